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


def register_grad_ready_hook(param, fn):
    """Calls ``fn()`` each time autograd has accumulated a gradient into
    ``param.grad`` (param: a leaf that requires grad). Returns an object with
    ``remove()``; keep it as long as the hook should stay."""
    if HAS_POST_ACCUMULATE_GRAD_HOOK:
        return param.register_post_accumulate_grad_hook(lambda _: fn())
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
