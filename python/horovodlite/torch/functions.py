"""Start-of-training helpers, as ``horovod.torch.functions``: make every rank's
parameters, optimizer state and arbitrary Python objects equal to the root's."""

import collections
import io

import torch

try:  # Horovod uses cloudpickle; plain pickle covers everything but lambdas/local classes.
    import cloudpickle as _pickle
except ImportError:  # pragma: no cover - depends on the installation
    import pickle as _pickle

from horovodlite.common.process_sets import global_process_set, check_global
from horovodlite.torch.mpi_ops import (allgather, broadcast_, broadcast_async_, synchronize, rank,
                                       _check_root)


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Broadcasts parameters in place from root_rank to every other rank.

    Arguments:
        params: ``model.state_dict()``, ``model.named_parameters()`` (or a list
            of ``(name, tensor)`` pairs), or a list of tensors.
        root_rank: the rank whose values everyone gets.
    """
    check_global(process_set, "broadcast_parameters")
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, (list, tuple)) or isinstance(params, collections.abc.Iterator):
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    _check_root(root_rank, "broadcast_parameters")
    for name, p in params:
        if not isinstance(p, torch.Tensor):
            raise TypeError("broadcast_parameters: %s is a %s, not a torch.Tensor" % (name, type(p).__name__))
    handles = [broadcast_async_(p, root_rank, name, process_set=process_set) for name, p in params]
    for handle in handles:
        synchronize(handle)


def _step_without_allreduce(optimizer):
    # A DistributedOptimizer's step() would allreduce every gradient, which needs
    # every rank to call it; initialising state must stay local. (Asked by duck
    # typing: optimizer.py imports this module, not the other way round.)
    step_locally = getattr(optimizer, "_step_locally", None)
    if step_locally is not None:
        step_locally()
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Broadcasts an optimizer's state (param-group options such as lr and
    momentum, and every parameter's state tensors and scalars) from root_rank.

    Optimizers that have no state yet get it created first by a step with zero
    gradients, as Horovod does. torch.optim.LBFGS is not supported.
    """
    check_global(process_set, "broadcast_optimizer_state")
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    _check_root(root_rank, "broadcast_optimizer_state")

    state_dict = optimizer.state_dict()
    if len(state_dict["state"]) == 0:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad and p.grad is None:
                    p.grad = p.data.new(p.size()).zero_()
                    if isinstance(optimizer, torch.optim.SparseAdam):
                        p.grad = p.grad.to_sparse()
        _step_without_allreduce(optimizer)
        state_dict = optimizer.state_dict()

    # Param-group options (lr, betas, momentum, ...): root's values everywhere.
    options = [{k: v for k, v in group.items() if k != "params"} for group in state_dict["param_groups"]]
    options = broadcast_object(options, root_rank, name="broadcast_optimizer_state.options",
                               process_set=process_set)
    if len(options) != len(optimizer.param_groups):
        raise ValueError("broadcast_optimizer_state: rank %d has %d param groups but the root has %d"
                         % (rank(), len(optimizer.param_groups), len(options)))
    for group, opts in zip(optimizer.param_groups, options):
        group.update(opts)

    if len(state_dict["state"]) == 0:
        return  # a stateless optimizer (e.g. plain SGD): nothing more to broadcast

    # Per-parameter state: tensors in place, other values through one object broadcast.
    handles = []
    scalars = {}
    occurrences = collections.defaultdict(int)
    for group in state_dict["param_groups"]:
        for pid in group["params"]:
            if pid not in state_dict["state"]:
                continue
            for key, value in sorted(state_dict["state"][pid].items()):
                occurrences[key] += 1
                name = "broadcast_optimizer_state.%s.%d" % (key, occurrences[key])
                if torch.is_tensor(value):
                    handles.append(broadcast_async_(value, root_rank, name, process_set=process_set))
                else:
                    scalars[name] = (pid, key, value)
    root_scalars = broadcast_object({n: v for n, (_, _, v) in scalars.items()}, root_rank,
                                    name="broadcast_optimizer_state.scalars", process_set=process_set)
    for handle in handles:
        synchronize(handle)
    for name, (pid, key, _) in scalars.items():
        if name in root_scalars:
            state_dict["state"][pid][key] = root_scalars[name]


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Serializes ``obj`` on root_rank and returns a copy of it on every rank.

    Arguments:
        obj: any picklable object (only root_rank's matters).
        root_rank: the rank whose object is returned.
        name: names the underlying broadcasts (default: the object's type name).
    """
    check_global(process_set, "broadcast_object")
    _check_root(root_rank, "broadcast_object")
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
    check_global(process_set, "allgather_object")
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
