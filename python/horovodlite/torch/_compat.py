"""The differences between the PyTorch releases horovodlite supports (Debian's
1.13 through 2.x; tested with 1.13.1 and 2.13.0), in one place.

- Gradient-ready hooks: ``Tensor.register_post_accumulate_grad_hook`` (2.1+)
  runs after a leaf's gradient was accumulated into ``.grad``; before 2.1 the
  same moment is a post hook on the leaf's grad accumulator node, which must be
  kept alive by whoever registers it.
- The identity of the backward pass a hook runs in: the outermost
  ``torch.autograd.backward`` frame on the hook's thread (one per
  ``loss.backward()``, including the nested backward calls of reentrant
  checkpointing); where there is none (a hook on an autograd device thread, a
  backward started from C++), the autograd graph task (2.x's
  ``torch._C._current_graph_task_id``), else nothing.
- Compiled autograd (2.x: ``torch._dynamo.compiled_autograd``; 2.13 calls
  its context ``_enable``) puts gradient hooks into the
  backward graph it captures, and Dynamo then traces them. horovodlite's hooks
  start collectives and keep per-pass bookkeeping (dicts keyed by parameters,
  the backward frame from ``sys._getframe``); traced, they break the graph in
  the middle and run out of order (seen with 2.13: the same gradient enqueued
  twice in one pass, "a collective named ... is already in flight"). Hooks are
  therefore registered through ``eager()``: ``torch.compiler.disable`` (2.1+),
  so compiled autograd calls them as opaque functions, eagerly, at the place
  in the backward graph where autograd would have called them. This imports
  ``torch._dynamo`` when the first optimizer registers its hooks (seconds,
  once per process; docs/results/2026-11-python.md).
"""

import sys

import torch

TORCH_VERSION = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])

HAS_POST_ACCUMULATE_GRAD_HOOK = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")

_BACKWARD_CODE = torch.autograd.backward.__code__
_current_graph_task_id = getattr(torch._C, "_current_graph_task_id", None)


class _AccumulatorHook:
    """A hook on a grad accumulator node, which holds the node: nodes are kept
    alive only by the graph, and a parameter's accumulator by nothing else."""

    __slots__ = ("node", "handle")

    def __init__(self, node, handle):
        self.node = node
        self.handle = handle

    def remove(self):
        if self.handle is not None:
            self.handle.remove()
        self.node = None


def eager(hook):
    """``hook``, marked so that Dynamo (compiled autograd) calls it instead of
    tracing it (see above); ``hook`` itself where there is no torch.compiler."""
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    return hook if disable is None else disable(hook)


def register_grad_ready_hook(param, fn):
    """Calls ``fn()`` each time autograd has accumulated a gradient into
    ``param.grad`` (param: a leaf that requires grad). Returns an object with
    ``remove()``; keep it as long as the hook should stay."""
    if HAS_POST_ACCUMULATE_GRAD_HOOK:
        return param.register_post_accumulate_grad_hook(eager(lambda _: fn()))
    node = param.expand_as(param).grad_fn.next_functions[0][0]
    handle = node.register_hook(lambda *_: fn())
    return _AccumulatorHook(node, handle if hasattr(handle, "remove") else None)


def backward_pass_key():
    """What identifies the backward pass the calling hook runs in (compare with
    ``==``), or None when it cannot be told."""
    frame = sys._getframe(1)
    outer = None
    while frame is not None:
        if frame.f_code is _BACKWARD_CODE:
            outer = frame
        frame = frame.f_back
    if outer is not None:
        return outer
    if _current_graph_task_id is not None:
        task = _current_graph_task_id()
        if task >= 0:
            return ("graph_task", task)
    return None
