"""Exception types, named as in ``horovod.common.exceptions``."""


class HorovodInternalError(RuntimeError):
    """A collective failed inside horovodlite: ranks disagreed about an operation
    (dtype, shape, root, op), the runtime was shut down while the operation was
    in flight or before it was enqueued, or MPI reported an error."""


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by Horovod's elastic mode when hosts change. horovodlite has no
    elastic mode; the type exists so that code catching it keeps importing."""

    def __init__(self, skip_sync=False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync
