"""Horovod's PyTorch API on horovodlite: ``import horovodlite.torch as hvd``.

The names, signatures, defaults and semantics follow ``horovod.torch`` 0.28.
"""

from horovodlite.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from horovodlite.common.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set  # noqa: F401
from horovodlite.torch import elastic, fsdp, zero  # noqa: F401,E402
from horovodlite.torch.basics import (  # noqa: F401
                                             Adasum,
                                             Average,
                                             Max,
                                             Min,
                                             Product,
                                             Sum,
                                             ccl_built,
                                             cross_rank,
                                             cross_size,
                                             cuda_built,
                                             ddl_built,
                                             gloo_built,
                                             gloo_enabled,
                                             init,
                                             is_homogeneous,
                                             is_initialized,
                                             local_rank,
                                             local_size,
                                             mpi_built,
                                             mpi_enabled,
                                             mpi_threads_supported,
                                             nccl_built,
                                             rank,
                                             rocm_built,
                                             shutdown,
                                             size,
                                             start_timeline,
                                             stop_timeline,
)
from horovodlite.torch.compression import Compression  # noqa: F401
from horovodlite.torch.fsdp import fully_shard  # noqa: F401
from horovodlite.torch.functions import (  # noqa: F401
                                             allgather_object,
                                             broadcast_object,
                                             broadcast_optimizer_state,
                                             broadcast_parameters,
)
from horovodlite.torch.mpi_ops import (  # noqa: F401
                                             allgather,
                                             allgather_async,
                                             allreduce,
                                             allreduce_,
                                             allreduce_async,
                                             allreduce_async_,
                                             alltoall,
                                             alltoall_async,
                                             barrier,
                                             broadcast,
                                             broadcast_,
                                             broadcast_async,
                                             broadcast_async_,
                                             grouped_allgather,
                                             grouped_allgather_async,
                                             grouped_allreduce,
                                             grouped_allreduce_,
                                             grouped_allreduce_async,
                                             grouped_allreduce_async_,
                                             grouped_reducescatter,
                                             grouped_reducescatter_async,
                                             join,
                                             poll,
                                             reducescatter,
                                             reducescatter_async,
                                             sparse_allreduce_async,
                                             synchronize,
)
from horovodlite.torch.optimizer import DistributedOptimizer  # noqa: F401
from horovodlite.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
from horovodlite.torch.zero import ZeroRedundancyOptimizer  # noqa: F401
