"""Process sets through hvd.*: every op on the even ranks, the odd ranks and the
world at once (same names), ProcessSet from an mpi4py communicator,
init(process_sets=...), add/remove with HOROVOD_DYNAMIC_PROCESS_SETS=1 and the
error without it, the optimizer on a subset, broadcast_object/allgather_object."""

import os

import horovodlite.torch as hvd
import pytest
import torch


def world():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def parity_ranks(parity):
    return list(range(parity, world().Get_size(), 2))


def run_every_op(ps):
    """Every collective on `ps` (a set this rank is in), started together; returns
    the handles and a check function. Names are the same for every set."""
    me = hvd.rank()
    ranks = ps.ranks
    n, r = ps.size(), ps.rank()
    assert ps.included() and ranks[r] == me
    x = torch.arange(6, dtype=torch.float64) + me
    h_sum = hvd.allreduce_async(x, name="ops.sum", op=hvd.Sum, process_set=ps)
    h_avg = hvd.allreduce_async(x, name="ops.avg", process_set=ps)
    h_group = hvd.grouped_allreduce_async([x, x * 2], name="ops.group", op=hvd.Sum, process_set=ps)
    h_gather = hvd.allgather_async(torch.full((r + 1, 2), me, dtype=torch.int32), name="ops.gather", process_set=ps)
    h_bcast = hvd.broadcast_async(torch.full((3,), float(me)), ranks[-1], name="ops.bcast", process_set=ps)
    h_a2a = hvd.alltoall_async(torch.tensor([me * 100 + j for j in range(n)], dtype=torch.int64), name="ops.a2a",
                               process_set=ps)
    h_rs = hvd.reducescatter_async(torch.ones(2 * n, 3) * (me + 1), name="ops.rs", op=hvd.Sum, process_set=ps)

    def check():
        total = sum(ranks)
        base = torch.arange(6, dtype=torch.float64)
        assert torch.equal(hvd.synchronize(h_sum), base * n + total)
        assert torch.allclose(hvd.synchronize(h_avg), base + total / n)
        g = hvd.synchronize(h_group)
        assert torch.equal(g[0], base * n + total) and torch.equal(g[1], 2 * (base * n + total))
        gathered = hvd.synchronize(h_gather)
        assert gathered[:, 0].tolist() == [g for j, g in enumerate(ranks) for _ in range(j + 1)]
        assert hvd.synchronize(h_bcast).tolist() == [float(ranks[-1])] * 3
        out, received = hvd.synchronize(h_a2a)
        assert out.tolist() == [g * 100 + r for g in ranks] and received.tolist() == [1] * n
        assert torch.equal(hvd.synchronize(h_rs), torch.ones(2, 3) * (total + n))
        hvd.barrier(process_set=ps)
    return check


def test_every_op_on_even_odd_and_world_at_once(dynamic):
    even = hvd.add_process_set(parity_ranks(0))
    odd = hvd.add_process_set(parity_ranks(1)) if hvd.size() > 1 else None
    mine = even if hvd.rank() % 2 == 0 else odd
    assert mine.process_set_id not in (None, 0)
    for _ in range(2):  # the second round goes through each set's response cache
        check_set = run_every_op(mine)
        check_world = run_every_op(hvd.global_process_set)
        check_set()
        check_world()


def test_rank_outside_a_set_gets_an_error(dynamic):
    first = hvd.add_process_set([0])
    if hvd.rank() == 0:
        assert first.included() and first.rank() == 0 and first.size() == 1
        return
    assert not first.included() and first.rank() == -1
    with pytest.raises(ValueError, match="rank %d is not in process set %d" % (hvd.rank(), first.process_set_id)):
        hvd.allreduce(torch.ones(2), name="outside", process_set=first)
    with pytest.raises(ValueError, match="not in process set"):
        hvd.barrier(process_set=first)


def test_add_remove_dynamic(dynamic):
    n = hvd.size()
    ranks = [n - 1, 0] if n > 2 else [n - 1]
    ps = hvd.add_process_set(ranks)
    assert ps.ranks == sorted(ranks)
    with pytest.raises(ValueError, match="exists already"):
        hvd.add_process_set(hvd.ProcessSet(sorted(ranks)))
    with pytest.raises(ValueError, match="differ between ranks"):
        hvd.add_process_set([hvd.rank()])
    if ps.included():
        out = hvd.allreduce(torch.tensor([float(hvd.rank())]), name="dyn", op=hvd.Sum, process_set=ps)
        assert out.item() == sum(ranks)
    assert hvd.remove_process_set(ps)
    assert ps.process_set_id is None and ps.size() is None
    assert not hvd.remove_process_set(ps)
    assert not hvd.remove_process_set(hvd.global_process_set)
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.ones(1), process_set=ps)
    again = hvd.add_process_set(ranks)
    ids = world().allgather(again.process_set_id)
    assert len(set(ids)) == 1
    assert hvd.remove_process_set(again)


def test_remove_with_ops_in_flight_is_an_error(dynamic):
    if hvd.size() < 3:
        pytest.skip("needs a two-rank set other than the world")
    ps = hvd.add_process_set([0, 1])
    handle = None
    if hvd.rank() == 0:
        handle = hvd.allreduce_async(torch.ones(3), name="in_flight", process_set=ps)
    with pytest.raises(hvd.HorovodInternalError, match=r"in flight on rank\(s\) 0"):
        hvd.remove_process_set(ps)
    assert ps.size() == 2
    if hvd.rank() == 1:
        handle = hvd.allreduce_async(torch.ones(3), name="in_flight", process_set=ps)
    if handle is not None:
        assert hvd.synchronize(handle).tolist() == [1.0] * 3
    assert hvd.remove_process_set(ps)


def test_add_without_dynamic_is_an_error():
    os.environ.pop("HOROVOD_DYNAMIC_PROCESS_SETS", None)
    os.environ.pop("HOROVODLITE_DYNAMIC_PROCESS_SETS", None)
    hvd.init()
    try:
        with pytest.raises(ValueError, match="HOROVOD_DYNAMIC_PROCESS_SETS=1"):
            hvd.add_process_set([0])
    finally:
        hvd.shutdown()


def test_init_process_sets_from_ranks_and_an_mpi4py_communicator():
    from mpi4py import MPI
    comm = world()
    n, me = comm.Get_size(), comm.Get_rank()
    if n < 2:
        pytest.skip()
    # The even ranks from a communicator (MPI.COMM_NULL on the odd ranks), the odd ones from ranks.
    group = comm.Get_group()
    even_group = group.Incl(parity_ranks(0))
    even_comm = comm.Create_group(even_group) if me % 2 == 0 else MPI.COMM_NULL
    even_group.Free()
    group.Free()
    even = hvd.ProcessSet(even_comm)
    odd = hvd.ProcessSet(parity_ranks(1))
    hvd.init(process_sets=[even, odd])
    try:
        assert even.ranks == parity_ranks(0) and even.process_set_id == 1
        assert odd.process_set_id == 2
        assert hvd.global_process_set.ranks == list(range(n))
        mine = even if me % 2 == 0 else odd
        run_every_op(mine)()
        # Static sets cannot be removed without dynamic process sets.
        with pytest.raises(ValueError, match="dynamic process sets"):
            hvd.remove_process_set(mine)
    finally:
        hvd.barrier()  # shutdown is collective: it would end the other set's ops still running
        hvd.shutdown()
        if even_comm != MPI.COMM_NULL:
            even_comm.Free()


def test_objects_on_a_set(dynamic):
    odd = hvd.add_process_set(parity_ranks(1)) if hvd.size() > 1 else hvd.add_process_set([0])
    if not odd.included():
        return
    root = odd.ranks[-1]
    got = hvd.broadcast_object({"from": hvd.rank()}, root_rank=root, process_set=odd)
    assert got == {"from": root}
    assert hvd.allgather_object(("r", hvd.rank()), process_set=odd) == [("r", g) for g in odd.ranks]


def test_optimizer_on_a_subset_equals_one_process_on_the_concatenated_batch(dynamic):
    subset = list(range(1, hvd.size())) if hvd.size() > 2 else [hvd.size() - 1]
    ps = hvd.add_process_set(subset)
    if not ps.included():
        return
    n, r, b = ps.size(), ps.rank(), 3

    def model():
        torch.manual_seed(7)
        return torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)).double()

    net, ref = model(), model()
    # Different starting points on the set's ranks: broadcast_parameters from its root fixes them.
    with torch.no_grad():
        for p in net.parameters():
            p.add_(hvd.rank())
    hvd.broadcast_parameters(net.state_dict(), root_rank=ps.ranks[0], process_set=ps)
    with torch.no_grad():
        for p, q in zip(net.parameters(), ref.parameters()):
            q.copy_(p)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=net.named_parameters(), process_set=ps)
    hvd.broadcast_optimizer_state(opt, root_rank=ps.ranks[0], process_set=ps)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        g = torch.Generator().manual_seed(100 + step)
        x, y = torch.randn(n * b, 4, generator=g).double(), torch.randn(n * b, 2, generator=g).double()
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x[r * b:(r + 1) * b]), y[r * b:(r + 1) * b]).backward()
        opt.step()
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref(x), y).backward()
        ref_opt.step()
    for p, q in zip(net.parameters(), ref.parameters()):
        assert torch.allclose(p, q, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("groups", [None, 2], ids=["per_parameter", "groups"])
def test_optimizer_on_a_set_acts_as_the_wrapped_one_outside_it(dynamic, groups):
    """Horovod 0.28: a DistributedOptimizer whose process set does not include
    this rank registers no hooks there and steps as the wrapped optimizer, so a
    program that gives every rank the same optimizer restricted to some of them
    runs on every rank."""
    ps = hvd.add_process_set(list(range(1, hvd.size())) if hvd.size() > 2 else [1])  # not rank 0
    g = torch.Generator().manual_seed(200 + hvd.rank())
    x, y = torch.randn(3, 4, generator=g).double(), torch.randn(3, 2, generator=g).double()

    def model():
        torch.manual_seed(11)
        return torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)).double()

    net, local = model(), model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), named_parameters=net.named_parameters(),
                                   process_set=ps, groups=groups)
    local_opt = torch.optim.SGD(local.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
        local_opt.zero_grad()
        torch.nn.functional.mse_loss(local(x), y).backward()
        local_opt.step()
    if not ps.included():
        assert opt._grad_hooks == [] and opt._handles == {}
        for p, q in zip(net.parameters(), local.parameters()):
            assert torch.equal(p, q)  # the wrapped optimizer's step on the local gradient
        return
    # In the set: gradients averaged over its ranks, so its ranks agree.
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).unsqueeze(0)
    gathered = hvd.allgather(flat, process_set=ps)
    assert torch.equal(gathered, flat.expand_as(gathered))
    if ps.size() > 1:
        assert not torch.equal(flat[0], torch.cat([p.detach().reshape(-1) for p in local.parameters()]))


def test_errors_in_a_set_name_global_ranks_and_the_set(dynamic):
    """A set of ranks 1..n-1: a mismatch names its members by their global ranks
    and says which set (its coordinator numbers them 0..n-2 inside the set)."""
    size, rank = hvd.size(), hvd.rank()
    if size < 3:
        pytest.skip("needs a set of two ranks that are not ranks 0 and 1")
    tail = hvd.add_process_set(list(range(1, size)))
    if tail.included():
        n = 6 if rank == size - 1 else 4
        with pytest.raises(hvd.HorovodInternalError) as info:
            hvd.allreduce(torch.ones(n), name="py.ps.bad", process_set=tail)
        message = str(info.value)
        ranks = ", ".join(str(r) for r in range(1, size))
        assert "Mismatched shapes for tensor 'py.ps.bad' (allreduce) in process set %d (ranks [%s])" % (
            tail.process_set_id, ranks) in message, message
        assert "rank 1: [4]" in message and "rank %d: [6]" % (size - 1) in message, message
    hvd.barrier()
    hvd.remove_process_set(tail)
