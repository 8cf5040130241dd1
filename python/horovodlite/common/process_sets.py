"""Process sets, as Horovod 0.28's ``horovod.common.process_sets``.

A process set is a subset of the ranks that runs collectives among itself, with
its own communicator and negotiation; ops on different sets may be in flight at
once. Register sets on every rank with ``hvd.init(process_sets=[...])`` or, with
``HOROVOD_DYNAMIC_PROCESS_SETS=1`` (or ``HOROVODLITE_DYNAMIC_PROCESS_SETS=1``),
``hvd.add_process_set()`` / ``hvd.remove_process_set()`` (collective over every
rank). Pass ``process_set=`` to a collective; a broadcast's ``root_rank`` stays a
global rank, as in Horovod.

This module is framework-neutral: it imports no framework. The framework
binding (``horovodlite.torch`` installs its extension module ``_C`` when it is
imported) is handed in with ``set_backend()``; it provides ``rank()``,
``size()``, ``process_set_ids()``, ``process_set_ranks(id)``,
``process_set_rank(id)``, ``process_set_size(id)``, ``add_process_set(ranks)``
-> (code, message, id) and ``remove_process_set(id)`` -> (code, message).
"""

from horovodlite.common.exceptions import HorovodInternalError

_backend = None


def set_backend(backend):
    """Installs the framework binding that answers for the core (see above)."""
    global _backend
    _backend = backend


def _C():
    if _backend is None:
        raise RuntimeError("horovodlite: no framework binding is loaded (import horovodlite.torch first)")
    return _backend


class ProcessSet:
    """A set of ranks that run collective operations together.

    Initialize it with a list of ranks or an mpi4py communicator, then pass it to
    ``hvd.init(process_sets=[...])`` or ``hvd.add_process_set()``; once
    registered, ``process_set_id`` is set."""

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            ranks = None
        if ranks is not None:
            if any(isinstance(r, bool) or not isinstance(r, int) for r in ranks):
                raise ValueError("ProcessSet should be initialized with a list of process ranks or an mpi4py Comm "
                                 "object")
            self.ranks = ranks
            return
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise ValueError("ProcessSet should be initialized with a list of process ranks or an mpi4py Comm "
                             "object (mpi4py is not importable: %s)" % e) from e
        if not isinstance(ranks_or_comm, MPI.Comm):
            raise ValueError("ProcessSet should be initialized with a list of process ranks or an mpi4py Comm object")
        self.mpi_comm = ranks_or_comm

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """The number of ranks in the set, or None if it is not registered."""
        if self.process_set_id is None:
            return None
        n = _C().process_set_size(self.process_set_id)
        return None if n < 0 else n

    def rank(self):
        """This process's rank within the set (useful to read an allgather's
        result), -1 if it is not a member, None if the set is not registered.
        Collectives still take global ranks (broadcast's root_rank)."""
        if self.process_set_id is None:
            return None
        return _C().process_set_rank(self.process_set_id)

    def included(self):
        """Whether this process is in the set, or None before its ranks are known."""
        if self.ranks is None:
            return None
        return _C().rank() in self.ranks

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=%s)" % (self.process_set_id, self.ranks,
                                                                        self.mpi_comm)

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def _resolve_comm_ranks(process_sets, global_comm):
    """Before init: the global ranks of each set given as an mpi4py communicator
    (ranks outside it may hold MPI.COMM_NULL). Collective over global_comm."""
    from mpi4py import MPI
    world_group = global_comm.Get_group()
    try:
        for ps in process_sets:
            if ps.ranks is not None or ps.mpi_comm is None:
                continue
            mine = None
            if ps.mpi_comm != MPI.COMM_NULL:
                group = ps.mpi_comm.Get_group()
                try:
                    mine = sorted(MPI.Group.Translate_ranks(group, list(range(group.Get_size())), world_group))
                finally:
                    group.Free()
                if any(r == MPI.UNDEFINED for r in mine):
                    raise ValueError("ProcessSet(%s): the communicator holds processes outside horovodlite's "
                                     "global communicator" % ps.mpi_comm)
            known = [r for r in global_comm.allgather(mine) if r is not None]
            if not known:
                raise ValueError("ProcessSet(mpi_comm): the communicator is MPI.COMM_NULL on every rank")
            ps.ranks = known[0]
    finally:
        world_group.Free()


def _init_process_sets(process_set_list):
    """After init: set process_set_id of each set passed to init() (a later
    duplicate of the same ranks is invalidated, as in Horovod) and the global
    set's ranks."""
    c = _C()
    ids = {tuple(c.process_set_ranks(i)): i for i in c.process_set_ids()}
    seen = {0}
    for ps in process_set_list:
        ps.process_set_id = ids.get(tuple(ps.ranks))
        if ps.process_set_id in seen:
            ps._invalidate()
        else:
            seen.add(ps.process_set_id)
    global_process_set.ranks = list(range(c.size()))


def add_process_set(process_set):
    """Registers a process set after init (collective over every rank, which all
    pass the same ranks) and returns it. Needs HOROVOD_DYNAMIC_PROCESS_SETS=1.
    No set with the same ranks may exist already (ValueError)."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.ranks is None and process_set.mpi_comm is not None:
        raise NotImplementedError("Dynamically adding process sets defined by an MPI communicator is not "
                                  "implemented. Please build the process set via a list of ranks.")
    code, message, process_set_id = _C().add_process_set(list(process_set.ranks))
    if code != "OK":
        if code == "PRECONDITION" and "dynamic process sets" in message:
            raise ValueError(message)
        if code == "INVALID_ARGUMENT":
            raise ValueError("Attempted to add a process set that cannot be added: %s (%s)" % (process_set, message))
        raise HorovodInternalError(message)
    process_set.process_set_id = process_set_id
    return process_set


def remove_process_set(process_set):
    """Removes a process set (collective over every rank); returns whether it was
    removed. False for the global set, an unregistered set or one removed
    already. Needs HOROVOD_DYNAMIC_PROCESS_SETS=1. Raises HorovodInternalError
    (and the set stays) if any rank has an op on the set in flight."""
    process_set_id = process_set.process_set_id
    if process_set_id is None or process_set_id == 0:
        return False
    code, message = _C().remove_process_set(process_set_id)
    if code == "OK":
        process_set._invalidate()
        return True
    if code == "PRECONDITION" and "dynamic process sets" in message:
        raise ValueError(message)
    if code == "INVALID_ARGUMENT":  # not registered (removed already)
        process_set._invalidate()
        return False
    raise HorovodInternalError(message)


def _ps_id(process_set, what):
    """The id a collective passes to the core."""
    if process_set is None or process_set is global_process_set:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError("%s: process_set must be a hvd.ProcessSet, got %s" % (what, type(process_set).__name__))
    if process_set.process_set_id is None:
        raise ValueError("%s: %s is not registered (pass it to hvd.init(process_sets=[...]) or "
                         "hvd.add_process_set())" % (what, process_set))
    return process_set.process_set_id


def _ps_size(process_set, what):
    """The number of ranks of the op's process set."""
    psid = _ps_id(process_set, what)
    n = _C().process_set_size(psid)
    if n < 0:
        raise ValueError("%s: process set %d is not registered (removed?)" % (what, psid))
    return n


def _ps_rank(process_set, what):
    return _C().process_set_rank(_ps_id(process_set, what))
