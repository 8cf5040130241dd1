"""Behaviours of Horovod 0.28 that Horovod programs rely on (issue 28, items
1, 2 and 4; item 3 is in tests/python/process_sets): each test is written from
Horovod's documented behaviour, not from horovodlite's code."""

import horovodlite.torch as hvd
import pytest
import torch


def _sparse(rank, nnz):
    g = torch.Generator().manual_seed(50 + rank)
    indices = torch.randint(0, 6, (1, nnz), generator=g)
    values = torch.randint(-5, 6, (nnz, 2), generator=g).to(torch.float64)
    return torch.sparse_coo_tensor(indices, values, (6, 2))


@pytest.mark.parametrize("op", [hvd.Average, hvd.Sum], ids=["average", "sum"])
def test_sparse_allreduce_async_handle_is_called(op, rank, size):
    # Horovod: sparse_allreduce_async returns a function; handle() waits and
    # returns the reduced sparse tensor.
    t = _sparse(rank, 2 + rank)
    handle = hvd.sparse_allreduce_async(t, "parity.sparse.%d" % op, op)
    assert callable(handle)
    result = handle()
    assert result.is_sparse and result.shape == t.shape
    expected = hvd.allreduce(t.to_dense(), op=op, name="parity.sparse.dense.%d" % op)
    assert torch.allclose(result.to_dense(), expected, rtol=1e-12, atol=1e-12)
    # Calling it again, or synchronize(handle), gives the same result.
    assert handle() is result
    assert hvd.synchronize(handle) is result


def test_join_with_a_device_id_on_a_cpu_job(size):
    # Horovod programs call hvd.join(hvd.local_rank()); on a CPU-only job the id
    # only says where zero tensors would go on a GPU, and join works.
    if hvd.rank() == 0:
        last = hvd.join(hvd.local_rank())
    else:
        out = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="parity.join.partial")
        assert torch.equal(out, torch.full((3,), float(size - 1)))  # rank 0 contributed zeros
        last = hvd.join(hvd.local_rank())
    assert 0 <= last < size
    assert 0 <= hvd.join(0) < size
    with pytest.raises(TypeError):
        hvd.join("cuda:0")
    with pytest.raises(ValueError):
        hvd.join(-2)


def _model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


@pytest.mark.parametrize("wrapped", [False, True], ids=["torch_optimizer", "distributed_optimizer"])
def test_broadcast_optimizer_state_leaves_zero_grads(wrapped, rank):
    # Horovod: a fresh optimizer gets its state from a step on zero gradients;
    # every parameter that requires grad then holds that zero tensor in .grad.
    model = _model()
    model[2].bias.requires_grad_(False)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    if wrapped:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    before = [p.detach().clone() for p in model.parameters()]
    assert all(p.grad is None for p in model.parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None, name
            assert p.grad.shape == p.shape and p.grad.dtype == p.dtype
            assert torch.count_nonzero(p.grad) == 0, name
        else:
            assert p.grad is None, name
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p.detach(), b)
    # Programs read (e.g. broadcast) those gradients; training goes on as usual.
    hvd.broadcast_(model[0].weight.grad, root_rank=0, name="parity.zero_grad.%d" % wrapped)
    opt.zero_grad()
    model(torch.randn(2, 3)).sum().backward()
    opt.step()
