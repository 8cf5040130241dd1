"""Process sets. horovodlite supports the global process set only; the names
exist so that code written against Horovod's signatures keeps working."""


class ProcessSet:
    """A set of ranks that an operation runs on. Only the global set (every
    rank) is supported: ``ProcessSet`` objects naming other ranks are rejected
    by the collectives with NotImplementedError."""

    def __init__(self, ranks=None):
        self.ranks = None if ranks is None else sorted(int(r) for r in ranks)
        self.process_set_id = 0 if ranks is None else None

    def _basics(self):
        from horovodlite.torch import basics
        return basics

    def size(self):
        return self._basics().size() if self.ranks is None else len(self.ranks)

    def rank(self):
        r = self._basics().rank()
        if self.ranks is None:
            return r
        return self.ranks.index(r) if r in self.ranks else -1

    def included(self):
        return self.ranks is None or self._basics().rank() in self.ranks

    def __repr__(self):
        return "ProcessSet(global)" if self.ranks is None else "ProcessSet(ranks=%s)" % self.ranks


global_process_set = ProcessSet()


def add_process_set(process_set):
    raise NotImplementedError("horovodlite supports only the global process set")


def remove_process_set(process_set):
    raise NotImplementedError("horovodlite supports only the global process set")


def check_global(process_set, what):
    if process_set is not global_process_set and not (
            isinstance(process_set, ProcessSet) and process_set.ranks is None):
        raise NotImplementedError("%s: horovodlite supports only the global process set" % what)
