"""Helpers for the launcher tests: run horovodlite-run as a user would, and a
rank script that writes what it received to <outdir>/received.<rank>.json."""

import os
import subprocess
import sys

MPIRUN = os.environ.get("HVL_TEST_MPIRUN", "mpirun")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir))

# Each rank reports its environment as the library reads it (HOROVODLITE_*),
# the Open MPI settings that reached it, where it ran and an allreduce result.
# Each rank writes its own file: mpirun may interleave the ranks' stdout.
REPORT_SCRIPT = """\
import json, os, socket, sys, torch
import horovodlite.torch as hvd
hvd.init()
total = hvd.allreduce(torch.ones(1), op=hvd.Sum).item()
received = {
    "rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(), "local_size": hvd.local_size(),
    "cross_rank": hvd.cross_rank(), "cross_size": hvd.cross_size(), "sum": total,
    "hostname": socket.gethostname(), "argv": sys.argv[1:],
    "env": {k: v for k, v in os.environ.items()
            if k.startswith(("HOROVODLITE_", "NCCL_", "HVL_")) or k in (
                "OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include", "OMPI_MCA_plm_rsh_args")},
}
with open(os.path.join(sys.argv[1], "received.%d.json" % hvd.rank()), "w") as f:
    json.dump(received, f)
hvd.shutdown()
"""


def clean_env(**extra):
    # Never inherit an enclosing MPI job's variables (or the caller's settings).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "HOROVODLITE_", "HOROVOD_"))}
    env.update(extra)
    return env


def launch(options, command, env=None, timeout=180):
    """horovodlite-run OPTIONS COMMAND; returns the CompletedProcess (output in .stdout)."""
    cmd = [sys.executable, "-m", "horovodlite.run", "--mpirun", MPIRUN] + list(options) + list(command)
    return subprocess.run(cmd, env=env or clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)


def report_command(tmp_path):
    script = tmp_path / "report.py"
    script.write_text(REPORT_SCRIPT)
    return [sys.executable, str(script), str(tmp_path)]


def read_reports(tmp_path, np):
    import json
    reports = []
    for r in range(np):
        with open(os.path.join(str(tmp_path), "received.%d.json" % r)) as f:
            reports.append(json.load(f))
    return reports


def read_commit_log(path):
    """An elastic test's commit log: one JSON object per line, each with the step
    and the world size it ran at ([] when there is none)."""
    import json
    return [json.loads(line) for line in open(path).read().splitlines()] if os.path.exists(path) else []


def last_runs(entries):
    """Step -> world size of the step's last run in a commit log (a step rolled
    back and redone counts once, as redone)."""
    last = {}
    for entry in entries:
        last[entry["step"]] = entry["size"]
    return last


def netns_usable():
    """None when simulated hosts (ci/hosts.sh) can run here, else why not."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "not root"
    try:
        subprocess.run(["ip", "netns", "list"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.CalledProcessError):
        return "no usable 'ip netns'"
    return None


def hosts_sh(testbed, *args):
    env = dict(os.environ, HVL_TESTBED=testbed, HVL_TESTBED_OWNER=str(os.getpid()))
    return subprocess.run([os.path.join(REPO, "ci", "hosts.sh")] + list(args), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)


def simulated_hosts(prefix, hosts, *rate):
    """A pytest fixture's body: a testbed named prefix + pid with `hosts` simulated
    hosts (and a tc rate), yielded by name and removed whatever happens; skips
    the module where simulated hosts cannot run."""
    import pytest
    why = netns_usable()
    if why:
        pytest.skip("multi-host launcher tests need root and network namespaces: %s" % why)
    hosts_sh("x", "gc")
    name = "%s%07d" % (prefix, os.getpid() % 10000000)
    up = hosts_sh(name, "up", str(hosts), *rate)
    try:
        assert up.returncode == 0, up.stdout
        yield name
    finally:
        down = hosts_sh(name, "down")
        assert down.returncode == 0, down.stdout
