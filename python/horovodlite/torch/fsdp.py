"""ZeRO stage 3: ``hvd.fully_shard(module)``, in the spirit of FSDP2's ``fully_shard``.

Apply it to each submodule that should gather its parameters on its own (a
transformer block, a layer), then to the root module:

    for layer in model.layers:
        hvd.fully_shard(layer)
    hvd.fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)   # the shards

Afterwards every parameter the call manages (those of the module not managed
by an earlier call on a submodule) is replaced, in its module, by this rank's
shard: a 1-D ``nn.Parameter`` with the rank's chunk of the flattened parameter
(padded to a multiple of the number of ranks N, rank r owning the r-th chunk,
as hvd.ZeroRedundancyOptimizer does). ``model.parameters()`` are the shards, so
any elementwise optimizer made after the call steps only them.

A step:
- before the module's forward its parameters are allgathered (the next
  module's gather, in the order of the first forward, is started at once:
  prefetch) and put in place of the shards for the forward; after it the
  shards are put back and, with ``reshard_after_forward`` (default), the
  gathered storage is freed;
- before the module's backward (a hook on its outputs' gradients) the
  parameters are gathered again into the same storage (autograd saved views
  of it), the previous module's gather prefetched;
- each parameter's full gradient is reducescattered (fused and negotiated as
  any collective) as soon as autograd has it, and its gathered storage freed;
  at the end of backward (a callback of the autograd engine) the reduced
  chunks are added to the shards' ``.grad``, and parameters without a gradient
  on this rank are sent as zeros so that every rank sends the same names.

Composes with activation checkpointing (torch.utils.checkpoint and
checkpoint_sequential, reentrant or not: a recomputed forward gathers again)
and with gradient accumulation (several backward passes add to the shards'
gradients; each pass reduces its own, as FSDP2 does by default). Every rank
must run the forward of the same fully sharded modules (their gathers are
collectives), as with FSDP.

Checkpoints: ``hvd.fsdp.full_state_dict(module)`` (collective) is the module's
state_dict with full parameters, ``hvd.fsdp.load_full_state_dict(module, sd)``
loads one on any number of ranks.
"""

import torch

from horovodlite.common.process_sets import _ps_rank, _ps_size, global_process_set
from horovodlite.torch.basics import rank
from horovodlite.torch.compression import Compression
from horovodlite.torch.functions import allgather_object
from horovodlite.torch.mpi_ops import (
    Average,
    Sum,
    allgather,
    allgather_async,
    reducescatter_async,
    synchronize,
)
from horovodlite.torch.zero import _BOUND_WAIT_S, _describe, _layout_error, clip_sharded_grads, return_freed_memory

_current_node = getattr(torch._C, "_current_autograd_node", None)
_instances = {}  # process set id -> fully_shard calls: names their collectives alike on every rank


def _storage_free(t):
    if hasattr(t, "untyped_storage"):
        t.untyped_storage().resize_(0)
    else:  # PyTorch 1.x
        t.storage().resize_(0)


def _storage_alloc(t):
    """Gives a tensor whose storage was freed its bytes back (contents undefined)."""
    if hasattr(t, "untyped_storage"):
        st = t.untyped_storage()
        if st.size() == 0:
            st.resize_(t.numel() * t.element_size())
    else:
        st = t.storage()
        if st.size() == 0:
            st.resize_(t.numel())


def _in_backward(ctx):
    """True while autograd runs a node on this thread: a forward run now is a
    checkpoint's recomputation, whose saved tensors backward uses next. (PyTorch
    1.x cannot say: there, while a backward pass of the tree is under way.)"""
    if _current_node is None:
        return ctx.pass_active
    return _current_node() is not None


def _in_discarded_recompute():
    """True while non-reentrant checkpointing recomputes a forward inside
    backward: the graph recorded then is never backwarded (the original
    forward's nodes get the gradients)."""
    if _current_node is None:
        return False
    node = _current_node()
    return node is not None and type(node).__name__ != "CheckpointFunctionBackward"


class _Param:
    """One managed parameter: where it lives, its shard and its gathered copy."""

    __slots__ = ("owners", "fqn", "shape", "numel", "chunk", "start", "stop", "shard", "buf", "full", "gather",
                 "name", "uses", "acc", "sends", "state")

    def __init__(self, owners, fqn, param, n, r, name, state):
        self.owners = owners          # [(module, attribute)], usually one
        self.fqn = fqn
        self.shape = param.shape
        self.numel = param.numel()
        self.chunk = -(-self.numel // n)
        self.start = min(r * self.chunk, self.numel)
        self.stop = min(self.start + self.chunk, self.numel)
        flat = param.detach().reshape(-1)
        self.shard = torch.nn.Parameter(flat[self.start:self.stop].clone(), requires_grad=param.requires_grad)
        self.buf = None               # the gathered (chunk * n) elements; storage freed when resharded
        self.full = False             # buf holds the gathered parameter
        self.gather = None            # the allgather in flight
        self.name = name
        self.uses = 0                 # forward uses whose backward is still to come (this pass)
        self.acc = None               # local gradient not yet sent
        self.sends = 0                # reducescatters sent this pass
        self.state = state

    def padded_shard(self):
        k = self.stop - self.start
        s = self.shard.detach()
        return s if k == self.chunk else torch.cat([s, s.new_zeros(self.chunk - k)])

    def view(self):
        return self.buf[:self.numel].view(self.shape)


class _Unshard(torch.autograd.Function):
    """The full parameter for the forward; its gradient goes to the reducescatter."""

    @staticmethod
    def forward(ctx, shard, p):
        ctx.p = p
        return p.view()

    @staticmethod
    def backward(ctx, grad):
        ctx.p.state.on_grad(ctx.p, grad)
        return None, None


class _Context:
    """What the fully sharded modules of one tree share: the forward order
    (for prefetching) and the backward pass (its end callback, the reductions
    in flight)."""

    def __init__(self):
        self.states = []
        self.order = []
        self.pass_active = False
        self.backward_queue = []
        self.backward_issued = 0
        self.inflight = []
        self.inflight_bytes = 0

    def record(self, state):
        if state not in self.order:
            self.order.append(state)

    def neighbour(self, state, step):
        if state not in self.order:
            return None
        i = self.order.index(state) + step
        return self.order[i] if 0 <= i < len(self.order) else None

    def begin_pass(self):
        if not self.pass_active:
            self.pass_active = True
            # The modules whose parameters backward gathers again, in reverse forward order.
            self.backward_queue = [st for st in reversed(self.order)
                                   if st.forward_with_grad and st.reshard_after_forward]
            self.backward_issued = 0
            torch.autograd.Variable._execution_engine.queue_callback(self.end_pass)

    def issue_backward_gathers(self, state, ahead):
        """Issues the backward queue's gathers up to ``state``'s and ``ahead`` more
        (all of them: state None)."""
        q = self.backward_queue
        last = len(q) - 1 if state is None or state not in q else min(q.index(state) + ahead, len(q) - 1)
        while self.backward_issued <= last:
            q[self.backward_issued].start_gather()
            self.backward_issued += 1

    def send(self, p, grad):
        st = p.state
        flat = grad.detach().reshape(-1)
        pad = p.chunk * st.n - p.numel
        flat = torch.cat([flat, flat.new_zeros(pad)]) if pad else flat
        compressed, cctx = st.compression.compress(flat)
        handle = reducescatter_async(compressed, name="%s.rs%d" % (p.name, p.sends), op=st.op,
                                     process_set=st.process_set)
        p.sends += 1
        self.inflight.append((p, handle, cctx, compressed))
        self.inflight_bytes += compressed.numel() * compressed.element_size()
        # Bounded as ZeroRedundancyOptimizer's stage 2 (_bound_inflight: a wait
        # that gives way, since the other ranks may send in another order).
        while self.inflight_bytes > st.max_inflight_bytes and len(self.inflight) > 1:
            if not self.inflight[0][1].wait(_BOUND_WAIT_S):
                break
            self.finish(self.inflight.pop(0))

    def finish(self, item):
        p, handle, cctx, sent = item
        self.inflight_bytes -= sent.numel() * sent.element_size()
        out = p.state.compression.decompress(synchronize(handle), cctx)
        out = out[:p.stop - p.start].to(p.shard.dtype)
        if p.shard.grad is None:
            p.shard.grad = out.clone() if out._base is not None else out
        else:
            p.shard.grad.add_(out)

    def end_pass(self):
        """At the end of backward: what is left to send (and zeros for what was
        never sent), then every reduction into the shards' gradients."""
        try:
            # The gathers other ranks made for backwards that did not run here.
            self.issue_backward_gathers(None, 0)
            for st in self.backward_queue:
                st.finish_gathers()
            for st in self.states:
                for p in st.params:
                    if not p.shard.requires_grad:
                        continue
                    if p.acc is not None:
                        grad, p.acc = p.acc, None
                        self.send(p, grad)
                    elif p.sends == 0:
                        self.send(p, torch.zeros(p.numel, dtype=p.shard.dtype, device=p.shard.device))
            while self.inflight:
                self.finish(self.inflight.pop(0))
        finally:
            for st in self.states:
                for p in st.params:
                    p.sends = 0
                    p.uses = 0
                    p.acc = None
                st.reshard()
                st.forward_with_grad = False
            self.pass_active = False


class _State:
    """One fully_shard call: its module and the parameters it manages."""

    def __init__(self, module, params, process_set, reshard_after_forward, compression, op, max_inflight_bytes,
                 name):
        self.module = module
        self.process_set = process_set
        self.n = _ps_size(process_set, "fully_shard")
        self.r = _ps_rank(process_set, "fully_shard")
        self.reshard_after_forward = reshard_after_forward
        self.compression = compression
        self.op = op
        self.max_inflight_bytes = max_inflight_bytes
        self.name = name
        self.params = []
        self.ctx = None
        for j, (fqn, p, owners) in enumerate(params):
            self.params.append(_Param(owners, fqn, p, self.n, self.r, "%s.%d" % (name, j), self))
            for m, attr in owners:
                m._parameters[attr] = self.params[-1].shard
        self.forward_with_grad = False  # this pass ran the module's forward with autograd on

    # ------------------------------------------------------------ gather ----

    def start_gather(self):
        for p in self.params:
            if not p.full and p.gather is None:
                p.gather = allgather_async(p.padded_shard(), name=p.name + ".ag", process_set=self.process_set)

    def unshard(self):
        self.start_gather()
        self.finish_gathers()

    def finish_gathers(self):
        """Waits for the gathers in flight (starts none) and puts their results in place."""
        for p in self.params:
            if p.gather is None:
                continue
            out = synchronize(p.gather)
            p.gather = None
            if p.buf is None:
                p.buf = out
            else:
                # The same storage as before: views of it that autograd saved
                # in forward see the parameter again. .data: no version bump.
                _storage_alloc(p.buf)
                p.buf.data.copy_(out)
            p.full = True

    def reshard(self):
        for p in self.params:
            if p.full:
                _storage_free(p.buf)
                p.full = False

    # ------------------------------------------------------------- hooks ----

    def pre_forward(self, module, args):
        self.ctx.record(self)
        self.unshard()
        nxt = self.ctx.neighbour(self, 1)
        if nxt is not None:
            nxt.start_gather()
        track = torch.is_grad_enabled() and not _in_discarded_recompute()
        if torch.is_grad_enabled():
            self.forward_with_grad = True
        for p in self.params:
            full = _Unshard.apply(p.shard, p)
            if track and p.shard.requires_grad:
                p.uses += 1
            for m, attr in p.owners:
                m._parameters[attr] = full

    def post_forward(self, module, args, output):
        for p in self.params:
            for m, attr in p.owners:
                m._parameters[attr] = p.shard
        if self.reshard_after_forward and not _in_backward(self.ctx):
            # (A recomputation's gathered parameters stay: backward reads them next.)
            self.reshard()
        if torch.is_grad_enabled():
            tensors = [t for t in _flatten(output) if isinstance(t, torch.Tensor) and t.requires_grad]
            fired = [False]

            def hook(grad):
                if not fired[0]:
                    fired[0] = True
                    self.pre_backward()
                return None
            for t in tensors:
                t.register_hook(hook)
        return None

    def pre_backward(self):
        """Gathers the parameters for this module's backward.

        Which modules' backward runs, and in which order, may differ across
        ranks (an output unused on some). The gathers are therefore issued in
        one order on every rank, the reverse of the forward's (the context's
        backward queue): a module's backward issues every gather up to its own
        (and one more, the prefetch) and waits for its own only, so a rank
        waits only on gathers every other rank has issued or will issue before
        waiting itself; end_pass issues the rest."""
        self.ctx.begin_pass()
        self.ctx.issue_backward_gathers(self, 1)
        self.unshard()

    def on_grad(self, p, grad):
        self.ctx.begin_pass()
        p.acc = grad if p.acc is None else p.acc + grad
        p.uses -= 1
        if p.uses <= 0:
            g, p.acc = p.acc, None
            self.ctx.send(p, g)
            if p.full:
                _storage_free(p.buf)
                p.full = False


def _flatten(output):
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (list, tuple)):
        return [t for o in output for t in _flatten(o)]
    if isinstance(output, dict):
        return [t for o in output.values() for t in _flatten(o)]
    return []


def _managed(module):
    """(qualified name, parameter, [(owner, attribute)]) of the parameters of
    ``module`` not under a submodule that is already fully sharded."""
    # An explicit stack, not a recursive closure: a closure that refers to
    # itself is a reference cycle, which would keep the replaced parameters
    # alive until the garbage collector runs.
    found = {}
    order = []
    stack = [(module, "")]
    while stack:
        m, prefix = stack.pop()
        for attr, p in m._parameters.items():
            if p is None:
                continue
            if id(p) not in found:
                found[id(p)] = (prefix + attr, p, [])
                order.append(id(p))
            found[id(p)][2].append((m, attr))
        children = [(child, prefix + name + ".") for name, child in m._modules.items()
                    if child is not None and getattr(child, "_hvl_fsdp_state", None) is None]
        stack.extend(reversed(children))  # depth first, in registration order
    return [found[i] for i in order]


def _states_under(module):
    return [m._hvl_fsdp_state for m in module.modules() if getattr(m, "_hvl_fsdp_state", None) is not None]


def fully_shard(module, process_set=global_process_set, reshard_after_forward=True, *,
                compression=Compression.none, op=Average, max_inflight_bytes=128 << 20):
    """Shards ``module``'s parameters (those not managed by an earlier call on
    a submodule) across the ranks of ``process_set``; returns ``module``.

    Arguments:
        reshard_after_forward: free the gathered parameters after forward and
            gather them again for backward (True, FSDP2's default) or keep them
            until backward.
        compression: hvd.Compression.none, .fp16 or .bf16 for the gradients' reducescatter.
        op: hvd.Average (default) or hvd.Sum of the gradients over the ranks.
        max_inflight_bytes: bound on full-size gradients waiting for their
            reducescatter (beyond it the hook waits for the oldest).
    """
    what = "fully_shard"
    if not isinstance(module, torch.nn.Module):
        raise TypeError("%s: expected a torch.nn.Module, got %s" % (what, type(module).__name__))
    if getattr(module, "_hvl_fsdp_state", None) is not None:
        raise ValueError("%s: %s is fully sharded already" % (what, type(module).__name__))
    if op not in (Average, Sum):
        raise ValueError("%s: op must be hvd.Average or hvd.Sum" % what)
    if compression not in (Compression.none, Compression.fp16, Compression.bf16):
        raise ValueError("%s: compression must be hvd.Compression.none, hvd.Compression.fp16 or "
                             "hvd.Compression.bf16" % what)
    if process_set.included() is False:
        raise ValueError("%s: rank %d is not in %s" % (what, rank(), process_set))
    return_freed_memory()
    params = _managed(module)
    psid = process_set.process_set_id
    k = _instances.get(psid, 0)
    _instances[psid] = k + 1
    name = "fully_shard.%s.%d" % (psid, k)
    sig = [(fqn or "<module>", _describe(p)) for fqn, p, _ in params]
    error = _layout_error(what, allgather_object(sig, name=name + ".layout", process_set=process_set),
                          list(process_set.ranks))
    if error is not None:
        raise ValueError(error)
    for fqn, p, _ in params:
        if not p.dtype.is_floating_point:
            raise ValueError("%s: parameter %s is %s; sharded parameters must be floating point" % (what, fqn, p.dtype))
    state = _State(module, params, process_set, bool(reshard_after_forward), compression, op,
                   int(max_inflight_bytes), name)
    ctx = _Context()
    for st in _states_under(module) + [state]:
        if st.process_set is not process_set:
            raise ValueError("%s: a submodule is fully sharded on %s, this module on %s; one process set per tree"
                             % (what, st.process_set, process_set))
        st.ctx = ctx
        ctx.states.append(st)
    module._hvl_fsdp_state = state
    module.register_forward_pre_hook(state.pre_forward)
    module.register_forward_hook(state.post_forward)
    return module


# ------------------------------------------------------------ checkpoints ----

def _shard_map(module):
    """id(shard parameter) -> _Param, for every fully sharded part of ``module``."""
    return {id(p.shard): p for st in _states_under(module) for p in st.params}


def _named_parameters(module):
    try:
        return list(module.named_parameters(remove_duplicate=False))
    except TypeError:  # PyTorch 1.x
        return list(module.named_parameters())


def full_state_dict(module):
    """``module.state_dict()`` with every sharded parameter gathered to its
    full shape (a collective over the process set of its shards)."""
    shards = _shard_map(module)
    names = {}
    for fqn, prm in _named_parameters(module):
        if id(prm) in shards:
            names[fqn] = shards[id(prm)]
    sd = module.state_dict()
    for fqn, p in names.items():
        if fqn in sd:
            full = allgather(p.padded_shard(), name=p.name + ".full", process_set=p.state.process_set)
            sd[fqn] = full[:p.numel].reshape(p.shape).clone()
    return sd


def load_full_state_dict(module, state_dict, strict=True):
    """Loads a full state dict (full_state_dict()'s, or an unsharded model's)
    into a fully sharded ``module`` on any number of ranks; not a collective."""
    shards = _shard_map(module)
    rest = dict(state_dict)
    with torch.no_grad():
        for fqn, prm in _named_parameters(module):
            p = shards.get(id(prm))
            if p is None:
                continue
            if fqn not in rest:
                if strict:
                    raise KeyError("load_full_state_dict: %s is missing from the state dict" % fqn)
                continue
            v = rest.pop(fqn)
            if tuple(v.shape) != tuple(p.shape):
                raise ValueError("load_full_state_dict: %s has shape %s in the state dict, the parameter %s"
                                 % (fqn, list(v.shape), list(p.shape)))
            p.shard.copy_(v.reshape(-1)[p.start:p.stop])
    # The rest (buffers, unsharded parameters) as torch loads them.
    missing, unexpected = module.load_state_dict(rest, strict=False)
    missing = [k for k in missing if k not in {n for n, prm in module.named_parameters() if id(prm) in shards}]
    if strict and (missing or unexpected):
        raise KeyError("load_full_state_dict: missing %s, unexpected %s" % (missing, unexpected))


def clip_grad_norm_(module, max_norm, norm_type=2.0):
    """Clips the gradients of a fully sharded ``module`` by their norm over
    every rank's shards (what torch.nn.utils.clip_grad_norm_ does for one
    process); returns the total norm. A collective."""
    shards = _shard_map(module)
    grads = [prm.grad for prm in module.parameters() if prm.grad is not None]
    sets = {p.state.process_set for p in shards.values()}
    process_set = sets.pop() if len(sets) == 1 else global_process_set
    return clip_sharded_grads(grads, max_norm, norm_type, "fully_shard.norm", process_set)
