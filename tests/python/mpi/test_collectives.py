import itertools

import horovodlite.torch as hvd
import pytest
import torch

DTYPES = [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64]
SHAPES = [(), (5,), (4, 3), (2, 3, 4)]


def _value(rank, dtype, shape):
    # Small values so that sums and products stay exact in every dtype.
    n = 1
    for d in shape:
        n *= d
    return ((torch.arange(n) % 3) + rank + 1).reshape(shape).to(dtype)


@pytest.mark.parametrize("dtype,shape", list(itertools.product(DTYPES, SHAPES)))
def test_allreduce_sum_min_max(dtype, shape, size):
    t = _value(hvd.rank(), dtype, shape)
    expected = sum(_value(r, torch.float64, shape) for r in range(size))
    assert torch.equal(hvd.allreduce(t, op=hvd.Sum, name="sum.%s.%s" % (dtype, shape)).double(), expected)
    lo = hvd.allreduce(t, op=hvd.Min)
    hi = hvd.allreduce(t, op=hvd.Max)
    assert torch.equal(lo, _value(0, dtype, shape)) and torch.equal(hi, _value(size - 1, dtype, shape))
    assert lo.dtype == dtype and lo.shape == t.shape
    assert torch.equal(t, _value(hvd.rank(), dtype, shape)), "input modified"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_allreduce_average_and_product(dtype, size):
    t = torch.full((3, 2), float(hvd.rank() + 1), dtype=dtype)
    avg = hvd.allreduce(t)
    assert torch.allclose(avg.double(), torch.full((3, 2), (size + 1) / 2.0, dtype=torch.float64))
    prod = hvd.allreduce(t, op=hvd.Product)
    expected = 1.0
    for r in range(size):
        expected *= r + 1
    assert torch.allclose(prod.double(), torch.full((3, 2), expected, dtype=torch.float64))


def test_allreduce_average_flag_compat(size):
    t = torch.ones(4) * (hvd.rank() + 1)
    with pytest.warns(DeprecationWarning):
        s = hvd.allreduce(t, average=False)
    assert torch.allclose(s, torch.full((4,), size * (size + 1) / 2.0))
    with pytest.raises(ValueError):
        hvd.allreduce(t, average=True, op=hvd.Sum)


def test_allreduce_scale_factors(size):
    t = torch.ones(6, dtype=torch.float64)
    out = hvd.allreduce(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25)
    assert torch.allclose(out, torch.full((6,), size * 0.5, dtype=torch.float64))


def test_allreduce_inplace_and_async(size):
    t = torch.ones(7) * hvd.rank()
    out = hvd.allreduce_(t, op=hvd.Sum)
    assert out is t
    assert torch.allclose(t, torch.full((7,), float(sum(range(size)))))
    handles = [hvd.allreduce_async(torch.ones(100) * i, name="async.%d" % i, op=hvd.Sum) for i in range(5)]
    for i, h in enumerate(handles):
        result = hvd.synchronize(h)
        assert hvd.poll(h)
        assert torch.allclose(result, torch.full((100,), float(i * size)))
    u = torch.ones(3)
    h = hvd.allreduce_async_(u, op=hvd.Sum)
    assert hvd.synchronize(h) is u and torch.allclose(u, torch.full((3,), float(size)))


def test_allreduce_noncontiguous_inplace(size):
    base = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    view = base.t()
    hvd.allreduce_(view, op=hvd.Sum)
    assert torch.allclose(base, torch.arange(12, dtype=torch.float64).reshape(3, 4) * size)


def test_allreduce_fp16_compression(size):
    t = torch.linspace(-1, 1, 33, dtype=torch.float32) * (hvd.rank() + 1)
    out = hvd.allreduce(t, compression=hvd.Compression.fp16)
    assert out.dtype == torch.float32
    expected = torch.linspace(-1, 1, 33) * (size + 1) / 2.0
    assert torch.allclose(out, expected, atol=1e-2)


def test_allreduce_bf16_compression(size):
    t = torch.linspace(-1, 1, 33, dtype=torch.float32) * (hvd.rank() + 1)
    out = hvd.allreduce(t, compression=hvd.Compression.bf16)
    assert out.dtype == torch.float32
    expected = torch.linspace(-1, 1, 33) * (size + 1) / 2.0
    # bf16: 8 significant bits, ~4e-3 relative per rounding; 1e-2 of the largest value.
    assert torch.allclose(out, expected, rtol=1e-2, atol=1e-2)


def test_grouped_allreduce_and_reducescatter_bf16_compression(size):
    """grouped_allreduce and reducescatter with bf16: close to float32's
    (rtol 1e-2: 8 significant bits), float32 and float64 restored."""
    r = hvd.rank()
    a = torch.linspace(-3, 3, 1000, dtype=torch.float32) * (r + 1)
    b = torch.linspace(0, 1, 7, dtype=torch.float64) + r
    outs = hvd.grouped_allreduce([a, b], name="bf16.grouped", compression=hvd.Compression.bf16)
    assert [o.dtype for o in outs] == [torch.float32, torch.float64]
    ref = hvd.grouped_allreduce([a, b], name="bf16.grouped.ref")
    for o, e in zip(outs, ref):
        assert torch.equal(o, o.to(torch.bfloat16).to(o.dtype))
        torch.testing.assert_close(o, e, rtol=1e-2, atol=1e-2)
    t = torch.linspace(-2, 2, 6 * size, dtype=torch.float32) * (r + 1) + 100.0
    for op in (hvd.Sum, hvd.Average):
        out = hvd.reducescatter(t, name="bf16.rs.%s" % op, op=op, compression=hvd.Compression.bf16)
        ref = hvd.reducescatter(t, name="bf16.rs.ref.%s" % op, op=op)
        assert out.dtype == torch.float32 and out.shape == ref.shape
        torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2)
    outs = hvd.grouped_reducescatter([t, t.double()], name="bf16.grs", compression=hvd.Compression.bf16)
    refs = hvd.grouped_reducescatter([t, t.double()], name="bf16.grs.ref")
    for o, e in zip(outs, refs):
        assert o.dtype == e.dtype
        torch.testing.assert_close(o, e, rtol=1e-2, atol=1e-2)


def test_grouped_allreduce_variants(size):
    tensors = [torch.ones(3) * (hvd.rank() + 1), torch.ones(2, 2, dtype=torch.float64) * hvd.rank()]
    out = hvd.grouped_allreduce(tensors, op=hvd.Sum, name="grp")
    assert torch.allclose(out[0], torch.full((3,), size * (size + 1) / 2.0))
    assert torch.allclose(out[1], torch.full((2, 2), float(sum(range(size))), dtype=torch.float64))
    h = hvd.grouped_allreduce_async(tensors)
    avg = hvd.synchronize(h)
    assert torch.allclose(avg[0], torch.full((3,), (size + 1) / 2.0))
    res = hvd.grouped_allreduce_(tensors, op=hvd.Max)
    assert res[0] is tensors[0] and torch.allclose(tensors[0], torch.full((3,), float(size)))
    h = hvd.grouped_allreduce_async_(tensors, op=hvd.Min)
    hvd.synchronize(h)
    assert torch.allclose(tensors[0], torch.full((3,), float(size)))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32, torch.float16, torch.float32, torch.float64,
                                   torch.bool])
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_allgather_variable_first_dim(dtype, dims, size):
    r = hvd.rank()
    shape = [r + 1] + [3] * (dims - 1)
    t = torch.full(shape, r % 2 if dtype == torch.bool else r, dtype=dtype)
    out = hvd.allgather(t)
    assert out.dtype == dtype and list(out.shape[1:]) == shape[1:]
    assert out.shape[0] == sum(i + 1 for i in range(size))
    offset = 0
    for i in range(size):
        block = out[offset:offset + i + 1]
        assert torch.equal(block, torch.full([i + 1] + shape[1:], i % 2 if dtype == torch.bool else i,
                                             dtype=dtype))
        offset += i + 1
    h = hvd.allgather_async(t)
    assert torch.equal(hvd.synchronize(h), out)


def test_allgather_scalar_and_grouped(size):
    out = hvd.allgather(torch.tensor(float(hvd.rank())))
    assert torch.equal(out, torch.arange(size, dtype=torch.float32))
    outs = hvd.grouped_allgather([torch.ones(1) * hvd.rank(), torch.ones(2, 2) * hvd.rank()])
    assert torch.equal(outs[0], torch.arange(size, dtype=torch.float32))
    assert outs[1].shape == (2 * size, 2)
    outs = hvd.synchronize(hvd.grouped_allgather_async([torch.ones(1) * hvd.rank()]))
    assert torch.equal(outs[0], torch.arange(size, dtype=torch.float32))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int64, torch.float16, torch.float32, torch.float64, torch.bool])
def test_broadcast_every_root(dtype, size):
    for root in range(size):
        t = torch.full((2, 3), hvd.rank() % 2 if dtype == torch.bool else hvd.rank(), dtype=dtype)
        orig = t.clone()
        out = hvd.broadcast(t, root)
        expected = torch.full((2, 3), root % 2 if dtype == torch.bool else root, dtype=dtype)
        assert torch.equal(out, expected) and torch.equal(t, orig)
        assert torch.equal(hvd.synchronize(hvd.broadcast_async(t, root)), expected)
        assert hvd.broadcast_(t, root) is t and torch.equal(t, expected)
        u = orig.clone()
        hvd.synchronize(hvd.broadcast_async_(u, root, name="bcast_inplace"))
        assert torch.equal(u, expected)


def test_alltoall_even_and_splits(size):
    r = hvd.rank()
    t = torch.arange(size * 2, dtype=torch.float32) + 100 * r
    out = hvd.alltoall(t)
    expected = torch.cat([torch.arange(r * 2, r * 2 + 2, dtype=torch.float32) + 100 * j for j in range(size)])
    assert torch.equal(out, expected)
    # rank r sends j+1 rows to rank j
    splits = [j + 1 for j in range(size)]
    t = torch.full((sum(splits), 2), float(r))
    out, received = hvd.alltoall(t, splits=splits)
    assert received.dtype == torch.int32 and received.tolist() == [r + 1] * size
    assert torch.equal(out, torch.cat([torch.full((r + 1, 2), float(j)) for j in range(size)]))
    out2, received2 = hvd.synchronize(hvd.alltoall_async(t, splits=torch.tensor(splits, dtype=torch.int32)))
    assert torch.equal(out2, out) and received2.tolist() == received.tolist()


def test_reducescatter_sum_average_uneven(size):
    r = hvd.rank()
    rows = 2 * size + 1
    t = torch.arange(rows * 3, dtype=torch.float64).reshape(rows, 3) + r
    full = sum(torch.arange(rows * 3, dtype=torch.float64).reshape(rows, 3) + i for i in range(size))
    counts = [rows // size + (1 if i < rows % size else 0) for i in range(size)]
    start = sum(counts[:r])
    out = hvd.reducescatter(t, op=hvd.Sum)
    assert torch.allclose(out, full[start:start + counts[r]])
    avg = hvd.synchronize(hvd.reducescatter_async(t))
    assert torch.allclose(avg, full[start:start + counts[r]] / size)
    outs = hvd.grouped_reducescatter([t, t.float()], op=hvd.Sum)
    assert torch.allclose(outs[0], full[start:start + counts[r]])
    assert outs[1].dtype == torch.float32
    outs = hvd.synchronize(hvd.grouped_reducescatter_async([t], op=hvd.Sum))
    assert torch.allclose(outs[0], full[start:start + counts[r]])


def test_join_and_barrier(size):
    hvd.barrier()
    last = hvd.join()
    assert 0 <= last < size


def test_join_lets_other_ranks_allreduce(size):
    # Rank 0 joins at once; the others allreduce with rank 0 contributing zeros.
    if hvd.rank() == 0:
        last = hvd.join()
    else:
        out = hvd.allreduce(torch.ones(4), op=hvd.Sum, name="join.partial")
        assert torch.allclose(out, torch.full((4,), float(size - 1)))
        last = hvd.join()
    assert 0 <= last < size
