"""Sparse gradients as Horovod: sparse_allreduce_async (allgather of indices and
values) and DistributedOptimizer with nn.Embedding(sparse=True) and
sparse_as_dense=False; results equal the dense computation."""

import faulthandler

import horovodlite.torch as hvd
import pytest
import torch


def _sparse(rank, shape, nnz, dense_dims=()):
    g = torch.Generator().manual_seed(1000 + rank)
    indices = torch.stack([torch.randint(0, d, (nnz,), generator=g) for d in shape])
    values = torch.randint(-8, 9, (nnz,) + tuple(dense_dims), generator=g).to(torch.float64)
    return torch.sparse_coo_tensor(indices, values, tuple(shape) + tuple(dense_dims))


@pytest.mark.parametrize("op", [hvd.Average, hvd.Sum], ids=["average", "sum"])
@pytest.mark.parametrize("dense_dims", [(), (3,)], ids=["scalar_values", "hybrid"])
def test_sparse_allreduce_equals_dense(op, dense_dims, rank, size):
    # different numbers of entries per rank, repeated indices, and a rank with none
    nnz = 0 if rank == size - 1 else 3 + 2 * rank
    t = _sparse(rank, (7, 5), nnz, dense_dims)
    handle = hvd.sparse_allreduce_async(t, name="sparse.%d.%d" % (op, len(dense_dims)), op=op)
    result = hvd.synchronize(handle)
    assert result.is_sparse and result.shape == t.shape and result.dtype == t.dtype
    expected = hvd.allreduce(t.to_dense(), op=op, name="sparse.dense.%d.%d" % (op, len(dense_dims)))
    if op == hvd.Sum:
        assert torch.equal(result.to_dense(), expected)
    else:  # each value divided by the size before the sum: equal up to rounding
        assert torch.allclose(result.to_dense(), expected, rtol=1e-12, atol=1e-12)
    # the unnamed form and poll() work as for every handle
    handle = hvd.sparse_allreduce_async(t, None, op)
    hvd.synchronize(handle)
    assert hvd.poll(handle)


def test_sparse_allreduce_bad_input(rank, size):
    with pytest.raises(ValueError, match="sparse COO"):
        hvd.sparse_allreduce_async(torch.ones(3), "sparse.bad.dense", hvd.Average)
    with pytest.raises(ValueError, match="Average or hvd.Sum"):
        hvd.sparse_allreduce_async(_sparse(rank, (4,), 2), "sparse.bad.op", hvd.Max)
    t = _sparse(rank, (4 + (rank == size - 1),), 2)
    with pytest.raises(ValueError, match=r"size differs between ranks .*rank\(s\) %d" % (size - 1)):
        hvd.synchronize(hvd.sparse_allreduce_async(t, "sparse.bad.size", hvd.Sum))
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(size)))


class _Net(torch.nn.Module):
    def __init__(self, sparse):
        super().__init__()
        torch.manual_seed(3)
        self.emb = torch.nn.Embedding(50, 6, sparse=sparse)
        self.out = torch.nn.Linear(6, 2)

    def forward(self, ids):
        return self.out(self.emb(ids).mean(dim=1))


def _batches(rank, steps):
    g = torch.Generator().manual_seed(77 + rank)
    # rank-dependent vocabulary ranges: ranks touch different and common rows
    return [torch.randint(5 * rank, 5 * rank + 30, (4, 3), generator=g) for _ in range(steps)]


def _loss(net, ids):
    return net(ids).pow(2).mean()


@pytest.mark.parametrize("kind", ["sgd", "sparse_adam"])
def test_distributed_optimizer_sparse_embedding(kind, rank, size):
    steps = 3

    def optimizer(net):
        if kind == "sgd":
            return torch.optim.SGD(net.parameters(), lr=0.5)
        return torch.optim.SparseAdam(list(net.emb.parameters()), lr=0.05)

    net = _Net(sparse=True)
    opt = hvd.DistributedOptimizer(optimizer(net), named_parameters=net.named_parameters(),
                                   sparse_as_dense=False)
    for ids in _batches(rank, steps):
        opt.zero_grad()
        _loss(net, ids).backward()
        opt.synchronize()
        assert net.emb.weight.grad.is_sparse  # travelled as indices and values
        with opt.skip_synchronize():
            opt.step()

    # The same training in one process: the mean over ranks of each rank's loss
    # (the averaged gradient), with a dense embedding.
    ref = _Net(sparse=kind == "sparse_adam")
    ref_opt = optimizer(ref)
    all_batches = [_batches(r, steps) for r in range(size)]
    for step in range(steps):
        ref_opt.zero_grad()
        (sum(_loss(ref, all_batches[r][step]) for r in range(size)) / size).backward()
        ref_opt.step()
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), name
    # and every rank holds the same parameters
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    assert torch.equal(flat, hvd.broadcast(flat, root_rank=0, name="sparse.params"))


def _embedding_loss(net, ids, use_embedding):
    """The loss of a step in which this rank may compute no embedding gradient."""
    if use_embedding:
        return _loss(net, ids)
    return net.out(torch.ones(2, 6)).pow(2).mean()


def _deadline(seconds=120):
    """Ends the process (with tracebacks) if a test hangs: a stall must fail the
    suite, not keep it waiting for its timeout."""
    faulthandler.dump_traceback_later(seconds, exit=True)


def test_sparse_param_without_gradient_on_one_rank(rank, size):
    """Step 1: every rank computes the embedding's sparse gradient (so every rank
    knows it is sparse). Steps 2 and 3: the last rank computes none (its loss does
    not use the embedding; zero_grad sets grads to None): it contributes an empty
    sparse gradient, and the result equals the dense computation."""
    steps = 3
    uses = [[s == 0 or r != size - 1 for s in range(steps)] for r in range(size)]
    net = _Net(sparse=True)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.5),
                                   named_parameters=net.named_parameters(), sparse_as_dense=False)
    _deadline()
    try:
        for step, ids in enumerate(_batches(rank, steps)):
            opt.zero_grad(set_to_none=True)
            _embedding_loss(net, ids, uses[rank][step]).backward()
            if not uses[rank][step]:
                assert net.emb.weight.grad is None
            opt.step()
            assert net.emb.weight.grad.is_sparse
    finally:
        faulthandler.cancel_dump_traceback_later()
    ref = _Net(sparse=False)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    all_batches = [_batches(r, steps) for r in range(size)]
    for step in range(steps):
        ref_opt.zero_grad()
        (sum(_embedding_loss(ref, all_batches[r][step], uses[r][step]) for r in range(size)) / size).backward()
        ref_opt.step()
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), name


def test_sparse_param_first_step_without_gradient_is_an_error(rank, size):
    """The last rank computes no gradient for the embedding in the first step: it
    cannot know that the others send it sparse. Every rank gets an error at once
    naming the tensor and the ranks (no stall), and horovodlite keeps working."""
    net = _Net(sparse=True)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.5),
                                   named_parameters=[("first." + n, p) for n, p in net.named_parameters()],
                                   sparse_as_dense=False)
    ids = _batches(rank, 1)[0]
    _deadline()
    try:
        opt.zero_grad(set_to_none=True)
        _embedding_loss(net, ids, rank != size - 1).backward()
        with pytest.raises(hvd.HorovodInternalError) as info:
            opt.step()
    finally:
        faulthandler.cancel_dump_traceback_later()
    message = str(info.value)
    assert "Mismatched operations for tensor 'first.emb.weight'" in message, message
    assert "rank %d: allreduce" % (size - 1) in message, message
    assert "rank 0: allgather" in message, message
    if rank != size - 1:
        assert "sparse_as_dense=True" in message, message
    # The other parameters' allreduces were issued everywhere: they complete; then
    # the runtime goes on.
    assert torch.equal(hvd.allreduce(torch.ones(3), op=hvd.Sum, name="sparse.after.error"),
                       torch.full((3,), float(size)))
