"""Horovod's PyTorch API on horovodlite: ``import horovodlite.torch as hvd``.

The names, signatures, defaults and semantics follow ``horovod.torch`` 0.28.
"""

from horovodlite.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from horovodlite.common.process_sets import (ProcessSet, global_process_set, add_process_set,  # noqa: F401
                                             remove_process_set)
from horovodlite.torch.basics import (init, shutdown, is_initialized, size, rank, local_size,  # noqa: F401
                                      local_rank, cross_size, cross_rank, is_homogeneous,
                                      mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled, gloo_built,
                                      nccl_built, ddl_built, ccl_built, cuda_built, rocm_built,
                                      start_timeline, stop_timeline,
                                      Average, Sum, Adasum, Min, Max, Product)
from horovodlite.torch.compression import Compression  # noqa: F401
from horovodlite.torch.mpi_ops import (allreduce, allreduce_, allreduce_async, allreduce_async_,  # noqa: F401
                                       grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                                       grouped_allreduce_async_, sparse_allreduce_async,
                                       allgather, allgather_async, grouped_allgather, grouped_allgather_async,
                                       broadcast, broadcast_, broadcast_async, broadcast_async_,
                                       alltoall, alltoall_async,
                                       reducescatter, reducescatter_async, grouped_reducescatter,
                                       grouped_reducescatter_async,
                                       poll, synchronize, join, barrier)
from horovodlite.torch.functions import (broadcast_parameters, broadcast_optimizer_state,  # noqa: F401
                                         broadcast_object, allgather_object)
from horovodlite.torch.optimizer import DistributedOptimizer  # noqa: F401
from horovodlite.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
