import horovodlite.torch as hvd
import pytest
import torch


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))


@pytest.mark.parametrize("root", [0, 1])
def test_broadcast_parameters_state_dict_and_named(root, rank):
    model = _model(seed=rank)
    model[1].running_mean.fill_(float(rank))
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    expected = _model(seed=root)
    for (name, p), q in zip(model.state_dict().items(), expected.state_dict().values()):
        if name != "1.running_mean":
            assert torch.equal(p, q), name
    assert torch.equal(model[1].running_mean, torch.full((4,), float(root)))
    other = _model(seed=rank + 10)
    hvd.broadcast_parameters(other.named_parameters(), root_rank=root)
    hvd.broadcast_parameters(list(other.parameters()), root_rank=root)
    assert torch.equal(other[0].weight, _model(seed=root + 10)[0].weight)


@pytest.mark.parametrize("opt_name", ["adam", "sgd"])
def test_broadcast_optimizer_state(opt_name, rank):
    model = _model(seed=0)
    if opt_name == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=0.01 * (rank + 1), betas=(0.8 + 0.01 * rank, 0.999))
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1 * (rank + 1), momentum=0.5)
    if rank == 0:  # only the root has state (e.g. restored from a checkpoint)
        for _ in range(2):
            opt.zero_grad()
            model(torch.randn(5, 3)).sum().backward()
            opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    state = {k: v for k, v in opt.state_dict().items()}
    root_state = hvd.broadcast_object(opt.state_dict(), root_rank=0)
    assert state["param_groups"] == root_state["param_groups"]
    for pid, s in state["state"].items():
        for key, value in s.items():
            other = root_state["state"][pid][key]
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(other)), key


def test_broadcast_optimizer_state_wrapped(rank):
    model = _model(seed=0)
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01 * (rank + 1)),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == 0.01
    with pytest.raises(ValueError):
        hvd.broadcast_optimizer_state(torch.optim.LBFGS(model.parameters()), root_rank=0)


def test_broadcast_and_allgather_object(rank, size):
    obj = {"rank": rank, "payload": list(range(rank * 100)), "nested": ("x", 1.5)}
    got = hvd.broadcast_object(obj, root_rank=size - 1)
    assert got["rank"] == size - 1 and len(got["payload"]) == (size - 1) * 100
    assert hvd.broadcast_object(None) is None
    objs = hvd.allgather_object(obj)
    assert [o["rank"] for o in objs] == list(range(size))
    assert [len(o["payload"]) for o in objs] == [r * 100 for r in range(size)]


@pytest.mark.parametrize("dims", [2, 3, 4])
def test_sync_batch_norm_matches_global_batch_norm(dims, rank, size):
    g = torch.Generator().manual_seed(11)
    shape = [size * 3, 4] + [5] * (dims - 2)
    x = torch.randn(*shape, generator=g, dtype=torch.float64) * 2 + 1
    gy = torch.randn(*shape, generator=g, dtype=torch.float64)
    sbn = hvd.SyncBatchNorm(4, momentum=0.3).double()
    bn = torch.nn.BatchNorm1d(4, momentum=0.3).double() if dims < 4 else torch.nn.BatchNorm2d(4, momentum=0.3).double()
    with torch.no_grad():
        sbn.weight.copy_(torch.tensor([1.0, 2.0, 0.5, -1.0]))
        bn.weight.copy_(sbn.weight)
    xl = x[rank * 3:(rank + 1) * 3].clone().requires_grad_()
    xg = x.clone().requires_grad_()
    yl = sbn(xl)
    yg = bn(xg)
    assert torch.allclose(yl, yg[rank * 3:(rank + 1) * 3], atol=1e-10)
    assert torch.allclose(sbn.running_mean, bn.running_mean, atol=1e-12)
    assert torch.allclose(sbn.running_var, bn.running_var, atol=1e-12)
    yl.backward(gy[rank * 3:(rank + 1) * 3])
    yg.backward(gy)
    assert torch.allclose(xl.grad, xg.grad[rank * 3:(rank + 1) * 3], atol=1e-10)
    # parameter gradients are local; their allreduce-sum is the global one
    assert torch.allclose(hvd.allreduce(sbn.weight.grad, op=hvd.Sum), bn.weight.grad, atol=1e-10)
    assert torch.allclose(hvd.allreduce(sbn.bias.grad, op=hvd.Sum), bn.bias.grad, atol=1e-10)
    sbn.eval()
    bn.eval()
    assert torch.allclose(sbn(xl.detach()), bn(xl.detach()), atol=1e-12)
