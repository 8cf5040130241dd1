"""TorchState (``horovod.torch.elastic.TorchState``): a model, an optimizer,
learning-rate schedulers, ElasticSamplers and plain objects, committed in host
memory and synchronized from rank 0 after a reset."""

import copy

import torch

try:
    import numpy as _np
except ImportError:  # the copy falls back to Tensor.copy_
    _np = None

from horovodlite.common.elastic import ObjectState
from horovodlite.torch.elastic.sampler import ElasticSampler


def _snapshot(value):
    """A deep copy of a state_dict whose tensors are cloned (no autograd, no
    sharing), faster than copy.deepcopy for large models."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return type(value)((k, _snapshot(v)) for k, v in value.items()) if not hasattr(value, "_metadata") \
            else _with_metadata(value)
    if isinstance(value, list):
        return [_snapshot(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_snapshot(v) for v in value)
    return copy.deepcopy(value)


# Dtypes whose tensors numpy can view without a copy.
_NUMPY_DTYPES = {torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8,
                 torch.uint8, torch.bool}


def _copy_into(saved, live):
    """saved <- live (same shape, dtype, device). Contiguous CPU tensors go through
    numpy's copy, which is glibc's memcpy (streaming stores for large blocks:
    faster than Tensor.copy_ for a large model's state)."""
    if (_np is not None and live.device.type == "cpu" and live.dtype in _NUMPY_DTYPES and live.is_contiguous()
            and saved.is_contiguous()):
        _np.copyto(saved.numpy(), live.detach().numpy(), casting="no")
        return
    with torch.no_grad():
        saved.copy_(live)


def _refresh(saved, live):
    """`live` snapshotted into the buffers of the earlier snapshot `saved` where
    the structure matches (no allocation: a commit of a large model is a plain
    copy), a fresh snapshot elsewhere."""
    if isinstance(live, torch.Tensor):
        if (isinstance(saved, torch.Tensor) and saved.shape == live.shape and saved.dtype == live.dtype
                and saved.device == live.device and saved.layout == live.layout and live.layout == torch.strided):
            _copy_into(saved, live)
            return saved
        return _snapshot(live)
    if isinstance(live, dict) and isinstance(saved, dict) and saved.keys() == live.keys():
        out = type(live)((k, _refresh(saved[k], v)) for k, v in live.items())
        if hasattr(live, "_metadata"):
            out._metadata = copy.deepcopy(live._metadata)
        return out
    if isinstance(live, (list, tuple)) and type(saved) is type(live) and len(saved) == len(live):
        return type(live)(_refresh(a, b) for a, b in zip(saved, live))
    return _snapshot(live)


def _with_metadata(value):
    out = type(value)((k, _snapshot(v)) for k, v in value.items())
    out._metadata = copy.deepcopy(value._metadata)
    return out


class StateHandler:
    def __init__(self, value):
        self.value = value

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def set_value(self, value):
        self.value = value
        self.save()


class ModelStateHandler(StateHandler):
    def __init__(self, model):
        super().__init__(model)
        self._saved = _snapshot(model.state_dict())

    def save(self):
        self._saved = _refresh(self._saved, self.value.state_dict())

    def restore(self):
        # load_state_dict copies into the parameters: the snapshot stays private.
        self.value.load_state_dict(self._saved)

    def sync(self):
        from horovodlite.torch.functions import broadcast_parameters
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(StateHandler):
    def __init__(self, optimizer):
        super().__init__(optimizer)
        self._saved = _snapshot(optimizer.state_dict())

    def save(self):
        self._saved = _refresh(self._saved, self.value.state_dict())

    def restore(self):
        # PyTorch 2's Optimizer.load_state_dict keeps the given tensors as its
        # state (no copy): load a copy, or training would change the commit.
        self.value.load_state_dict(_snapshot(self._saved))

    def sync(self):
        from horovodlite.torch.functions import broadcast_optimizer_state
        broadcast_optimizer_state(self.value, root_rank=0)


class _StateDictHandler(StateHandler):
    """An object with state_dict()/load_state_dict() of plain values (a learning-rate
    scheduler, an ElasticSampler): saved as a deep copy, synced from rank 0."""

    def __init__(self, value):
        super().__init__(value)
        self._saved = copy.deepcopy(value.state_dict())

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        from horovodlite.torch.functions import broadcast_object
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))


class LRSchedulerStateHandler(_StateDictHandler):
    pass


class SamplerStateHandler(_StateDictHandler):
    pass


def _lr_scheduler_base():
    sched = torch.optim.lr_scheduler
    return getattr(sched, "LRScheduler", None) or sched._LRScheduler


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (_lr_scheduler_base(), LRSchedulerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    return _handler_registry


def set_handler_registry(registry):
    global _handler_registry
    _handler_registry = registry


def _get_handler(value):
    for handler_type, handler_cls in _handler_registry:
        if isinstance(value, handler_type):
            return handler_cls(value)
    return None


class TorchState(ObjectState):
    """State of a PyTorch training process. Models, optimizers, LR schedulers
    and ElasticSamplers given as keyword arguments (model= and optimizer= by
    name) get handlers that save/restore their state_dicts and broadcast them
    from rank 0; everything else is an ordinary Python object."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        from horovodlite.torch.basics import rank
        from horovodlite.torch.functions import broadcast_object
        kwargs.update(model=model, optimizer=optimizer)
        handlers, remainder = {}, {}
        for name, value in kwargs.items():
            handler = _get_handler(value)
            if handler is not None:
                handlers[name] = handler
            else:
                remainder[name] = value
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **remainder)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def __setattr__(self, name, value):
        if name != "_handlers" and name in getattr(self, "_handlers", {}) and hasattr(self, name):
            self._handlers[name].set_value(value)
        super().__setattr__(name, value)
