"""A one-machine Slurm for tests: munged, slurmctld and slurmd started as this
process's children on a temporary directory, and stopped with everything they
started when the `with` block ends.

    with SlurmCluster() as cluster:
        subprocess.run(["srun", "-n", "2", "hostname"], env=cluster.env(os.environ))

Everything is private to the cluster: its slurm.conf (SLURM_CONF, which
cluster.env() sets for srun, sbatch and sinfo), its munge key and socket
(AuthInfo=socket=...), free ports for slurmctld and slurmd, and a first job id
whose ports 15000 + (job id % 10000) are free (hvd.init()'s default store port
under Slurm). The node is this machine under its host name with NodeAddr
127.0.0.1, so Slurm's own traffic stays on the loopback. It needs root and
Debian's slurm-wlm and munge (ci/install_deps.sh).
"""

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd")
CLIENTS = ("srun", "sbatch", "sinfo", "squeue", "scancel")
# Ports hvd.init() derives from the job id (launchers.slurm_port).
_JOB_PORT_BASE = 15000
_JOB_IDS_RESERVED = 50


class SlurmStartError(RuntimeError):
    """The cluster did not come up; the message carries the daemons' logs."""


def _which(name):
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")


def unavailable():
    """Why this machine cannot run the cluster (a sentence), or None."""
    if os.geteuid() != 0:
        return "Slurm tests need root (slurmd runs jobs as their user), this is uid %d" % os.geteuid()
    missing = [n for n in DAEMONS + CLIENTS if _which(n) is None]
    if missing:
        return ("Slurm tests need root and Slurm's daemons and clients (ci/install_deps.sh installs slurm-wlm "
                "and munge): %s not found" % ", ".join(missing))
    return None


def _port_free(port):
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _first_job_id(avoid):
    """A first job id whose next _JOB_IDS_RESERVED jobs' store ports are free."""
    for _ in range(200):
        first = random.randint(1, 10000 - _JOB_IDS_RESERVED)
        ports = range(_JOB_PORT_BASE + first, _JOB_PORT_BASE + first + _JOB_IDS_RESERVED)
        if not set(ports) & set(avoid) and all(_port_free(p) for p in ports):
            return first
    raise SlurmStartError("no run of %d free ports above %d for the jobs' stores" % (_JOB_IDS_RESERVED,
                                                                                  _JOB_PORT_BASE))


def _tail(path, lines=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return "(%s)\n" % e


class SlurmCluster:
    """munged + slurmctld + slurmd of one node, as a context manager.

    cpus: the node's CPUs as slurm.conf says: at least the machine's and at
    least 4, so that `srun -n 3` runs on 2 cores (SlurmdParameters=
    config_overrides lets slurmd accept more than it finds). start_timeout_s:
    how long to wait for the node to be idle; stop_timeout_s: for each daemon
    to stop, and for the jobs left to go.
    """

    def __init__(self, cpus=None, start_timeout_s=60.0, stop_timeout_s=15.0):
        self.cpus = max(cpus or 0, os.cpu_count() or 1, 4)
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.host = socket.gethostname().split(".")[0]
        self.dir = None
        self.conf = None
        self.ctld_port = self.slurmd_port = self.first_job_id = None
        self._procs = {}  # name -> Popen, in start order

    # --- what tests use

    def env(self, base=None, **extra):
        """`base` (os.environ if None) with this cluster's SLURM_CONF, plus `extra`."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = self.conf
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def logs(self):
        """The tails of every daemon's log, for an error message."""
        parts = []
        for name in ("munged", "slurmctld", "slurmd"):
            for path in (os.path.join(self.dir, name + ".log"), os.path.join(self.dir, name + ".out")):
                if os.path.exists(path):
                    parts.append("--- %s\n%s" % (path, _tail(path)))
        return "\n".join(parts)

    # --- start

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, *exc):
        self._stop()
        return False

    def _start(self):
        self.dir = tempfile.mkdtemp(prefix="hvl-slurm-")
        os.chmod(self.dir, 0o755)  # munged wants its socket's directory searchable
        for sub in ("state", "spool"):
            os.mkdir(os.path.join(self.dir, sub), 0o755)
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.ctld_port = _free_port()
        self.slurmd_port = _free_port()
        while self.slurmd_port == self.ctld_port:
            self.slurmd_port = _free_port()
        self.first_job_id = _first_job_id((self.ctld_port, self.slurmd_port))
        self._write_conf()
        self._start_munge()
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-f", self.conf])
        self._spawn("slurmd", [_which("slurmd"), "-D", "-f", self.conf, "-N", self.host])
        self._wait_idle()

    def _write_conf(self):
        d = self.dir
        plugstack = os.path.join(d, "plugstack.conf")  # none of the machine's SPANK plugins
        open(plugstack, "w").close()
        lines = [
            "ClusterName=hvltest",
            "SlurmctldHost=%s(127.0.0.1)" % self.host,
            "SlurmctldPort=%d" % self.ctld_port,
            "SlurmdPort=%d" % self.slurmd_port,
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            "AuthInfo=socket=%s" % self.munge_socket,
            "StateSaveLocation=%s/state" % d,
            "SlurmdSpoolDir=%s/spool" % d,
            "SlurmctldPidFile=%s/slurmctld.pid" % d,
            "SlurmdPidFile=%s/slurmd.pid" % d,
            "SlurmctldLogFile=%s/slurmctld.log" % d,
            "SlurmdLogFile=%s/slurmd.log" % d,
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "PlugStackConfig=%s" % plugstack,
            "MailProg=/bin/true",
            "FirstJobId=%d" % self.first_job_id,
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            "KillWait=2",
            "InactiveLimit=0",
            "NodeName=%s NodeAddr=127.0.0.1 CPUs=%d RealMemory=512 State=UNKNOWN" % (self.host, self.cpus),
            "PartitionName=debug Nodes=%s Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4" % self.host,
        ]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    @property
    def munge_socket(self):
        return os.path.join(self.dir, "munge.socket")

    def _start_munge(self):
        key = os.path.join(self.dir, "munge.key")
        subprocess.run([_which("mungekey"), "--create", "--keyfile=" + key], check=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        self._spawn("munged", [_which("munged"), "--foreground", "--force", "--socket=" + self.munge_socket,
                               "--key-file=" + key, "--log-file=" + os.path.join(self.dir, "munged.log"),
                               "--pid-file=" + os.path.join(self.dir, "munged.pid"),
                               "--seed-file=" + os.path.join(self.dir, "munged.seed")])
        self._poll_until(lambda: os.path.exists(self.munge_socket), "munged's socket %s" % self.munge_socket)

    def _spawn(self, name, cmd):
        out = open(os.path.join(self.dir, name + ".out"), "w")
        # SLURM_CONF in the daemons' environment too: every process the
        # cluster starts (slurmstepd, the tasks) carries it, which is how
        # _stop() finds any left behind.
        self._procs[name] = subprocess.Popen(cmd, env=self.env(), stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=subprocess.STDOUT, cwd=self.dir, start_new_session=True)
        out.close()

    def _poll_until(self, ready, what, interval_s=0.2):
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise SlurmStartError("%s exited %d while waiting for %s\n%s" % (name, proc.returncode, what,
                                                                                   self.logs()))
            if ready():
                return
            if time.monotonic() > deadline:
                raise SlurmStartError("no %s within %g s\n%s" % (what, self.start_timeout_s, self.logs()))
            time.sleep(interval_s)

    def _node_state(self):
        p = subprocess.run([_which("sinfo"), "-h", "-N", "-n", self.host, "-o", "%T"], env=self.env(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
        self._last_sinfo = p.stdout.strip()
        return self._last_sinfo if p.returncode == 0 else None

    def _wait_idle(self):
        self._last_sinfo = ""
        try:
            self._poll_until(lambda: self._node_state() == "idle", "idle node %s in sinfo" % self.host, 0.3)
        except SlurmStartError as e:
            raise SlurmStartError("%s\n--- last sinfo: %s" % (e, self._last_sinfo)) from None

    # --- stop

    def _stop(self):
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            self._cancel_jobs()
        for name in reversed(list(self._procs)):
            self._terminate(self._procs[name])
        if self._procs:
            self._kill_left_behind()
        self._procs = {}
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def _cancel_jobs(self):
        """scancel every job still there and wait (a few s) for them to go."""
        def jobs():
            p = subprocess.run([_which("squeue"), "-h", "-o", "%i"], env=self.env(), stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, timeout=30)
            return p.stdout.split() if p.returncode == 0 else []
        try:
            left = jobs()
            if left:
                subprocess.run([_which("scancel"), "--full"] + left, env=self.env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=30)
            deadline = time.monotonic() + self.stop_timeout_s
            while left and time.monotonic() < deadline:
                time.sleep(0.5)
                left = jobs()
        except (OSError, subprocess.TimeoutExpired):
            pass  # the daemons are stopped next either way

    def _terminate(self, proc):
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _kill_left_behind(self):
        """SIGKILL the processes, other than this one, that carry this
        cluster's SLURM_CONF (slurmstepd and tasks of a step that outlived a
        test's timeout)."""
        marker = ("SLURM_CONF=%s" % self.conf).encode()
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    if marker not in f.read().split(b"\0"):
                        continue
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                continue
