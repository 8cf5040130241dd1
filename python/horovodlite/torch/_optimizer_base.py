"""What DistributedOptimizer's two forms share (optimizer.py's gradient
allreduce and _adasum_optimizer.py's update Adasum): the parameter names and
their checks, backward_passes_per_step, the gradient-ready hooks, the local
step and zero_grad's guard.

As in Horovod, DistributedOptimizer(opt) returns an instance of a class made
for ``opt``'s class: a direct subclass of it whose members are those of the
form's class and of this base (wrap()). So ``super(self._hvl_made, self)`` in
these methods is the wrapped optimizer's class, also in an instance of a
subclass of the made class (Lightning wraps optimizers that way): never
``super(self._hvl_made, self)``, which recurses there.
"""

import torch

from horovodlite.torch._compat import eager, register_grad_ready_hook

_TOO_MANY_PASSES = ("Gradients were computed more than backward_passes_per_step times before call to step(). "
                    "Increase backward_passes_per_step to accumulate gradients locally.")


def wrap(optimizer, form, *args):
    """An instance of ``optimizer``'s class made a DistributedOptimizer of the
    given form (a subclass of _HorovodOptimizer), on the same param groups;
    ``args`` go to the form's __init__ after them."""
    members = {}
    for cls in reversed(form.__mro__[:form.__mro__.index(_HorovodOptimizer) + 1]):
        members.update(cls.__dict__)
    members.pop("__dict__", None)
    members.pop("__weakref__", None)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), members)
    cls._hvl_made = cls
    return cls(optimizer.param_groups, *args)


class _HorovodOptimizer(torch.optim.Optimizer):
    """The shared part of DistributedOptimizer's forms (see the module's doc)."""

    @staticmethod
    def find_duplicates(lst):
        seen = set()
        dups = set()
        for el in lst:
            if el in seen:
                dups.add(el)
            seen.add(el)
        return dups

    def _set_named_parameters(self, named_parameters, backward_passes_per_step):
        """Checks and records the parameters' names (Horovod's rules and
        messages; generated names where none are given) and the passes per
        step; returns the list of (name, parameter)."""
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("allreduce.noname.%s.%s" % (i, j), v)
                                for i, param_group in enumerate(self.param_groups)
                                for j, v in enumerate(param_group["params"])]
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                             "usually produced by model.named_parameters().")
        dups = self.find_duplicates([k for k, _ in named_parameters])
        if dups:
            raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: %s"
                             % ", ".join(sorted(dups)))
        all_param_ids = {id(v) for param_group in self.param_groups for v in param_group["params"]}
        unnamed_param_ids = all_param_ids - {id(v) for _, v in named_parameters}
        if unnamed_param_ids:
            raise ValueError("named_parameters was specified, but one or more model parameters were not "
                             "named. Python object ids: %s" % ", ".join(str(i) for i in unnamed_param_ids))
        if isinstance(backward_passes_per_step, bool) or not isinstance(backward_passes_per_step, int) \
                or backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be a positive int, got %r" % (backward_passes_per_step,))
        self._parameter_names = {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step for _, v in named_parameters}
        self._grad_hooks = []       # keep the gradient-ready hooks registered
        self._requires_update = set()
        return named_parameters

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _hook_parameters(self, make_piece_hook=None):
        """Registers self._make_hook(p) to run when p's gradient is ready (and
        make_piece_hook(p) on each piece of it), for every parameter that
        requires grad."""
        for param_group in self.param_groups:
            for p in param_group["params"]:
                if p.requires_grad:
                    self._requires_update.add(p)
                    self._grad_hooks.append(register_grad_ready_hook(p, self._make_hook(p)))
                    if make_piece_hook is not None:
                        p.register_hook(eager(make_piece_hook(p)))

    def _step_locally(self, closure=None):
        """The wrapped optimizer's step, without allreducing (for initialising
        state on one rank, e.g. by broadcast_optimizer_state)."""
        return super(self._hvl_made, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                                 "cause a race condition.")
        return super(self._hvl_made, self).zero_grad(*args, **kwargs)
