"""The pieces of horovodlite-run (horovodlite.run): host lists, the start-time
reachability check, the simulated-hosts testbed and --check-build; and
``run(fn, ...)``, Horovod's ``horovod.run`` (runner/interactive.py)."""

from horovodlite.runner.interactive import RunError, run

__all__ = ["RunError", "run"]
