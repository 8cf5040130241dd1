"""Start-of-training helpers, as ``horovod.torch.functions``: make every rank's
parameters, optimizer state and arbitrary Python objects equal to the root's."""

import collections
import io

import torch

try:  # Horovod uses cloudpickle; plain pickle covers everything but lambdas/local classes.
    import cloudpickle as _pickle
except ImportError:  # pragma: no cover - depends on the installation
    import pickle as _pickle

from horovodlite.common.process_sets import _ps_id, global_process_set
from horovodlite.torch._checks import check_root
from horovodlite.torch.mpi_ops import allgather, broadcast_, broadcast_async_, rank, synchronize


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Broadcasts parameters in place from root_rank to every other rank.

    Arguments:
        params: ``model.state_dict()``, ``model.named_parameters()`` (or a list
            of ``(name, tensor)`` pairs), or a list of tensors.
        root_rank: the rank whose values everyone gets.
    """
    _ps_id(process_set, "broadcast_parameters")
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, (list, tuple)) or isinstance(params, collections.abc.Iterator):
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    check_root(root_rank, "broadcast_parameters")
    for name, p in params:
        if not isinstance(p, torch.Tensor):
            raise TypeError("broadcast_parameters: %s is a %s, not a torch.Tensor" % (name, type(p).__name__))
    handles = [broadcast_async_(p, root_rank, name, process_set=process_set) for name, p in params]
    for handle in handles:
        synchronize(handle)


def _local_step(optimizer):
    """optimizer.step() without a DistributedOptimizer's gradient allreduce
    (which every rank would have to join): the wrapped torch optimizer's step.
    Asked by duck typing, so that this module need not import optimizer.py
    (which imports this one)."""
    step_locally = getattr(optimizer, "_step_locally", None)
    if step_locally is not None:
        step_locally()
    else:
        optimizer.step()


def _init_state_locally(optimizer):
    """Creates the state of an optimizer that has none with a step on zero
    gradients (as Horovod does), without collectives and without changing the
    parameters. As in Horovod, every parameter that requires grad is left with
    the zero gradient of that step in ``.grad`` (programs read it, e.g. to
    broadcast it); a step that raises leaves the gradients as they were."""
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    saved = [(p, p.grad, p.detach().clone()) for p in params]
    ok = False
    try:
        for p in params:
            p.grad = torch.zeros_like(p)
            if isinstance(optimizer, torch.optim.SparseAdam):
                p.grad = p.grad.to_sparse()
        _local_step(optimizer)
        ok = True
    finally:
        with torch.no_grad():
            for p, grad, data in saved:
                p.copy_(data)
                if not ok:
                    p.grad = grad


def _describe_state(optimizer):
    """Root's side: param-group options, and for every state entry either
    ("tensor", shape, dtype, device type) or ("value", value), by parameter index."""
    options = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    counts = [len(group["params"]) for group in optimizer.param_groups]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    entries = []
    for index, p in enumerate(params):
        for key, value in sorted(optimizer.state.get(p, {}).items(), key=lambda kv: str(kv[0])):
            if torch.is_tensor(value):
                entries.append((index, key, ("tensor", tuple(value.shape), value.dtype, value.device.type)))
            else:
                entries.append((index, key, ("value", value)))
    return options, counts, entries


def _check_layout(optimizer, root, root_rank, process_set):
    """Every rank learns whether every rank's param groups match root's, so that
    all of them raise together instead of some waiting for the others."""
    options, counts, _ = root
    mine = [len(group["params"]) for group in optimizer.param_groups]
    bad = allgather(torch.tensor([0 if mine == counts else 1], dtype=torch.int32),
                    name="broadcast_optimizer_state.layout", process_set=process_set)
    bad_ranks = [r for r, b in enumerate(bad.tolist()) if b]
    if bad_ranks:
        raise ValueError("broadcast_optimizer_state: the param groups (parameters per group) of rank(s) %s "
                         "differ from root rank %d's %s; this rank has %s"
                         % (", ".join(map(str, bad_ranks)), root_rank, counts, mine))


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Broadcasts an optimizer's state (param-group options such as lr and
    momentum, and every parameter's state tensors and values) from root_rank:
    afterwards every rank's state has root's entries, no others.

    An optimizer without state (a fresh one, e.g. on the ranks that did not load
    a checkpoint) first gets it by a local step on zero gradients, as in
    Horovod; this step never allreduces (also for a DistributedOptimizer) and
    leaves the parameters as they were; as in Horovod, each parameter that
    requires grad then holds that step's zero gradient in ``.grad``.
    torch.optim.LBFGS is not supported.

    Arguments:
        optimizer: a torch.optim.Optimizer or a DistributedOptimizer.
        root_rank: the rank whose state everyone gets.
        model: accepted for Horovod 0.28's signature; not needed here.
        process_set: the ranks that take part (root_rank is a global rank in it).
    """
    _ps_id(process_set, "broadcast_optimizer_state")
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    check_root(root_rank, "broadcast_optimizer_state")
    if model is not None and not isinstance(model, torch.nn.Module):
        raise TypeError("broadcast_optimizer_state: model must be a torch.nn.Module or None, got %s"
                        % type(model).__name__)

    if len(optimizer.state) == 0:
        _init_state_locally(optimizer)

    is_root = rank() == root_rank
    root = broadcast_object(_describe_state(optimizer) if is_root else None, root_rank,
                            name="broadcast_optimizer_state.options", process_set=process_set)
    _check_layout(optimizer, root, root_rank, process_set)
    options, _, entries = root
    for group, opts in zip(optimizer.param_groups, options):
        group.update(opts)

    # State: root's entries everywhere; tensors broadcast in place (allocated
    # where this rank lacks them or has another shape or dtype).
    params = [p for group in optimizer.param_groups for p in group["params"]]
    new_state = collections.defaultdict(dict)
    handles = []
    occurrences = collections.defaultdict(int)
    for index, key, desc in entries:
        p = params[index]
        if desc[0] == "value":
            new_state[p][key] = desc[1]
            continue
        _, shape, dtype, device_type = desc
        occurrences[key] += 1
        current = optimizer.state.get(p, {}).get(key)
        if is_root:
            tensor = current
        elif torch.is_tensor(current) and tuple(current.shape) == shape and current.dtype == dtype \
                and current.device.type == device_type:
            tensor = current
        else:
            device = p.device if p.device.type == device_type else torch.device(device_type)
            tensor = torch.empty(shape, dtype=dtype, device=device)
        new_state[p][key] = tensor
        handles.append(broadcast_async_(tensor, root_rank, "broadcast_optimizer_state.%s.%d"
                                        % (key, occurrences[key]), process_set=process_set))
    for handle in handles:
        synchronize(handle)
    if not is_root:
        optimizer.state.clear()
        for p, st in new_state.items():
            optimizer.state[p] = st


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Serializes ``obj`` on root_rank and returns a copy of it on every rank.

    Arguments:
        obj: any picklable object (only root_rank's matters).
        root_rank: the rank whose object is returned.
        name: names the underlying broadcasts (default: the object's type name).
    """
    _ps_id(process_set, "broadcast_object")
    check_root(root_rank, "broadcast_object")
    if name is None:
        name = type(obj).__name__
    if rank() == root_rank:
        buf = io.BytesIO()
        _pickle.dump(obj, buf)
        payload = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
        broadcast_(length, root_rank, name + ".sz", process_set)
    else:
        length = torch.zeros(1, dtype=torch.int64)
        broadcast_(length, root_rank, name + ".sz", process_set)
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name + ".t", process_set)
    if rank() != root_rank:
        obj = _pickle.loads(payload.numpy().tobytes())
    return obj


def allgather_object(obj, name=None, process_set=global_process_set):
    """Serializes ``obj`` on every rank and returns the list of all ranks'
    objects, in rank order."""
    _ps_id(process_set, "allgather_object")
    if name is None:
        name = type(obj).__name__
    buf = io.BytesIO()
    _pickle.dump(obj, buf)
    payload = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
    sizes = allgather(torch.tensor([payload.numel()], dtype=torch.int64), name=name + ".sz",
                      process_set=process_set).tolist()
    gathered = allgather(payload, name=name + ".t", process_set=process_set).numpy()
    result = []
    offset = 0
    for n in sizes:
        result.append(_pickle.loads(gathered[offset:offset + n].tobytes()))
        offset += n
    return result
