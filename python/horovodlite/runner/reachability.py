"""Before launching on other hosts, horovodrun checks that each one can be
reached (ssh ... true) and gives up with a clear error after --start-timeout.
Here the check goes through the same launch agent mpirun will use (ssh by
default; whatever plm_rsh_agent names, e.g. the simulated-hosts agent)."""

import os
import shlex
import shutil
import signal
import subprocess
import threading
import time

# Options horovodrun passes to ssh for its check: never prompt.
_SSH_CHECK_OPTIONS = ["-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes"]


def launch_agent(mpi_args_tokens, explicit_agent=None):
    """The argv of the rsh agent mpirun will use: `explicit_agent`, else a
    plm_rsh_agent given in --mpi-args or OMPI_MCA_plm_rsh_agent, else Open MPI's
    default 'ssh : rsh' (the first one found). None when none is installed."""
    value = explicit_agent
    if value is None:
        for i, token in enumerate(mpi_args_tokens[:-2]):
            if token in ("-mca", "--mca") and mpi_args_tokens[i + 1] == "plm_rsh_agent":
                value = mpi_args_tokens[i + 2]
    if value is None:
        value = os.environ.get("OMPI_MCA_plm_rsh_agent", "ssh : rsh")
    for alternative in value.split(":"):
        argv = shlex.split(alternative)
        if argv and shutil.which(argv[0]):
            return argv
    return None


def probe_command(agent_argv, ssh_args, host, timeout_s):
    cmd = list(agent_argv)
    if os.path.basename(agent_argv[0]) == "ssh":
        cmd += _SSH_CHECK_OPTIONS + ["-o", "ConnectTimeout=%d" % max(1, int(timeout_s))]
    return cmd + list(ssh_args) + [host, "true"]


def unreachable_hosts(hosts, agent_argv, ssh_args, timeout_s):
    """Runs `AGENT [ssh_args] HOST true` for every host at once. Returns
    [(host, reason)] for those that failed or did not answer within timeout_s."""
    results = {}
    deadline = time.monotonic() + timeout_s

    def probe(host):
        cmd = probe_command(agent_argv, ssh_args, host, timeout_s)
        try:
            # A session of its own, so that a timeout kills the agent's children too.
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        except OSError as e:
            results[host] = "cannot run %s: %s" % (cmd[0], e)
            return
        try:
            out, _ = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            results[host] = "no answer within %g s" % timeout_s
            return
        if proc.returncode != 0:
            text = out.decode(errors="replace").strip()
            results[host] = text.splitlines()[-1] if text else "exit code %d" % proc.returncode

    threads = [threading.Thread(target=probe, args=(h,), daemon=True) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [(h, results[h]) for h in hosts if h in results]


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        pass
