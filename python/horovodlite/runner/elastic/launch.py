"""horovodlite-run in elastic mode (--min-np/--max-np/--host-discovery-script):
the rendezvous server with the driver's /rendezvous/... endpoints, and worker
processes started (local or through the launch agent) as the driver asks."""

import concurrent.futures
import signal
import sys
import threading
import time

from horovodlite.runner import gloo_run, horovod_messages, worker_env
from horovodlite.runner import hosts as hosts_util
from horovodlite.runner.elastic.discovery import FixedHosts, HostDiscoveryScript, HostManager
from horovodlite.runner.elastic.driver import ElasticDriver, JobEnded
from horovodlite.runner.rendezvous import RendezvousServer
from horovodlite.runner.secret import make_secret

_LEVELS = {"TRACE": 0, "DEBUG": 1, "INFO": 2, "WARNING": 3, "ERROR": 4, "FATAL": 5}


class _ElasticWorker:
    """A worker process and the thread that reports its exit to the driver."""

    def __init__(self, slot, argv, env, remote):
        self.slot = slot
        self.argv = argv
        self.env = env
        self.remote = remote
        self.worker = None
        self.done = threading.Event()

    def terminate(self, grace_s=gloo_run.TERMINATE_GRACE_S):
        """SIGTERM now, SIGKILL after grace_s; does not wait."""
        w = self.worker
        if w is None or self.done.is_set():
            return
        w.close_stdin()
        w.signal(signal.SIGTERM)
        timer = threading.Timer(grace_s, lambda: None if self.done.is_set() else w.signal(signal.SIGKILL))
        timer.daemon = True
        timer.start()


def launch_elastic(command, discovery, np, min_np, max_np, job_env, *, timeout_s, reset_limit, cooldown_range,
                   iface=None, gloo_timeout_s=None, agent=None, ssh_args=(), is_local=hosts_util.is_local,
                   log_level="INFO", first_hosts=None, discovery_interval_s=1.0):
    """Runs an elastic job; returns its exit code."""
    threshold = _LEVELS.get((log_level or "INFO").upper(), 2)

    def log(level, message):
        if _LEVELS.get(level.upper(), 2) >= threshold:
            prefix = "" if level == "info" else level + ": "
            print("horovodlite-run: %s%s" % (prefix, message), file=sys.stderr, flush=True)

    manager = HostManager(discovery, cooldown_range)
    secret = make_secret()
    # Local ranks die with the thread that started them (PR_SET_PDEATHSIG): all
    # are started from this one long-lived thread.
    spawner = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="hvl-spawn")
    workers = []
    state = {}

    def start_worker(slot, generation, extra_env):
        remote = not is_local(slot.hostname)
        if remote and agent is None:
            raise JobEnded("no launch agent (ssh) to reach %s" % slot.hostname)
        env = worker_env.rank_environment(remote, job_env, worker_env.gloo_env(
            slot, state["addr"], state["port"], timeout_s=gloo_timeout_s, iface=iface, secret=secret), extra_env)
        if remote:
            stdin_data = gloo_run.private_stdin(env)
            argv, env = gloo_run.remote_command(agent, ssh_args, slot.hostname, env, command), None
        else:
            argv = list(command)
            stdin_data = None
        handle = _ElasticWorker(slot, argv, env, remote)

        try:
            handle.worker = spawner.submit(gloo_run.Worker, slot, argv, env, remote, None, stdin_data).result()
            log("debug", "started worker %s[%d] (rank %d of %d, generation %d, pid %d)" % (
                slot.hostname, slot.local_rank, slot.rank, slot.size, generation, handle.worker.pid))
        except OSError as e:
            log("error", "cannot start %s on %s: %s" % (command[0], slot.hostname, e))

        def run():
            rc = handle.worker.wait() if handle.worker is not None else 127
            handle.done.set()
            driver.on_worker_exit(slot.hostname, slot.local_rank, rc, handle)

        thread = threading.Thread(target=run, name="hvl-worker-%s-%d" % (slot.hostname, slot.local_rank),
                                  daemon=True)
        workers.append((handle, thread))
        thread.start()
        return handle

    try:
        manager_hosts = first_hosts or list(discovery.find_available_hosts_and_slots().items())
    except Exception:  # noqa: BLE001 - driver.start reports it
        manager_hosts = []
    # Workers reach the store at this address (hosts discovered later too), so
    # it listens there and nowhere else.
    state["addr"] = gloo_run.rendezvous_address(manager_hosts or [("localhost", 1)], iface, is_local)
    server = RendezvousServer(bind_host=gloo_run.bind_address(state["addr"]), port=0, secret=secret,
                              log=lambda message: log("warning", message.partition("warning: ")[2] or message))
    driver = ElasticDriver(manager, min_np, max_np, start_worker, timeout_s=timeout_s, reset_limit=reset_limit,
                           rendezvous=server, log=log, discovery_interval_s=discovery_interval_s)
    server.get_hook = driver.http_get_hook
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        previous[sig] = signal.signal(sig, gloo_run._raise_interrupt)
    try:
        state["port"] = server.start()
        log("debug", "rendezvous at %s:%d; discovery: %s" % (state["addr"], state["port"], discovery))
        try:
            driver.start(np)
        except JobEnded as e:
            driver.stop(1, str(e))
        code, message = driver.wait()
    except gloo_run._Interrupted as e:
        log("info", "interrupted (%s): ending the workers" % e)
        driver.stop(128 + e.signum, None)
        code, message = 128 + e.signum, None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # Every worker ends (the driver terminated them); wait for their exits.
    deadline = time.monotonic() + 3 * gloo_run.TERMINATE_GRACE_S
    for handle, thread in list(workers):
        if not handle.done.is_set():
            handle.terminate()
        thread.join(max(0.0, deadline - time.monotonic()))
    spawner.shutdown(wait=False)
    server.stop()
    if message:
        print("horovodlite-run: error: " + message, file=sys.stderr, flush=True)
    failure = driver.first_failure()
    if code != 0 and failure and not (message and "--reset-limit" in message):
        # Horovod raises this one unless the reset limit ended the job.
        print("horovodlite-run: " + horovod_messages.elastic_nonzero_exit(*failure), file=sys.stderr, flush=True)
    return code


def make_discovery(script, fixed_hosts, slots_per_host):
    if script:
        return HostDiscoveryScript(script, slots_per_host or 1)
    return FixedHosts(dict(fixed_hosts))
