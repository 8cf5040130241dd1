"""Runs one rank's function for an engine (horovodlite.spark) or for
horovodlite.runner.run: started as `python -m horovodlite.runner.fn_exec` with
the Gloo-launch contract's environment (or under mpirun) plus

    HVL_ENGINE_KV_ADDR / HVL_ENGINE_KV_PORT / HVL_ENGINE_KV_SCOPE   the driver's KV store
    HVL_ENGINE_PARENT_PID                                           the task's process
    HVL_ENGINE_DRIVER_PYTHON                                        the driver's interpreter (for errors)

It fetches the pickled (fn, args, kwargs) from <scope>/fn (sealed with the job's
secret, HOROVODLITE_SECRET_KEY: runner/secret.py), calls fn, and puts (sealed)
("ok", result) or ("error", traceback text, pickled exception) at
<scope>/result/<rank>; a failure also goes to <scope>/failed/<rank> at once so
that the driver can end the other ranks. The process dies with its parent
(PR_SET_PDEATHSIG): a task that Spark kills leaves no rank behind.
"""

import ctypes
import os
import signal
import sys
import traceback


def _die_with_parent():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    expected = os.environ.get("HVL_ENGINE_PARENT_PID")
    if expected and os.getppid() != int(expected):
        os._exit(3)  # the parent died before prctl took effect


def _pickler():
    # The standalone cloudpickle (a dependency of horovodlite[spark], as of Horovod):
    # importing pyspark here would compile it from the task's pyspark.zip (seconds).
    import cloudpickle
    return cloudpickle


def _load_fn(cloudpickle, payload):
    """(fn, args, kwargs), or an error naming both interpreters where this one
    cannot unpickle what the driver pickled (another Python or cloudpickle:
    "Can't get attribute '_function_setstate'", a missing module)."""
    try:
        return cloudpickle.loads(payload)
    except Exception as e:  # noqa: BLE001 - re-raised with what tells the cause
        import platform
        driver = os.environ.get("HVL_ENGINE_DRIVER_PYTHON", "?")
        raise RuntimeError(
            "this rank's Python %s (Python %s, cloudpickle %s) cannot unpickle the function that the driver's "
            "Python %s pickled: %s: %s. Run the ranks with the driver's Python (the default executable=, "
            "sys.executable) or one with the same Python, cloudpickle and modules"
            % (sys.executable, platform.python_version(), getattr(cloudpickle, "__version__", "?"), driver,
               type(e).__name__, e)) from e


def _rank():
    """The Gloo contract's HOROVOD_RANK, or mpirun's rank (horovodlite.runner.run --mpi)."""
    for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"):
        if os.environ.get(name):
            return int(os.environ[name])
    raise RuntimeError("horovodlite.runner.fn_exec: no rank in the environment (HOROVOD_RANK or mpirun's)")


def _shutdown_horovodlite():
    mod = sys.modules.get("horovodlite.torch")
    if mod is not None and mod.is_initialized():
        mod.shutdown()


# The driver's side of the protocol (horovodlite.spark.run, horovodlite.runner.run).

def result_record(server, scope, rank, error, who):
    """Rank `rank`'s result record once its seal checks (None when there is
    none); a record not sealed with the job's secret is refused, never
    unpickled: `error` (a driver's exception class taking ranks=) naming `who`."""
    from horovodlite.runner.secret import AuthError
    record = server.get(scope, "result/%d" % rank)
    if record is None:
        return None
    try:
        return server.unseal("%s/result/%d" % (scope, rank), record)
    except AuthError as e:
        raise error("%s: the result of rank %d was refused, not unpickled: %s" % (who, rank, e),
                    ranks=[rank]) from None


def failure(server, scope, rank, record, cloudpickle):
    """(traceback text, its last line, the exception or None) of a failed rank:
    from its result `record` when it has one, else the text at failed/<rank>."""
    tb = server.get(scope, "failed/%d" % rank).decode(errors="replace")
    cause = None
    if record is not None:
        _, tb, exc = cloudpickle.loads(record)
        if exc is not None:
            try:
                cause = cloudpickle.loads(exc)
            except Exception:  # noqa: BLE001 - the text is enough
                cause = None
    return tb, tb.strip().splitlines()[-1] if tb.strip() else "?", cause


def main():
    _die_with_parent()
    from horovodlite.runner.store_client import RendezvousClient
    cloudpickle = _pickler()
    client = RendezvousClient(os.environ["HVL_ENGINE_KV_ADDR"], os.environ["HVL_ENGINE_KV_PORT"])
    scope = os.environ["HVL_ENGINE_KV_SCOPE"]
    rank = _rank()
    try:
        # Unpickled only once its seal says the job's driver put it there.
        fn, args, kwargs = _load_fn(cloudpickle, client.unseal(scope + "/fn", client.wait(scope, "fn", 60)))
        result = fn(*args, **kwargs)
        _shutdown_horovodlite()
        payload = cloudpickle.dumps(("ok", result))
    except BaseException as e:  # noqa: BLE001 - every failure goes to the driver
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        sys.stderr.flush()
        try:
            exc = cloudpickle.dumps(e)
        except Exception:  # noqa: BLE001 - an unpicklable exception still has its text
            exc = None
        try:
            client.put(scope, "failed/%d" % rank, tb)
            client.put(scope, "result/%d" % rank, client.seal("%s/result/%d" % (scope, rank),
                                                              cloudpickle.dumps(("error", tb, exc))))
        finally:
            sys.stdout.flush()
            os._exit(1)  # no atexit shutdown: it is collective and the others may never come
    client.put(scope, "result/%d" % rank, client.seal("%s/result/%d" % (scope, rank), payload))
    sys.stdout.flush()
    sys.stderr.flush()


if __name__ == "__main__":
    main()
