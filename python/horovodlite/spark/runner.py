"""horovodlite.spark.run: a horovodlite job inside a Spark job (horovod.spark.run's API).

Control plane (docs/engines.md): the Gloo launch of
docs/elastic.md#the-gloo-launch-contract. The
driver serves the rendezvous KV store (horovodlite.runner.rendezvous) and starts
one Spark barrier stage of `num_proc` tasks. Each task registers its host under
<scope>/task/<partition>; once all have, the driver gives out ranks (contiguous
per host, horovodlite.runner.worker_env.assign_ranks) under <scope>/assign/<partition>.
Each task then starts its rank as a child process (python -m
horovodlite.runner.fn_exec) with the contract's HOROVOD_* variables: a fresh
process per job, so horovodlite initialises cleanly every time and ending the
child ends the rank. The rank fetches the pickled fn from <scope>/fn and puts its
result (or traceback) under <scope>/result/<rank>; its output is forwarded to the
driver under <scope>/out/<rank>/<stream>/<n>.
"""

import itertools
import json
import os
import subprocess
import sys
import threading
import time

from horovodlite.runner import fn_exec, worker_env
from horovodlite.runner.gloo_run import bind_address
from horovodlite.runner.rendezvous import RendezvousClient, RendezvousServer
from horovodlite.runner.secret import make_secret

SCOPE = "spark"
DEFAULT_START_TIMEOUT_S = 600  # Horovod's HOROVOD_SPARK_START_TIMEOUT default
_POLL_S = 0.05
_job_ids = itertools.count()


class SparkJobError(RuntimeError):
    """fn failed on one or more ranks (`ranks`); `remote_traceback` is the first one's."""

    def __init__(self, message, ranks=(), remote_traceback=None):
        super().__init__(message)
        self.ranks = list(ranks)
        self.remote_traceback = remote_traceback


def _cloudpickle():
    # fn travels with the standalone cloudpickle (fast to import in each rank's
    # process; register_pickle_by_value with it). Spark pickles its own task.
    try:
        import cloudpickle
    except ImportError as e:
        raise ImportError("horovodlite.spark needs cloudpickle (pip install cloudpickle): %s" % e) from e
    return cloudpickle


def _log(verbose, level, msg):
    if verbose >= level:
        sys.stderr.write("horovodlite.spark: %s\n" % msg)
        sys.stderr.flush()


# ---------------------------------------------------------------- task side


def _interpreter():
    """This process's Python, as the messages about a mismatch name it."""
    import platform
    return "%s (Python %s)" % (sys.executable, platform.python_version())


def _make_task(addr, port, start_timeout, user_env, executable, verbose, secret, driver_python):
    """The function each Spark task runs (pickled by Spark: no closure over the
    driver's objects). The job's secret travels in it, as Horovod's does: Spark
    ships it to the executors over its own channel, never on a command line.
    The rank runs under `executable` (the driver's Python unless run() was
    given another), not the Spark worker's: fn was pickled by the driver."""

    def task(iterator):
        from pyspark import TaskContext
        ctx = TaskContext.get()
        index = ctx.partitionId()
        client = RendezvousClient(addr, port, timeout=30, secret=secret)
        stage_attempt = getattr(ctx, "stageAttemptNumber", lambda: 0)()
        if ctx.attemptNumber() > 0 or stage_attempt > 0:
            # A retried task or stage would join a world that has already started.
            client.put(SCOPE, "failed/task%d" % index, "Spark retried task %d (attempt %d, stage attempt %d); "
                       "a horovodlite job cannot restart one rank" % (index, ctx.attemptNumber(), stage_attempt))
            return iter([(index, -1, "retried")])
        if not (os.path.isfile(executable) and os.access(executable, os.X_OK)):
            client.put(SCOPE, "failed/task%d" % index, _no_executable_text(executable, driver_python, index))
            return iter([(index, -1, "no executable")])
        client.put(SCOPE, "task/%d" % index, json.dumps({"host": worker_env.host_identity(), "pid": os.getpid()}))
        deadline = time.monotonic() + start_timeout + 30
        delay = 0.01
        while True:
            assigned = client.get(SCOPE, "assign/%d" % index)
            if assigned is not None:
                break
            if client.get(SCOPE, "abort") is not None:
                return iter([(index, -1, "aborted before start")])
            if time.monotonic() > deadline:
                return iter([(index, -1, "no rank assigned within %d s" % start_timeout)])
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
        slot = worker_env.SlotInfo.from_dict(json.loads(assigned))
        env = worker_env.strip_inherited(os.environ)
        env.update(worker_env.gloo_env(slot, addr, port, timeout_s=int(user_env.pop("__gloo_timeout", 30)),
                                       iface=user_env.pop("__iface", None), secret=secret))
        env.update(user_env)
        env.update({"HVL_ENGINE_KV_ADDR": addr, "HVL_ENGINE_KV_PORT": str(port),
                    "HVL_ENGINE_KV_SCOPE": SCOPE, "HVL_ENGINE_PARENT_PID": str(os.getpid()),
                    "HVL_ENGINE_DRIVER_PYTHON": driver_python, "PYTHONUNBUFFERED": "1"})
        proc = subprocess.Popen([executable, "-m", "horovodlite.runner.fn_exec"], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        pumps = [threading.Thread(target=_pump, args=(stream, client, slot.rank, name), daemon=True)
                 for stream, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr"))]
        for p in pumps:
            p.start()
        outcome = None
        try:
            last_check = 0.0
            while proc.poll() is None:
                try:
                    proc.wait(timeout=0.2)
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                if now - last_check >= 0.5:
                    last_check = now
                    try:
                        aborted = client.get(SCOPE, "abort") is not None
                    except OSError:
                        aborted = True  # the driver is gone: end the rank
                    if aborted:
                        outcome = "aborted"
                        break
        finally:
            if proc.poll() is None:
                _end(proc)
            for p in pumps:
                p.join(timeout=5)
        if outcome is None and proc.returncode != 0:
            try:
                if client.get(SCOPE, "result/%d" % slot.rank) is None:
                    # Died without a word (a signal, os._exit, a crash in native code).
                    client.put(SCOPE, "failed/%d" % slot.rank, "the rank's process (Spark task %d on %s, %s; the "
                               "driver runs %s) exited with %s before fn returned\n" % (
                                   index, slot.hostname, executable, driver_python, _exit_text(proc.returncode)))
            except OSError:
                pass
        return iter([(index, slot.rank, outcome or "exit %d" % proc.returncode)])

    return task


def _no_executable_text(executable, driver_python, index):
    return ("the rank's Python %s does not exist (or cannot be run) on Spark task %d's host %s, whose Spark worker "
            "runs %s; the driver runs %s. Pass executable= a Python that exists on every worker, has "
            "horovodlite and unpickles what the driver pickles (the same Python and cloudpickle versions)"
            % (executable, index, worker_env.host_identity(), _interpreter(), driver_python))


def _pump(stream, client, rank, name):
    """Forwards a rank's output to the driver in batches (every 0.1 s or 64 KiB)."""
    seq = 0
    buf = []
    size = 0
    last = time.monotonic()
    for line in iter(stream.readline, b""):
        buf.append(line)
        size += len(line)
        now = time.monotonic()
        if size >= 65536 or now - last >= 0.1:
            _put_out(client, rank, name, seq, buf)
            seq, buf, size, last = seq + 1, [], 0, now
    if buf:
        _put_out(client, rank, name, seq, buf)
        seq += 1
    try:
        client.put(SCOPE, "out/%d/%s/end" % (rank, name), str(seq))
    except OSError:
        pass


def _put_out(client, rank, name, seq, lines):
    try:
        client.put(SCOPE, "out/%d/%s/%d" % (rank, name, seq), b"".join(lines))
    except OSError:
        pass  # the driver is gone; the rank is ended by the task's loop


def _exit_text(code):
    if code < 0:
        import signal
        try:
            return "signal %s" % signal.Signals(-code).name
        except ValueError:
            return "signal %d" % -code
    return "exit code %d" % code


def _end(proc):
    proc.terminate()
    try:
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------- driver side


class _Output:
    """Writes the ranks' forwarded output to the driver's streams, in order per rank and stream."""

    def __init__(self, store, num_proc, stdout, stderr, prefix_timestamp):
        self.store = store
        self.streams = {"stdout": stdout or sys.stdout, "stderr": stderr or sys.stderr}
        self.next = {(r, s): 0 for r in range(num_proc) for s in self.streams}
        self.prefix_timestamp = prefix_timestamp

    def drain(self):
        for (rank, name), seq in self.next.items():
            while True:
                chunk = self.store.get(SCOPE, "out/%d/%s/%d" % (rank, name, seq))
                if chunk is None:
                    break
                self.store.delete(SCOPE, "out/%d/%s/%d" % (rank, name, seq))
                seq += 1
                stream = self.streams[name]
                for line in chunk.decode(errors="replace").splitlines(True):
                    stamp = time.strftime("%a %b %d %H:%M:%S %Y") + " " if self.prefix_timestamp else ""
                    stream.write("%s[%d]<%s>:%s" % (stamp, rank, name, line))
                stream.flush()
            self.next[(rank, name)] = seq

    def finished(self):
        return all(self.store.get(SCOPE, "out/%d/%s/end" % key) is not None for key in self.next)


def _spark_context():
    from pyspark import SparkContext
    sc = SparkContext._active_spark_context
    if sc is None:
        raise ValueError("horovodlite.spark.run: could not find an active SparkContext; are you running in a "
                         "PySpark session? (e.g. SparkSession.builder.master('local[2]').getOrCreate())")
    return sc


def _driver_host(sc, nics):
    if nics:
        return worker_env.driver_address(nics)
    master = sc.master or ""
    if master.startswith("local"):
        return "127.0.0.1"  # local[N] and local-cluster[...]: every task is on this host
    host = sc.getConf().get("spark.driver.host", None)
    return host or worker_env.driver_address()


def run(fn, args=(), kwargs=None, num_proc=None, start_timeout=None, use_mpi=None, use_gloo=None,
        extra_mpi_args=None, env=None, stdout=None, stderr=None, verbose=1, nics=None,
        prefix_output_with_timestamp=False, executable=None):
    """Runs `fn(*args, **kwargs)` in `num_proc` Spark tasks with horovodlite's
    Gloo environment set up among them (fn calls hvd.init(), as under
    horovod.spark.run), and returns fn's results ordered by rank.

    Args:
        fn: the function every rank runs (pickled with cloudpickle).
        args, kwargs: its arguments.
        num_proc: number of ranks (Spark tasks); default: Spark's default parallelism.
        start_timeout: seconds for all tasks to start and register (default
            $HOROVOD_SPARK_START_TIMEOUT or 600); after that the job ends with an
            error saying how many started.
        use_mpi, use_gloo, extra_mpi_args: the job always runs on Gloo; asking for
            MPI (use_mpi=True, use_gloo=False or extra_mpi_args) is an error.
        env: extra environment variables for every rank (e.g. HOROVOD_FUSION_THRESHOLD).
        stdout, stderr: where the ranks' output goes on the driver (default sys.stdout /
            sys.stderr), each line prefixed "[rank]<stdout>:".
        verbose: 0 quiet, 1 a start line, 2 the driver's steps.
        nics: network interfaces for the rendezvous address and Gloo (HOROVOD_GLOO_IFACE: the first).
        prefix_output_with_timestamp: prefix forwarded lines with the time.
        executable: the Python that runs each rank (default: the driver's
            sys.executable, as Horovod's: fn is unpickled by the Python that
            pickled it, whichever Python Spark's workers run). A path missing on
            a worker is an error naming both interpreters.

    Raises:
        SparkJobError: fn raised on some rank (the message names the rank(s) and
            carries the first traceback; the original exception is the cause when it
            could be unpickled), or a task was lost.
        TimeoutError: not all tasks started within start_timeout.
    """
    if use_mpi or use_gloo is False or extra_mpi_args:
        raise ValueError("horovodlite.spark.run: only the Gloo control plane is supported (the driver serves the "
                         "rendezvous; docs/engines.md); leave use_mpi/extra_mpi_args unset (use_gloo=True is the "
                         "default)")
    kwargs = dict(kwargs or {})
    sc = _spark_context()
    if num_proc is None:
        num_proc = sc.defaultParallelism
    if not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError("horovodlite.spark.run: num_proc must be a positive int, got %r" % (num_proc,))
    if start_timeout is None:
        start_timeout = int(os.environ.get("HOROVOD_SPARK_START_TIMEOUT", DEFAULT_START_TIMEOUT_S))
    if start_timeout <= 0:
        raise ValueError("horovodlite.spark.run: start_timeout must be > 0, got %r" % (start_timeout,))
    user_env = {str(k): str(v) for k, v in (env or {}).items()}
    user_env["__gloo_timeout"] = os.environ.get("HOROVOD_GLOO_TIMEOUT_SECONDS",
                                                str(worker_env.DEFAULT_GLOO_TIMEOUT_S))
    if nics:
        user_env["__iface"] = sorted(nics)[0]

    addr = _driver_host(sc, nics)
    secret = make_secret()
    server = RendezvousServer(bind_host=bind_address(addr), port=0, secret=secret)
    port = server.start()
    job_group = "horovodlite.spark.run.%d.%d" % (os.getpid(), next(_job_ids))
    outcome = {}
    thread = None
    try:
        server.put(SCOPE, "fn", server.seal(SCOPE + "/fn", _cloudpickle().dumps((fn, tuple(args), kwargs))))
        _log(verbose, 1, "running %d processes (rendezvous %s:%d)" % (num_proc, addr, port))
        task = _make_task(addr, port, start_timeout, user_env, executable or sys.executable, verbose, secret,
                          _interpreter())

        def spark_job():
            try:
                sc.setJobGroup(job_group, "horovodlite.spark.run: %d ranks" % num_proc, interruptOnCancel=True)
                rdd = sc.parallelize(range(num_proc), num_proc).barrier().mapPartitions(task)
                outcome["tasks"] = rdd.collect()
            except BaseException as e:  # noqa: BLE001 - handed to the driver's thread
                outcome["error"] = e

        thread = threading.Thread(target=spark_job, name="hvl-spark-job", daemon=True)
        t0 = time.monotonic()
        thread.start()
        output = _Output(server.store, num_proc, stdout, stderr, prefix_output_with_timestamp)
        _wait_for_start(server, num_proc, start_timeout, thread, outcome, t0, verbose, getattr(sc, "pythonExec", None))
        _wait_for_ranks(server, num_proc, thread, output)
        thread.join()
        output.drain()
        return _results(server, num_proc, outcome)
    finally:
        server.put(SCOPE, "abort", b"1")
        if thread is not None and thread.is_alive():
            # Tasks see the abort within 0.5 s and end their ranks; a stage that
            # never got its slots is cancelled.
            thread.join(timeout=5)
            if thread.is_alive():
                sc.cancelJobGroup(job_group)
                thread.join(timeout=30)
        server.stop()


def _registered(server):
    return [k for k in server.store.keys(SCOPE) if k.startswith("task/")]


def _early_failure(server):
    return [k for k in server.store.keys(SCOPE) if k.startswith("failed/task")]


def _worker_python_hint(error, worker_python):
    """Why a Spark worker could not run the task, where it is its Python's
    missing horovodlite (or cloudpickle): the two interpreters named."""
    text = str(error or "")
    if "No module named" not in text:
        return ""
    return ("\nThe Spark workers' Python (%s: PYSPARK_PYTHON or spark.pyspark.python, else python3 from PATH) cannot "
            "import what the task needs; the driver runs %s. Set PYSPARK_PYTHON to the driver's Python before the "
            "SparkSession starts, or install horovodlite (and cloudpickle) for the workers' Python"
            % (worker_python or "python3", _interpreter()))


def _wait_for_start(server, num_proc, start_timeout, thread, outcome, t0, verbose, worker_python=None):
    """Waits for every task to register, then assigns ranks."""
    deadline = t0 + start_timeout
    while True:
        registered = _registered(server)
        if len(registered) == num_proc:
            break
        if _early_failure(server):
            key = _early_failure(server)[0]
            raise SparkJobError("horovodlite.spark.run: %s" % server.get(SCOPE, key).decode())
        if not thread.is_alive():
            raise SparkJobError("horovodlite.spark.run: the Spark job ended before all tasks started (%d of %d "
                                "registered): %s%s" % (len(registered), num_proc, outcome.get("error"),
                                                       _worker_python_hint(outcome.get("error"), worker_python)))
        if time.monotonic() >= deadline:
            raise TimeoutError(
                "horovodlite.spark.run: timed out after %s s waiting for %d Spark tasks to start: %d of %d started. "
                "A barrier stage needs num_proc free task slots at once (local[N] has N; "
                "spark.task.cpus per task); lower num_proc or raise start_timeout"
                % (start_timeout, num_proc, len(registered), num_proc))
        time.sleep(_POLL_S)
    hosts = []
    for index in range(num_proc):
        hosts.append(json.loads(server.get(SCOPE, "task/%d" % index))["host"])
    slots = worker_env.assign_ranks(hosts)
    for index, slot in enumerate(slots):
        server.put(SCOPE, "assign/%d" % index, json.dumps(slot.to_dict()))
    _log(verbose, 2, "all %d tasks started after %.2f s on %d host(s)" % (num_proc, time.monotonic() - t0,
                                                                          len(set(hosts))))


def _failed_ranks(server):
    return sorted(int(k.split("/")[1]) for k in server.store.keys(SCOPE)
                  if k.startswith("failed/") and not k.startswith("failed/task"))


def _wait_for_ranks(server, num_proc, thread, output):
    """Until the Spark job ends; on the first failing rank, tells the others to end."""
    while thread.is_alive():
        output.drain()
        if _failed_ranks(server):
            time.sleep(0.2)  # ranks failing together are named together
            server.put(SCOPE, "abort", b"1")
            break
        thread.join(timeout=_POLL_S)
    thread.join()
    # The last output arrives with (or just after) the task's end.
    deadline = time.monotonic() + 5
    while not output.finished() and time.monotonic() < deadline:
        output.drain()
        time.sleep(_POLL_S)


def _result_record(server, rank):
    return fn_exec.result_record(server, SCOPE, rank, SparkJobError, "horovodlite.spark.run")


def _results(server, num_proc, outcome):
    cloudpickle = _cloudpickle()
    failed = _failed_ranks(server)
    tasks = {t[0]: t for t in outcome.get("tasks", [])}
    rank_task = {t[1]: t[0] for t in tasks.values()}
    if failed:
        first = failed[0]
        tb, last, cause = fn_exec.failure(server, SCOPE, first, _result_record(server, first), cloudpickle)
        err = SparkJobError("horovodlite.spark.run: fn failed on rank%s %s (first: rank %d%s): %s\n"
                            "Traceback of rank %d:\n%s"
                            % ("s" if len(failed) > 1 else "", ", ".join(map(str, failed)), first,
                               ", Spark task %d" % rank_task[first] if first in rank_task else "", last, first, tb),
                            ranks=failed, remote_traceback=tb)
        raise err from cause
    if "error" in outcome:
        raise SparkJobError("horovodlite.spark.run: the Spark job failed: %s" % outcome["error"]) \
            from outcome["error"]
    results = []
    for rank in range(num_proc):
        record = _result_record(server, rank)
        if record is None:
            task = rank_task.get(rank)
            how = tasks[task][2] if task is not None else "no task ran it"
            raise SparkJobError("horovodlite.spark.run: rank %d returned no result (%s)" % (rank, how), ranks=[rank])
        status, value = cloudpickle.loads(record)[:2]
        results.append(value)
    return results
