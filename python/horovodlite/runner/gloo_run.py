"""horovodlite-run --gloo: start the ranks without mpirun (Horovod 0.28's
horovod/runner/gloo_run.py, our own code).

The launcher serves the rendezvous KV store (runner/rendezvous.py), works out
each rank's place (rank, local rank, cross rank) from the host list, and starts
every rank with the Gloo-launch contract's environment
(docs/elastic.md#the-gloo-launch-contract; both built by runner/worker_env.py):
local ranks as child processes, remote ranks through the launch agent (ssh, or
the simulated-hosts agent) wrapped in runner/task.py, which ends the rank when
the launcher goes away. When a rank fails the launcher names it, ends the others
(SIGTERM, then SIGKILL after a grace period) and exits with that rank's code.
"""

import os
import queue
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

from horovodlite.runner import horovod_messages, worker_env
from horovodlite.runner import hosts as hosts_util
from horovodlite.runner.secret import SECRET_ENV_NAMES, make_secret

# Seconds between SIGTERM and SIGKILL when the job is ended.
TERMINATE_GRACE_S = 3.0

# ray/elastic.py's name for worker_env.gloo_env (it passes timeout_s and secret
# by keyword): one function, until that module names it itself.
slot_environment = worker_env.gloo_env


def bind_address(addr):
    """Where the store listens: the address the workers are given (loopback when
    all are local), or HOROVODLITE_RENDEZVOUS_BIND when the user asks for
    another (0.0.0.0 for every interface)."""
    return os.environ.get("HOROVODLITE_RENDEZVOUS_BIND") or addr


def _first_external_address():
    for _, name in socket.if_nameindex():
        addr = worker_env.interface_address(name)
        if addr and not addr.startswith("127."):
            return addr
    return None


def rendezvous_address(hosts, iface=None, is_local=hosts_util.is_local):
    """The address the ranks reach the launcher's KV store at: the address of
    --network-interface where this machine has it; 127.0.0.1 when every host is
    this machine; else the source address of a route to the first remote host
    (no packet is sent), else this machine's first non-loopback address."""
    if iface:
        addr = worker_env.interface_address(iface)
        if addr:
            return addr
    remote = [name for name, _ in hosts if not is_local(name)]
    if not remote:
        return "127.0.0.1"
    addr = worker_env.route_source(remote[0])
    if addr and not addr.startswith("127."):
        return addr
    return _first_external_address() or socket.gethostname()


def remote_command(agent, ssh_args, host, env, command, cwd=None, python=None):
    """argv that runs `command` on `host` with `env` through the launch agent,
    wrapped in runner/task.py (ends the rank when the agent's stdin closes).
    The job's secret is not on it (a command line is anyone's to read with
    ps): runner/task.py reads it from its stdin, where private_stdin(env) puts it."""
    python = python or sys.executable
    public = {k: v for k, v in env.items() if k not in SECRET_ENV_NAMES}
    assignments = " ".join(shlex.quote("%s=%s" % (k, v)) for k, v in sorted(public.items()))
    inner = " ".join(shlex.quote(c) for c in [python, "-m", "horovodlite.runner.task", "--env-from-stdin", "--"]
                     + list(command))
    cd = "cd %s >/dev/null 2>&1 ; " % shlex.quote(cwd or os.getcwd())
    remote = "%sexec env %s %s" % (cd, assignments, inner)
    opts = []
    if os.path.basename(agent[0]) == "ssh":
        opts = ["-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes"]
    return list(agent) + opts + list(ssh_args) + [host, remote]


def private_stdin(env):
    """What a remote rank's runner/task.py reads from stdin before it starts the
    command: the private variables of `env`, one NAME=VALUE a line, then an
    empty line."""
    lines = ["%s=%s\n" % (k, env[k]) for k in SECRET_ENV_NAMES if env.get(k)]
    return ("".join(lines) + "\n").encode()


def describe_exit(rc):
    if rc < 0:
        try:
            return "was killed by signal %d (%s)" % (-rc, signal.Signals(-rc).name)
        except ValueError:
            return "was killed by signal %d" % -rc
    return "exited with code %d" % rc


def exit_code(rc):
    return 128 - rc if rc < 0 else rc


class Worker:
    """One started rank: a local child or a remote one through the agent, each
    in a session of its own so that ending it ends everything it started."""

    def __init__(self, slot, argv, env, remote, output_dir=None, stdin_data=None):
        self.slot = slot
        self.argv = argv
        self.remote = remote
        self.proc = None
        self.returncode = None
        self._files = []
        stdout = stderr = None
        if output_dir:
            rank_dir = os.path.join(output_dir, "rank.%d" % slot.rank)
            os.makedirs(rank_dir, exist_ok=True)
            stdout = open(os.path.join(rank_dir, "stdout"), "wb")
            stderr = open(os.path.join(rank_dir, "stderr"), "wb")
            self._files = [stdout, stderr]
        # Remote ranks end when this pipe closes (runner/task.py); local ones get
        # no stdin, as under mpirun.
        stdin = subprocess.PIPE if remote else subprocess.DEVNULL
        self.proc = subprocess.Popen(argv, env=env, stdin=stdin, stdout=stdout, stderr=stderr,
                                     start_new_session=True, preexec_fn=None if remote else _die_with_parent)
        if remote and stdin_data:
            try:
                self.proc.stdin.write(stdin_data)
                self.proc.stdin.flush()
            except OSError:
                pass  # the agent failed at once: its exit says why

    @property
    def pid(self):
        return self.proc.pid

    def signal(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def close_stdin(self):
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def wait(self):
        self.returncode = self.proc.wait()
        for f in self._files:
            f.close()
        return self.returncode


def _die_with_parent():
    """Local ranks get SIGKILL if the launcher itself dies (prctl
    PR_SET_PDEATHSIG), so that no rank outlives a killed launcher."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort
        pass


class WorkerGroup:
    """Runs workers, reports each one's exit through a queue, ends them all."""

    def __init__(self, log=None):
        self.workers = []
        self.exits = queue.Queue()
        self.log = log or (lambda msg: print("horovodlite-run: " + msg, file=sys.stderr, flush=True))
        self._lock = threading.Lock()

    def start(self, slot, argv, env, remote, output_dir=None, stdin_data=None):
        worker = Worker(slot, argv, env, remote, output_dir, stdin_data)
        with self._lock:
            self.workers.append(worker)

        def waiter():
            rc = worker.wait()
            self.exits.put((worker, rc))

        threading.Thread(target=waiter, name="hvl-wait-%d" % slot.rank, daemon=True).start()
        return worker

    def running(self):
        with self._lock:
            return [w for w in self.workers if w.returncode is None]

    def terminate(self, workers=None, grace_s=TERMINATE_GRACE_S):
        """SIGTERM (and, for remote ranks, end-of-file on their stdin) now,
        SIGKILL to those still running after grace_s. Returns when all are gone
        or after a further grace period."""
        workers = self.running() if workers is None else [w for w in workers if w.returncode is None]
        for w in workers:
            w.close_stdin()
            w.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for w in workers:
            try:
                w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for w in workers:
            # Leaders gone or not: nothing of their sessions may remain.
            w.signal(signal.SIGKILL)
        for w in workers:
            try:
                w.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.log("rank %d on %s (pid %d) did not end after SIGKILL" % (
                    w.slot.rank, w.slot.hostname, w.pid))


def launch_gloo(command, hosts, np, job_env, *, iface=None, timeout_s=None, agent=None, ssh_args=(),
                output_dir=None, verbose=False, is_local=hosts_util.is_local, bind_host=None, log=None, secret=None):
    """Runs `command` on `np` ranks over `hosts` ([(name, slots)]); returns the
    job's exit code (0, or the first failing rank's). `secret`: the job's
    (default: a new one), for a caller that serves a store of its own to the
    ranks (runner/interactive.py)."""
    from horovodlite.runner.rendezvous import RendezvousServer

    log = log or (lambda msg: print("horovodlite-run: " + msg, file=sys.stderr, flush=True))
    slots = worker_env.host_assignments(hosts, np)
    remote_hosts = sorted({s.hostname for s in slots if not is_local(s.hostname)})
    if remote_hosts and agent is None:
        raise RuntimeError("no launch agent to reach %s: install ssh" % ", ".join(remote_hosts))
    addr = rendezvous_address(hosts, iface, is_local)
    if bind_host is None:
        bind_host = bind_address(addr)
    secret = secret or make_secret()
    server = RendezvousServer(bind_host=bind_host, port=0, secret=secret, log=log)
    port = server.start()
    if verbose:
        log("rendezvous at %s:%d (bound to %s); %d rank(s) on %s" % (
            addr, port, bind_host, np, hosts_util.format_hosts(hosts)))
    group = WorkerGroup(log)
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        previous[sig] = signal.signal(sig, _raise_interrupt)
    try:
        for slot in slots:
            remote = slot.hostname in remote_hosts
            env = worker_env.rank_environment(remote, job_env, worker_env.gloo_env(
                slot, addr, port, timeout_s=timeout_s, iface=iface, secret=secret))
            if remote:
                argv = remote_command(agent, ssh_args, slot.hostname, env, command)
                group.start(slot, argv, None, True, output_dir, private_stdin(env))
            else:
                group.start(slot, list(command), env, False, output_dir)
            if verbose:
                log("started rank %d on %s" % (slot.rank, slot.hostname))
        return _supervise(group, np, log)
    except _Interrupted as e:
        log("interrupted (%s): ending the ranks" % e)
        group.terminate()
        return 128 + e.signum
    except OSError as e:
        log("cannot start %s: %s" % (command[0], e))
        group.terminate()
        return 127
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.stop()


def _supervise(group, np, log):
    finished = 0
    while finished < np:
        worker, rc = group.exits.get()
        finished += 1
        if rc != 0:
            others = group.running()
            log("rank %d on host %s %s; ending the other %d rank(s)" % (
                worker.slot.rank, worker.slot.hostname, describe_exit(rc), len(others)))
            log(horovod_messages.nonzero_exit(worker.slot.rank, rc))
            group.terminate(others)
            return exit_code(rc)
    return 0


class _Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupt(signum, _frame):
    raise _Interrupted(signum)
