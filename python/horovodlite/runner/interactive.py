"""horovodlite.runner.run: Horovod's `horovod.run` (horovod/runner/__init__.py),
our own code. Runs fn(*args, **kwargs) on np ranks launched as horovodlite-run
would (horovodlite.run.main: mpirun, or Gloo where mpirun is missing or asked
for) and returns each rank's return value in rank order.

How fn and its results travel, as for horovodlite.spark.run: this process serves
a rendezvous KV store (runner/rendezvous.py) with the job's secret, which the
launcher gives the ranks too (Gloo: in each rank's environment; MPI: exported by
name). Every rank is `executable -m horovodlite.runner.fn_exec`: it fetches the
sealed, cloudpickled (fn, args, kwargs) from <scope>/fn and puts its sealed
result, or its traceback and exception, at <scope>/result/<rank>. A rank that
fails exits non-zero, and the launcher ends the others.
"""

import sys

from horovodlite.runner import fn_exec, horovod_messages

SCOPE = "runfunc"

# run()'s elastic parameters: horovodlite-run's elastic driver runs commands,
# not functions with results.
_ELASTIC_PARAMS = ("min_np", "max_np", "slots", "reset_limit", "cooldown_range")


class RunError(RuntimeError):
    """fn failed on one or more ranks (`ranks`), or the job failed before every
    rank gave a result; `remote_traceback` is the first failing rank's. The
    exception fn raised is the cause (__cause__) where it could be unpickled."""

    def __init__(self, message, ranks=(), remote_traceback=None, exit_code=None):
        super().__init__(message)
        self.ranks = list(ranks)
        self.remote_traceback = remote_traceback
        self.exit_code = exit_code


def _cloudpickle():
    try:
        import cloudpickle
    except ImportError as e:
        raise ImportError("horovodlite.runner.run needs cloudpickle (pip install cloudpickle), as Horovod's "
                          "horovod.run does: %s" % e) from e
    return cloudpickle


class _UsageError(ValueError):
    pass


def _parser():
    """horovodlite-run's parser, whose errors raise ValueError instead of exiting."""
    from horovodlite.run import make_parser
    parser = make_parser()

    def error(message):
        raise _UsageError("horovodlite.runner.run: %s" % message)

    parser.error = error
    return parser


def _argv(np, hosts, hostfile, start_timeout, ssh_port, ssh_identity_file, output_filename, verbose, use_gloo,
          use_mpi, mpi_args, network_interface, executable):
    argv = ["-np", str(np)]
    if hosts is not None:
        argv += ["-H", hosts]
    if hostfile is not None:
        argv += ["--hostfile", hostfile]
    if start_timeout is not None:
        argv += ["--start-timeout", str(start_timeout)]
    if ssh_port is not None:
        argv += ["-p", str(ssh_port)]
    if ssh_identity_file is not None:
        argv += ["-i", ssh_identity_file]
    if output_filename is not None:
        argv += ["--output-filename", output_filename]
    if verbose:
        argv += ["--verbose"]
    if use_gloo:
        argv += ["--gloo"]
    if use_mpi:
        argv += ["--mpi"]
    if mpi_args:
        argv += ["--mpi-args=" + mpi_args]
    if network_interface:
        argv += ["--network-interface", network_interface]
    return argv + ["--", executable or sys.executable, "-m", "horovodlite.runner.fn_exec"]


def _store_address(args):
    """Where the ranks reach this process's store: the launcher's rendezvous
    address for the same hosts."""
    from horovodlite.runner import gloo_run
    from horovodlite.runner import hosts as hosts_util
    from horovodlite.runner.launch_args import host_list, interfaces
    try:
        hosts = host_list(args) or [("localhost", args.np)]
    except hosts_util.HostsError as e:
        raise _UsageError("horovodlite.runner.run: %s" % e) from None
    nics = interfaces(args)
    return gloo_run.rendezvous_address(hosts, nics.split(",")[0] if nics else None)


def run(fn, args=(), kwargs=None, np=1, min_np=None, max_np=None, slots=None, reset_limit=None,
        cooldown_range=None, hosts=None, hostfile=None, start_timeout=None, ssh_port=None, ssh_identity_file=None,
        disable_cache=None, output_filename=None, verbose=None, use_gloo=None, use_mpi=None, mpi_args=None,
        network_interface=None, executable=None):
    """Runs `fn(*args, **kwargs)` on `np` horovodlite processes and returns
    their return values, indexed by rank (Horovod 0.28's horovod.run).

    Args:
        fn: the function each rank runs (it calls hvd.init()); pickled with cloudpickle.
        args, kwargs: its arguments.
        np: number of processes.
        min_np, max_np, slots, reset_limit, cooldown_range: Horovod's elastic
            parameters: not supported for a function here (NotImplementedError);
            run an elastic script with horovodlite-run --min-np/--max-np.
        hosts: "host1:2,host2:4" (default: localhost:np); hostfile: a file of
            "<host> slots=<n>" lines (not both).
        start_timeout: seconds within which every host must answer (default
            $HOROVOD_START_TIMEOUT or 30).
        ssh_port, ssh_identity_file: how ssh reaches the hosts.
        disable_cache: accepted for Horovod's signature; horovodlite keeps no
            cache of its checks.
        output_filename: each rank's output under this directory.
        verbose: print the launch's steps.
        use_gloo, use_mpi: the controller (not both); neither: what
            horovodlite-run picks (mpirun where it is found and the build has MPI).
        mpi_args: extra mpirun arguments, as one string (MPI jobs).
        network_interface: network interface(s), comma-separated.
        executable: the Python that runs each rank (default: sys.executable).

    Returns:
        A list of fn's return values, element r from rank r.

    Raises:
        RunError (a RuntimeError): fn raised on some rank (the message names the
            rank(s) and carries the first one's traceback; the exception is the
            cause), or a rank ended without a result.
        ValueError: arguments the launcher refuses.
    """
    used = [name for name, value in zip(_ELASTIC_PARAMS, (min_np, max_np, slots, reset_limit, cooldown_range))
            if value is not None]
    if used:
        raise NotImplementedError(
            "horovodlite.runner.run: elastic jobs (%s) are not supported for a function: horovodlite's elastic "
            "driver runs commands (horovodlite-run --min-np N --max-np M python3 train.py, docs/elastic.md)"
            % ", ".join(used))
    if hosts is not None and hostfile is not None:
        raise ValueError("horovodlite.runner.run: give hosts or hostfile, not both")
    if use_gloo and use_mpi:
        raise ValueError("horovodlite.runner.run: use_gloo and use_mpi cannot both be True")
    if not isinstance(np, int) or isinstance(np, bool) or np < 1:
        raise ValueError("horovodlite.runner.run: np must be a positive int, got %r" % (np,))
    del disable_cache  # no cache of checks to disable
    cloudpickle = _cloudpickle()
    from horovodlite import run as launcher
    from horovodlite.runner.gloo_run import bind_address
    from horovodlite.runner.rendezvous import RendezvousServer
    from horovodlite.runner.secret import make_secret

    argv = _argv(np, hosts, hostfile, start_timeout, ssh_port, ssh_identity_file, output_filename, verbose,
                 use_gloo, use_mpi, mpi_args, network_interface, executable)
    parser = _parser()
    addr = _store_address(parser.parse_args(argv))
    secret = make_secret()
    server = RendezvousServer(bind_host=bind_address(addr), port=0, secret=secret)
    port = server.start()
    try:
        server.put(SCOPE, "fn", server.seal(SCOPE + "/fn", cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))))
        extra_env = {"HVL_ENGINE_KV_ADDR": addr, "HVL_ENGINE_KV_PORT": str(port), "HVL_ENGINE_KV_SCOPE": SCOPE,
                     "HVL_ENGINE_DRIVER_PYTHON": sys.executable}
        rc = launcher.main(argv, parser=parser, extra_env=extra_env, secret=secret)
        return _results(server, np, rc, cloudpickle)
    finally:
        server.stop()


def _record(server, rank):
    return fn_exec.result_record(server, SCOPE, rank, RunError, "horovodlite.runner.run")


def _failed_ranks(server):
    return sorted(int(k.split("/")[1]) for k in server.store.keys(SCOPE) if k.startswith("failed/"))


def _results(server, np, rc, cloudpickle):
    failed = _failed_ranks(server)
    if failed:
        first = failed[0]
        tb, last, cause = fn_exec.failure(server, SCOPE, first, _record(server, first), cloudpickle)
        # Horovod's text too (its horovod.run raises it): fn_exec exits 1 after an exception.
        raise RunError("horovodlite.runner.run: fn failed on rank%s %s (first: rank %d): %s\nTraceback of rank %d:\n%s"
                       "%s" % ("s" if len(failed) > 1 else "", ", ".join(map(str, failed)), first, last, first, tb,
                               horovod_messages.nonzero_exit(first, 1)),
                       ranks=failed, remote_traceback=tb, exit_code=rc) from cause
    missing = [rank for rank in range(np) if server.get(SCOPE, "result/%d" % rank) is None]
    if rc != 0 or missing:
        raise RunError("horovodlite.runner.run: the job exited with code %d%s" % (
            rc, "; rank(s) %s gave no result (see their output above)" % ", ".join(map(str, missing))
            if missing else ""), ranks=missing, exit_code=rc)
    results = []
    for rank in range(np):
        status, value = cloudpickle.loads(_record(server, rank))[:2]
        results.append(value)
    return results

