"""hvd.fully_shard (ZeRO stage 3) against the replicated hvd.DistributedOptimizer
on the same model and data: the same parameters after training (float
tolerance), identical on every rank, with activation checkpointing, gradient
accumulation and an unused head; full state dicts across world sizes; errors."""

import horovodlite.torch as hvd
import pytest
import torch
from test_zero import SIZES, Branchy, batch, loss_of, make_model, replicated


def shard(model, reshard=True, process_set=hvd.global_process_set):
    for m in model:
        if isinstance(m, torch.nn.Linear):
            hvd.fully_shard(m, process_set=process_set, reshard_after_forward=reshard)
    return hvd.fully_shard(model, process_set=process_set, reshard_after_forward=reshard)


def train_sharded(model, opt, steps, passes=1, checkpoint=None, start=0, clip=None):
    norms = []
    for s in range(start, start + steps):
        for k in range(passes):
            x, y = batch(s * passes + k)
            loss_of(model, x, y, checkpoint).backward()
        if clip is not None:
            norms.append(float(hvd.fsdp.clip_grad_norm_(model, clip)))
        opt.step()
        opt.zero_grad()
    return norms


def train_ref(model, opt, steps, passes=1, checkpoint=None, start=0, clip=None):
    norms = []
    for s in range(start, start + steps):
        for k in range(passes):
            x, y = batch(s * passes + k)
            loss_of(model, x, y, checkpoint).backward()
        if clip is not None:
            opt.synchronize()
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
        opt.zero_grad()
    return norms


class Full(torch.nn.Module):
    """The full parameters of a fully sharded model, gathered, as a module to compare."""

    def __init__(self, sd, like):
        super().__init__()
        self.ps = torch.nn.ParameterList([torch.nn.Parameter(sd[k]) for k, _ in like.named_parameters()])

    def named_parameters(self):
        return [(str(i), p) for i, p in enumerate(self.ps)]


def assert_sharded_same(model, ref, **tol):
    full = hvd.fsdp.full_state_dict(model)
    for name, q in ref.named_parameters():
        torch.testing.assert_close(full[name], q.detach(), msg=lambda m, name=name: "%s: %s" % (name, m), **tol)
    flat = torch.cat([full[name].reshape(-1) for name, _ in ref.named_parameters()])
    gathered = hvd.allgather(flat.unsqueeze(0), name="fsdp.test.identical")
    for r in range(hvd.size()):
        assert torch.equal(gathered[r], flat), "parameters differ between rank %d and rank %d" % (r, hvd.rank())


@pytest.mark.parametrize("reshard", [True, False])
def test_equals_replicated(reshard):
    ref = make_model()
    train_ref(ref, replicated(ref), 5)
    model = shard(make_model(), reshard)
    n = hvd.size()
    for p in model.parameters():  # the module now holds this rank's shards
        assert p.dim() == 1
    assert sum(p.numel() for p in model.parameters()) <= sum(-(-a * b // n) + -(-b // n)
                                                             for a, b in zip(SIZES, SIZES[1:]))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    train_sharded(model, opt, 5)
    assert_sharded_same(model, ref)


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_compression(name):
    """fully_shard's reducescatter in fp16 / bf16 against the replicated
    optimizer with the same compression: within 2e-2 (bf16: 8 significant bits)."""
    compression = getattr(hvd.Compression, name)
    ref = make_model()
    train_ref(ref, replicated(ref, compression=compression), 3)
    model = make_model()
    for m in model:
        if isinstance(m, torch.nn.Linear):
            hvd.fully_shard(m, compression=compression)
    model = hvd.fully_shard(model, compression=compression)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    train_sharded(model, opt, 3)
    assert_sharded_same(model, ref, rtol=2e-2, atol=2e-2)


def test_gathered_storage_is_freed_between_steps():
    model = shard(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train_sharded(model, opt, 1)
    for st in [m._hvl_fsdp_state for m in model.modules() if getattr(m, "_hvl_fsdp_state", None)]:
        for p in st.params:
            storage = p.buf.untyped_storage() if hasattr(p.buf, "untyped_storage") else p.buf.storage()
            assert not p.full and storage.size() == 0


@pytest.mark.parametrize("reentrant", [True, False])
def test_activation_checkpointing(reentrant):
    ref = make_model()
    train_ref(ref, replicated(ref), 3, checkpoint=reentrant)
    model = shard(make_model())
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    train_sharded(model, opt, 3, checkpoint=reentrant)
    assert_sharded_same(model, ref)


def test_gradient_accumulation():
    ref = make_model()
    train_ref(ref, replicated(ref, passes=2), 3, passes=2)
    model = shard(make_model())
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    train_sharded(model, opt, 3, passes=2)
    assert_sharded_same(model, ref)


def test_unused_head_on_some_ranks():
    ref = Branchy()
    train_ref(ref, replicated(ref), 3)
    model = Branchy()
    hvd.fully_shard(model.body)
    hvd.fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    train_sharded(model, opt, 3)
    assert_sharded_same(model, ref)


def test_clip_grad_norm():
    ref = make_model()
    ref_norms = train_ref(ref, replicated(ref), 3, clip=0.05)
    model = shard(make_model())
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    norms = train_sharded(model, opt, 3, clip=0.05)
    assert ref_norms[0] > 0.05
    torch.testing.assert_close(torch.tensor(norms), torch.tensor(ref_norms), rtol=1e-4, atol=1e-6)
    assert_sharded_same(model, ref)


def test_full_state_dict_on_another_world_size():
    """Trained on size - 1 ranks (a process set), saved whole, loaded and
    continued on all ranks."""
    n = hvd.size()
    sub = hvd.add_process_set(list(range(n - 1)))
    try:
        sd = None
        if hvd.rank() < n - 1:
            model = shard(make_model(), process_set=sub)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            train_sharded(model, opt, 2)
            sd = hvd.fsdp.full_state_dict(model)
        hvd.barrier()
        sd = hvd.broadcast_object(sd, root_rank=0, name="fsdp.test.sd")
        ref = make_model()
        ref.load_state_dict(sd)
        model = shard(make_model())
        hvd.fsdp.load_full_state_dict(model, sd)
        assert_sharded_same(model, ref)
        train_ref(ref, replicated(ref, cls=torch.optim.SGD, lr=0.1), 2, start=2)
        train_sharded(model, torch.optim.SGD(model.parameters(), lr=0.1), 2, start=2)
        assert_sharded_same(model, ref)
    finally:
        hvd.barrier()
        hvd.remove_process_set(sub)


def test_parameters_that_differ_across_ranks():
    model = make_model()
    if hvd.rank() == hvd.size() - 1:
        model[2] = torch.nn.Linear(9, 4)
    with pytest.raises(ValueError, match=r"parameter 2.weight differs across ranks: shape \[5, 9\] float32 on "
                                         r"rank.*shape \[4, 9\] float32 on rank %d" % (hvd.size() - 1)):
        hvd.fully_shard(model)
    with pytest.raises(TypeError, match="nn.Module"):
        hvd.fully_shard(torch.zeros(3))


def test_load_full_state_dict_of_another_model():
    model = shard(make_model())
    other = torch.nn.Sequential(torch.nn.Linear(7, 4))
    with pytest.raises(ValueError, match=r"0.weight has shape \[4, 7\] in the state dict, the parameter \[9, 7\]"):
        hvd.fsdp.load_full_state_dict(model, other.state_dict())


def test_replaced_parameters_are_freed_at_once():
    import gc
    import weakref
    model = make_model()
    refs = [weakref.ref(p) for p in model.parameters()]
    gc.disable()  # freed by reference counting, not by a later collection
    try:
        shard(model)
        assert all(r() is None for r in refs)
    finally:
        gc.enable()
