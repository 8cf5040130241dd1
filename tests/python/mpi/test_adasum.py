"""op=hvd.Adasum: the allreduce (plain, async, in place, grouped) against a
float64 reference of the recursive pairwise combination computed on every rank
from every rank's inputs, and DistributedOptimizer(op=hvd.Adasum) against a
simulation of Horovod's semantics (each rank's optimizer steps locally, the
updates are combined with Adasum, applied from the pre-step parameters)."""

import copy

import horovodlite.torch as hvd
import pytest
import torch


def _power_of_two(n):
    return n > 0 and n & (n - 1) == 0


def adasum_ref(vectors):
    """Adasum of one tensor per rank, in float64: pairs (0,1), (2,3), ... then
    the pairs' results at distance 2, and so on (the lower rank's side is a)."""
    vs = [v.double().flatten() for v in vectors]
    d = 1
    while d < len(vs):
        for r in range(0, len(vs), 2 * d):
            a, b = vs[r], vs[r + d]
            dot, aa, bb = (a * b).sum(), (a * a).sum(), (b * b).sum()
            ca = 1 - dot / (2 * aa) if aa > 0 else 1.0
            cb = 1 - dot / (2 * bb) if bb > 0 else 1.0
            vs[r] = ca * a + cb * b
        d *= 2
    return vs[0].reshape(vectors[0].shape)


def _inputs(shape, dtype, seed, scale=1.0):
    """Every rank's input (correlated across ranks, like gradients)."""
    shared = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    out = []
    for r in range(hvd.size()):
        own = torch.randn(shape, generator=torch.Generator().manual_seed(seed * 100 + r + 1), dtype=torch.float64)
        out.append(((0.7 * shared + own) * scale).to(dtype))
    return out


_TOL = {torch.float16: 5e-3, torch.bfloat16: 3e-2, torch.float32: 1e-5, torch.float64: 1e-12}
_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _check(got, want, dtype):
    scale = max(want.abs().max().item(), 1e-30)
    err = (got.double() - want).abs().max().item()
    assert err <= _TOL[dtype] * scale, "max error %g (scale %g)" % (err, scale)


@pytest.mark.parametrize("dtype", _DTYPES)
def test_allreduce_adasum_matches_reference(dtype, rank, size):
    if not _power_of_two(size):
        pytest.skip("Adasum needs a power-of-two number of ranks")
    xs = _inputs((33, 17), dtype, seed=3)
    want = adasum_ref(xs)
    x = xs[rank].clone()
    _check(hvd.allreduce(x, op=hvd.Adasum, name="adasum.py.%s" % dtype), want, dtype)
    assert torch.equal(x, xs[rank])  # out of place leaves the input alone
    _check(hvd.synchronize(hvd.allreduce_async(x, op=hvd.Adasum)), want, dtype)
    y = x.clone()
    hvd.allreduce_(y, op=hvd.Adasum)
    _check(y, want, dtype)
    y = x.clone()
    hvd.synchronize(hvd.allreduce_async_(y, op=hvd.Adasum))
    _check(y, want, dtype)


def test_grouped_allreduce_adasum_combines_each_tensor_alone(rank, size):
    if not _power_of_two(size):
        pytest.skip("Adasum needs a power-of-two number of ranks")
    # Very different scales in one fused group: each tensor keeps its own result.
    per_tensor = [_inputs((5,), torch.float32, 11, 1e-3), _inputs((4000,), torch.float32, 12),
                  _inputs((3, 3), torch.float32, 13, 100.0)]
    outs = hvd.grouped_allreduce([xs[rank] for xs in per_tensor], op=hvd.Adasum, name="adasum.py.group")
    for out, xs in zip(outs, per_tensor):
        _check(out, adasum_ref(xs), torch.float32)


def test_allreduce_adasum_errors(size):
    with pytest.raises(ValueError, match="Adasum"):
        hvd.allreduce(torch.ones(3, dtype=torch.int64), op=hvd.Adasum, name="adasum.py.int")
    if not _power_of_two(size):
        with pytest.raises(ValueError, match="power-of-two.*world size is %d" % size):
            hvd.allreduce(torch.ones(3), op=hvd.Adasum, name="adasum.py.size")


# ---- DistributedOptimizer(op=hvd.Adasum) ----

def _model():
    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))


def _batch(r, step, micro=0):
    g = torch.Generator().manual_seed(1000 + 100 * r + 10 * step + micro)
    return torch.randn(8, 6, generator=g), torch.randn(8, 1, generator=g)


def _make_opt(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01)


def _simulate(steps, passes, model_fn=_model, opt_fn=None):
    """Every rank's optimizer stepping locally from the common parameters; the
    updates combined with the reference Adasum and applied from them."""
    opt_fn = opt_fn or (lambda m: _make_opt(m.parameters()))
    model = model_fn()
    replicas = [copy.deepcopy(model) for _ in range(hvd.size())]
    opts = [opt_fn(m) for m in replicas]
    params = [p.detach().clone() for p in model.parameters()]
    for step in range(steps):
        deltas = []
        for r, (m, opt) in enumerate(zip(replicas, opts)):
            with torch.no_grad():
                for p, v in zip(m.parameters(), params):
                    p.copy_(v)
            opt.zero_grad()
            for micro in range(passes):
                x, y = _batch(r, step, micro)
                torch.nn.functional.mse_loss(m(x), y).backward()
            opt.step()
            deltas.append([p.detach() - v for p, v in zip(m.parameters(), params)])
        params = [v + adasum_ref([d[i] for d in deltas]).float() for i, v in enumerate(params)]
    return params


@pytest.mark.parametrize("passes", [1, 2])
def test_distributed_optimizer_adasum_equals_reference(rank, size, passes):
    if not _power_of_two(size):
        pytest.skip("Adasum needs a power-of-two number of ranks")
    steps = 3
    model = _model()
    opt = hvd.DistributedOptimizer(_make_opt(model.parameters()), named_parameters=model.named_parameters(),
                                   op=hvd.Adasum, backward_passes_per_step=passes)
    for step in range(steps):
        opt.zero_grad()
        for micro in range(passes):
            x, y = _batch(rank, step, micro)
            torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    want = _simulate(steps, passes)
    for p, w in zip(model.parameters(), want):
        assert torch.allclose(p.detach(), w, rtol=1e-5, atol=1e-6), (p, w)
    # Every rank holds the same parameters.
    for p in model.parameters():
        assert torch.equal(hvd.broadcast(p.detach(), root_rank=0, name="adasum.py.same"), p.detach())


def _deep_model():
    # 30 parameters in two groups, one of them 1 MiB: the hooks step and send
    # them in batches (_BATCH_PARAMS of them, or _BATCH_BYTES, which the large
    # one fills alone), and step() the rest.
    torch.manual_seed(11)
    layers = [torch.nn.Linear(6, 512), torch.nn.Tanh(), torch.nn.Linear(512, 512), torch.nn.Tanh(),
              torch.nn.Linear(512, 6)]
    for _ in range(12):
        layers += [torch.nn.Tanh(), torch.nn.Linear(6, 6)]
    return torch.nn.Sequential(*layers)


def _two_groups(m):
    params = list(m.parameters())
    return torch.optim.Adam([{"params": params[:20], "lr": 0.01}, {"params": params[20:], "lr": 0.003}])


def test_distributed_optimizer_adasum_many_parameters_two_groups(rank, size):
    if not _power_of_two(size):
        pytest.skip("Adasum needs a power-of-two number of ranks")
    steps = 3
    model = _deep_model()
    assert len(list(model.parameters())) == 30
    opt = hvd.DistributedOptimizer(_two_groups(model), named_parameters=model.named_parameters(), op=hvd.Adasum)
    for step in range(steps):
        opt.zero_grad()
        x, y = _batch(rank, step)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    want = _simulate(steps, 1, _deep_model, _two_groups)
    for p, w in zip(model.parameters(), want):
        assert torch.allclose(p.detach(), w, rtol=1e-5, atol=1e-6), (p, w)
    for p in model.parameters():
        assert torch.equal(hvd.broadcast(p.detach(), root_rank=0, name="adasum.py.deep"), p.detach())


def test_distributed_optimizer_adasum_too_many_backward_passes(rank, size):
    if not _power_of_two(size):
        pytest.skip("Adasum needs a power-of-two number of ranks")
    model = _model()
    opt = hvd.DistributedOptimizer(_make_opt(model.parameters()), named_parameters=model.named_parameters(),
                                   op=hvd.Adasum)
    x, y = _batch(rank, 0)
    torch.nn.functional.mse_loss(model(x), y).backward()
    # A second pass before step(): the parameters' updates are ready (not yet
    # sent: fewer than _BATCH_PARAMS) or sent; either way Horovod's error.
    with pytest.raises(AssertionError, match="more than backward_passes_per_step"):
        torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()  # what was ready still goes, on every rank alike


def test_distributed_optimizer_adasum_fp16_compression(rank, size):
    if not _power_of_two(size):
        pytest.skip("Adasum needs a power-of-two number of ranks")
    model = _model()
    opt = hvd.DistributedOptimizer(_make_opt(model.parameters()), named_parameters=model.named_parameters(),
                                   op=hvd.Adasum, compression=hvd.Compression.fp16)
    for step in range(2):
        opt.zero_grad()
        x, y = _batch(rank, step)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    want = _simulate(2, 1)
    for p, w in zip(model.parameters(), want):
        assert torch.allclose(p.detach(), w, rtol=0, atol=2e-3), (p, w)


def test_distributed_optimizer_adasum_arguments():
    model = _model()
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(_make_opt(model.parameters()), op=hvd.Adasum, gradient_predivide_factor=2.0)
    opt = hvd.DistributedOptimizer(_make_opt(model.parameters()), named_parameters=model.named_parameters(),
                                   op=hvd.Adasum)
    with pytest.raises(AssertionError):
        with opt.skip_synchronize():
            pass
