"""DistributedOptimizer must match one process training on the concatenated
batch (float64, tight tolerance), with accumulation and with checkpointing."""

import copy
import inspect

import horovodlite.torch as hvd
import pytest
import torch
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

TOL = dict(rtol=1e-10, atol=1e-12)
# checkpoint_sequential takes use_reentrant from PyTorch 2.x on (and warns when it
# is left out); 1.13's is always reentrant.
SEQ_REENTRANT_ARG = "use_reentrant" in inspect.signature(checkpoint_sequential).parameters
BATCH = 4  # rows per rank per backward pass


def _mlp():
    torch.manual_seed(7)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
        torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()


def _data(steps, passes, size):
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(steps, passes, size * BATCH, 6, generator=g, dtype=torch.float64)
    y = torch.randn(steps, passes, size * BATCH, 3, generator=g, dtype=torch.float64)
    return x, y


def _forward(model, x, mode):
    if mode == "plain":
        return model(x)
    if mode in ("reentrant", "nonreentrant"):
        reentrant = mode == "reentrant"
        h = checkpoint(lambda t: model[1](model[0](t)), x.requires_grad_(True) if reentrant else x,
                       use_reentrant=reentrant)
        h = checkpoint(lambda t: model[3](model[2](t)), h, use_reentrant=reentrant)
        return model[6](model[5](model[4](h)))
    if mode.startswith("seqnr"):
        return checkpoint_sequential(model, int(mode[5:]), x, use_reentrant=False)
    if mode.startswith("seq"):
        kwargs = {"use_reentrant": True} if SEQ_REENTRANT_ARG else {}
        return checkpoint_sequential(model, int(mode[3:]), x.requires_grad_(True), **kwargs)
    raise ValueError(mode)


def _assert_ranks_identical(model, what):
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).unsqueeze(0)
    gathered = hvd.allgather(flat)
    assert torch.equal(gathered, flat.expand_as(gathered)), "ranks' parameters differ after " + what


def _train(mode, size, rank, steps=3, passes=1, opt_name="sgd", op=None, compression=None):
    model = _mlp()
    reference = copy.deepcopy(model)
    make = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
            "adam": lambda p: torch.optim.Adam(p, lr=0.01)}[opt_name]
    kwargs = {}
    if op is not None:
        kwargs["op"] = op
    if compression is not None:
        kwargs["compression"] = compression
    opt = hvd.DistributedOptimizer(make(model.parameters()), named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes, **kwargs)
    ref_opt = make(reference.parameters())
    xs, ys = _data(steps, passes, size)
    scale = size if op == hvd.Sum else 1.0
    for s in range(steps):
        opt.zero_grad()
        for k in range(passes):
            x = xs[s, k, rank * BATCH:(rank + 1) * BATCH].clone()
            y = ys[s, k, rank * BATCH:(rank + 1) * BATCH]
            loss = torch.nn.functional.mse_loss(_forward(model, x, mode), y) / passes
            loss.backward()
        opt.step()
        _assert_ranks_identical(model, "step %d (mode=%s, passes=%d)" % (s, mode, passes))
        # reference: one process, all ranks' rows, same total loss scaling
        ref_opt.zero_grad()
        for k in range(passes):
            loss = torch.nn.functional.mse_loss(reference(xs[s, k]), ys[s, k]) * scale / passes
            loss.backward()
        ref_opt.step()
    return model, reference


@pytest.mark.parametrize("mode", ["plain", "reentrant", "nonreentrant", "seq2", "seq3", "seq4", "seqnr3"])
@pytest.mark.parametrize("passes", [1, 2])
def test_matches_single_process(mode, passes, size, rank):
    if mode.startswith("seqnr") and not SEQ_REENTRANT_ARG:
        pytest.skip("checkpoint_sequential(use_reentrant=False) needs PyTorch 2.x")
    model, reference = _train(mode, size, rank, passes=passes)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.allclose(p, q, **TOL), "%s differs (mode=%s, passes=%d)" % (name, mode, passes)
    gathered = hvd.allgather(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).unsqueeze(0))
    assert torch.equal(gathered, gathered[:1].expand_as(gathered)), "ranks disagree"


def test_adam_and_sum_op(size, rank):
    model, reference = _train("plain", size, rank, opt_name="adam")
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p, q, **TOL)
    model, reference = _train("plain", size, rank, op=hvd.Sum)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p, q, **TOL)


@pytest.mark.parametrize("mode", ["reentrant", "nonreentrant", "seq2", "seq4"])
@pytest.mark.parametrize("passes", [1, 2])
def test_checkpointing_with_fp16_compression(mode, passes, size, rank):
    model, reference = _train(mode, size, rank, passes=passes, compression=hvd.Compression.fp16)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert p.dtype == torch.float64
        assert torch.allclose(p, q, rtol=1e-2, atol=1e-2)


def test_fp16_compression_close(size, rank):
    model, reference = _train("plain", size, rank, compression=hvd.Compression.fp16)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert p.dtype == torch.float64
        assert torch.allclose(p, q, rtol=1e-2, atol=1e-2)


def test_bf16_compression_close(size, rank):
    """bf16 on the wire (float64 gradients: the compressor path; float32: the
    core's wire): within 2e-2 of the uncompressed training after three steps
    (bf16 keeps 8 significant bits, 8x fewer than fp16's tolerance of 1e-2 assumes)."""
    model, reference = _train("plain", size, rank, compression=hvd.Compression.bf16)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert p.dtype == torch.float64
        assert torch.allclose(p, q, rtol=2e-2, atol=2e-2)
    model = _mlp().float()
    reference = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), compression=hvd.Compression.bf16)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    xs, ys = _data(1, 1, size)
    x, y = xs[0, 0].float(), ys[0, 0].float()
    mine = slice(rank * BATCH, (rank + 1) * BATCH)
    torch.nn.functional.mse_loss(model(x[mine]), y[mine]).backward()
    opt.synchronize()
    torch.nn.functional.mse_loss(reference(x), y).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert p.grad.dtype == torch.float32
        assert torch.equal(p.grad, p.grad.bfloat16().float()), "float32 gradients travel as bf16"
        assert torch.allclose(p.grad, q.grad, rtol=2e-2, atol=1e-2)
    with opt.skip_synchronize():
        opt.step()
    ref_opt.step()


@pytest.mark.parametrize("set_to_none", [False, True])
@pytest.mark.parametrize("fp16", [False, True])
def test_gradients_reduced_in_place(set_to_none, fp16, size, rank):
    """The average is written into p.grad itself (no result buffer per parameter,
    issue 19) and is right in every step, whether zero_grad() zeroes p.grad or
    drops it; p.grad stays a plain tensor users can clip."""
    model = _mlp()
    reference = copy.deepcopy(model)
    kwargs = {"compression": hvd.Compression.fp16} if fp16 else {}
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(), **kwargs)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    tol = dict(rtol=1e-2, atol=1e-3) if fp16 else TOL
    xs, ys = _data(6, 1, size)
    seen = {p: set() for p in model.parameters()}
    for s in range(6):
        opt.zero_grad(set_to_none=set_to_none)
        x, y = xs[s, 0, rank * BATCH:(rank + 1) * BATCH], ys[s, 0, rank * BATCH:(rank + 1) * BATCH]
        torch.nn.functional.mse_loss(model(x), y).backward()
        before = {p: p.grad.data_ptr() for p in model.parameters()}
        opt.synchronize()
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(xs[s, 0]), ys[s, 0]).backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            assert torch.allclose(p.grad, q.grad, **tol), "step %d" % s
            assert p.grad.data_ptr() == before[p], "step %d: the result is not in p.grad's own memory" % s
            assert type(p.grad) is torch.Tensor and p.grad.grad_fn is None
            seen[p].add(p.grad.data_ptr())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)  # p.grad usable as any gradient
        with opt.skip_synchronize():
            opt.step()
        ref_opt.step()
    if not set_to_none:
        # zero_grad() zeroes in place: the same memory every step.
        assert all(len(ptrs) == 1 for ptrs in seen.values()), [len(ptrs) for ptrs in seen.values()]


class _Shared(torch.nn.Module):
    """One Linear used in two reentrant checkpoint segments and once outside:
    its accumulator hook fires three times per backward pass."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.inp = torch.nn.Linear(4, 5)
        self.shared = torch.nn.Linear(5, 5)
        self.out = torch.nn.Linear(5, 2)

    def forward(self, x, use_checkpoint):
        h = torch.tanh(self.inp(x))
        if use_checkpoint:
            h = checkpoint(lambda t: torch.tanh(self.shared(t)), h, use_reentrant=True)
            h = checkpoint(lambda t: torch.tanh(self.shared(t)), h, use_reentrant=True)
        else:
            h = torch.tanh(self.shared(torch.tanh(self.shared(h))))
        return self.out(self.shared(h))


@pytest.mark.parametrize("passes", [1, 2])
def test_parameter_shared_across_reentrant_segments(passes, size, rank):
    model = _Shared().double()
    reference = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters(), backward_passes_per_step=passes)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(99)
    for step in range(3):
        xs = torch.randn(passes, size * 3, 4, generator=g, dtype=torch.float64)
        ys = torch.randn(passes, size * 3, 2, generator=g, dtype=torch.float64)
        opt.zero_grad()
        ref_opt.zero_grad()
        for k in range(passes):
            x = xs[k, rank * 3:(rank + 1) * 3]
            loss = torch.nn.functional.mse_loss(model(x, True), ys[k, rank * 3:(rank + 1) * 3]) / passes
            loss.backward()
            torch.nn.functional.mse_loss(reference(xs[k], False), ys[k]).div(passes).backward()
        opt.step()
        ref_opt.step()
        for p, q in zip(model.parameters(), reference.parameters()):
            assert torch.allclose(p, q, **TOL), "step %d" % step
        # the shared weight's gradient arrived in pieces: it is now sent at synchronize()
        assert any(p is model.shared.weight for p in opt._late)


def test_unused_parameters_get_reduced(size, rank):
    torch.manual_seed(5)
    a = torch.nn.Linear(3, 3).double()
    b = torch.nn.Linear(3, 3).double()
    params = list(a.named_parameters(prefix="a")) + list(b.named_parameters(prefix="b"))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in params], lr=1.0), named_parameters=params)
    x = torch.ones(2, 3, dtype=torch.float64)
    # rank 0 uses only a, the others use only b
    (a(x) if rank == 0 else b(x)).sum().backward()
    opt.synchronize()
    with opt.skip_synchronize():
        opt.step()
    ga = 2.0 / size  # d(sum)/d(bias) = rows, averaged with zeros
    assert torch.allclose(a.bias.grad, torch.full((3,), ga, dtype=torch.float64))
    assert torch.allclose(b.bias.grad, torch.full((3,), 2.0 * (size - 1) / size, dtype=torch.float64))


def _small_model_and_optimizer():
    model = torch.nn.Linear(2, 2)
    return model, hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                           named_parameters=model.named_parameters())


def test_too_many_backward_passes_raises(rank):
    model, opt = _small_model_and_optimizer()
    model(torch.ones(1, 2)).sum().backward()
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        model(torch.ones(1, 2)).sum().backward()
    opt.synchronize()


def test_zero_grad_before_step_raises():
    model, opt = _small_model_and_optimizer()
    model(torch.ones(1, 2)).sum().backward()
    with pytest.raises(AssertionError, match="zero_grad"):
        opt.zero_grad()
    opt.step()
    opt.zero_grad()


def test_step_after_synchronize_warns():
    model, opt = _small_model_and_optimizer()
    model(torch.ones(1, 2)).sum().backward()
    opt.synchronize()
    with pytest.warns(UserWarning, match="skip_synchronize"):
        opt.step()


def test_groups_and_unnamed_parameters(size, rank):
    model, reference = _mlp(), _mlp()
    params = list(model.parameters())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1), groups=[params[:2], params[2:4]])
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    xs, ys = _data(2, 1, size)
    for s in range(2):
        opt.zero_grad()
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(model(xs[s, 0, rank * BATCH:(rank + 1) * BATCH]),
                                     ys[s, 0, rank * BATCH:(rank + 1) * BATCH]).backward()
        opt.step()
        torch.nn.functional.mse_loss(reference(xs[s, 0]), ys[s, 0]).backward()
        ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p, q, **TOL)


def test_bad_arguments():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=[("w", model.weight)])
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=[("w", model.weight), ("w", model.bias)])
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Sum,
                                 gradient_predivide_factor=2.0)
    with pytest.raises(ValueError):  # Adasum: no predivide (test_adasum.py has the rest)
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Adasum,
                                 gradient_predivide_factor=2.0)


@pytest.mark.parametrize("adasum", [False, True], ids=["allreduce", "adasum"])
def test_subclass_of_the_distributed_optimizer(adasum, size, rank):
    """A subclass of the class DistributedOptimizer makes, sharing its instance's
    state (Lightning's LightningOptimizer): every method reaches the wrapped
    optimizer's class once, no recursion."""
    if adasum and (size & (size - 1)) != 0:
        pytest.skip("Adasum needs a power-of-two size")
    model = _mlp()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(prefix="subclass%d" % adasum),
                                   op=hvd.Adasum if adasum else hvd.Average)

    class Wrapper(type(opt)):
        def __init__(self, inner):
            self.__dict__ = inner.__dict__

    wrapped = Wrapper(opt)
    x, y = _data(1, 1, size)
    before = [p.detach().clone() for p in model.parameters()]
    torch.nn.functional.mse_loss(model(x[0, 0]), y[0, 0]).backward()
    wrapped.step()
    wrapped.zero_grad()
    wrapped.load_state_dict(opt.state_dict())
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    gathered = hvd.allgather_object([p.detach() for p in model.parameters()])
    for theirs in gathered:
        for a, b in zip(theirs, model.parameters()):
            assert torch.equal(a, b)
