"""hvd.elastic's worker side over the MPI path (every rank runs pytest under
mpirun): State/ObjectState/TorchState commit, restore and sync, host-update
interrupts through _host_messages, the run loop's roll back and re-init, and
ElasticSampler's re-partitioning."""

import queue
import time

import horovodlite.torch as hvd
import pytest
import torch
from horovodlite.common import elastic as common_elastic
from horovodlite.runner.elastic.discovery import HostUpdateResult


@pytest.fixture(autouse=True)
def initialized():
    hvd.init()
    yield


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def _step(model, opt, seed):
    torch.manual_seed(seed)
    opt.zero_grad()
    model(torch.randn(5, 4)).sum().backward()
    opt.step()


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_names_exist():
    for name in ("run", "State", "ObjectState", "TorchState", "ElasticSampler", "HostsUpdatedInterrupt",
                 "HorovodInternalError"):
        assert hasattr(hvd.elastic, name), name
    assert hvd.HostsUpdatedInterrupt is hvd.elastic.HostsUpdatedInterrupt


def test_object_state_commit_restore_sync():
    state = hvd.elastic.ObjectState(epoch=0, name="x")
    assert isinstance(state._host_messages, queue.Queue) and state._last_updated_timestamp == 0
    state.epoch = 5
    state.restore()
    assert state.epoch == 0
    state.epoch = 3 + hvd.rank()
    state.commit()
    state.epoch = 99
    state.restore()
    assert state.epoch == 3 + hvd.rank()
    state.sync()  # rank 0's committed values everywhere
    assert state.epoch == 3 and state.name == "x"


def test_horovod_signature_of_object_state():
    state = hvd.elastic.ObjectState(hvd.broadcast_object, hvd.rank, batch=7)
    state.sync()
    assert state.batch == 7


def test_torch_state_restore_rolls_back_model_and_optimizer():
    model = _model(hvd.rank())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = hvd.elastic.TorchState(model, opt, epoch=0)
    _step(model, opt, 1)
    state.epoch = 1
    state.commit()
    committed = _model(0)
    committed.load_state_dict(model.state_dict())
    committed_momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    _step(model, opt, 2)
    state.epoch = 2
    assert not _same(model, committed)
    state.restore()
    assert _same(model, committed) and state.epoch == 1
    assert all(torch.equal(opt.state[p]["momentum_buffer"], m) for p, m in zip(model.parameters(), committed_momentum))
    # The saved copy is not the live tensor: training after restore leaves it intact
    # (PyTorch 2's Optimizer.load_state_dict keeps the tensors it is given).
    _step(model, opt, 3)
    state.restore()
    assert _same(model, committed)
    assert all(torch.equal(opt.state[p]["momentum_buffer"], m) for p, m in zip(model.parameters(), committed_momentum))
    # A commit after that copies into the same buffers, and is then what restore gives.
    _step(model, opt, 4)
    state.commit()
    again = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    _step(model, opt, 5)
    state.restore()
    assert all(torch.equal(opt.state[p]["momentum_buffer"], m) for p, m in zip(model.parameters(), again))


def test_torch_state_sync_makes_every_rank_rank0s():
    model = _model(100 + hvd.rank())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _step(model, opt, 7 + hvd.rank())
    state = hvd.elastic.TorchState(model=model, optimizer=opt, batch=hvd.rank())
    state.sync()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = hvd.allgather(flat.unsqueeze(0))
    assert all(torch.equal(gathered[0], gathered[r]) for r in range(hvd.size()))
    assert state.batch == 0


def test_torch_state_setattr_replaces_a_handled_object():
    model = _model(0)
    state = hvd.elastic.TorchState(model, None)
    other = _model(1)
    state.model = other
    assert state._handlers["model"].value is other
    state.restore()
    assert _same(other, _model(1))


def test_check_host_updates_raises_everywhere_from_rank0s_messages():
    state = hvd.elastic.ObjectState(epoch=0)
    state.check_host_updates()  # nothing queued
    if hvd.rank() == 0:
        state._host_messages.put((10, HostUpdateResult.added))
    with pytest.raises(hvd.elastic.HostsUpdatedInterrupt) as info:
        state.commit()
    assert info.value.skip_sync is False
    assert state._last_updated_timestamp == 10
    # The same timestamp again is not news; an older one neither.
    if hvd.rank() == 0:
        state._host_messages.put((10, HostUpdateResult.added))
        state._host_messages.put((9, HostUpdateResult.removed))
    state.check_host_updates()
    if hvd.rank() == 0:
        state._host_messages.put((11, HostUpdateResult.removed))
    with pytest.raises(hvd.elastic.HostsUpdatedInterrupt) as info:
        state.check_host_updates()
    assert info.value.skip_sync is True


def test_run_rolls_back_to_the_commit_and_reinitializes():
    """A HorovodInternalError: restore, reset (shutdown + init, here over MPI),
    sync, and func again from the committed state; callbacks run on reset."""
    state = hvd.elastic.ObjectState(step=0, log=[])
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.is_initialized())])
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(state.step)
        while state.step < 6:
            state.step += 1
            state.log = state.log + [state.step]
            if state.step % 2 == 0:
                state.commit()
            if state.step == 5 and len(calls) == 1:
                raise hvd.HorovodInternalError("simulated peer failure")
        return state.step

    assert train(state) == 6
    assert calls == [0, 4]  # the second run started from the commit at step 4
    assert state.log == [1, 2, 3, 4, 5, 6]
    assert resets == [True] and hvd.is_initialized()
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()


def test_run_keeps_state_on_hosts_updated():
    state = hvd.elastic.ObjectState(step=0)
    runs = []

    @hvd.elastic.run
    def train(state):
        runs.append(state.step)
        while state.step < 3:
            state.step += 1
            if state.step == 2 and len(runs) == 1:
                if hvd.rank() == 0:
                    state._host_messages.put((int(time.time()), HostUpdateResult.added))
                state.commit()  # saves, then raises HostsUpdatedInterrupt on every rank
        return state.step

    assert train(state) == 3
    assert runs == [0, 2]  # not rolled back: a host change loses no work


def test_elastic_sampler_partitions_and_repartitions():
    data = list(range(23))
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=3)
    assert sampler.num_replicas == hvd.size() and sampler.rank == hvd.rank()
    mine = list(iter(sampler))
    everyone = hvd.allgather_object(mine)
    seen = [i for part in everyone for i in part]
    assert set(seen) == set(data) and len(mine) == len(sampler)
    # Two batches of 4 per rank processed, then the world "changes": the rest
    # is split among the ranks, nothing processed is repeated.
    sampler.record_batch(0, 4)
    sampler.record_batch(1, 4)
    state = hvd.elastic.TorchState(sampler=sampler)
    state.commit()
    processed = set([i for part in everyone for i in part[:8]])
    sampler.record_batch(2, 4)
    state.restore()
    assert sampler.processed_num == 8 * hvd.size()
    rest = [i for part in hvd.allgather_object(list(iter(sampler))) for i in part]
    assert set(rest) == set(data) - processed or (set(rest) >= set(data) - processed and hvd.size() * 8 > 23)
    sampler.set_epoch(1)
    assert sampler.processed_num == 0 and len(list(iter(sampler))) == len(sampler)


def test_notification_manager_is_off_outside_an_elastic_job():
    assert not common_elastic.elastic_enabled()
    common_elastic.notification_manager.init()
    assert common_elastic.notification_manager._thread is None
