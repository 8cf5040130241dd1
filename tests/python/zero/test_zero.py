"""hvd.ZeroRedundancyOptimizer (stages 1 and 2) against the replicated
hvd.DistributedOptimizer on the same model and data: the same parameters
after training (float tolerance), identical on every rank; its checkpoints
(consolidated, and sharded across another world size); and its errors."""

import inspect
import os
import tempfile

import horovodlite.torch as hvd
import pytest
import torch
from horovodlite.torch import zero
from torch.utils.checkpoint import checkpoint_sequential

SIZES = (7, 9, 5, 3)  # parameters of 63, 9, 45, 5, 15, 3 elements: most need padding at 2 and 3 ranks


def make_model(seed=0):
    torch.manual_seed(seed)
    layers = []
    for a, b in zip(SIZES, SIZES[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers[:-1])


def batch(step, seed=100):
    g = torch.Generator().manual_seed(seed + 1000 * hvd.rank() + step)
    return torch.randn(8, SIZES[0], generator=g), torch.randn(8, SIZES[-1], generator=g)


def loss_of(model, x, y, checkpoint=None):
    if checkpoint is None:
        out = model(x)
    elif "use_reentrant" in inspect.signature(checkpoint_sequential).parameters:
        out = checkpoint_sequential(model, 2, x, use_reentrant=checkpoint)
    elif checkpoint:
        out = checkpoint_sequential(model, 2, x)  # PyTorch 1.x: reentrant only
    else:
        pytest.skip("checkpoint_sequential has no use_reentrant=False before PyTorch 2")
    return torch.nn.functional.mse_loss(out, y)


def train(model, opt, steps, passes=1, checkpoint=None, clip=None, sched=None, start=0):
    for s in range(start, start + steps):
        for k in range(passes):
            x, y = batch(s * passes + k)
            loss_of(model, x, y, checkpoint).backward()
        if clip is not None:
            if isinstance(opt, hvd.ZeroRedundancyOptimizer):
                norm = opt.clip_grad_norm_(clip)
                opt.step()
            else:
                opt.synchronize()
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                with opt.skip_synchronize():
                    opt.step()
            clip_norms.append(float(norm))
        else:
            opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()
    return model


clip_norms = []


def replicated(model, lr=0.01, passes=1, compression=hvd.Compression.none, cls=torch.optim.Adam, **kw):
    return hvd.DistributedOptimizer(cls(model.parameters(), lr=lr, **kw), named_parameters=model.named_parameters(),
                                    backward_passes_per_step=passes, compression=compression)


def assert_same(a, b, atol=1e-6, rtol=1e-5):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), atol=atol, rtol=rtol,
                                   msg=lambda m, name=name: "%s: %s" % (name, m))


def assert_identical_on_ranks(model):
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = hvd.allgather(flat.unsqueeze(0), name="zero.test.identical")
    for r in range(hvd.size()):
        assert torch.equal(gathered[r], flat), "parameters differ between rank %d and rank %d" % (r, hvd.rank())


@pytest.mark.parametrize("stage", [1, 2])
@pytest.mark.parametrize("cls,kw", [(torch.optim.Adam, {"weight_decay": 0.01}),
                                    (torch.optim.SGD, {"momentum": 0.9})])
def test_equals_replicated(stage, cls, kw):
    ref = make_model()
    train(ref, replicated(ref, cls=cls, **kw), 6)
    model = make_model()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=cls, stage=stage, lr=0.01, **kw)
    train(model, opt, 6)
    assert_same(model, ref)
    assert_identical_on_ranks(model)


def test_shard_memory_is_a_shard():
    model = make_model()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
    train(model, opt, 1)
    n = hvd.size()
    for p in model.parameters():
        assert p.grad is None  # stage 2 drops the full gradient once it is reduced
        chunk = -(-p.numel() // n)
        mine = max(0, min(p.numel() - hvd.rank() * chunk, chunk))  # the last ranks' chunks are short
        st = opt._inner.state[opt._by_param[p].local]
        assert st["exp_avg"].numel() == mine
        assert opt._by_param[p].local.data_ptr() == p.data_ptr() + hvd.rank() * chunk * p.element_size() or mine == 0


def test_stage1_keeps_local_gradient():
    model = make_model()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, stage=1, lr=0.1)
    x, y = batch(0)
    loss_of(model, x, y).backward()
    local = [p.grad.clone() for p in model.parameters()]
    opt.step()
    for p, g in zip(model.parameters(), local):
        assert torch.equal(p.grad, g)
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_backward_passes_per_step():
    ref = make_model()
    train(ref, replicated(ref, passes=2), 4, passes=2)
    model = make_model()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01,
                                      backward_passes_per_step=2)
    train(model, opt, 4, passes=2)
    assert_same(model, ref)


def test_too_many_passes():
    model = make_model()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.1)
    x, y = batch(0)
    loss_of(model, x, y).backward()
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        loss_of(model, x, y).backward()
    opt.step()  # what the first pass sent still completes on every rank
    opt.zero_grad()


@pytest.mark.parametrize("reentrant", [True, False])
def test_activation_checkpointing(reentrant):
    ref = make_model()
    train(ref, replicated(ref), 4, checkpoint=reentrant)
    model = make_model()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
    train(model, opt, 4, checkpoint=reentrant)
    assert_same(model, ref)


class Branchy(torch.nn.Module):
    """A head used on rank 0 only: the other ranks' gradient of it is zero."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Linear(SIZES[0], SIZES[-1])
        self.head = torch.nn.Linear(SIZES[-1], SIZES[-1])

    def forward(self, x):
        out = self.body(x)
        return self.head(out) if hvd.rank() == 0 else out


def test_unused_parameters():
    ref = Branchy()
    train(ref, replicated(ref), 3)
    model = Branchy()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
    train(model, opt, 3)
    assert_same(model, ref)
    assert_identical_on_ranks(model)


def test_param_groups_and_scheduler():
    def groups(m):
        return [{"params": m[0].parameters(), "lr": 0.05}, {"params": list(m[2].parameters()) +
                                                             list(m[4].parameters())}]
    ref = make_model()
    ropt = hvd.DistributedOptimizer(torch.optim.SGD(groups(ref), lr=0.01, momentum=0.9),
                                    named_parameters=ref.named_parameters())
    train(ref, ropt, 6, sched=torch.optim.lr_scheduler.StepLR(ropt, 2, gamma=0.5))
    model = make_model()
    opt = hvd.ZeroRedundancyOptimizer(groups(model), optimizer_class=torch.optim.SGD, lr=0.01, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2, gamma=0.5)
    train(model, opt, 6, sched=sched)
    assert_same(model, ref)
    assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in ropt.param_groups]


def test_add_param_group():
    ref, model = make_model(), make_model()
    ropt = hvd.DistributedOptimizer(torch.optim.Adam(ref[0].parameters(), lr=0.01),
                                    named_parameters=list(ref[0].named_parameters()))
    opt = hvd.ZeroRedundancyOptimizer(model[0].parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
    for m in (ref, model):
        for p in list(m[2].parameters()) + list(m[4].parameters()):
            p.requires_grad_(False)
    train(ref, ropt, 2)
    train(model, opt, 2)
    for m in (ref, model):
        for p in list(m[2].parameters()) + list(m[4].parameters()):
            p.requires_grad_(True)
    # A second replicated optimizer stands for the added group (Horovod has no add_param_group).
    later = list(ref[2].parameters()) + list(ref[4].parameters())
    ropt2 = hvd.DistributedOptimizer(torch.optim.Adam(later, lr=0.02),
                                     named_parameters=[("g2.%d" % i, p) for i, p in enumerate(later)])
    opt.add_param_group({"params": list(model[2].parameters()) + list(model[4].parameters()), "lr": 0.02})
    for s in range(2, 4):
        x, y = batch(s)
        loss_of(ref, x, y).backward()
        ropt.step()
        ropt2.step()
        ropt.zero_grad()
        ropt2.zero_grad()
    train(model, opt, 2, start=2)
    assert_same(model, ref)


def test_clip_grad_norm():
    del clip_norms[:]
    ref = make_model()
    train(ref, replicated(ref), 4, clip=0.05)
    ref_norms = list(clip_norms)
    del clip_norms[:]
    model = make_model()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
    train(model, opt, 4, clip=0.05)
    assert ref_norms[0] > 0.05  # the bar clips
    torch.testing.assert_close(torch.tensor(clip_norms), torch.tensor(ref_norms), rtol=1e-4, atol=1e-6)
    assert_same(model, ref)


def test_fp16_compression():
    ref = make_model()
    train(ref, replicated(ref, compression=hvd.Compression.fp16), 4)
    model = make_model()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01,
                                      compression=hvd.Compression.fp16)
    train(model, opt, 4)
    assert_same(model, ref, atol=2e-3, rtol=1e-2)
    assert_identical_on_ranks(model)


def test_bf16_compression():
    """bf16 reducescatter against the replicated optimizer's bf16 allreduce: both
    8 significant bits, rounded at different points: within 2e-2."""
    ref = make_model()
    train(ref, replicated(ref, compression=hvd.Compression.bf16), 4)
    model = make_model()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01,
                                      compression=hvd.Compression.bf16)
    train(model, opt, 4)
    assert_same(model, ref, atol=2e-2, rtol=2e-2)
    assert_identical_on_ranks(model)
    with pytest.raises(ValueError, match="bf16"):
        hvd.ZeroRedundancyOptimizer(make_model().parameters(), optimizer_class=torch.optim.Adam, lr=0.01,
                                    compression=object())


def test_consolidated_state_dict_matches_and_resumes():
    ref = make_model()
    ropt = replicated(ref)
    train(ref, ropt, 3)
    model = make_model()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
    train(model, opt, 3)
    with pytest.raises(RuntimeError, match="consolidate_state_dict"):
        opt.state_dict()
    opt.consolidate_state_dict(to=0)
    if hvd.rank() == 0:
        sd = opt.state_dict()
        rsd = ropt.state_dict()
        assert sorted(sd["state"]) == sorted(rsd["state"])
        for i in rsd["state"]:
            for k, v in rsd["state"][i].items():
                torch.testing.assert_close(sd["state"][i][k], v, atol=1e-6, rtol=1e-5)
        assert sd["param_groups"][0]["lr"] == rsd["param_groups"][0]["lr"]
    else:
        with pytest.raises(RuntimeError, match="rank %d: the state was consolidated on rank 0" % hvd.rank()):
            opt.state_dict()
        sd = None
    sd = hvd.broadcast_object(sd, root_rank=0, name="zero.test.sd")
    # A fresh model and optimizer resume from the checkpoint (a plain Adam
    # also reads it: the format is the wrapped optimizer's own).
    model2 = make_model()
    model2.load_state_dict(model.state_dict())
    opt2 = hvd.ZeroRedundancyOptimizer(model2.parameters(), optimizer_class=torch.optim.Adam, lr=0.5)
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == 0.01
    plain = torch.optim.Adam(make_model().parameters(), lr=0.01)
    plain.load_state_dict(sd)
    train(ref, ropt, 3, start=3)
    train(model2, opt2, 3, start=3)
    assert_same(model2, ref)
    opt.step()  # consolidated state goes stale after a step
    if hvd.rank() == 0:
        with pytest.raises(RuntimeError, match="1 step"):
            opt.state_dict()


def test_sharded_checkpoint_on_another_world_size():
    """Trained and saved on a process set of size - 1 ranks, loaded and
    continued on all ranks: equal to the replicated optimizer throughout."""
    n = hvd.size()
    sub = hvd.add_process_set(list(range(n - 1)))
    root = os.environ.get("TMPDIR", tempfile.gettempdir())
    path = hvd.broadcast_object(tempfile.mkdtemp(prefix="hvl-zero-", dir=root) if hvd.rank() == 0 else None,
                                name="zero.test.path")
    try:
        if hvd.rank() < n - 1:
            ref = make_model()
            ropt = hvd.DistributedOptimizer(torch.optim.Adam(ref.parameters(), lr=0.01),
                                            named_parameters=ref.named_parameters(), process_set=sub)
            train(ref, ropt, 3)
            model = make_model()
            opt = hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, process_set=sub,
                                              lr=0.01)
            train(model, opt, 3)
            assert_same(model, ref)
            zero.save_sharded(opt, path)
            weights = model.state_dict()
            ref_state = ropt.state_dict()
        hvd.barrier()
        pieces = (weights, ref_state) if hvd.rank() == 0 else None
        weights, ref_state = hvd.broadcast_object(pieces, root_rank=0, name="zero.test.weights")
        model = make_model()
        model.load_state_dict(weights)
        opt = hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
        zero.load_sharded(opt, path)
        opt.consolidate_state_dict(to=0)
        if hvd.rank() == 0:
            sd = opt.state_dict()
            for i in ref_state["state"]:
                for k, v in ref_state["state"][i].items():
                    torch.testing.assert_close(sd["state"][i][k], v, atol=1e-6, rtol=1e-5)
        # continue on all ranks, against the replicated optimizer loaded alike
        ref = make_model()
        ref.load_state_dict(weights)
        ropt = replicated(ref)
        ropt.load_state_dict(ref_state)
        train(ref, ropt, 2, start=3)
        train(model, opt, 2, start=3)
        assert_same(model, ref)
        assert_identical_on_ranks(model)
    finally:
        hvd.barrier()
        hvd.remove_process_set(sub)
        if hvd.rank() == 0:
            import shutil
            shutil.rmtree(path, ignore_errors=True)


# ----------------------------------------------------------------- errors ----

def test_parameters_that_differ_across_ranks():
    model = make_model()
    params = list(model.parameters())
    if hvd.rank() == hvd.size() - 1:
        params[2] = torch.nn.Parameter(torch.zeros(4, 9))
    with pytest.raises(ValueError, match=r"parameter param_groups\[0\]\['params'\]\[2\] differs across ranks: "
                                         r"shape \[5, 9\] float32 on rank.*shape \[4, 9\] float32 on rank %d"
                                         % (hvd.size() - 1)):
        hvd.ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.Adam, lr=0.01)
    if hvd.rank() == 0:
        params = params + [torch.nn.Parameter(torch.zeros(3))]
    with pytest.raises(ValueError, match="different numbers of parameters: 6 on rank.*7 on rank 0"):
        hvd.ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.Adam, lr=0.01)


def test_non_contiguous_and_sparse_parameters():
    w = torch.nn.Parameter(torch.zeros(4, 6).t())
    with pytest.raises(ValueError, match=r"parameter param_groups\[0\]\['params'\]\[0\] is not contiguous"):
        hvd.ZeroRedundancyOptimizer([w], optimizer_class=torch.optim.SGD, lr=0.1)
    s = torch.nn.Parameter(torch.zeros(4, 6).to_sparse())
    with pytest.raises(ValueError, match=r"parameter param_groups\[0\]\['params'\]\[0\] is sparse"):
        hvd.ZeroRedundancyOptimizer([s], optimizer_class=torch.optim.SGD, lr=0.1)


def test_state_dict_of_another_model():
    model = make_model()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
    other = torch.nn.Sequential(torch.nn.Linear(7, 4), torch.nn.Tanh(), torch.nn.Linear(4, 5), torch.nn.Tanh(),
                                torch.nn.Linear(5, 3))
    o = torch.optim.Adam(other.parameters(), lr=0.01)
    other(torch.randn(2, 7)).sum().backward()
    o.step()
    with pytest.raises(ValueError, match=r"state 'exp_avg' of parameter param_groups\[0\]\['params'\]\[0\] has "
                                         r"shape \[4, 7\] in the state dict, the parameter \[9, 7\]"):
        opt.load_state_dict(o.state_dict())
    small = torch.optim.Adam(torch.nn.Linear(2, 2).parameters())
    with pytest.raises(ValueError, match="holds 2 parameter"):
        opt.load_state_dict(small.state_dict())


def test_bad_arguments():
    model = make_model()
    with pytest.raises(ValueError, match="stage must be 1 or 2"):
        hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, stage=3)
    with pytest.raises(TypeError, match="optimizer_class"):
        hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class="adam")
    with pytest.raises(ValueError, match="overlap_with_ddp"):
        hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, overlap_with_ddp=True)


def test_hooks_in_another_order_on_each_rank():
    """Gradients ready in the opposite order on odd ranks, with a bound of
    0 bytes in flight: each rank's hook waits for a reduction the other rank
    sends only later; the bound gives way instead of hanging."""
    torch.manual_seed(0)
    a, b = torch.nn.Parameter(torch.randn(5)), torch.nn.Parameter(torch.randn(7))
    ref_a, ref_b = torch.nn.Parameter(a.detach().clone()), torch.nn.Parameter(b.detach().clone())
    opt = hvd.ZeroRedundancyOptimizer([a, b], optimizer_class=torch.optim.SGD, lr=0.1, max_inflight_bytes=0)
    ref = hvd.DistributedOptimizer(torch.optim.SGD([ref_a, ref_b], lr=0.1), named_parameters=[("a", ref_a),
                                                                                              ("b", ref_b)])
    for o, (pa, pb) in ((opt, (a, b)), (ref, (ref_a, ref_b))):
        # autograd runs the branch made last first: a's gradient first on even ranks, b's on odd ones
        if hvd.rank() % 2 == 0:
            first, second = (pb ** 2).sum(), (pa * (hvd.rank() + 1)).sum()
        else:
            first, second = (pa * (hvd.rank() + 1)).sum(), (pb ** 2).sum()
        loss = first + second
        loss.backward()
        o.step()
    torch.testing.assert_close(a.detach(), ref_a.detach())
    torch.testing.assert_close(b.detach(), ref_b.detach())


def test_parameters_given_new_storage():
    """p.data replaced between steps (as load_state_dict(assign=True) or
    module.to() do): the shards follow, with their optimizer state."""
    ref = make_model()
    ropt = replicated(ref)
    model = make_model()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
    train(ref, ropt, 2)
    train(model, opt, 2)
    with torch.no_grad():
        for p, q in zip(model.parameters(), ref.parameters()):
            p.data = p.data * 0.5  # new storage, new values
            q.mul_(0.5)
    train(ref, ropt, 2, start=2)
    train(model, opt, 2, start=2)
    assert_same(model, ref)
    assert all(st["exp_avg"].numel() == sh.stop - sh.start
               for sh in opt._shards for st in [opt._inner.state[sh.local]])
