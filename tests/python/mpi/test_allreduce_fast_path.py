"""hvd.allreduce without autograd: the fast path straight to the core, results
on storages the adapter pools (reused only once nothing references them), and
fp16 compression converted by the core. Results must be those of Horovod's
path: compress / allreduce / decompress, a fresh tensor per call."""

import io
import os

import horovodlite.torch as hvd
import pytest
import torch

# Above the pool's 64 KiB floor, so that results come from pooled storages.
N = 1 << 16


def _input(i):
    return torch.arange(N, dtype=torch.float32) * 0.5 + (hvd.rank() + 1) * 1000.0 + i


def _expected_sum(i, size):
    return torch.arange(N, dtype=torch.float32) * 0.5 * size + 1000.0 * size * (size + 1) / 2 + i * size


def test_held_results_are_never_overwritten(size):
    held = []
    for i in range(12):  # more results than the pool holds storages
        held.append(hvd.allreduce(_input(i), name="pool.hold.%d" % i, op=hvd.Sum))
    for i, r in enumerate(held):
        assert torch.equal(r, _expected_sum(i, size)), i
    assert len({r.data_ptr() for r in held}) == len(held)


def test_views_and_storages_keep_a_result_alive(size):
    r = hvd.allreduce(_input(0), name="pool.view.0", op=hvd.Sum)
    view = r[1:]                      # a view on the result's storage
    r_ptr = r.data_ptr()
    s = hvd.allreduce(_input(1), name="pool.view.1", op=hvd.Sum)
    storage = s.storage()             # a storage object alone keeps it too
    s_ptr = s.data_ptr()
    del r, s
    for i in range(2, 8):             # results dropped at once: their storages are free for reuse
        out = hvd.allreduce(_input(i), name="pool.view.%d" % i, op=hvd.Sum)
        assert torch.equal(out, _expected_sum(i, size))
        assert out.data_ptr() not in (r_ptr, s_ptr)
        del out
    assert torch.equal(view, _expected_sum(0, size)[1:])
    kept = torch.tensor([], dtype=torch.float32).set_(storage)
    assert torch.equal(kept, _expected_sum(1, size))


def test_reused_results_are_fresh_tensors(size):
    a = hvd.allreduce(_input(0), name="pool.fresh.a", op=hvd.Sum)
    a.requires_grad_(True)
    (a * 2).sum().backward()          # autograd metadata on a (a leaf with a .grad)
    del a
    b = hvd.allreduce(_input(1), name="pool.fresh.b", op=hvd.Sum)
    assert not b.requires_grad and b.grad_fn is None and b.grad is None
    assert torch.equal(b, _expected_sum(1, size))
    b.mul_(2)  # a result is the caller's to change
    c = hvd.allreduce(_input(2), name="pool.fresh.c", op=hvd.Sum)
    assert torch.equal(c, _expected_sum(2, size)) and torch.equal(b, _expected_sum(1, size) * 2)


def test_result_shape_dtype_and_noncontiguous_input(size):
    x = (torch.arange(2 * N, dtype=torch.float64).reshape(2, N) + hvd.rank()).t()  # non-contiguous
    out = hvd.allreduce(x, name="pool.nc", op=hvd.Sum)
    assert out.shape == x.shape and out.dtype == torch.float64 and out.is_contiguous()
    expected = torch.arange(2 * N, dtype=torch.float64).reshape(2, N).t() * size + sum(range(size))
    assert torch.equal(out, expected)
    assert torch.equal(hvd.allreduce(x, name="pool.nc.avg"), expected / size)


def _smaps_field(address, field):
    """A field of the mapping that holds `address` (/proc/self/smaps), split."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= address < hi
            elif inside and line.startswith(field + ":"):
                return line.split()[1:]
    return []


def _vm_flags(address):
    """The VmFlags of the mapping that holds `address`."""
    return _smaps_field(address, "VmFlags")


def _huge_kib(address):
    """KiB of the mapping that holds `address` on transparent huge pages."""
    return int(_smaps_field(address, "AnonHugePages")[0])


def _thp_mode():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
    except OSError:
        return ""
    return text[text.index("[") + 1:text.index("]")] if "[" in text else ""


def _kernel_moves_onto_huge_pages():
    """Whether madvise(MADV_COLLAPSE) (Linux 6.1) moves this process's memory."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    t = torch.ones(3 << 20)  # 12 MiB: whole 2 MiB pages inside it
    lo = (t.data_ptr() + (2 << 20) - 1) & ~((2 << 20) - 1)
    return libc.madvise(lo, 2 << 20, 25) == 0


@pytest.mark.skipif(not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"),
                    reason="this kernel has no transparent huge pages")
def test_large_results_sit_on_huge_page_storages(size):
    # From 2 MiB up a result's storage is the adapter's own, 2 MiB aligned and
    # advised onto huge pages (host_memory.h), and behaves as any other: right
    # values, resizable, saved and loaded.
    n = (5 << 19) + 7  # 2.5 MiB of float32 and a bit
    x = torch.arange(n, dtype=torch.float32) + hvd.rank()
    out = hvd.allreduce(x, name="pool.huge", op=hvd.Sum)
    expected = torch.arange(n, dtype=torch.float32) * size + sum(range(size))
    assert torch.equal(out, expected)
    assert out.data_ptr() % (2 << 20) == 0
    assert "hg" in _vm_flags(out.data_ptr()), _vm_flags(out.data_ptr())
    buf = io.BytesIO()
    torch.save(out, buf)
    buf.seek(0)
    assert torch.equal(torch.load(buf), expected)
    out.resize_(n + 1000)
    assert torch.equal(out[:n], expected)
    small = hvd.allreduce(_input(0), name="pool.small", op=hvd.Sum)  # under 2 MiB: LibTorch's allocator
    assert "hg" not in _vm_flags(small.data_ptr())


def test_a_large_input_sent_again_moves_onto_huge_pages(size):
    """HOROVODLITE_HUGE_PAGE_INPUTS (default 1): a tensor of 4 MiB or more that
    hvd.allreduce sends from the user's own memory moves onto huge pages from
    its second call on (its whole 2 MiB pages, in place: host_memory.h), where
    the peers on this host copy out of it far faster; its address and values
    stay, and the results are right."""
    if any(v in os.environ for v in ("HOROVODLITE_HUGE_PAGE_INPUTS", "HOROVOD_HUGE_PAGE_INPUTS")):
        pytest.skip("set by the environment")
    if hvd.local_size() < 2:
        pytest.skip("no peer on this host")
    if _thp_mode() != "madvise":
        pytest.skip("THP mode %r: a tensor may start on huge pages, or never move" % _thp_mode())
    if not _kernel_moves_onto_huge_pages():
        pytest.skip("this kernel does not move memory onto huge pages on request (MADV_COLLAPSE)")
    n = (3 << 20) + 777  # 12 MiB of float32 and a bit
    x = torch.arange(n, dtype=torch.float32) + hvd.rank()
    ptr, before = x.data_ptr(), _huge_kib(x.data_ptr())
    expected = torch.arange(n, dtype=torch.float32) * size + sum(range(size))
    for _ in range(3):
        assert torch.equal(hvd.allreduce(x, name="huge.input", op=hvd.Sum), expected)
        assert x.data_ptr() == ptr
        assert torch.equal(x, torch.arange(n, dtype=torch.float32) + hvd.rank())
    whole_pages = (n * 4 - (2 << 20)) // (2 << 20) * (2 << 20)  # at least, wherever x starts
    assert _huge_kib(ptr) - before >= whole_pages >> 10, (before, _huge_kib(ptr))


def test_requires_grad_keeps_the_autograd_path(size):
    x = _input(0).requires_grad_(True)
    y = hvd.allreduce(x, name="pool.grad", op=hvd.Sum)
    assert y.grad_fn is not None
    y.sum().backward()
    assert torch.equal(x.grad, torch.full((N,), float(size)))
    with torch.no_grad():
        z = hvd.allreduce(x, name="pool.nograd", op=hvd.Sum)
    assert z.grad_fn is None and torch.equal(z, _expected_sum(0, size))


def _horovod_fp16(t, op, size):
    """Horovod's result: the fp16 values summed with fp16 rounding of each partial
    sum, the sum scaled by 1/size in float and rounded to fp16, cast back."""
    gathered = hvd.allgather(t.to(torch.float16).unsqueeze(0), name="fp16.ref.%s" % op)
    acc = gathered[0]
    for r in range(1, size):
        acc = (acc.float() + gathered[r].float()).half()
    if op == hvd.Average:
        acc = (acc.float() * torch.tensor(1.0 / size, dtype=torch.float32)).half()
    # Another order of the partial sums (a ring) rounds differently: each of the
    # size - 1 roundings is within half an fp16 ulp of a partial sum, which is at
    # most the sum of magnitudes.
    bound = gathered.float().abs().sum(0) * (size - 1) * 2.0 ** -11
    if op == hvd.Average:
        bound = bound / size
    return acc.to(t.dtype), bound.to(t.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
@pytest.mark.parametrize("n", [33, N])
def test_fp16_compression_matches_horovod(dtype, op, n, size):
    g = torch.Generator().manual_seed(100 + hvd.rank())
    t = (torch.randn(n, generator=g, dtype=torch.float64) * 3).to(dtype)
    out = hvd.allreduce(t, name="fp16.%s.%s.%d" % (dtype, op, n), op=op, compression=hvd.Compression.fp16)
    assert out.dtype == dtype
    expected, bound = _horovod_fp16(t, op, size)
    if size == 2:
        # Two ranks: one fp16 rounding of the sum, whatever the order: bitwise equal.
        assert torch.equal(out, expected)
    else:
        # Rounding differences of the summation order, plus Average's rounding.
        assert bool(((out - expected).abs() <= 2 * bound + 2.0 ** -24).all())
    h = hvd.allreduce_async(t, name="fp16.async.%s.%s.%d" % (dtype, op, n), op=op,
                            compression=hvd.Compression.fp16)
    assert torch.equal(hvd.synchronize(h), out)


def test_fp16_compression_leaves_other_dtypes_as_horovod(size):
    ints = torch.arange(10, dtype=torch.int32) + hvd.rank()
    out = hvd.allreduce(ints, name="fp16.ints", op=hvd.Sum, compression=hvd.Compression.fp16)
    assert out.dtype == torch.int32 and torch.equal(out, torch.arange(10, dtype=torch.int32) * size + sum(range(size)))
    bf = torch.full((5,), 1.0 + hvd.rank(), dtype=torch.bfloat16)
    out = hvd.allreduce(bf, name="fp16.bf16", op=hvd.Sum, compression=hvd.Compression.fp16)
    assert out.dtype == torch.bfloat16 and torch.equal(out.float(), torch.full((5,), size * (size + 1) / 2.0))


def _horovod_bf16(t, op, size):
    """The bf16 twin of _horovod_fp16: bf16 values summed with bf16 rounding of
    each partial sum, Average's 1/size applied in float and rounded to bf16.
    bf16 keeps 8 significant bits: half an ulp is 2^-8 of a value's magnitude."""
    gathered = hvd.allgather(t.to(torch.bfloat16).unsqueeze(0), name="bf16.ref.%s" % op)
    acc = gathered[0]
    for r in range(1, size):
        acc = (acc.float() + gathered[r].float()).bfloat16()
    if op == hvd.Average:
        acc = (acc.float() * torch.tensor(1.0 / size, dtype=torch.float32)).bfloat16()
    bound = gathered.float().abs().sum(0) * (size - 1) * 2.0 ** -8
    if op == hvd.Average:
        bound = bound / size
    return acc.to(t.dtype), bound.to(t.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
@pytest.mark.parametrize("n", [33, N])
def test_bf16_compression_matches_horovod_and_is_close_to_float32(dtype, op, n, size):
    """float32 goes through the core's bf16 wire, float64 through the Python
    compressor (as fp16 does); both give the bf16 values a bf16 allreduce gives,
    within about 1e-2 (relative to the magnitudes) of the uncompressed result."""
    g = torch.Generator().manual_seed(200 + hvd.rank())
    t = (torch.randn(n, generator=g, dtype=torch.float64) * 3).to(dtype)
    out = hvd.allreduce(t, name="bf16.%s.%s.%d" % (dtype, op, n), op=op, compression=hvd.Compression.bf16)
    assert out.dtype == dtype
    assert torch.equal(out, out.to(torch.bfloat16).to(dtype)), "not bf16 values: bf16 was not on the wire"
    expected, bound = _horovod_bf16(t, op, size)
    if size == 2:
        assert torch.equal(out, expected)  # one bf16 rounding of the sum, whatever the order
    else:
        assert bool(((out - expected).abs() <= 2 * bound + 2.0 ** -133).all())
    exact = hvd.allreduce(t, name="bf16.exact.%s.%s.%d" % (dtype, op, n), op=op)
    magnitude = hvd.allreduce(t.abs(), name="bf16.mag.%s.%s.%d" % (dtype, op, n), op=op)
    # Close to float32's: each of at most 2 * size bf16 roundings (the inputs,
    # the partial sums, Average's quotient) is within 2^-9 of the magnitudes
    # involved: 7.8e-3 (np 2) and 1.2e-2 (np 3) of the mean magnitude.
    assert bool(((out - exact).abs() <= 2 * size * 2.0 ** -9 * magnitude + 1e-30).all())
    h = hvd.allreduce_async(t, name="bf16.async.%s.%s.%d" % (dtype, op, n), op=op,
                            compression=hvd.Compression.bf16)
    assert torch.equal(hvd.synchronize(h), out)


def test_bf16_keeps_float32_range_where_fp16_overflows(size):
    t = torch.full((64,), 60000.0) + hvd.rank()
    bf = hvd.allreduce(t, name="bf16.range", op=hvd.Sum, compression=hvd.Compression.bf16)
    fp = hvd.allreduce(t, name="fp16.range", op=hvd.Sum, compression=hvd.Compression.fp16)
    assert bool(torch.isinf(fp).all())
    assert bool(torch.isfinite(bf).all())
    torch.testing.assert_close(bf, torch.full((64,), 60000.0 * size), rtol=1e-2, atol=0)


def test_bf16_compression_refuses_integer_tensors_by_name(size):
    """fp16 lets an integer tensor through uncompressed (Horovod's compressor
    does); bf16 refuses it, naming the tensor, on every rank alike (before
    anything is enqueued, so the ranks stay in step)."""
    ints = torch.arange(10, dtype=torch.int32)
    bf16 = hvd.Compression.bf16
    with pytest.raises(TypeError, match=r"allreduce: Compression\.bf16 .*'bf16\.ints' is torch\.int32"):
        hvd.allreduce(ints, name="bf16.ints", compression=bf16)
    with pytest.raises(TypeError, match=r"allreduce_async: .*'bf16\.ints\.async'"):
        hvd.allreduce_async(ints, name="bf16.ints.async", compression=bf16)
    with pytest.raises(TypeError, match=r"grouped_allreduce: .*'bf16\.ints\.grouped' \[1\] is torch\.int64"):
        hvd.grouped_allreduce([torch.ones(3), torch.ones(3, dtype=torch.int64)], name="bf16.ints.grouped",
                              compression=bf16)
    with pytest.raises(TypeError, match=r"reducescatter: .*'bf16\.ints\.rs'"):
        hvd.reducescatter(torch.ones(2 * size, dtype=torch.int32), name="bf16.ints.rs", compression=bf16)
    with pytest.raises(TypeError, match=r"grouped_reducescatter: .*unnamed"):
        hvd.grouped_reducescatter([torch.ones(2 * size, dtype=torch.uint8)], compression=bf16)
    with pytest.raises(TypeError, match="floating-point"):
        hvd.Compression.bf16.compress(ints)
    # The runtime is still in step: an ordinary allreduce works.
    assert torch.equal(hvd.allreduce(ints, name="bf16.ints.after", op=hvd.Sum), ints * size)


@pytest.mark.parametrize("form", ["allreduce", "allreduce_async", "allreduce_async_", "allreduce_"])
def test_every_allreduce_form_makes_the_same_checks(form, size):
    """The in-place form (DistributedOptimizer's and per-parameter loops' fast
    path) refuses what the others refuse, with the same error types, and names
    the public function; nothing is enqueued, so the ranks stay in step."""
    fn = getattr(hvd, form)
    t = torch.ones(3)
    unregistered = hvd.ProcessSet([0])
    bad = [
        (TypeError, "expected a torch.Tensor", lambda: fn([1.0, 2.0], name="chk.list")),
        (ValueError, "sparse", lambda: fn(torch.ones(2).to_sparse(), name="chk.sparse")),
        (TypeError, "name must be a str", lambda: fn(t, name=7)),
        (TypeError, "prescale_factor must be a number", lambda: fn(t, name="chk.pre", prescale_factor="2")),
        (TypeError, "postscale_factor must be a number", lambda: fn(t, name="chk.post", postscale_factor=None)),
        (ValueError, "op must be one of", lambda: fn(t, name="chk.op", op=99)),
        (ValueError, "op must be one of", lambda: fn(t, name="chk.op.bool", op=True)),
        (ValueError, "is not registered", lambda: fn(t, name="chk.ps", process_set=unregistered)),
        (TypeError, "process_set must be a hvd.ProcessSet", lambda: fn(t, name="chk.ps.type", process_set=1)),
    ]
    for error, text, call in bad:
        with pytest.raises(error, match=text) as info:
            call()
        assert str(info.value).startswith(form) or form in str(info.value), str(info.value)
    # Integer factors and a None name are accepted (converted), as everywhere.
    out = hvd.synchronize(fn(t.clone(), name=None, op=hvd.Sum, prescale_factor=2, postscale_factor=1)) \
        if form.endswith("async") or form.endswith("async_") else \
        fn(t.clone(), name=None, op=hvd.Sum, prescale_factor=2, postscale_factor=1)
    assert torch.equal(out, torch.full((3,), 2.0 * size))
