"""Exception types, named as in ``horovod.common.exceptions``."""


class HorovodInternalError(RuntimeError):
    """A collective failed inside horovodlite: ranks disagreed about an operation
    (dtype, shape, root, op), the runtime was shut down while the operation was
    in flight or before it was enqueued, or MPI reported an error."""


class HostsUpdatedInterrupt(RuntimeError):
    """Raised in an elastic job (state.commit() / check_host_updates()) when
    hosts were added or removed: the world is re-formed. skip_sync: only hosts
    were removed, the survivors' state needs no synchronization."""

    def __init__(self, skip_sync=False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync
