"""horovodlite.torch on CUDA tensors (issue 29): every collective, fp16 (half
tensors and fp16 compression), grouped ops, broadcasts, process sets, and
DistributedOptimizer equal to one process on the concatenated batch; and
Horovod's CUDA behaviours: half prescale/postscale as Horovod's kernels round
them, alltoall's received splits on the tensor's device, a grouped op mixing
CPU and CUDA tensors rejected naming the tensors. Results are compared on the
host with what a single process computes."""

import horovodlite.torch as hvd
import pytest
import torch


def dev():
    return torch.device("cuda", torch.cuda.current_device())


def rank_tensor(shape, dtype=torch.float32, offset=0.0):
    return torch.full(shape, float(hvd.rank() + 1) + offset, dtype=dtype, device=dev())


def total(n=None):
    n = hvd.size() if n is None else n
    return n * (n + 1) / 2


# ---- collectives ----

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                                   torch.int64, torch.uint8, torch.int8])
def test_allreduce_sum_and_average(dtype):
    x = rank_tensor((1000,), dtype)
    y = hvd.allreduce(x, op=hvd.Sum, name="gpu.ar.sum.%s" % dtype)
    assert y.is_cuda and y.device == x.device and y.dtype == dtype
    assert torch.all(y.double().cpu() == total())
    if dtype.is_floating_point:
        a = hvd.allreduce(x, op=hvd.Average, name="gpu.ar.avg.%s" % dtype)
        assert torch.allclose(a.double().cpu(), torch.full((1000,), total() / hvd.size(), dtype=torch.float64),
                              rtol=1e-2)


def test_allreduce_min_max_product():
    x = rank_tensor((64,))
    assert torch.all(hvd.allreduce(x, op=hvd.Min, name="gpu.ar.min").cpu() == 1)
    assert torch.all(hvd.allreduce(x, op=hvd.Max, name="gpu.ar.max").cpu() == hvd.size())
    prod = 1.0
    for r in range(hvd.size()):
        prod *= r + 1
    assert torch.all(hvd.allreduce(x, op=hvd.Product, name="gpu.ar.prod").cpu() == prod)


def test_allreduce_in_place_and_async():
    x = rank_tensor((4097,))
    h = hvd.allreduce_async_(x, op=hvd.Sum, name="gpu.ar.inplace")
    out = hvd.synchronize(h)
    assert out.data_ptr() == x.data_ptr()
    assert torch.all(x.cpu() == total())
    # Many small tensors in flight: fused on the device.
    xs = [rank_tensor((7 + i,), offset=i) for i in range(64)]
    hs = [hvd.allreduce_async_(t, op=hvd.Sum, name="gpu.ar.many.%d" % i) for i, t in enumerate(xs)]
    for i, (t, h) in enumerate(zip(xs, hs)):
        hvd.synchronize(h)
        assert torch.all(t.cpu() == total() + hvd.size() * i), i


def test_allreduce_result_ordered_on_the_consumer_stream():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = rank_tensor((1 << 20,))
        y = hvd.allreduce(x, op=hvd.Sum, name="gpu.ar.stream")
        z = y * 2  # on s, after the allreduce
    torch.cuda.synchronize()
    assert torch.all(z.cpu() == 2 * total())


def test_allgather_uneven_rows():
    x = rank_tensor((hvd.rank() + 1, 3))
    y = hvd.allgather(x, name="gpu.ag")
    assert y.is_cuda and y.shape == (total(), 3)
    rows = torch.cat([torch.full((r + 1, 3), float(r + 1)) for r in range(hvd.size())])
    assert torch.equal(y.cpu(), rows)


def test_broadcast_and_in_place():
    root = hvd.size() - 1
    x = rank_tensor((257,))
    y = hvd.broadcast(x, root_rank=root, name="gpu.bc")
    assert y.is_cuda and torch.all(y.cpu() == root + 1)
    hvd.broadcast_(x, root_rank=0, name="gpu.bc_")
    assert torch.all(x.cpu() == 1)


def test_broadcast_parameters_and_optimizer_state():
    torch.manual_seed(hvd.rank())
    model = torch.nn.Linear(8, 4).to(dev())
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 8, device=dev())).sum().backward()
    opt.step()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for name, p in model.state_dict().items():
        ref = hvd.broadcast(p.clone(), root_rank=0, name="gpu.bcp.check." + name)
        assert torch.equal(p, ref)


def test_alltoall_with_splits_returns_received_splits_on_the_device():
    n = hvd.size()
    splits = [r + 1 for r in range(n)]  # r + 1 rows to rank r
    x = torch.cat([torch.full((r + 1, 2), float(hvd.rank() * 100 + r), device=dev()) for r in range(n)])
    out, received = hvd.alltoall(x, splits=splits, name="gpu.a2a")
    assert out.is_cuda
    # Horovod returns the received splits on the tensor's device.
    assert received.device == x.device, received.device
    assert received.cpu().tolist() == [hvd.rank() + 1] * n
    expect = torch.cat([torch.full((hvd.rank() + 1, 2), float(s * 100 + hvd.rank())) for s in range(n)])
    assert torch.equal(out.cpu(), expect)


def test_reducescatter_sum_and_average():
    n = hvd.size()
    x = rank_tensor((2 * n + 1, 3))
    y = hvd.reducescatter(x, op=hvd.Sum, name="gpu.rs")
    rows = (2 * n + 1) // n + (1 if hvd.rank() < (2 * n + 1) % n else 0)
    assert y.is_cuda and y.shape == (rows, 3)
    assert torch.all(y.cpu() == total())
    a = hvd.reducescatter(x, op=hvd.Average, name="gpu.rs.avg")
    assert torch.allclose(a.cpu(), torch.full((rows, 3), total() / n))


def test_grouped_ops():
    xs = [rank_tensor((5 + i,)) for i in range(4)]
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum, name="gpu.gar")
    assert all(y.is_cuda and torch.all(y.cpu() == total()) for y in ys)
    gs = hvd.grouped_allgather([rank_tensor((1, 2)), rank_tensor((2,))], name="gpu.gag")
    assert gs[0].shape == (hvd.size(), 2) and gs[1].shape == (2 * hvd.size(),)
    rs = hvd.grouped_reducescatter([rank_tensor((hvd.size(), 2)), rank_tensor((2 * hvd.size(),))], op=hvd.Sum,
                                   name="gpu.grs")
    assert all(r.is_cuda and torch.all(r.cpu() == total()) for r in rs)


def test_grouped_allreduce_mixing_cpu_and_cuda_raises_naming_the_tensors():
    cpu = torch.ones(4)
    gpu = torch.ones(4, device=dev())
    with pytest.raises(Exception) as err:
        hvd.grouped_allreduce([cpu, gpu], op=hvd.Sum, name="gpu.mixed")
    msg = str(err.value)
    assert "one device" in msg and "the CPU" in msg and "cuda:%d" % dev().index in msg, msg
    assert "gpu.mixed" in msg, msg
    # The runtime is unaffected.
    assert torch.all(hvd.allreduce(gpu, op=hvd.Sum, name="gpu.after.mixed").cpu() == hvd.size())


# ---- fp16 ----

def horovod_half_scale(x, factor):
    """Horovod's CUDA scaling of a half tensor: the factor rounded to half, the
    product of two halves (exact in float32) rounded once."""
    f = torch.tensor(factor, dtype=torch.float16).float()
    return (x.float() * f).half()


@pytest.mark.parametrize("factor", [0.3, 1.0 / 3.0, 1.7])
def test_half_prescale_postscale_rounded_as_horovod(factor):
    torch.manual_seed(7)
    base = (torch.rand(4096) * 20).half()  # the same on every rank
    x = base.to(dev())
    y = hvd.allreduce(x, op=hvd.Sum, prescale_factor=factor, name="gpu.h.pre.%g" % factor)
    pre = horovod_half_scale(base, factor)
    expect = pre.float() * hvd.size() if hvd.size() == 1 else None
    if expect is not None:  # one rank: the sum is the scaled tensor itself, bit for bit
        assert torch.equal(y.cpu(), expect.half())
    z = hvd.allreduce(x, op=hvd.Sum, postscale_factor=factor, name="gpu.h.post.%g" % factor)
    if hvd.size() == 1:
        assert torch.equal(z.cpu(), horovod_half_scale(base, factor))
    # reducescatter and grouped reducescatter: the same rounding
    n = hvd.size()
    rs = hvd.reducescatter(base.repeat(n).to(dev()), op=hvd.Sum, prescale_factor=factor, name="gpu.h.rs.%g" % factor)
    grs = hvd.grouped_reducescatter([base.repeat(n).to(dev())], op=hvd.Sum, postscale_factor=factor,
                                    name="gpu.h.grs.%g" % factor)[0]
    if n == 1:
        assert torch.equal(rs.cpu(), horovod_half_scale(base, factor))
        assert torch.equal(grs.cpu(), horovod_half_scale(base, factor))
    else:
        # n ranks: n * pre rounded by NCCL's half sum; bounded by the half rounding.
        assert torch.allclose(rs.float().cpu(), n * horovod_half_scale(base, factor).float(), rtol=2e-3)


def test_fp16_compression():
    x = rank_tensor((3001,))
    y = hvd.allreduce(x, op=hvd.Average, compression=hvd.Compression.fp16, name="gpu.fp16c")
    assert y.dtype == torch.float32 and y.is_cuda
    assert torch.allclose(y.cpu(), torch.full((3001,), total() / hvd.size()), rtol=1e-3)


# ---- DistributedOptimizer = one process on the concatenated batch ----

def test_distributed_optimizer_equals_one_process():
    torch.manual_seed(1)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).double()
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).double()
    model.load_state_dict(ref.state_dict())
    ref.to(dev())
    model.to(dev())
    n, per = hvd.size(), 8
    gen = torch.Generator().manual_seed(3)
    data = torch.randn(n * per, 16, generator=gen, dtype=torch.float64)
    target = torch.randn(n * per, 4, generator=gen, dtype=torch.float64)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for _ in range(3):
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref(data.to(dev())), target.to(dev())).backward()
        ref_opt.step()
        opt.zero_grad()
        mine = slice(hvd.rank() * per, (hvd.rank() + 1) * per)
        torch.nn.functional.mse_loss(model(data[mine].to(dev())), target[mine].to(dev())).backward()
        opt.step()
    for a, b in zip(ref.parameters(), model.parameters()):
        assert torch.allclose(a, b, atol=1e-10), (a - b).abs().max()


# ---- process sets ----

def test_process_set_allreduce():
    if hvd.size() < 2:
        pytest.skip("needs two ranks")
    # The even ranks, added dynamically (conftest initialises with process_sets="dynamic").
    evens = [r for r in range(hvd.size()) if r % 2 == 0]
    ps = hvd.add_process_set(evens)
    try:
        if hvd.rank() in evens:
            y = hvd.allreduce(rank_tensor((100,)), op=hvd.Sum, process_set=ps, name="gpu.ps")
            assert y.is_cuda and torch.all(y.cpu() == sum(r + 1 for r in evens))
    finally:
        hvd.remove_process_set(ps)
