"""Lifecycle, topology and build information (``horovod.common.basics``)."""

import atexit
import os
import warnings

import torch  # noqa: F401  (loads libtorch before the extension module)

from horovodlite.common import launchers as _launchers
from horovodlite.common import process_sets as _process_sets
from horovodlite.common.process_sets import ProcessSet, _init_process_sets, _resolve_comm_ranks
from horovodlite.torch import _C

# The framework-neutral process sets ask the core through this binding.
_process_sets.set_backend(_C)

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
    background thread. A second call while initialized is a no-op. As in
    Horovod, the runtime is shut down at interpreter exit if the program has
    not called shutdown().

    Arguments:
        comm: None or [] for MPI_COMM_WORLD; a list of MPI_COMM_WORLD ranks (the
            ranks in the list call init() with the same list; they get ranks
            0 .. len - 1 in list order); or an mpi4py communicator, which is
            duplicated. Lists and communicators need mpi4py.
        process_sets: process sets to register on every rank (a list of
            hvd.ProcessSet, from ranks or mpi4py communicators; every rank passes
            the same list), or "dynamic" to allow add_process_set() /
            remove_process_set() (as HOROVOD_DYNAMIC_PROCESS_SETS=1).
    """
    if isinstance(process_sets, str):
        if process_sets != "dynamic":
            raise ValueError("horovodlite.init(): process_sets must be a list of ProcessSet or 'dynamic'")
        os.environ["HOROVODLITE_DYNAMIC_PROCESS_SETS"] = "1"
        process_sets = None
    sets = list(process_sets or [])
    for ps in sets:
        if not isinstance(ps, ProcessSet):
            raise TypeError("horovodlite.init(): process_sets must hold hvd.ProcessSet objects, got %s"
                            % type(ps).__name__)
    if _C.is_initialized():
        _register_shutdown_at_exit()
        return
    if comm is None or (isinstance(comm, (list, tuple)) and len(comm) == 0):
        launch = _launchers.prepare()
        try:
            if any(ps.ranks is None for ps in sets):
                if launch.kind in _launchers.JOINED:
                    raise ValueError("horovodlite.init(): process sets from mpi4py communicators need an MPI job; "
                                     "this one was started by %s: give the sets' ranks" % launch.kind)
                _resolve_comm_ranks(sets, _mpi4py("None").COMM_WORLD)
            _C.init_with(0, [ps.ranks for ps in sets])
        except BaseException:
            _launchers.leave()
            raise
    else:
        _init_comm(comm, sets)
    _init_process_sets(sets)
    _register_shutdown_at_exit()


def _mpi4py(what):
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError("horovodlite.init(comm=%s) needs mpi4py (e.g. Debian's python3-mpi4py): %s"
                          % (what, e)) from e
    return MPI


def _init_comm(comm, sets):
    if isinstance(comm, (list, tuple)):
        if any(isinstance(r, bool) or not isinstance(r, int) for r in comm):
            raise TypeError("horovodlite.init(comm=%r): the list must hold MPI_COMM_WORLD ranks (ints)" % (comm,))
        MPI = _mpi4py("[ranks]")
        world = MPI.COMM_WORLD
        n, me = world.Get_size(), world.Get_rank()
        bad = [r for r in comm if not 0 <= r < n]
        if bad or len(set(comm)) != len(comm):
            raise ValueError("horovodlite.init(comm=%r): ranks must be distinct and in [0, %d)%s"
                             % (list(comm), n, " (out of range: %s)" % bad if bad else ""))
        if me not in comm:
            raise ValueError("horovodlite.init(comm=%r): rank %d of MPI_COMM_WORLD is not in the list; only the "
                             "listed ranks may call init() with it" % (list(comm), me))
        world_group = world.Get_group()
        group = world_group.Incl(list(comm))
        sub = world.Create_group(group)  # collective over the listed ranks only
        group.Free()
        world_group.Free()
        try:
            if any(ps.ranks is None for ps in sets):
                _resolve_comm_ranks(sets, sub)
            _C.init_with(MPI._addressof(sub), [ps.ranks for ps in sets])
        finally:
            sub.Free()  # the core works on its own duplicate
        return
    MPI = _mpi4py(type(comm).__name__)
    if not isinstance(comm, MPI.Comm):
        raise TypeError("horovodlite.init(): comm must be None, a list of ranks or an mpi4py communicator, got %s"
                        % type(comm).__name__)
    if comm == MPI.COMM_NULL:
        raise ValueError("horovodlite.init(): comm is MPI.COMM_NULL (this rank is not in the communicator)")
    if comm.Is_inter():
        raise ValueError("horovodlite.init(): comm must be an intra-communicator")
    if any(ps.ranks is None for ps in sets):
        _resolve_comm_ranks(sets, comm)
    _C.init_with(MPI._addressof(comm), [ps.ranks for ps in sets])


_shutdown_registered = False


def _shutdown_at_exit():
    # Horovod's atexit shutdown: a plain script need not call shutdown(). Quiet:
    # a failure here (e.g. a peer already failed) was reported where it happened.
    try:
        if _C.is_initialized():
            _C.shutdown()
    except Exception:  # noqa: BLE001  (nothing useful can be done at exit)
        pass


def _register_shutdown_at_exit():
    global _shutdown_registered
    if not _shutdown_registered:
        _shutdown_registered = True
        atexit.register(_shutdown_at_exit)


def shutdown():
    """Stops horovodlite on every rank (collective). Operations still in flight
    fail with HorovodInternalError. init() may be called again afterwards."""
    try:
        _C.shutdown()
    finally:
        _launchers.leave()


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
    """True when this job runs on MPI (started by mpirun), False on Gloo
    (horovodlite-run --gloo, elastic, Spark or Ray jobs). Before init(): what
    init() would choose from the environment."""
    return bool(_C.mpi_enabled())


def mpi_built():
    """True when the library was built with the MPI backend (HVL_WITH_MPI); a
    build without it runs Gloo jobs only (horovodlite-run --gloo, elastic,
    Spark, Ray)."""
    return bool(_C.mpi_built())


def gloo_enabled():
    """True when this job runs on the Gloo transport (see mpi_enabled())."""
    return bool(_C.gloo_enabled())


def gloo_built():
    """True when the library was built with the Gloo TCP transport (libgloo-dev)."""
    return bool(_C.gloo_built())


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
        warnings.warn("horovodlite was built without timeline support: start_timeline() is a no-op", stacklevel=2)
    try:
        _C.start_timeline(file_path, bool(mark_cycles))
    except RuntimeError as e:  # e.g. a timeline to another file is already running
        raise ValueError(str(e)) from e


def stop_timeline():
    """Stops the timeline started by start_timeline() (no-op if none is running)."""
    _checked(lambda: None)
    _C.stop_timeline()
