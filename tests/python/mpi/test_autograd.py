"""Gradients of the collectives follow Horovod 0.28's conventions."""

import horovodlite.torch as hvd
import pytest
import torch

FLOATS = [torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["avg", "sum"])
def test_allreduce_grad(dtype, op, size):
    hop = hvd.Average if op == "avg" else hvd.Sum
    x = torch.randn(4, 3, dtype=dtype, requires_grad=True)
    y = hvd.allreduce(x, op=hop)
    g = torch.ones(4, 3, dtype=dtype) * (hvd.rank() + 1)
    y.backward(g)
    # the gradient is the same allreduce of the incoming gradients
    total = size * (size + 1) / 2.0
    expected = total / size if op == "avg" else total
    assert torch.allclose(x.grad, torch.full((4, 3), expected, dtype=dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_grouped_allreduce_grad(dtype, size):
    xs = [torch.randn(3, dtype=dtype, requires_grad=True) for _ in range(2)]
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum)
    (ys[0].sum() + 2 * ys[1].sum()).backward()
    assert torch.allclose(xs[0].grad, torch.full((3,), float(size), dtype=dtype))
    assert torch.allclose(xs[1].grad, torch.full((3,), 2.0 * size, dtype=dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dims", [1, 2])
def test_allgather_grad(dtype, dims, size):
    r = hvd.rank()
    sizes = [3, 2, 7, 4][:size]
    x = torch.full([sizes[r]] + [5] * (dims - 1), float(r), dtype=dtype, requires_grad=True)
    y = hvd.allgather(x)
    grad = torch.cat([torch.full([n] + [5] * (dims - 1), float(i), dtype=dtype) for i, n in enumerate(sizes)])
    y.backward(grad)
    # Horovod: incoming gradients averaged over ranks, then this rank's rows
    assert torch.allclose(x.grad, torch.full(x.shape, float(r), dtype=dtype))


def test_grouped_allgather_grad(size):
    r = hvd.rank()
    xs = [torch.full((2,), float(r), requires_grad=True), torch.full((1, 3), 1.0, requires_grad=True)]
    ys = hvd.grouped_allgather(xs)
    (ys[0] * torch.arange(2 * size, dtype=torch.float32)).sum().backward(retain_graph=True)
    ys[1].sum().backward()
    assert torch.allclose(xs[0].grad, torch.tensor([2.0 * r, 2.0 * r + 1]))
    assert torch.allclose(xs[1].grad, torch.ones(1, 3))


@pytest.mark.parametrize("dtype", FLOATS)
def test_broadcast_grad(dtype, size):
    for root in range(size):
        x = torch.ones(3, 2, dtype=dtype, requires_grad=True)
        y = hvd.broadcast(x, root)
        y.backward(torch.ones(3, 2, dtype=dtype) * (hvd.rank() + 1))
        expected = (size + 1) / 2.0 if hvd.rank() == root else 0.0
        assert torch.allclose(x.grad, torch.full((3, 2), expected, dtype=dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_alltoall_grad(dtype, size):
    r = hvd.rank()
    splits = [j + 1 for j in range(size)]
    x = torch.full((sum(splits), 2), float(r), dtype=dtype, requires_grad=True)
    out, received = hvd.alltoall(x, splits=splits)
    # weight each received row by its source rank: the gradient sent back to
    # rank j is j's own weight... use row values to check routing
    weights = torch.cat([torch.full((r + 1, 2), float(j + 1), dtype=dtype) for j in range(size)])
    (out * weights).sum().backward()
    expected = torch.cat([torch.full((j + 1, 2), float(r + 1), dtype=dtype) for j in range(size)])
    assert torch.allclose(x.grad, expected)
    # even split form returns only the tensor
    x2 = torch.ones(size * 2, dtype=dtype, requires_grad=True)
    hvd.alltoall(x2).sum().backward()
    assert torch.allclose(x2.grad, torch.ones(size * 2, dtype=dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["avg", "sum"])
def test_reducescatter_grad(dtype, op, size):
    hop = hvd.Average if op == "avg" else hvd.Sum
    x = torch.randn(size * 4, 3, dtype=dtype, requires_grad=True)
    y = hvd.reducescatter(x, op=hop)
    y.backward(torch.ones_like(y))
    expected = float(size) if op == "sum" else 1.0
    assert torch.allclose(x.grad, torch.full(x.shape, expected, dtype=dtype))
    xs = [torch.randn(size * 2, dtype=dtype, requires_grad=True)]
    ys = hvd.grouped_reducescatter(xs, op=hop)
    ys[0].sum().backward()
    assert torch.allclose(xs[0].grad, torch.full(xs[0].shape, expected, dtype=dtype))


def test_gradcheck_allreduce_sum():
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: hvd.allreduce(t, op=hvd.Average), (x,))
