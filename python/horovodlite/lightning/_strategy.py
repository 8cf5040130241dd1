"""What HorovodStrategy and HorovodEnvironment do, for either Lightning package.

The classes here are mixins without a Lightning base: pytorch.py puts them in
front of ``lightning.pytorch``'s ParallelStrategy and ``lightning.fabric``'s
ClusterEnvironment, pytorch_lightning.py in front of ``pytorch_lightning``'s
and ``lightning_fabric``'s. Nothing here imports Lightning.

The world is horovodlite's: each process is one rank, started by its launcher
(mpirun, horovodlite-run, torchrun, ...); Lightning launches nothing. hvd.init()
runs the first time Lightning asks for a rank (while the Trainer is made), and
horovodlite stays initialized after fit (see teardown()).

Gradients: each optimizer is wrapped in hvd.DistributedOptimizer with
backward_passes_per_step = trainer.accumulate_grad_batches, and Lightning does
the accumulation itself (handles_gradient_accumulation stays False): on the
batches that only accumulate it runs the closure (forward, backward) outside
any step, and the hooks count those passes without allreducing; on the batch
that steps, Lightning calls optimizer.step(closure). A DistributedOptimizer's
step() would synchronize before running the closure, i.e. before this batch's
backward, so optimizer_step() steps under skip_synchronize() and synchronizes
at the end of the closure instead: after the last backward, before the
precision plugin's unscaling, gradient clipping and on_before_optimizer_step.
A window cut short by the end of the epoch is synchronized the same way
(synchronize() sends what the delayed hooks held back).
"""

import functools
import logging
import os
import weakref

import torch

import horovodlite.torch as hvd

log = logging.getLogger(__name__)


def check_version(package, version):
    """Refuses Lightning 1.x (whose strategies differ; it has its own HorovodStrategy)."""
    try:
        major = int(version.split(".")[0])
    except ValueError:
        return
    if major < 2:
        raise ImportError("horovodlite.lightning supports %s 2.x, found %s" % (package, version))


def ensure_initialized():
    """hvd.init() unless horovodlite is initialized already."""
    if not hvd.is_initialized():
        hvd.init()


def _rank_zero_only():
    # Lightning's rank_zero_only (both packages re-export this one object): the
    # rank its loggers and rank_zero_* messages consult.
    from lightning_utilities.core.rank_zero import rank_zero_only
    return rank_zero_only


def _world_group(group, what):
    """Only the global world: ``group`` None or torch.distributed's WORLD."""
    if group is None:
        return
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and group is dist.group.WORLD:
        return
    raise ValueError("HorovodStrategy.%s: only the whole world (group=None) is supported, got group=%r"
                     % (what, group))


def _reduce_op(reduce_op):
    """horovodlite's op for Lightning's reduce_op ("mean"/"avg", "sum", "max",
    "min", "product", any case, or a torch.distributed.ReduceOp)."""
    if reduce_op is None:
        return hvd.Average
    if isinstance(reduce_op, str):
        ops = {"mean": hvd.Average, "avg": hvd.Average, "sum": hvd.Sum, "max": hvd.Max, "min": hvd.Min,
               "product": hvd.Product}
        op = ops.get(reduce_op.lower())
    else:
        red = torch.distributed.ReduceOp
        pairs = [(red.SUM, hvd.Sum), (red.MAX, hvd.Max), (red.MIN, hvd.Min), (red.PRODUCT, hvd.Product)]
        if hasattr(red, "AVG"):
            pairs.append((red.AVG, hvd.Average))
        op = next((mine for theirs, mine in pairs if reduce_op == theirs), None)
    if op is None:
        raise ValueError("HorovodStrategy.reduce: unsupported reduce_op %r (mean, avg, sum, max, min or product)"
                         % (reduce_op,))
    return op


class _AllgatherSummingGrads(torch.autograd.Function):
    """Stacks every rank's tensor (same shape everywhere) into (world, ...). The
    gradient is that of torch.distributed.nn's all_gather, which Lightning's
    DDP uses: the sum over ranks of the incoming gradients' row of this rank."""

    @staticmethod
    def forward(ctx, tensor):
        return hvd.allgather(tensor.unsqueeze(0))

    @staticmethod
    def backward(ctx, grad_output):
        summed = hvd.allreduce(grad_output.contiguous(), op=hvd.Sum)
        return summed[hvd.rank()]


def _named_parameters(module, optimizer):
    """(name, parameter) for each of the optimizer's parameters: the module's
    names, "unnamed.<group>.<index>" for parameters the module does not hold."""
    names = {p: name for name, p in module.named_parameters()}
    return [(names.get(p, "unnamed.%d.%d" % (g, i)), p)
            for g, group in enumerate(optimizer.param_groups) for i, p in enumerate(group["params"])]


def _mark_steps_for_schedulers(optimizer):
    """torch's LR schedulers mark their optimizer's step() so that
    lr_scheduler.step() can warn when it runs before any optimizer.step()
    (torch.optim.lr_scheduler: the attributes _wrapped_by_lr_sched and
    _opt_called). A scheduler moved onto the wrapped optimizer needs the same
    mark on it."""
    if getattr(optimizer.step, "_wrapped_by_lr_sched", False):
        return
    ref = weakref.ref(optimizer)
    step = optimizer.step.__func__

    @functools.wraps(step)
    def marked(*args, **kwargs):
        opt = ref()
        opt._opt_called = True
        return step(opt, *args, **kwargs)

    marked._wrapped_by_lr_sched = True
    optimizer.step = marked


def _bind_to_optimizer(lightning_optimizer):
    """Lightning's LightningOptimizer subclasses its optimizer's class, so a
    DistributedOptimizer's methods called on it (opt.zero_grad() in manual
    optimization) would run with the LightningOptimizer as self, and what they
    set (the pending handles, the pass counts) would land on the wrapper. Its
    instance gets them bound to the DistributedOptimizer."""
    optimizer = lightning_optimizer.optimizer
    own = vars(type(lightning_optimizer).__bases__[0])  # LightningOptimizer's members
    for name, member in vars(type(optimizer)).items():
        if callable(member) and not name.startswith("__") and name not in own:
            setattr(lightning_optimizer, name, getattr(optimizer, name))


def _is_distributed_optimizer(optimizer):
    return callable(getattr(optimizer, "synchronize", None)) and callable(getattr(optimizer, "skip_synchronize", None))


class HorovodEnvironmentBase:
    """ClusterEnvironment of the horovodlite world (ranks from hvd)."""

    @property
    def creates_processes_externally(self):
        return True  # the launcher started every rank

    @property
    def main_address(self):
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self):
        return int(os.environ.get("MASTER_PORT", "29500"))

    @staticmethod
    def detect():
        return hvd.is_initialized()

    def world_size(self):
        ensure_initialized()
        return hvd.size()

    def set_world_size(self, size):
        log.debug("HorovodEnvironment.set_world_size(%s) ignored: the launcher sets the world", size)

    def global_rank(self):
        ensure_initialized()
        return hvd.rank()

    def set_global_rank(self, rank):
        log.debug("HorovodEnvironment.set_global_rank(%s) ignored: the launcher sets the world", rank)

    def local_rank(self):
        ensure_initialized()
        return hvd.local_rank()

    def node_rank(self):
        ensure_initialized()
        return hvd.cross_rank()


class HorovodStrategyBase:
    """Lightning's Strategy on horovodlite (pytorch.py and pytorch_lightning.py
    give it its Lightning base; docs/lightning.md)."""

    strategy_name = "horovodlite"

    def __init__(self, accelerator=None, checkpoint_io=None, precision_plugin=None):
        super().__init__(accelerator=accelerator, parallel_devices=None,
                         cluster_environment=self._environment_class(), checkpoint_io=checkpoint_io,
                         precision_plugin=precision_plugin)
        self._wrapped = []  # the DistributedOptimizers this strategy made

    # ---------------------------------------------------------------- world

    @property
    def global_rank(self):
        ensure_initialized()
        return hvd.rank()

    @property
    def local_rank(self):
        ensure_initialized()
        return hvd.local_rank()

    @property
    def node_rank(self):
        ensure_initialized()
        return hvd.cross_rank()

    @property
    def world_size(self):
        ensure_initialized()
        return hvd.size()

    @property
    def num_nodes(self):
        ensure_initialized()
        return hvd.cross_size()

    @num_nodes.setter
    def num_nodes(self, num_nodes):
        # Trainer(num_nodes=...) is the launcher's business here.
        pass

    @property
    def is_distributed(self):
        return True

    @property
    def root_device(self):
        devices = self.parallel_devices
        if devices and devices[0].type == "cuda":
            # One GPU per rank by local rank; a process that sees one GPU
            # (CUDA_VISIBLE_DEVICES set per rank) uses it.
            return torch.device("cuda", self.local_rank if torch.cuda.device_count() > 1 else 0)
        return torch.device("cpu") if not devices else devices[0]

    @property
    def distributed_sampler_kwargs(self):
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    def set_world_ranks(self):
        # Called while the Trainer is made: from here on Lightning's rank-zero
        # helpers (loggers, messages) know the rank.
        ensure_initialized()
        _rank_zero_only().rank = hvd.rank()

    def setup_environment(self):
        if self._layer_sync is not None:
            raise ValueError("HorovodStrategy does not support Trainer(sync_batchnorm=True) (torch's SyncBatchNorm "
                             "needs torch.distributed): use horovodlite.torch.SyncBatchNorm in the module instead")
        self.set_world_ranks()
        super().setup_environment()

    def model_to_device(self):
        if self.root_device.type == "cuda":
            torch.cuda.set_device(self.root_device)
        self.model.to(self.root_device)

    # ---------------------------------------------------------------- setup

    def setup(self, trainer):
        super().setup(trainer)
        # Every rank starts from rank 0's weights (also to validate or test).
        hvd.broadcast_parameters(self.lightning_module.state_dict(), root_rank=0)
        if trainer.state.fn != "fit":
            return
        self.optimizers = [self._distribute(opt, trainer.accumulate_grad_batches) for opt in self.optimizers]

    @property
    def optimizers(self):
        return super().optimizers

    @optimizers.setter
    def optimizers(self, optimizers):
        # Lightning's setter makes the LightningOptimizers (also when the LR
        # finder sets them again); those of DistributedOptimizers get bound.
        super(HorovodStrategyBase, type(self)).optimizers.fset(self, optimizers)
        for lightning_optimizer in self._lightning_optimizers:
            if _is_distributed_optimizer(lightning_optimizer.optimizer):
                _bind_to_optimizer(lightning_optimizer)

    def _distribute(self, optimizer, passes):
        """``optimizer`` as an hvd.DistributedOptimizer with rank 0's state;
        the LR schedulers that drive it drive the wrapped one."""
        if isinstance(optimizer, hvd.ZeroRedundancyOptimizer):
            raise ValueError("HorovodStrategy does not support hvd.ZeroRedundancyOptimizer: return the torch "
                             "optimizer from configure_optimizers (the strategy wraps it in DistributedOptimizer)")
        if _is_distributed_optimizer(optimizer):
            # configure_optimizers made it (e.g. with its own
            # backward_passes_per_step for manual optimization): used as it is.
            hvd.broadcast_optimizer_state(optimizer, root_rank=0)
            return optimizer
        wrapped = hvd.DistributedOptimizer(optimizer, named_parameters=_named_parameters(self.lightning_module,
                                                                                          optimizer),
                                           backward_passes_per_step=passes)
        if optimizer.state:
            wrapped.load_state_dict(optimizer.state_dict())
        hvd.broadcast_optimizer_state(wrapped, root_rank=0)
        # The wrapper shares the param groups (so a scheduler's lr changes reach
        # it either way); the scheduler is moved so that it sees its steps.
        for config in self.lr_scheduler_configs:
            if getattr(config.scheduler, "optimizer", None) is optimizer:
                config.scheduler.optimizer = wrapped
                _mark_steps_for_schedulers(wrapped)
        self._wrapped.append(wrapped)
        return wrapped

    def on_train_batch_start(self, batch, batch_idx):
        # accumulate_grad_batches may change at an epoch's start
        # (GradientAccumulationScheduler); a window starts there.
        super().on_train_batch_start(batch, batch_idx)
        if batch_idx != 0:
            return
        passes = self.lightning_module.trainer.accumulate_grad_batches
        for opt in self._wrapped:
            if opt.backward_passes_per_step != passes:
                opt.set_backward_passes_per_step(passes)

    # ---------------------------------------------------------------- steps

    def optimizer_step(self, optimizer, closure, model=None, **kwargs):
        if not _is_distributed_optimizer(optimizer):
            return super().optimizer_step(optimizer, closure, model, **kwargs)

        def closure_then_synchronize():
            result = closure()
            optimizer.synchronize()
            return result

        with optimizer.skip_synchronize():
            return super().optimizer_step(optimizer, closure_then_synchronize, model, **kwargs)

    # ---------------------------------------------------------- collectives

    def reduce(self, tensor, group=None, reduce_op="mean"):
        """Allreduce over every rank ("mean" by default); anything but a tensor
        comes back as it is. An integer mean comes back as a float tensor."""
        if not isinstance(tensor, torch.Tensor):
            return tensor
        _world_group(group, "reduce")
        op = _reduce_op(reduce_op)
        if op == hvd.Average and not (torch.is_floating_point(tensor) or torch.is_complex(tensor)):
            return hvd.allreduce(tensor, op=hvd.Sum) / hvd.size()
        return hvd.allreduce(tensor, op=op)

    def all_gather(self, tensor, group=None, sync_grads=False):
        """Every rank's tensor (the same shape on every rank), stacked: (world, *shape)."""
        _world_group(group, "all_gather")
        tensor = tensor.contiguous()
        if sync_grads:
            return _AllgatherSummingGrads.apply(tensor)
        with torch.no_grad():
            return hvd.allgather(tensor.unsqueeze(0))

    def broadcast(self, obj, src=0):
        return hvd.broadcast_object(obj, root_rank=src)

    def barrier(self, name=None):
        hvd.barrier()

    # ------------------------------------------------------------- teardown

    def teardown(self):
        """Takes the gradient hooks of the DistributedOptimizers it made off the
        parameters (a later fit of the same module wraps its new optimizers
        afresh). horovodlite stays initialized (a Trainer may fit, validate or
        test again, the script may use hvd after fit); it shuts down at exit, or
        at hvd.shutdown()."""
        for opt in self._wrapped:
            # DistributedOptimizer keeps its hooks' handles in _grad_hooks.
            for hook in getattr(opt, "_grad_hooks", ()):
                hook.remove()
        self._wrapped = []
        super().teardown()
