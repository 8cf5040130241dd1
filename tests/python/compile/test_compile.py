"""torch.compile: a compiled model trained with DistributedOptimizer ends with
the same parameters as the same model uncompiled, on every rank (np 2).

The gradient hooks are on the parameters (post-accumulate-grad hooks), outside
the compiled graph: AOTAutograd's compiled backward is one autograd node that
hands each parameter's gradient to its accumulator, so the hooks fire as for an
uncompiled model, also across graph breaks. The backend defaults to aot_eager
(dynamo graph capture + AOTAutograd, the parts that meet the hooks; no C++
code generation, which takes minutes on a small machine); set
HVL_TEST_COMPILE_BACKEND=inductor to run the default backend.

Compiled autograd (test_compiled_autograd_*): the backward pass is captured
into one graph, hooks included, and compiled; horovodlite's hooks are marked
torch.compiler.disable (_compat.eager), so the graph calls them eagerly. Traced
instead (before that change), they enqueued a gradient twice in one pass.
"""

import copy
import os

import horovodlite.torch as hvd
import pytest
import torch

if not hasattr(torch, "compile"):
    pytest.skip("torch.compile needs PyTorch 2.0+", allow_module_level=True)

BACKEND = os.environ.get("HVL_TEST_COMPILE_BACKEND", "aot_eager")
TOL = dict(rtol=1e-9, atol=1e-11)
BATCH = 4


class Net(torch.nn.Module):
    def __init__(self, graph_break):
        super().__init__()
        torch.manual_seed(11)
        self.fc1 = torch.nn.Linear(6, 16)
        self.fc2 = torch.nn.Linear(16, 16)
        self.fc3 = torch.nn.Linear(16, 3)
        self.unused = torch.nn.Linear(3, 3)  # no gradient: reduced as zeros at synchronize()
        self.graph_break = graph_break

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        if self.graph_break:
            torch._dynamo.graph_break()  # two compiled graphs, two backward nodes
        h = torch.tanh(self.fc2(h))
        return self.fc3(h)


def _compiled_autograd():
    """A context in which backward passes run under compiled autograd (or None
    where this PyTorch has none)."""
    ca = getattr(torch._dynamo, "compiled_autograd", None)
    enable = getattr(ca, "enable", None) or getattr(ca, "_enable", None)
    if enable is None:
        return None
    return enable(torch.compile(backend=BACKEND))


def _train(model, size, rank, steps, passes, whole_batch=False, backward_context=None, op=hvd.Average):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if not whole_batch:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                       backward_passes_per_step=passes, op=op)
    g = torch.Generator().manual_seed(99)
    for _ in range(steps):
        opt.zero_grad()
        for _ in range(passes):
            x = torch.randn(size * BATCH, 6, generator=g, dtype=torch.float64)
            y = torch.randn(size * BATCH, 3, generator=g, dtype=torch.float64)
            mine = slice(None) if whole_batch else slice(rank * BATCH, (rank + 1) * BATCH)
            loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine]) / passes
            if backward_context is None:
                loss.backward()
            else:
                with backward_context():
                    loss.backward()
        opt.step()


@pytest.mark.parametrize("graph_break", [False, True])
@pytest.mark.parametrize("passes", [1, 2])
def test_compiled_matches_uncompiled(graph_break, passes, size, rank):
    torch._dynamo.reset()
    eager = Net(graph_break).double()
    net = copy.deepcopy(eager)
    compiled = torch.compile(net, backend=BACKEND)
    _train(compiled, size, rank, steps=3, passes=passes)
    _train(eager, size, rank, steps=3, passes=passes)
    for (name, p), q in zip(net.named_parameters(), eager.parameters()):
        assert torch.allclose(p, q, **TOL), "%s: compiled and uncompiled differ (graph_break=%s, passes=%d)" % (
            name, graph_break, passes)
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).unsqueeze(0)
    gathered = hvd.allgather(flat)
    assert torch.equal(gathered, flat.expand_as(gathered)), "ranks' compiled models differ"
    # The training moved the parameters (the test would pass vacuously otherwise).
    assert not torch.allclose(net.fc1.weight, Net(graph_break).double().fc1.weight)


@pytest.mark.parametrize("op", ["Average", "Adasum"])
@pytest.mark.parametrize("graph_break", [False, True])
@pytest.mark.parametrize("passes", [1, 2])
def test_compiled_autograd_matches_uncompiled(graph_break, passes, op, size, rank):
    """torch.compile'd model, backward under compiled autograd: the same
    parameters as the uncompiled model trained with DistributedOptimizer, and
    (Average) as one process trained on the ranks' concatenated batches (plain
    SGD). Adasum's optimizer steps each parameter from its hook: the same hooks."""
    op = getattr(hvd, op)
    if _compiled_autograd() is None:
        pytest.skip("no torch._dynamo.compiled_autograd in this PyTorch")
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    eager = Net(graph_break).double()
    whole = copy.deepcopy(eager)
    net = copy.deepcopy(eager)
    _train(torch.compile(net, backend=BACKEND), size, rank, steps=3, passes=passes,
           backward_context=_compiled_autograd, op=op)
    # Compiled autograd really ran (the test would pass vacuously otherwise).
    assert counters["compiled_autograd"]["captures"] > 0, dict(counters)
    _train(eager, size, rank, steps=3, passes=passes, op=op)
    _train(whole, size, rank, steps=3, passes=passes, whole_batch=True)
    for (name, p), q, w in zip(net.named_parameters(), eager.parameters(), whole.parameters()):
        assert torch.allclose(p, q, **TOL), "%s: compiled autograd and uncompiled differ (graph_break=%s, passes=%d)" \
            % (name, graph_break, passes)
        if op == hvd.Average:
            assert torch.allclose(p, w, **TOL), "%s: np %d and one process on the whole batch differ" % (name, size)
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).unsqueeze(0)
    gathered = hvd.allgather(flat)
    assert torch.equal(gathered, flat.expand_as(gathered)), "ranks' models differ"
    assert not torch.allclose(net.fc1.weight, Net(graph_break).double().fc1.weight)
