"""Sharded data parallelism, stages 1 and 2 of ZeRO: ``hvd.ZeroRedundancyOptimizer``,
with the API of ``torch.distributed.optim.ZeroRedundancyOptimizer``.

Every rank keeps the whole parameters (as plain data parallelism) but only its
shard of the gradients and of the optimizer state. Each parameter is sharded
on its own, elementwise: its flattened values are padded to a multiple of the
number of ranks N and rank r owns the r-th of N equal chunks (FSDP2 shards
each parameter too, along dim 0; sharding the flat view instead keeps the
chunks equal for any shape, which the core's reducescatter needs to hand
every rank the same number of elements). The wrapped optimizer steps only the
shards, so it must be elementwise (SGD, Adam, AdamW, RMSprop, Adagrad, ...),
as for any flat-sharded ZeRO.

A step:
- stage 2 (default): a hook on each parameter starts the reducescatter of its
  gradient as soon as backward has produced it (negotiated and fused by the
  core as any collective, so the order of the hooks may differ across ranks)
  and drops p.grad; the full gradient lives until the core has reduced it
  (the hooks reap finished reductions as backward goes on, and wait for the
  oldest when more than ``max_inflight_bytes`` of gradients are in flight,
  so that a backward faster than the network cannot hold every gradient);
- stage 1: gradients are kept in p.grad (the local, unreduced gradient) and
  reducescattered together at step();
- step() sends what no hook sent (a parameter without a gradient on a rank
  counts as a zero gradient, as in hvd.DistributedOptimizer), waits, steps the
  wrapped optimizer on the shards and allgathers the updated shards back into
  the parameters (bounded in flight, so the gathered copies never add a whole
  model's worth of memory).

Each shard is a view of its parameter: the wrapped optimizer updates the
parameter's chunk in place, so a parameter changed in place between steps
(broadcast_parameters after the optimizer was made, a model's
load_state_dict) is what is stepped. Where the parameter got new storage
(``p.data = ...``, ``load_state_dict(assign=True)``, ``module.to()``), step()
finds the view left behind and makes a new one, the optimizer's state moving
with it.

Checkpoints: consolidate_state_dict(to) gathers the state into the format of
the wrapped optimizer's own state_dict() (full-size state per parameter), which
load_state_dict() reads on any number of ranks; sharded_state_dict() and
load_sharded_state_dict() (and save_sharded/load_sharded for files) keep one
piece per rank with an index, also loadable on another number of ranks.
"""

import ctypes
import json
import os

import torch

from horovodlite.common.process_sets import _ps_rank, _ps_size, global_process_set
from horovodlite.torch._compat import backward_pass_key, eager, register_grad_ready_hook
from horovodlite.torch.basics import rank
from horovodlite.torch.compression import Compression
from horovodlite.torch.functions import allgather_object
from horovodlite.torch.mpi_ops import Average, Max, Sum, allgather_async, allreduce, reducescatter_async, synchronize

_TOO_MANY_PASSES = ("Gradients were computed more than backward_passes_per_step times before call to step(). "
                    "Increase backward_passes_per_step to accumulate gradients locally.")

# Bytes of allgathered parameters (or of reducescattered gradients at stage 1's
# step) in flight at once: enough to fill the core's fusion buffer several
# times, small next to a model that needs sharding.
_WINDOW_BYTES = 64 << 20
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameters
_GLIBC_DEFAULTS = ((_M_MMAP_MAX, 65536), (_M_TRIM_THRESHOLD, 128 << 10))
_MALLOC_SETTINGS = ("MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def return_freed_memory():
    """Gives freed memory back to the system again (glibc's own policy).

    hvd.init() keeps freed memory for reuse (HOROVODLITE_KEEP_FREED_MEMORY,
    default on: no mmap for large blocks, no trimming; a step then reuses its
    activations' pages instead of faulting fresh ones in). That makes every
    block freed during a step stay with the process: a sharded optimizer's
    saving stays in the heap (with 4 ranks and a 60M-parameter MLP, stage 2's
    peak was 0.81x the replicated optimizer's with the policy and 0.58x
    without, docs/results/2026-12-zero.md). The sharded optimizers therefore
    call this when made, unless HOROVODLITE_KEEP_FREED_MEMORY is set or the
    user tuned malloc (MALLOC_*_, GLIBC_TUNABLES glibc.malloc.*)."""
    if os.environ.get("HOROVODLITE_KEEP_FREED_MEMORY") is not None:
        return False
    if any(v in os.environ for v in _MALLOC_SETTINGS) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False  # not glibc
    return all(mallopt(k, v) == 1 for k, v in _GLIBC_DEFAULTS)


# How long a gradient hook waits for the oldest reduction when too many bytes are in flight.
_BOUND_WAIT_S = 0.2

# Optimizers made per process set (id -> count): names their collectives alike
# on every rank of the set (other ranks may make other optimizers meanwhile).
_instances = {}


class _Shard:
    """One parameter's sharding: its chunk of the flattened parameter."""

    __slots__ = ("param", "where", "name", "numel", "chunk", "start", "stop", "local", "passes", "sent")

    def __init__(self, param, where, name, n_ranks, my_rank):
        self.param = param
        self.where = where  # "param_groups[g]['params'][j]", for errors
        self.name = name
        self.numel = param.numel()
        self.chunk = -(-self.numel // n_ranks)
        self.start = min(my_rank * self.chunk, self.numel)
        self.stop = min(self.start + self.chunk, self.numel)
        # A view of the parameter itself: the wrapped optimizer updates this
        # rank's chunk in place (no copy to keep in step), and the allgather
        # sends it from there. The last ranks' chunks may be short or empty.
        self.local = param.detach().view(-1)[self.start:self.stop]
        self.passes = 0
        self.sent = False

    def padded_local(self):
        """The shard padded to ``chunk`` elements (itself when it is full)."""
        k = self.stop - self.start
        if k == self.chunk:
            return self.local
        return torch.cat([self.local, self.local.new_zeros(self.chunk - k)])


def _describe(p):
    if not isinstance(p, torch.Tensor):
        return ("not a tensor", type(p).__name__)
    return (tuple(p.shape), str(p.dtype).replace("torch.", ""), bool(p.is_sparse),
            bool(p.is_sparse or p.is_contiguous()), bool(p.requires_grad))


def _ranks_text(ranks):
    return ("rank %d" % ranks[0]) if len(ranks) == 1 else ("ranks " + ", ".join(str(r) for r in ranks))


def _layout_error(what, signatures, set_ranks):
    """The error for parameters that differ across ranks, or None. Every rank
    computes it from the same gathered signatures, so all raise alike."""
    counts = {}
    for r, sig in zip(set_ranks, signatures):
        counts.setdefault(len(sig), []).append(r)
    if len(counts) > 1:
        return ("%s: ranks hold different numbers of parameters: %s" % (
            what, "; ".join("%d on %s" % (n, _ranks_text(rs)) for n, rs in sorted(counts.items()))))
    for i, (where, _) in enumerate(signatures[0]):
        seen = {}
        for r, sig in zip(set_ranks, signatures):
            seen.setdefault(sig[i][1], []).append(r)
        if len(seen) > 1:
            return ("%s: parameter %s differs across ranks: %s" % (
                what, where, "; ".join("%s on %s" % (_sig_text(s), _ranks_text(rs)) for s, rs in seen.items())))
    for where, s in signatures[0]:
        if len(s) == 2:
            return "%s: parameter %s is %s, not a tensor (on %s)" % (what, where, s[1], _ranks_text(set_ranks))
        if s[2]:
            return ("%s: parameter %s is sparse (on %s); sharded optimizers take dense parameters"
                    % (what, where, _ranks_text(set_ranks)))
        if not s[3]:
            return ("%s: parameter %s is not contiguous (on %s); make it contiguous (p.data = p.data.contiguous()) "
                    "before sharding" % (what, where, _ranks_text(set_ranks)))
    return None


def _sig_text(s):
    if len(s) == 2:
        return s[1]
    return "shape %s %s" % (list(s[0]), s[1])


def clip_sharded_grads(grads, max_norm, norm_type, name, process_set, device=None):
    """Scales this rank's shard gradients ``grads`` so that their norm over
    every rank of ``process_set`` (one allreduce named ``name``) is at most
    ``max_norm``; returns that norm. ZeroRedundancyOptimizer.clip_grad_norm_
    and hvd.fsdp.clip_grad_norm_."""
    norm_type = float(norm_type)
    device = grads[0].device if grads else (device or torch.device("cpu"))
    if norm_type == float("inf"):
        local = torch.stack([g.abs().max() for g in grads]).max().float() if grads \
            else torch.zeros((), device=device)
        total = allreduce(local.reshape(1), name=name, op=Max, process_set=process_set)[0]
    else:
        local = sum((g.float().norm(norm_type) ** norm_type for g in grads), torch.zeros((), device=device))
        total = allreduce(local.reshape(1), name=name, op=Sum, process_set=process_set)[0] ** (1.0 / norm_type)
    coef = float(max_norm) / (float(total) + 1e-6)
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)
    return total


class ZeroRedundancyOptimizer(torch.optim.Optimizer):
    """Shards ``optimizer_class``'s state (and, at stage 2, the gradients)
    across the ranks of ``process_set``; torch's ZeroRedundancyOptimizer API.

    Arguments:
        params: parameters or param groups, as for any optimizer.
        optimizer_class: the elementwise torch.optim class that steps each shard.
        process_set: the ranks that share the model (default: all).
        parameters_as_bucket_view: accepted for torch's signature; shards are flat anyway.
        overlap_with_ddp: torch's DDP-hook mode; not applicable (no DDP here).
        stage: 2 (default; gradients sharded, freed as reduced) or 1 (optimizer
            state sharded, gradients kept in p.grad and reduced at step()).
        compression: hvd.Compression.none, .fp16 or .bf16 for the gradients' reducescatter.
        backward_passes_per_step: backward passes accumulated locally per step.
        op: hvd.Average (default) or hvd.Sum over the ranks.
        max_inflight_bytes: stage 2's bound on the full-size gradients waiting
            for their reducescatter (default 128 MiB).
        **defaults: the optimizer's arguments (lr, betas, weight_decay, ...).
    """

    def __init__(self, params, optimizer_class, process_set=global_process_set, parameters_as_bucket_view=False,
                 overlap_with_ddp=False, *, stage=2, compression=Compression.none, backward_passes_per_step=1,
                 op=Average, max_inflight_bytes=128 << 20, **defaults):
        what = "ZeroRedundancyOptimizer"
        if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.Optimizer)):
            raise TypeError("%s: optimizer_class must be a torch.optim.Optimizer subclass, got %r"
                            % (what, optimizer_class))
        if overlap_with_ddp:
            raise ValueError("%s: overlap_with_ddp is torch's mode for DDP's communication hook; horovodlite "
                             "reduces the gradients itself (drop DDP and the argument)" % what)
        if stage not in (1, 2):
            raise ValueError("%s: stage must be 1 or 2, got %r (stage 3 is hvd.fully_shard)" % (what, stage))
        if isinstance(backward_passes_per_step, bool) or not isinstance(backward_passes_per_step, int) \
                or backward_passes_per_step < 1:
            raise ValueError("%s: backward_passes_per_step must be a positive int, got %r"
                             % (what, backward_passes_per_step))
        if op not in (Average, Sum):
            raise ValueError("%s: op must be hvd.Average or hvd.Sum" % what)
        if compression not in (Compression.none, Compression.fp16, Compression.bf16):
            raise ValueError("%s: compression must be hvd.Compression.none, hvd.Compression.fp16 or "
                             "hvd.Compression.bf16" % what)
        self._inner = None
        super().__init__(params, defaults)
        return_freed_memory()
        if process_set.included() is False:
            raise ValueError("%s: rank %d is not in %s; make the optimizer on the set's ranks only"
                             % (what, rank(), process_set))
        self.process_set = process_set
        self.optimizer_class = optimizer_class
        self.stage = stage
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self._compression = compression
        self.parameters_as_bucket_view = parameters_as_bucket_view
        self._n = _ps_size(process_set, what)
        self._r = _ps_rank(process_set, what)
        psid = process_set.process_set_id
        self._id = "%s.%d" % (psid, _instances.get(psid, 0))
        _instances[psid] = _instances.get(psid, 0) + 1
        self._shards = []           # every sharded parameter, in param-group order (the same on every rank)
        self._by_param = {}
        self._inflight = []         # (shard, handle, compression ctx, input kept alive) of this step's reductions
        self._inflight_bytes = 0
        self._max_inflight = int(max_inflight_bytes)
        self._hooks = []
        self._pass_key = None
        self._counted = set()
        self._reduced = False       # gradients already reduced this step (synchronize/clip_grad_norm_)
        self._consolidated = None   # (rank it was sent to, step count, state dict)
        self._steps = 0
        groups = []
        for g, group in enumerate(self.param_groups):
            groups.append(self._shard_group(g, group))
        self._inner = optimizer_class(groups, **defaults)
        for group, inner in zip(self.param_groups, self._inner.param_groups):
            for k, v in inner.items():
                if k != "params":
                    group[k] = v

    # ------------------------------------------------------------ layout ----

    def _shard_group(self, g, group):
        """Checks the group's parameters across ranks and makes their shards;
        returns the wrapped optimizer's group over the shards."""
        what = "ZeroRedundancyOptimizer"
        params = group["params"]
        sig = [("param_groups[%d]['params'][%d]" % (g, j), _describe(p)) for j, p in enumerate(params)]
        set_ranks = self.process_set.ranks
        signatures = allgather_object(sig, name="%s.%s.layout.%d" % (what, self._id, g),
                                      process_set=self.process_set)
        error = _layout_error(what, signatures, list(set_ranks))
        if error is not None:
            raise ValueError(error)
        local = []
        for j, p in enumerate(params):
            if not p.requires_grad or p.numel() == 0:
                continue  # never stepped: left as it is on every rank
            sh = _Shard(p, sig[j][0], "%s.%s.%d.%d" % (what, self._id, g, j), self._n, self._r)
            self._shards.append(sh)
            self._by_param[p] = sh
            local.append(sh.local)
            if self.stage == 2:
                self._hooks.append(register_grad_ready_hook(p, eager(self._make_hook(sh))))
        inner = {k: v for k, v in group.items() if k != "params"}
        inner["params"] = local
        return inner

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        if self._inner is None:
            return  # during __init__: the shards are made afterwards
        g = len(self.param_groups) - 1
        inner = self._shard_group(g, self.param_groups[g])
        self._inner.add_param_group(inner)
        for k, v in self._inner.param_groups[-1].items():
            if k != "params":
                self.param_groups[g][k] = v

    # --------------------------------------------------- gradient reduce ----

    def _make_hook(self, sh):
        def hook():
            key = backward_pass_key()
            if key is not None:
                if key != self._pass_key:
                    self._pass_key = key
                    self._counted = set()
                if sh in self._counted:
                    return  # another piece of this pass's gradient (reentrant checkpointing): sent at step()
                self._counted.add(sh)
            sh.passes += 1
            if sh.passes > self.backward_passes_per_step:
                raise AssertionError(_TOO_MANY_PASSES)
            if sh.passes == self.backward_passes_per_step and not sh.sent:
                self._send(sh)
                self._reap()
                self._bound_inflight()
        return hook

    def _send(self, sh, suffix=""):
        p = sh.param
        grad = p.grad
        if grad is None:
            grad = torch.zeros(sh.chunk * self._n, dtype=p.dtype, device=p.device)
        else:
            if grad.is_sparse:
                raise ValueError("ZeroRedundancyOptimizer: the gradient of parameter %s is sparse on rank %d; "
                                 "sharded optimizers take dense gradients" % (sh.where, rank()))
            flat = grad.detach().reshape(-1)
            pad = sh.chunk * self._n - sh.numel
            grad = torch.cat([flat, flat.new_zeros(pad)]) if pad else flat
        if self.stage == 2:
            p.grad = None  # the input below keeps it until the core has reduced it
        compressed, ctx = self._compression.compress(grad)
        handle = reducescatter_async(compressed, name=sh.name + suffix, op=self.op, process_set=self.process_set)
        self._inflight.append((sh, handle, ctx, compressed))
        self._inflight_bytes += compressed.numel() * compressed.element_size()
        sh.sent = True

    def _finish(self, item):
        sh, handle, ctx, sent = item
        self._inflight_bytes -= sent.numel() * sent.element_size()
        out = self._compression.decompress(synchronize(handle), ctx)
        if out.dtype != sh.local.dtype:
            out = out.to(sh.local.dtype)
        out = out[:sh.stop - sh.start]
        if sh.local.grad is None:
            sh.local.grad = out
        else:
            sh.local.grad.add_(out)

    def _reap(self):
        """Finishes the reductions the core has done, oldest first, so their
        full-size inputs are freed while backward goes on."""
        done = 0
        for item in self._inflight:
            if not item[1].poll():
                break
            self._finish(item)
            done += 1
        if done:
            del self._inflight[:done]

    def _bound_inflight(self):
        """Waits for the oldest reductions while more than max_inflight_bytes
        are in flight, at most _BOUND_WAIT_S each: hooks may fire in another
        order on another rank, which may then be waiting for a gradient this
        rank has not sent yet; past the wait this rank goes on (the bound
        gives way rather than the job hanging)."""
        while self._inflight and self._inflight_bytes > self._max_inflight:
            if not self._inflight[0][1].wait(_BOUND_WAIT_S):
                return
            self._finish(self._inflight.pop(0))

    def _drain(self, limit_bytes=0):
        """Finishes the oldest reductions until at most ``limit_bytes`` are in flight (0: all)."""
        while self._inflight and (limit_bytes == 0 or self._inflight_bytes > limit_bytes):
            self._finish(self._inflight.pop(0))

    def synchronize(self):
        """Finishes this step's gradient reduction (sending what no hook sent):
        call before inspecting the shards' gradients; clip_grad_norm_ and
        step() call it."""
        if self._reduced:
            return
        for sh in self._shards:  # the same order on every rank
            if not sh.sent:
                self._send(sh)
            elif self.stage == 2 and sh.param.grad is not None:
                self._send(sh, ".late")  # pieces that came after the hook sent (reentrant checkpointing)
            if self.stage == 1:
                self._drain(_WINDOW_BYTES)
        self._drain()
        for sh in self._shards:
            sh.passes = 0
            sh.sent = False
        self._pass_key = None
        self._counted = set()
        self._reduced = True

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """Clips the gradients by their norm over all shards (FSDP's
        clip_grad_norm_); returns the total norm. Call after backward and
        before step()."""
        self.synchronize()
        grads = [sh.local.grad for sh in self._shards if sh.local.grad is not None]
        device = self._shards[0].local.device if self._shards else torch.device("cpu")
        return clip_sharded_grads(grads, max_norm, norm_type, "ZeroRedundancyOptimizer.%s.norm" % self._id,
                                  self.process_set, device)

    # -------------------------------------------------------------- step ----

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.synchronize()
        self._follow_storage()
        for group, inner in zip(self.param_groups, self._inner.param_groups):
            for k, v in group.items():
                if k != "params":
                    inner[k] = v  # LR schedulers change self.param_groups
        self._inner.step()
        for sh in self._shards:
            sh.local.grad = None
        self._gather_params()
        self._reduced = False
        self._steps += 1
        return loss

    def _follow_storage(self):
        """Re-makes the views of parameters whose storage was replaced since
        the last step (their state follows them)."""
        for sh in self._shards:
            k = sh.stop - sh.start
            p = sh.param
            if k == 0 or sh.local.data_ptr() == p.data_ptr() + sh.start * p.element_size():
                continue
            new = p.detach().view(-1)[sh.start:sh.stop]
            new.grad = sh.local.grad
            for group in self._inner.param_groups:
                group["params"] = [new if t is sh.local else t for t in group["params"]]
            if sh.local in self._inner.state:
                self._inner.state[new] = self._inner.state.pop(sh.local)
            sh.local = new

    def _gather_params(self):
        pending = []
        nbytes = 0
        for sh in self._shards:
            pending.append((sh, allgather_async(sh.padded_local(), name=sh.name + ".params",
                                                process_set=self.process_set)))
            nbytes += sh.chunk * self._n * sh.local.element_size()
            if nbytes >= _WINDOW_BYTES:
                self._write_back(pending)
                pending, nbytes = [], 0
        self._write_back(pending)

    @staticmethod
    def _write_back(pending):
        with torch.no_grad():
            for sh, handle in pending:
                full = synchronize(handle)
                sh.param.view(-1).copy_(full[:sh.numel])

    def zero_grad(self, set_to_none=True):
        if self._inflight:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                                 "cause a race condition.")
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    if set_to_none:
                        p.grad = None
                    else:
                        p.grad.detach_()
                        p.grad.zero_()
        for sh in self._shards:
            sh.local.grad = None
            sh.passes = 0
            sh.sent = False
        self._reduced = False

    # ------------------------------------------------------- checkpoints ----

    def _state_pieces(self, sh):
        """The wrapped optimizer's state of ``sh``: {key: (tensor, sharded?)}."""
        out = {}
        for k, v in self._inner.state.get(sh.local, {}).items():
            if isinstance(v, torch.Tensor) and v.dim() == 1 and v.numel() == sh.stop - sh.start:
                out[k] = (v, True)
            elif isinstance(v, torch.Tensor) and v.numel() > 1:
                raise ValueError("ZeroRedundancyOptimizer: state %r of parameter %s has shape %s, not the "
                                 "parameter's: %s is not elementwise and cannot be sharded"
                                 % (k, sh.where, list(v.shape), self.optimizer_class.__name__))
            else:
                out[k] = (v, False)
        return out

    def _param_index(self):
        """torch's state_dict numbering: every parameter of every group, in order."""
        index = {}
        for group in self.param_groups:
            for p in group["params"]:
                index.setdefault(p, len(index))
        return index

    def _groups_for_dict(self, index):
        groups = []
        for group in self.param_groups:
            d = {k: v for k, v in group.items() if k != "params"}
            d["params"] = [index[p] for p in group["params"]]
            groups.append(d)
        return groups

    def consolidate_state_dict(self, to=0):
        """Gathers the whole optimizer state on rank ``to`` (a collective: call
        on every rank of the set); state_dict() there then returns it in the
        wrapped optimizer's own format, loadable on any number of ranks."""
        if to not in (self.process_set.ranks or range(self._n)):
            raise ValueError("ZeroRedundancyOptimizer.consolidate_state_dict: rank %r is not in %s"
                             % (to, self.process_set))
        index = self._param_index()
        state = {}
        for sh in self._shards:
            entry = {}
            for k, (v, sharded) in sorted(self._state_pieces(sh).items()):
                if sharded:
                    pad = sh.chunk - v.numel()
                    v = torch.cat([v, v.new_zeros(pad)]) if pad else v.contiguous()
                    full = synchronize(allgather_async(v, name="%s.state.%s" % (sh.name, k),
                                                       process_set=self.process_set))
                    if rank() == to:
                        entry[k] = full[:sh.numel].reshape(sh.param.shape).clone()
                    del full
                elif rank() == to:
                    entry[k] = v.clone() if isinstance(v, torch.Tensor) else v
            if rank() == to and entry:
                state[index[sh.param]] = entry
        if rank() == to:
            self._consolidated = (to, self._steps, {"state": state, "param_groups": self._groups_for_dict(index)})
        else:
            self._consolidated = (to, self._steps, None)

    def state_dict(self):
        """The state consolidated on this rank by consolidate_state_dict(to=this rank)."""
        if self._consolidated is None:
            raise RuntimeError("ZeroRedundancyOptimizer.state_dict() on rank %d: the state has not been "
                               "consolidated; call consolidate_state_dict(to=%d) on every rank first"
                               % (rank(), rank()))
        to, steps, sd = self._consolidated
        if sd is None:
            raise RuntimeError("ZeroRedundancyOptimizer.state_dict() on rank %d: the state was consolidated on "
                               "rank %d (consolidate_state_dict(to=%d)); call it on that rank, or consolidate "
                               "with to=%d" % (rank(), to, to, rank()))
        if steps != self._steps:
            raise RuntimeError("ZeroRedundancyOptimizer.state_dict() on rank %d: the consolidated state is %d "
                               "step(s) old; call consolidate_state_dict(to=%d) again"
                               % (rank(), self._steps - steps, to))
        return sd

    def load_state_dict(self, state_dict):
        """Loads a consolidated state dict (or the state_dict() of the wrapped
        optimizer class over the same parameters), on any number of ranks:
        each rank keeps its shard. Not a collective."""
        what = "ZeroRedundancyOptimizer.load_state_dict"
        groups = state_dict.get("param_groups")
        if not isinstance(groups, list) or "state" not in state_dict:
            raise ValueError("%s: not an optimizer state dict (it needs 'state' and 'param_groups')" % what)
        if len(groups) != len(self.param_groups):
            raise ValueError("%s: the state dict has %d param group(s), this optimizer %d (a state dict of another "
                             "model?)" % (what, len(groups), len(self.param_groups)))
        by_index = {}
        for g, (mine, theirs) in enumerate(zip(self.param_groups, groups)):
            if len(theirs["params"]) != len(mine["params"]):
                raise ValueError("%s: param_groups[%d] holds %d parameter(s) in the state dict, %d here (a state "
                                 "dict of another model?)" % (what, g, len(theirs["params"]), len(mine["params"])))
            for j, (p, i) in enumerate(zip(mine["params"], theirs["params"])):
                by_index[i] = (p, "param_groups[%d]['params'][%d]" % (g, j))
        new_state = {}
        for i, entry in state_dict["state"].items():
            if i not in by_index:
                raise ValueError("%s: the state dict has state for parameter %r, which no param group holds"
                                 % (what, i))
            p, where = by_index[i]
            sh = self._by_param.get(p)
            if sh is None:
                continue  # not sharded here (does not require grad): has no state
            local = {}
            for k, v in entry.items():
                # Shaped like the parameter: sharded (for a 0-dim parameter, all
                # its state but torch's 0-dim step counter).
                if isinstance(v, torch.Tensor) and (v.numel() > 1 or v.dim() > 0 or (p.dim() == 0 and k != "step")):
                    if tuple(v.shape) != tuple(p.shape):
                        raise ValueError("%s: state %r of parameter %s has shape %s in the state dict, the "
                                         "parameter %s (a state dict of another model?)"
                                         % (what, k, where, list(v.shape), list(p.shape)))
                    local[k] = v.reshape(-1)[sh.start:sh.stop].to(sh.local.device).clone()
                else:
                    local[k] = v.clone() if isinstance(v, torch.Tensor) else v
            new_state[sh.local] = local
        self._inner.state.clear()
        for t, st in new_state.items():
            self._inner.state[t] = st
        for mine, theirs, inner in zip(self.param_groups, groups, self._inner.param_groups):
            for k, v in theirs.items():
                if k != "params":
                    mine[k] = v
                    inner[k] = v
        self._consolidated = None

    def sharded_state_dict(self):
        """This rank's piece of the state, with what loading it on another
        number of ranks needs (load_sharded_state_dict). Not a collective."""
        index = self._param_index()
        state = {}
        for sh in self._shards:
            entry = {}
            for k, (v, sharded) in self._state_pieces(sh).items():
                if sharded:
                    entry[k] = v.clone()
                else:
                    entry[k] = v.clone() if isinstance(v, torch.Tensor) else v
            state[index[sh.param]] = {"start": sh.start, "stop": sh.stop, "shape": list(sh.param.shape),
                                      "sharded": sorted(k for k, (_, s) in self._state_pieces(sh).items() if s),
                                      "state": entry}
        return {"rank": self._r, "world": self._n, "state": state, "param_groups": self._groups_for_dict(index)}

    def load_sharded_state_dict(self, pieces):
        """Loads from the sharded_state_dict() of every rank of the saving job
        (a list, or a function rank -> piece that is called only for the ranks
        whose pieces overlap this rank's shards), saved on any number of ranks."""
        get = pieces if callable(pieces) else (lambda r, _p=list(pieces): _p[r])
        cache = {0: get(0)}
        world = cache[0]["world"]
        full = {"param_groups": cache[0]["param_groups"], "state": {}}
        # Only this rank's range of each sharded state tensor is filled (the
        # rest stays zero): load_state_dict keeps no more than that range.
        for p, i in self._param_index().items():
            sh = self._by_param.get(p)
            if sh is None or i not in cache[0]["state"]:
                continue
            meta = cache[0]["state"][i]
            if list(meta["shape"]) != list(p.shape):
                raise ValueError("ZeroRedundancyOptimizer.load_sharded_state_dict: parameter %s has shape %s in "
                                 "the checkpoint, %s here" % (sh.where, meta["shape"], list(p.shape)))
            entry = {k: (torch.zeros(sh.numel, dtype=v.dtype, device=sh.local.device) if k in meta["sharded"] else v)
                     for k, v in meta["state"].items()}
            chunk = -(-sh.numel // world)  # the saving job's ranges follow from its world size
            for r in range(world):
                lo, hi = min(r * chunk, sh.numel), min(r * chunk + chunk, sh.numel)
                if hi <= sh.start or lo >= sh.stop:
                    continue
                if r not in cache:
                    cache[r] = get(r)
                piece = cache[r]["state"][i]
                for k in meta["sharded"]:
                    entry[k][lo:hi].copy_(piece["state"][k])
            for k in meta["sharded"]:
                entry[k] = entry[k].reshape(p.shape)
            full["state"][i] = entry
        self.load_state_dict(full)


def save_sharded(optimizer, path):
    """Writes ``optimizer``'s sharded state to directory ``path``: one file per
    rank (rank<r>.pt) and index.json (a collective only through the file
    system: every rank writes its own)."""
    os.makedirs(path, exist_ok=True)
    piece = optimizer.sharded_state_dict()
    torch.save(piece, os.path.join(path, "rank%d.pt" % piece["rank"]))
    if piece["rank"] == 0:
        with open(os.path.join(path, "index.json"), "w") as f:
            json.dump({"world": piece["world"], "files": ["rank%d.pt" % r for r in range(piece["world"])]}, f)


def load_sharded(optimizer, path):
    """Loads what save_sharded wrote, on any number of ranks: each rank reads
    only the files that overlap its shards."""
    with open(os.path.join(path, "index.json")) as f:
        index = json.load(f)
    files = index["files"]

    def get(r):
        return torch.load(os.path.join(path, files[r]), map_location="cpu", weights_only=False)
    optimizer.load_sharded_state_dict(get)
