"""Elastic training with the real core across simulated hosts (ci/hosts.sh:
network namespaces on a bridge, each worker on its own host, the launcher and
its rendezvous server in the testbed's launch namespace): a host added by the
discovery script joins at a commit; a worker killed with SIGKILL and a host
whose link goes down are left behind and the survivors train on; after every
reset the model equals what the committed steps imply. Needs root; skipped
elsewhere. The module's testbed is removed whatever happens."""

import json
import os
import subprocess
import sys
import time

import pytest
from launch_util import clean_env, hosts_sh, last_runs, read_commit_log, simulated_hosts


@pytest.fixture(scope="module")
def testbed():
    yield from simulated_hosts("e", 3)


# value += allreduce(ones, Sum) per step (= the world size), commit per step;
# rank 0 logs (step, size, time) before each commit. Every worker writes its
# final value. Actions at a step of generation 1 (the first world), on a host:
#   kill:H:S  the worker on host H kills itself with SIGKILL at step S
#   add:S     rank 0 adds the third host to the discovery file at step S
WORKER = r"""
import json, os, signal, subprocess, sys, time, torch
import horovodlite.torch as hvd
outdir, steps, action, hosts_file, testbed = sys.argv[1:6]
steps = int(steps)
kind, _, rest = action.partition(":")
hvd.init()
state = hvd.elastic.ObjectState(step=0, value=0.0)
me = os.environ["HOROVOD_HOSTNAME"]

@hvd.elastic.run
def train(state):
    while state.step < steps:
        first = os.environ.get("HOROVODLITE_ELASTIC_GENERATION", "1") == "1"
        if kind == "kill" and first and me == rest.split(":")[0] and state.step == int(rest.split(":")[1]):
            os.kill(os.getpid(), signal.SIGKILL)
        if kind == "add" and hvd.rank() == 0 and state.step == int(rest):
            with open(hosts_file, "a") as f:
                f.write("%s-h3:1\n" % testbed)
        s = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="step").item()
        state.value += s
        state.step += 1
        time.sleep(0.1)
        # Logged before the commit, which may raise HostsUpdatedInterrupt after
        # saving (the step stands); a step rolled back is redone and logged again.
        if hvd.rank() == 0:
            with open(os.path.join(outdir, "log"), "a") as f:
                f.write(json.dumps({"step": state.step, "size": hvd.size(), "t": time.time()}) + "\n")
        state.commit()
    return state.value

value = train(state)
with open(os.path.join(outdir, "final." + me), "w") as f:
    f.write(repr(value))
"""


def _elastic(testbed, tmp_path, hosts, action, steps=30, extra=(), env_extra=None, at_step=None, timeout=300):
    """Runs the elastic job; at_step=(S, fn): the test calls fn() from outside
    (the root namespace) once the commit log shows step S."""
    hosts_file = tmp_path / "hosts.txt"
    hosts_file.write_text("".join("%s-h%d:1\n" % (testbed, h) for h in hosts))
    script = tmp_path / "elastic.py"
    script.write_text(WORKER)
    os.chmod(tmp_path, 0o755)
    env = clean_env()
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "horovodlite.run", "--hosts-netns", testbed, "--min-np", "2", "--max-np", "3",
           "--host-discovery-script", "cat %s" % hosts_file, "--gloo-timeout-seconds", "20",
           "--elastic-timeout", "60"] + list(extra) + [sys.executable, str(script), str(tmp_path), str(steps),
                                                      action, str(hosts_file), testbed]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log_path = tmp_path / "log"
    deadline = time.monotonic() + timeout
    while at_step is not None and proc.poll() is None and time.monotonic() < deadline:
        if log_path.exists() and any(json.loads(line)["step"] >= at_step[0]
                                     for line in log_path.read_text().splitlines() if line.strip()):
            at_step[1]()
            break
        time.sleep(0.05)
    try:
        stdout, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, _ = proc.communicate()
    out = subprocess.CompletedProcess(cmd, proc.returncode, stdout)
    return out, read_commit_log(str(log_path))


def _committed(log, steps):
    """Step -> world size of each committed step (a step redone after a
    rollback counts once, as its last run) and the value they imply."""
    last = last_runs(log)
    assert sorted(last) == list(range(1, steps + 1)), sorted(last)
    return last, float(sum(last.values()))


def _final(tmp_path, host):
    return float((tmp_path / ("final." + host)).read_text())


def test_host_added_joins_at_a_commit(testbed, tmp_path):
    out, log = _elastic(testbed, tmp_path, [1, 2], "add:5")
    assert out.returncode == 0, out.stdout
    last, expected = _committed(log, 30)
    assert last[1] == 2 and last[30] == 3, last
    for h in (1, 2, 3):
        assert _final(tmp_path, "%s-h%d" % (testbed, h)) == expected, out.stdout


def test_worker_killed_on_a_host(testbed, tmp_path):
    victim = "%s-h3" % testbed
    out, log = _elastic(testbed, tmp_path, [1, 2, 3], "kill:%s:10" % victim)
    assert out.returncode == 0, out.stdout
    assert "blacklisted host %s" % victim in out.stdout, out.stdout
    last, expected = _committed(log, 30)
    assert {last[s] for s in range(1, 10)} == {3} and last[30] == 2, last
    for h in (1, 2):
        assert _final(tmp_path, "%s-h%d" % (testbed, h)) == expected
    gap = max(b["t"] - a["t"] for a, b in zip(log, log[1:]))
    print("killed worker: longest gap between commits %.2f s" % gap)
    assert gap < 10, gap


def test_host_link_down(testbed, tmp_path):
    victim = "%s-h3" % testbed
    try:
        out, log = _elastic(testbed, tmp_path, [1, 2, 3], "none", extra=["--reset-limit", "3"],
                            at_step=(10, lambda: hosts_sh(testbed, "link", victim, "down")),
                            # The survivors' watchdog ends their waits on the lost host.
                            env_extra={"HOROVODLITE_PEER_TIMEOUT_SECONDS": "5"})
    finally:
        hosts_sh(testbed, "link", victim, "up")
    assert out.returncode == 0, out.stdout[-4000:]
    last, expected = _committed(log, 30)
    assert last[30] == 2, last
    for h in (1, 2):
        assert _final(tmp_path, "%s-h%d" % (testbed, h)) == expected, out.stdout[-4000:]
    gap = max(b["t"] - a["t"] for a, b in zip(log, log[1:]))
    print("link down: longest gap between commits %.2f s (watchdog 5 s)" % gap)
