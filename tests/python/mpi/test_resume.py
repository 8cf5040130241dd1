"""Horovod's resume recipe: every rank wraps a fresh optimizer in
DistributedOptimizer, rank 0 loads a checkpoint, every rank calls
broadcast_optimizer_state(optimizer, 0). A fresh rank initialises its state
with a local step on zero gradients; this must not allreduce (rank 0 is inside
the broadcast), and every rank must end with root's state."""

import copy
import inspect

import horovodlite.torch as hvd
import pytest
import torch

# Every torch.optim optimizer except LBFGS (unsupported, as in Horovod) and
# SparseAdam (needs sparse gradients).
OPTIMIZERS = sorted((c for c in vars(torch.optim).values()
                     if isinstance(c, type) and issubclass(c, torch.optim.Optimizer)
                     and c not in (torch.optim.Optimizer, torch.optim.LBFGS, torch.optim.SparseAdam)),
                    key=lambda c: c.__name__)
OPTION_SETS = [dict(lr=0.2, momentum=0.9, weight_decay=0.1, centered=True), dict(lr=0.2)]


def _options(cls, options):
    accepted = inspect.signature(cls.__init__).parameters
    return {k: v for k, v in options.items() if k in accepted}


def _model(cls=None):
    torch.manual_seed(7)
    # torch.optim.Muon (PyTorch 2.9+) optimises 2-D parameters only: no biases for it.
    bias = cls is None or cls is not getattr(torch.optim, "Muon", None)
    return torch.nn.Sequential(torch.nn.Linear(5, 4, bias=bias), torch.nn.ReLU(), torch.nn.Linear(4, 3, bias=bias))


def _flatten(state_dict):
    """(param-group options, state entry count, [(param id, key, value)])"""
    groups = [{k: v for k, v in g.items() if k != "params"} for g in state_dict["param_groups"]]
    entries = []
    for pid in sorted(state_dict["state"]):
        for key, value in sorted(state_dict["state"][pid].items()):
            entries.append((pid, key, value.clone() if torch.is_tensor(value) else value))
    return groups, len(state_dict["state"]), entries


def _assert_same(mine, root):
    groups, count, entries = mine
    root_groups, root_count, root_entries = root
    assert groups == root_groups
    assert count == root_count
    assert [(p, k) for p, k, _ in entries] == [(p, k) for p, k, _ in root_entries]
    for (pid, key, value), (_, _, expected) in zip(entries, root_entries):
        if torch.is_tensor(expected):
            assert torch.is_tensor(value), (pid, key)
            assert value.dtype == expected.dtype and torch.equal(value, expected), (pid, key)
        else:
            assert value == expected, (pid, key)


@pytest.mark.parametrize("options", OPTION_SETS, ids=["many_options", "lr_only"])
@pytest.mark.parametrize("wrapped", [True, False], ids=["distributed", "plain"])
@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__name__)
def test_resume_from_root_checkpoint(cls, wrapped, options, rank, size):
    kwargs = _options(cls, options)

    def make(model):
        opt = cls(model.parameters(), **kwargs)
        if wrapped:
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        return opt

    # One training step everywhere (different data per rank), then rank 0 saves.
    model = _model(cls)
    opt = make(model)
    torch.manual_seed(100 + rank)
    opt.zero_grad()
    model(torch.randn(6, 5)).pow(2).sum().backward()
    opt.step()
    checkpoint = copy.deepcopy(opt.state_dict()) if rank == 0 else None

    # Resume: fresh model and optimizer everywhere; only rank 0 loads the checkpoint.
    model = _model(cls)
    opt = make(model)
    if rank == 0:
        opt.load_state_dict(checkpoint)
    for group in opt.param_groups:  # ranks start with different options: root's must win
        group["lr"] = 0.2 + rank
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

    mine = _flatten(opt.state_dict())
    root = hvd.broadcast_object(mine, root_rank=0, name="test_resume.root_state")
    _assert_same(mine, root)
    if rank == 0:
        _assert_same(mine, _flatten(checkpoint))

    # Training goes on in lockstep: the same data on every rank gives the same parameters.
    torch.manual_seed(200)
    opt.zero_grad()
    model(torch.randn(6, 5)).pow(2).sum().backward()
    opt.step()
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.equal(params, hvd.broadcast(params, root_rank=0, name="test_resume.params"))


def test_keyword_arguments_as_horovod(rank):
    model = _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1 * (rank + 1), momentum=0.9),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0, model=None, process_set=hvd.global_process_set)
    hvd.broadcast_optimizer_state(opt, 0, model, hvd.global_process_set)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)


def test_mismatched_param_groups_raise_on_every_rank(rank, size):
    model = _model()
    params = list(model.parameters())
    if rank == size - 1:
        params = params[:-1]
    opt = torch.optim.Adam(params, lr=0.1)
    with pytest.raises(ValueError, match=r"rank\(s\) %d differ from root rank 0" % (size - 1)):
        hvd.broadcast_optimizer_state(opt, root_rank=0)
    # every rank raised: the next collective still matches up
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(size)))
