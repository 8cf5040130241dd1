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
if hvd.rank() == 0:
    with open(os.path.join(outdir, "rendezvous"), "w") as f:
        f.write("%s:%s" % (os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"], os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]))

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


# Someone on another host of the same network, who knows the job's port but not
# its secret: every endpoint, plain and signed with a guessed secret, several
# times while the job trains. Writes each answer's status to a JSON file.
OUTSIDER = r"""
import http.client, json, re, secrets, sys, time
sys.path.insert(0, sys.argv[4])
from horovodlite.runner import secret as auth
from horovodlite.runner.rendezvous import signed_request
addr, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
hosts = sys.argv[5:]
paths = ["/global/rank_0", "/global.1/rank_0", "/global.1/0", "/global.1/1", "/spark/fn", "/", "/x"]
paths += ["/rendezvous/hosts_updated"] + ["/rendezvous/rank_and_size/%s:0" % h for h in hosts]
answers = []
guess = auth.Signer(auth.parse_secret(secrets.token_hex(32)))
for _ in range(3):
    for path in paths:
        for method, body in (("GET", None), ("PUT", b"198.18.0.66:6666"), ("POST", b"x"), ("DELETE", None),
                             ("HEAD", None)):
            conn = http.client.HTTPConnection(addr, port, timeout=10)
            try:
                conn.request(method, path, body=body)
                resp = conn.getresponse()
                resp.read()
                answers.append([method, path, "plain", resp.status])
            except OSError as e:
                answers.append([method, path, "plain", str(e)])
            finally:
                conn.close()
            try:
                answers.append([method, path, "guessed", signed_request(addr, port, guess, method, path, body, 10)[0]])
            except auth.AuthError as e:
                # Refused (401), or an answer the client would not believe: its status.
                status = re.search(r"status (\d+)", str(e))
                answers.append([method, path, "guessed", int(status.group(1)) if status else
                                "AuthError" if "refused" in str(e) else str(e)])
    time.sleep(0.5)
json.dump(answers, open(out, "w"))
"""


def test_an_outsider_is_refused_on_every_endpoint_while_the_job_trains(testbed, tmp_path):
    h1, h2, h3 = ("%s-h%d" % (testbed, i) for i in (1, 2, 3))
    (tmp_path / "outsider.py").write_text(OUTSIDER)
    answers_file = tmp_path / "answers.json"
    python_dir = os.path.dirname(os.path.dirname(os.path.abspath(__import__("horovodlite").__file__)))

    def attack():
        addr, port = (tmp_path / "rendezvous").read_text().split(":")
        subprocess.run(["ip", "netns", "exec", h3, sys.executable, str(tmp_path / "outsider.py"), addr, port,
                        str(answers_file), python_dir, h1, h2], check=True, timeout=120, env=clean_env())

    out, log = _elastic(testbed, tmp_path, [1, 2], "none", steps=80, extra=["--log-level", "DEBUG"],
                        at_step=(3, attack))
    assert out.returncode == 0, out.stdout[-4000:]
    answers = json.loads(answers_file.read_text())
    assert len(answers) == 3 * 10 * 5 * 2
    # No 2xx anywhere: 401 for every request the store reads, 501 for a method it has no handler for.
    wrong = [a for a in answers if a[3] not in ((501 if a[0] == "HEAD" else 401), "AuthError")]
    assert not wrong, wrong
    # The job went on: every step committed at its size, every worker's value what they imply.
    last, expected = _committed(log, 80)
    assert set(last.values()) == {2}, last
    for h in (h1, h2):
        assert _final(tmp_path, h) == expected, out.stdout[-4000:]
    # Logged once, at warning level, with the outsider's address.
    refusals = [line for line in out.stdout.splitlines() if "rendezvous store: refused" in line]
    assert len(refusals) == 1, refusals
    outsider_addr = subprocess.run(["ip", "netns", "exec", h3, "ip", "-4", "-o", "addr", "show", "eth0"],
                                   stdout=subprocess.PIPE, text=True, check=True).stdout.split()[3].split("/")[0]
    assert "from %s" % outsider_addr in refusals[0] and "WARNING" in refusals[0].upper(), refusals


# An elastic script as Horovod's integration scripts are written: it reads
# HOROVOD_HOSTNAME and HOROVOD_RANK from its environment, trains a TorchState
# (model, optimizer, epoch, batch, commits, rendezvous) with a reset callback,
# and at the end of an epoch where the schedule changes the hosts, rank 0 waits
# for the driver's notice in state._host_messages; rank 0 logs one JSON line per
# epoch. The discovery script prints the hosts of the epoch the log has reached.
HOROVOD_STYLE = r"""
import argparse, json, os, time
import torch
import torch.nn.functional as F
import horovodlite.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--batches-per-epoch", type=int, default=4)
p.add_argument("--logfile", required=True)
p.add_argument("--schedule", required=True)
p.add_argument("--discovery-wait", type=float, default=30)
args = p.parse_args()
hvd.init()
hostname = os.environ.get("HOROVOD_HOSTNAME")
start_rank = int(os.environ.get("HOROVOD_RANK", 0))
schedule = json.loads(args.schedule)

def hosts_at(epoch):
    return [hosts for first, hosts in schedule if first <= epoch][-1]

torch.manual_seed(0)
data = torch.randn(32, 2)
target = torch.randint(0, 2, (32,))
lr = 0.001
model = torch.nn.Linear(2, 2)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr * hvd.size()),
                                     named_parameters=model.named_parameters())

@hvd.elastic.run
def train(state):
    state.rendezvous += 1
    while state.epoch < args.epochs:
        while state.batch < args.batches_per_epoch:
            optimizer.zero_grad()
            F.cross_entropy(model(data), target).backward()
            optimizer.step()
            state.batch += 1
            state.commits += 1
            state.commit()
        if hvd.rank() == 0:
            with open(args.logfile, "a") as f:
                f.write(json.dumps({"epoch": state.epoch, "commits": state.commits, "hostname": hostname,
                                    "start_rank": start_rank, "rank": hvd.rank(), "size": hvd.size(),
                                    "rendezvous": state.rendezvous, "lr": optimizer.param_groups[0]["lr"],
                                    "updated": state._last_updated_timestamp}) + "\n")
            if hosts_at(state.epoch) != hosts_at(state.epoch + 1):
                start = time.time()
                while state._host_messages.empty():
                    if time.time() - start > args.discovery_wait:
                        raise TimeoutError("no host update from the driver")
                    time.sleep(0.1)
        state.epoch += 1
        state.batch = 0
        state.commits += 1
        state.commit()

def on_state_reset():
    for group in optimizer.param_groups:
        group["lr"] = lr * hvd.size()

state = hvd.elastic.TorchState(model, optimizer, batch=0, epoch=0, commits=0, rendezvous=0)
state.register_reset_callbacks([on_state_reset])
train(state)
"""

DISCOVER = r"""
import json, os, sys
logfile, schedule = sys.argv[1], json.loads(sys.argv[2])
epoch = len(open(logfile).read().splitlines()) if os.path.exists(logfile) else 0
print("\n".join("%s:1" % h for h in [hosts for first, hosts in schedule if first <= epoch][-1]))
"""


def test_horovod_style_script_hosts_added_and_removed(testbed, tmp_path):
    h1, h2, h3 = ("%s-h%d" % (testbed, i) for i in (1, 2, 3))
    # Epoch 0 on h1+h2, epoch 1 adds h3, epochs 2-3 without h2.
    schedule = json.dumps([[0, [h1, h2]], [1, [h1, h2, h3]], [2, [h1, h3]]])
    logfile = tmp_path / "epochs.log"
    (tmp_path / "train.py").write_text(HOROVOD_STYLE)
    (tmp_path / "discover.py").write_text(DISCOVER)
    os.chmod(tmp_path, 0o755)
    discovery = "%s %s %s '%s'" % (sys.executable, tmp_path / "discover.py", logfile, schedule)
    cmd = [sys.executable, "-m", "horovodlite.run", "--hosts-netns", testbed, "--min-np", "2", "--max-np", "3",
           "--host-discovery-script", discovery, "--log-level", "DEBUG", "--network-interface", "eth0",
           "--gloo-timeout-seconds", "20", "--elastic-timeout", "60",
           sys.executable, str(tmp_path / "train.py"), "--logfile", str(logfile), "--schedule", schedule]
    out = subprocess.run(cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-4000:]
    epochs = [json.loads(line) for line in logfile.read_text().splitlines()]
    # One line per epoch, each at the world size its hosts give, by the rank 0 on h1
    # that started as rank 0; every batch and every epoch end committed once.
    assert [e["epoch"] for e in epochs] == [0, 1, 2, 3], epochs
    assert [e["size"] for e in epochs] == [2, 3, 2, 2], epochs
    assert all(e["hostname"] == h1 and e["start_rank"] == 0 for e in epochs), epochs
    assert [e["commits"] for e in epochs] == [4 + 5 * i for i in range(4)], epochs
    # A new world (a rendezvous) after each host change, and the reset callback
    # scaled the learning rate to each world.
    assert [e["rendezvous"] for e in epochs] == [1, 2, 3, 3], epochs
    assert [round(e["lr"], 6) for e in epochs] == [0.002, 0.003, 0.002, 0.002], epochs
    # The driver's notices carry a timestamp the state kept.
    assert epochs[0]["updated"] == 0 and epochs[1]["updated"] > 0 and epochs[2]["updated"] >= epochs[1]["updated"]
    assert "DEBUG" in out.stdout or "debug" in out.stdout, out.stdout[-2000:]
