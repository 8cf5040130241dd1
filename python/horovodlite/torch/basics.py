"""Lifecycle, topology and build information (``horovod.common.basics``)."""

import warnings

import torch  # noqa: F401  (loads libtorch before the extension module)

from horovodlite.torch import _C

Average = _C.AVERAGE
Sum = _C.SUM
Adasum = _C.ADASUM
Min = _C.MIN
Max = _C.MAX
Product = _C.PRODUCT

_OPS = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}
_NOT_INITIALIZED = "Horovod has not been initialized; use hvd.init()."


def init(comm=None, process_sets=None):
    """Initializes horovodlite: MPI (unless the program already did), the
    configuration (HOROVODLITE_* / HOROVOD_* environment variables) and the
    background thread. A second call while initialized is a no-op.

    Arguments:
        comm: must be None (MPI_COMM_WORLD); other communicators are not supported.
        process_sets: must be None; only the global process set is supported.
    """
    if comm is not None and comm != []:
        raise NotImplementedError("horovodlite.init(): only comm=None (MPI_COMM_WORLD) is supported")
    if process_sets not in (None, [], "dynamic"):
        raise NotImplementedError("horovodlite.init(): only the global process set is supported")
    _C.init()


def shutdown():
    """Stops horovodlite on every rank (collective). Operations still in flight
    fail with HorovodInternalError. init() may be called again afterwards."""
    _C.shutdown()


def is_initialized():
    """True between init() and shutdown()."""
    return bool(_C.is_initialized())


def _checked(fn):
    if not _C.is_initialized():
        raise ValueError(_NOT_INITIALIZED)
    return fn()


def size():
    """The number of processes."""
    return _checked(_C.size)


def rank():
    """This process's rank, 0 .. size() - 1."""
    return _checked(_C.rank)


def local_size():
    """The number of processes on this host."""
    return _checked(_C.local_size)


def local_rank():
    """This process's rank among the processes on this host."""
    return _checked(_C.local_rank)


def cross_size():
    """The number of hosts that have a process with this local_rank."""
    return _checked(_C.cross_size)


def cross_rank():
    """This host's index among the hosts (for processes with this local_rank)."""
    return _checked(_C.cross_rank)


def is_homogeneous():
    """True if every host runs the same number of processes."""
    return _checked(lambda: _C.size() == _C.local_size() * _C.cross_size())


def mpi_threads_supported():
    """True if MPI provided MPI_THREAD_MULTIPLE."""
    return _checked(lambda: bool(_C.mpi_threads_supported()))


def mpi_enabled():
    """horovodlite always runs on MPI."""
    return True


def mpi_built():
    return True


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    """The NCCL version horovodlite was built with as an int (e.g. 21805), 0 without NCCL."""
    return int(_C.nccl_version())


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return bool(_C.cuda_built)


def rocm_built():
    return False


_timeline_warned = False


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-tracing timeline to ``file_path`` (rank 0 writes it).

    Raises ValueError if a timeline to another file is running. In builds whose
    core lacks timeline support this is a documented no-op that warns once."""
    global _timeline_warned
    if not isinstance(file_path, str) or not file_path:
        raise ValueError("start_timeline: file_path must be a non-empty string")
    _checked(lambda: None)
    if not _C.timeline_built and not _timeline_warned:
        _timeline_warned = True
        warnings.warn("horovodlite was built without timeline support: start_timeline() is a no-op")
    try:
        _C.start_timeline(file_path, bool(mark_cycles))
    except RuntimeError as e:  # e.g. a timeline to another file is already running
        raise ValueError(str(e))


def stop_timeline():
    """Stops the timeline started by start_timeline() (no-op if none is running)."""
    _checked(lambda: None)
    _C.stop_timeline()
