"""horovodlite-run --gloo with the real core: hvd.init() on the Gloo transport,
collectives, and elastic training with a worker killed by SIGKILL (the model
equals what the committed steps imply). Skipped, saying why, where the core
was built without libgloo; a build with Gloo that does not start a Gloo job
fails here."""

import json
import os
import subprocess
import sys

import pytest
from launch_util import clean_env, last_runs, read_commit_log

# One write per rank: both ranks share the launcher's stdout, and print()'s
# pieces (arguments, separators) from two unbuffered processes interleave.
PROBE = ("import sys; import horovodlite.torch as hvd; hvd.init(); "
         "sys.stdout.write('GLOO %s %s %s %s\\n' % (hvd.gloo_built(), hvd.gloo_enabled(), hvd.mpi_enabled(), "
         "hvd.size()))")


def _run(options, command, timeout=180, env=None):
    cmd = [sys.executable, "-m", "horovodlite.run"] + options + command
    return subprocess.run(cmd, env=env or clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def gloo_core():
    out = _run(["--gloo", "-np", "2", "--gloo-timeout-seconds", "20"], [sys.executable, "-c", PROBE], timeout=120)
    if "GLOO False" in out.stdout:
        pytest.skip("horovodlite was built without Gloo (libgloo-dev)")
    assert "GLOO True True False 2" in out.stdout, "a Gloo job did not start:\n" + out.stdout


WORKER = r"""
import os, sys, torch
import horovodlite.torch as hvd
hvd.init()
e = os.environ
assert (hvd.rank(), hvd.size()) == (int(e["HOROVOD_RANK"]), int(e["HOROVOD_SIZE"]))
assert (hvd.local_rank(), hvd.local_size()) == (int(e["HOROVOD_LOCAL_RANK"]), int(e["HOROVOD_LOCAL_SIZE"]))
assert hvd.gloo_enabled() and not hvd.mpi_enabled()
n = hvd.size()
for count in (0, 1, 7, 1 << 20):
    t = torch.full((count,), float(hvd.rank() + 1))
    assert torch.equal(hvd.allreduce(t, op=hvd.Sum), torch.full((count,), n * (n + 1) / 2.0)), count
g = hvd.allgather(torch.tensor([hvd.rank()]))
assert g.tolist() == list(range(n))
b = hvd.broadcast(torch.tensor([hvd.rank() * 10.0]), root_rank=n - 1)
assert b.item() == (n - 1) * 10.0
assert hvd.broadcast_object({"r": hvd.rank()}, root_rank=0) == {"r": 0}
a2a, _ = hvd.alltoall(torch.arange(n, dtype=torch.float32) + 10 * hvd.rank(), splits=torch.ones(n, dtype=torch.int32))
assert a2a.tolist() == [10.0 * k + hvd.rank() for k in range(n)], a2a
rs = hvd.reducescatter(torch.ones(n * 3) * (hvd.rank() + 1), op=hvd.Average)
assert torch.allclose(rs, torch.full((3,), (n + 1) / 2.0)), rs
# 50 async allreduces fused into few responses
hs = [hvd.allreduce_async_(torch.ones(100) * i, op=hvd.Sum, name="f%d" % i) for i in range(50)]
assert all(torch.all(hvd.synchronize(h) == i * n) for i, h in enumerate(hs))
# A process set (a Gloo split over its members).
members = [0, n - 1] if n > 2 else [1]  # (at np 2, [0, 1] is the global set)
ps = hvd.add_process_set(members)
if ps.included():
    assert hvd.allreduce(torch.ones(4), op=hvd.Sum, process_set=ps).tolist() == [float(len(members))] * 4
    assert hvd.allgather(torch.tensor([hvd.rank()]), process_set=ps).tolist() == members
hvd.remove_process_set(ps)
# Adasum is refused on Gloo (NotImplementedError), naming the tensor, on every rank.
try:
    hvd.allreduce(torch.ones(2), op=hvd.Adasum, name="ada")
    raise SystemExit("Adasum ran on Gloo")
except (NotImplementedError, ValueError, hvd.HorovodInternalError) as e:
    assert "'ada'" in str(e) and ("MPI job" in str(e) or "power-of-two" in str(e)), e
print("rank %d ok" % hvd.rank(), flush=True)
hvd.shutdown()
"""


@pytest.mark.parametrize("np", [2, 3])
def test_gloo_job_collectives(tmp_path, gloo_core, np):
    script = tmp_path / "w.py"
    script.write_text(WORKER)
    env = clean_env()
    env["HOROVODLITE_DYNAMIC_PROCESS_SETS"] = "1"
    out = _run(["--gloo", "-np", str(np)], [sys.executable, str(script)], env=env)
    assert out.returncode == 0, out.stdout
    for r in range(np):
        assert "rank %d ok" % r in out.stdout, out.stdout


# Two hosts of two ranks (127.0.0.1 and 127.0.0.2 are two hosts to the
# launcher): the hierarchical allreduce over splits of the transport, forced
# on for every size; sizes over several of its 8 MiB pieces, dtypes, ops, fp16
# on the wire, fused tensors; every rank's result alike. Then the hierarchical
# allgather, forced on: uneven rows (one rank none), fused.
HIERARCHICAL = r"""
import sys, torch
import horovodlite.torch as hvd
hvd.init()
n, r = hvd.size(), hvd.rank()
assert (hvd.local_size(), hvd.cross_size()) == (2, 2), (hvd.local_size(), hvd.cross_size())
for count in (1, 7, 1000, (1 << 20) + 3, 5 * (1 << 20) + 1):
    for dtype in (torch.float32, torch.float64, torch.int32):
        base = (torch.arange(count) % 97).to(dtype)
        s = hvd.allreduce(base * (r + 1), op=hvd.Sum, name="s%d%s" % (count, dtype))
        assert torch.equal(s, base * (n * (n + 1) // 2)), (count, dtype)
        m = hvd.allreduce(base * (r + 1), op=hvd.Max, name="m%d%s" % (count, dtype))
        assert torch.equal(m, base * n), (count, dtype)
    a = hvd.allreduce(torch.full((count,), float(r)), op=hvd.Average, name="a%d" % count)
    assert torch.allclose(a, torch.full((count,), (n - 1) / 2.0)), count
    h = hvd.allreduce(torch.rand(count, generator=torch.Generator().manual_seed(r)), op=hvd.Sum,
                      name="h%d" % count, compression=hvd.Compression.fp16)
    g = hvd.allgather(h.unsqueeze(0), name="same%d" % count)
    assert all(torch.equal(g[0], g[k]) for k in range(n)), count
hs = [hvd.allreduce_async_(torch.ones(100000) * i, op=hvd.Sum, name="f%d" % i) for i in range(20)]
assert all(torch.all(hvd.synchronize(h) == i * n) for i, h in enumerate(hs))
# The hierarchical allgather: ranks give different numbers of rows (rank 2 none).
for rows in (1, 1000, 300000):
    mine = torch.arange(rows * (r != 2) * (r + 1) * 2, dtype=torch.float64).reshape(-1, 2) + 1000 * r
    g = hvd.allgather(mine, name="g%d" % rows)
    want = torch.cat([torch.arange(rows * (k != 2) * (k + 1) * 2, dtype=torch.float64).reshape(-1, 2) + 1000 * k
                      for k in range(n)])
    assert torch.equal(g, want), rows
hs = [hvd.allgather_async(torch.full((k + r, 3), float(r)), name="fa%d" % k) for k in range(10)]
for k, h in enumerate(hs):
    assert torch.equal(hvd.synchronize(h), torch.cat([torch.full((k + q, 3), float(q)) for q in range(n)])), k
sys.stdout.write("rank %d ok\n" % r)
hvd.shutdown()
"""


def test_gloo_hierarchical_2x2(tmp_path, gloo_core):
    script = tmp_path / "h.py"
    script.write_text(HIERARCHICAL)
    timeline = tmp_path / "timeline.json"
    env = clean_env()
    env.update(HOROVODLITE_HIERARCHICAL_ALLREDUCE="1", HOROVODLITE_HIERARCHICAL_ALLGATHER="1",
               HOROVODLITE_TIMELINE=str(timeline))
    out = _run(["--gloo", "-np", "4", "-H", "127.0.0.1:2,127.0.0.2:2"], [sys.executable, str(script)], env=env,
               timeout=300)
    assert out.returncode == 0, out.stdout
    for r in range(4):
        assert "rank %d ok" % r in out.stdout, out.stdout
    text = timeline.read_text()
    assert "HIERARCHICAL_ALLREDUCE" in text and "RING_ALLREDUCE" not in text
    assert "HIERARCHICAL_ALLGATHER" in text and "TRANSPORT_ALLGATHERV" not in text


# Elastic: value += allreduce(ones, Sum) each step, commit every step. Rank 0
# logs (step, size) after each commit. The worker on 127.0.0.3 kills itself
# with SIGKILL at step KILL_AT of generation 1.
ELASTIC = r"""
import json, os, signal, sys, time, torch
import horovodlite.torch as hvd
outdir, steps, kill_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hvd.init()
state = hvd.elastic.ObjectState(step=0, value=0.0)

@hvd.elastic.run
def train(state):
    while state.step < steps:
        if (os.environ["HOROVOD_HOSTNAME"] == "127.0.0.3" and state.step == kill_at
                and os.environ.get("HOROVODLITE_ELASTIC_GENERATION") == "1"):
            os.kill(os.getpid(), signal.SIGKILL)
        s = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="step").item()
        state.value += s
        state.step += 1
        time.sleep(0.05)
        state.commit()
        if hvd.rank() == 0:
            with open(os.path.join(outdir, "log"), "a") as f:
                f.write(json.dumps({"step": state.step, "size": hvd.size(), "t": time.time()}) + "\n")
    return state.value

value = train(state)
with open(os.path.join(outdir, "final.%s" % os.environ["HOROVOD_HOSTNAME"]), "w") as f:
    f.write(repr(value))
"""


def test_elastic_training_survives_sigkill(tmp_path, gloo_core):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("127.0.0.1:1\n127.0.0.2:1\n127.0.0.3:1\n")
    script = tmp_path / "elastic.py"
    script.write_text(ELASTIC)
    out = _run(["--min-np", "2", "--host-discovery-script", "cat %s" % hosts, "--gloo-timeout-seconds", "20",
                "--elastic-timeout", "60"], [sys.executable, str(script), str(tmp_path), "30", "10"], timeout=300)
    assert out.returncode == 0, out.stdout
    assert "was killed by signal 9" in out.stdout and "blacklisted host 127.0.0.3" in out.stdout, out.stdout
    log = read_commit_log(str(tmp_path / "log"))
    last = last_runs(log)  # a rolled-back step is redone: the last entry counts
    assert sorted(last) == list(range(1, 31))
    expected = float(sum(last.values()))
    assert {last[s] for s in range(1, 10)} == {3} and last[30] == 2
    for host in ("127.0.0.1", "127.0.0.2"):
        assert float((tmp_path / ("final." + host)).read_text()) == expected
    # The survivors trained again within 10 s of the kill.
    gap = max(b["t"] - a["t"] for a, b in zip(log, log[1:]))
    print("longest gap between commits (the kill and the re-forming): %.2f s" % gap)
    assert gap < 10, gap


# The same for LibTorch C++ (examples/elastic_train.cc over
# horovodlite::torch::elastic): the model's committed_steps buffer gains
# allreduce(ones, Sum) = the world size at every step, so at the end it equals
# the sum of the committed steps' sizes. HVL_ELASTIC_TRAIN is the binary (CMake
# sets it for py_launcher_gloo).
def test_cpp_elastic_training_survives_sigkill(tmp_path, gloo_core):
    binary = os.environ.get("HVL_ELASTIC_TRAIN", "")
    if not binary or not os.path.exists(binary):
        pytest.skip("HVL_ELASTIC_TRAIN does not name the elastic_train example (built with LibTorch)")
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("127.0.0.1:1\n127.0.0.2:1\n127.0.0.3:1\n")
    out = _run(["--min-np", "2", "--host-discovery-script", "cat %s" % hosts, "--gloo-timeout-seconds", "20",
                "--elastic-timeout", "60"],
               [binary, "--steps", "30", "--sleep-ms", "50", "--out", str(tmp_path), "--kill-host", "127.0.0.3",
                "--kill-at-step", "10"], timeout=300)
    assert out.returncode == 0, out.stdout
    assert "was killed by signal 9" in out.stdout and "blacklisted host 127.0.0.3" in out.stdout, out.stdout
    log = read_commit_log(str(tmp_path / "log"))
    last = last_runs(log)  # a rolled-back step is redone: the last entry counts
    assert sorted(last) == list(range(1, 31)), out.stdout
    assert {last[s] for s in range(1, 10)} == {3} and last[30] == 2, last
    expected = float(sum(last.values()))
    finals = [json.loads((tmp_path / ("final." + h)).read_text()) for h in ("127.0.0.1", "127.0.0.2")]
    for final in finals:
        assert final["step"] == 30 and final["committed_steps"] == expected, (final, expected, out.stdout)
    # The survivors hold the same model (synchronized from rank 0, averaged gradients since).
    assert finals[0]["checksum"] == finals[1]["checksum"], finals
    assert not (tmp_path / "final.127.0.0.3").exists()
    gap = max(b["t"] - a["t"] for a, b in zip(log, log[1:]))
    print("C++: longest gap between commits (the kill and the re-forming): %.2f s" % gap)
    assert gap < 10, gap
