"""horovodlite-run --gloo: flags, each rank's environment (the Gloo-launch
contract), real launches of plain Python workers that talk to the launcher's KV
store, remote ranks through a launch agent, and what happens when a rank fails
or the launcher is killed (no rank outlives the job)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from horovodlite.runner import gloo_run, worker_env
from launch_util import clean_env

from horovodlite import run

# A worker that checks its environment, exchanges a value with every other rank
# through the KV store and writes what it saw to <outdir>/gloo.<rank>.json.
# argv: OUTDIR [MODE]; MODE "fail1" makes rank 1 exit 7 after the exchange,
# "hang" makes every rank sleep after the exchange (after writing its pid).
WORKER = r"""
import json, os, socket, sys, time
from horovodlite.runner.rendezvous import RendezvousClient
outdir = sys.argv[1]
mode = sys.argv[2] if len(sys.argv) > 2 else ""
e = os.environ
rank, size = int(e["HOROVOD_RANK"]), int(e["HOROVOD_SIZE"])
kv = RendezvousClient(e["HOROVOD_GLOO_RENDEZVOUS_ADDR"], e["HOROVOD_GLOO_RENDEZVOUS_PORT"])
kv.put("global", "rank_%d" % rank, "value-%d" % rank)
seen = [kv.wait("global", "rank_%d" % p, 30).decode() for p in range(size)]
with open(os.path.join(outdir, "gloo.%d.json" % rank), "w") as f:
    json.dump({"seen": seen, "pid": os.getpid(), "cwd": os.getcwd(),
               "env": {k: v for k, v in e.items() if k.startswith(("HOROVOD", "HVL_"))}}, f)
print("rank %d done" % rank, flush=True)
kv.put("global", "written_%d" % rank, "1")
if mode == "fail1" and rank == 1:
    for p in range(size):
        kv.wait("global", "written_%d" % p, 30)
    sys.exit(7)
if mode in ("fail1", "hang"):
    time.sleep(300)
"""

# Plays ssh: AGENT [options] HOST COMMAND (one string, run by a shell), here on
# this machine; records each host it was asked for.
FAKE_AGENT = """#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    -p | -i | -o) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host="$1"; shift
echo "$host" >> "%s"
echo "$*" >> "%s.argv"
[ "$1" = true ] && exit 0
exec sh -c "$*"
"""


def _launch(options, command, env=None, timeout=120):
    cmd = [sys.executable, "-m", "horovodlite.run"] + list(options) + list(command)
    return subprocess.run(cmd, env=env or clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)


def _worker(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    return [sys.executable, str(script), str(tmp_path)]


def _reports(tmp_path, np):
    return [json.loads((tmp_path / ("gloo.%d.json" % r)).read_text()) for r in range(np)]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def _fake_agent(tmp_path):
    log = tmp_path / "agent.log"
    agent = tmp_path / "agent.sh"
    agent.write_text(FAKE_AGENT % (log, log))
    agent.chmod(0o755)
    return agent, log


# --- flags and environment, no launch ------------------------------------

def test_gloo_flags_parse():
    args = run.make_parser().parse_args(["--gloo", "-np", "2", "--gloo-timeout-seconds", "9",
                                         "--network-interface", "eth1,eth2", "python3", "x.py"])
    assert args.use_gloo and not args.use_mpi and args.gloo_timeout_seconds == 9
    assert run.wants_gloo(args)
    assert run.interfaces(args) == "eth1,eth2"
    with pytest.raises(SystemExit):
        run.make_parser().parse_args(["--gloo", "--mpi", "-np", "2", "true"])
    with pytest.raises(SystemExit):
        run.make_parser().parse_args(["--gloo", "-np", "2", "--gloo-timeout-seconds", "0", "true"])


def test_gloo_is_the_default_where_mpirun_is_missing(monkeypatch):
    monkeypatch.setattr(run, "built_with_mpi", lambda: True)
    parse = run.make_parser().parse_args
    assert run.wants_gloo(parse(["-np", "2", "--mpirun", "/nonexistent/mpirun", "true"]))
    assert not run.wants_gloo(parse(["-np", "2", "--mpirun", sys.executable, "true"]))
    assert not run.wants_gloo(parse(["--mpi", "-np", "2", "--mpirun", "/nonexistent/mpirun", "true"]))


def test_gloo_is_the_default_where_the_build_has_no_mpi(monkeypatch, capsys):
    monkeypatch.setattr(run, "built_with_mpi", lambda: False)
    parse = run.make_parser().parse_args
    assert run.wants_gloo(parse(["-np", "2", "--mpirun", sys.executable, "true"]))
    with pytest.raises(SystemExit) as exit_info:
        run.main(["--mpi", "-np", "2", "--mpirun", sys.executable, "true"])
    assert exit_info.value.code == 2
    assert "built without MPI (HVL_WITH_MPI=OFF); launch with --gloo" in capsys.readouterr().err


def test_host_assignments_fill_hosts_in_order():
    slots = worker_env.host_assignments([("a", 2), ("b", 3), ("c", 1)], 5)
    got = [(s.hostname, s.rank, s.local_rank, s.local_size, s.cross_rank, s.cross_size) for s in slots]
    assert got == [
        ("a", 0, 0, 2, 0, 2), ("a", 1, 1, 2, 0, 2),
        ("b", 2, 0, 3, 1, 2), ("b", 3, 1, 3, 1, 2), ("b", 4, 2, 3, 0, 1),
    ]
    assert all(s.size == 5 for s in slots)
    assert [s.hostname for s in worker_env.host_assignments([("a", 2), ("b", 2)], 2)] == ["a", "a"]
    with pytest.raises(ValueError, match="-np 4 is more than the 3 slots"):
        worker_env.host_assignments([("a", 2), ("b", 1)], 4)


def test_slot_environment_is_the_contract():
    slot = worker_env.host_assignments([("h1", 1), ("h2", 2)], 3)[2]
    env = worker_env.gloo_env(slot, "10.0.0.1", 4242, iface="eth0", timeout_s=12)
    assert env == {
        "HOROVOD_HOSTNAME": "h2", "HOROVOD_RANK": "2", "HOROVOD_SIZE": "3",
        "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2",
        "HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "1",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "4242",
        "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_IFACE": "eth0", "HOROVOD_GLOO_TIMEOUT_SECONDS": "12",
    }
    env = worker_env.gloo_env(slot, "a", 1)
    assert "HOROVOD_GLOO_IFACE" not in env and env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "30"
    assert "HOROVODLITE_SECRET_KEY" not in env
    assert worker_env.gloo_env(slot, "a", 1, secret="ab" * 32)["HOROVODLITE_SECRET_KEY"] == "ab" * 32


def test_rendezvous_address():
    assert gloo_run.rendezvous_address([("localhost", 2)]) == "127.0.0.1"
    assert gloo_run.rendezvous_address([("localhost", 2)], iface="lo") == "127.0.0.1"
    # An interface this machine lacks falls back to the other rules.
    assert gloo_run.rendezvous_address([("localhost", 2)], iface="nonexistent0") == "127.0.0.1"


def test_remote_command_quotes_everything():
    secret = "5e" * 32
    env = {"A": "x y", "B": "$HOME", "HOROVODLITE_SECRET_KEY": secret}
    argv = gloo_run.remote_command(["ssh"], ["-p", "2222"], "h1", env,
                                   ["python3", "t.py", "a b"], cwd="/tmp/my dir", python="/usr/bin/python3")
    assert argv[0] == "ssh" and "BatchMode=yes" in argv and argv[-2] == "h1"
    assert argv[argv.index("-p") + 1] == "2222"
    remote = argv[-1]
    # The secret is not on the command line (ps shows it to anyone): task.py
    # reads it from stdin.
    assert remote == ("cd '/tmp/my dir' >/dev/null 2>&1 ; exec env 'A=x y' 'B=$HOME' "
                      "/usr/bin/python3 -m horovodlite.runner.task --env-from-stdin -- python3 t.py 'a b'")
    assert all(secret not in a for a in argv)
    assert gloo_run.private_stdin(env) == ("HOROVODLITE_SECRET_KEY=%s\n\n" % secret).encode()


def test_task_takes_the_private_environment_from_stdin(tmp_path):
    """runner/task.py --env-from-stdin: the lines up to an empty one become the
    command's environment; what follows is the launcher's end-of-file watch."""
    out = tmp_path / "seen"
    code = "import os; open(%r, 'w').write(os.environ.get('HOROVODLITE_SECRET_KEY', 'none'))" % str(out)
    proc = subprocess.Popen([sys.executable, "-m", "horovodlite.runner.task", "--env-from-stdin", "--",
                             sys.executable, "-c", code], stdin=subprocess.PIPE, env=clean_env())
    proc.stdin.write(b"HOROVODLITE_SECRET_KEY=" + b"ab" * 32 + b"\n\n")
    proc.stdin.flush()
    assert proc.wait(timeout=60) == 0
    proc.stdin.close()
    assert out.read_text() == "ab" * 32


@pytest.mark.parametrize("flags, message", [
    (["--mpi-args=--bind-to core"], "--mpi-args has no meaning in a Gloo job"),
    (["-H", "localhost:1"], "-np 2 is more than the 1 slots"),
])
def test_gloo_usage_errors(tmp_path, flags, message):
    marker = tmp_path / "ran"
    out = _launch(["--gloo", "-np", "2"] + flags, [sys.executable, "-c", "open(%r, 'w')" % str(marker)])
    assert out.returncode == 2 and message in out.stdout, out.stdout
    assert not marker.exists()


def test_gloo_timeout_is_an_error_in_an_mpi_job():
    out = _launch(["--mpi", "-np", "1", "--mpirun", sys.executable, "--gloo-timeout-seconds", "5"], ["true"])
    assert out.returncode == 2 and "--gloo-timeout-seconds is for Gloo jobs" in out.stdout, out.stdout


# --- real launches -----------------------------------------------------------

@pytest.mark.parametrize("np", [2, 3])
def test_local_ranks_get_the_contract_and_meet_at_the_kv_store(tmp_path, np):
    out = _launch(["--gloo", "-np", str(np), "--gloo-timeout-seconds", "17", "--network-interface", "lo",
                   "--cycle-time-ms", "3"], _worker(tmp_path), env=clean_env(HOROVODLITE_FROM_CALLER="x"))
    assert out.returncode == 0, out.stdout
    reports = _reports(tmp_path, np)
    ports = {r["env"]["HOROVOD_GLOO_RENDEZVOUS_PORT"] for r in reports}
    assert len(ports) == 1
    for rank, got in enumerate(reports):
        assert got["seen"] == ["value-%d" % p for p in range(np)]
        env = got["env"]
        assert env["HOROVOD_RANK"] == str(rank) and env["HOROVOD_SIZE"] == str(np)
        assert env["HOROVOD_LOCAL_RANK"] == str(rank) and env["HOROVOD_LOCAL_SIZE"] == str(np)
        assert env["HOROVOD_CROSS_RANK"] == "0" and env["HOROVOD_CROSS_SIZE"] == "1"
        assert env["HOROVOD_HOSTNAME"] == "localhost"
        assert env["HOROVOD_CONTROLLER"] == "gloo" and env["HOROVOD_CPU_OPERATIONS"] == "gloo"
        assert env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "127.0.0.1"
        assert env["HOROVOD_GLOO_IFACE"] == "lo" and env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "17"
        assert env["HOROVODLITE_CYCLE_TIME"] == "3.0" and env["HOROVODLITE_FROM_CALLER"] == "x"
    for rank in range(np):
        assert "rank %d done" % rank in out.stdout


def test_gloo_when_mpirun_is_missing(tmp_path):
    out = _launch(["-np", "2", "--mpirun", "/nonexistent/mpirun"], _worker(tmp_path))
    assert out.returncode == 0, out.stdout
    assert [r["env"]["HOROVOD_CONTROLLER"] for r in _reports(tmp_path, 2)] == ["gloo", "gloo"]


def test_output_filename_per_rank(tmp_path):
    out = _launch(["--gloo", "-np", "2", "--output-filename", str(tmp_path / "logs")], _worker(tmp_path))
    assert out.returncode == 0, out.stdout
    for rank in range(2):
        assert (tmp_path / "logs" / ("rank.%d" % rank) / "stdout").read_text() == "rank %d done\n" % rank


def test_failing_rank_is_named_and_ends_the_others(tmp_path):
    start = time.monotonic()
    out = _launch(["--gloo", "-np", "3"], _worker(tmp_path) + ["fail1"])
    took = time.monotonic() - start
    assert out.returncode == 7, out.stdout
    assert "rank 1 on host localhost exited with code 7; ending the other 2 rank(s)" in out.stdout, out.stdout
    assert "Horovod detected that one or more processes exited with non-zero status, thus causing the job to be " \
           "terminated. The first process to do so was:\nProcess name: 1\nExit code: 7" in out.stdout
    assert took < 30, took  # the others sleep 300 s
    pids = [r["pid"] for r in _reports(tmp_path, 3)]
    assert _wait_gone(pids, 5), pids


def test_rank_killed_by_a_signal(tmp_path):
    script = tmp_path / "sig.py"
    script.write_text("import os, signal, time\n"
                      "if os.environ['HOROVOD_RANK'] == '0':\n"
                      "    time.sleep(0.5); os.kill(os.getpid(), signal.SIGKILL)\n"
                      "time.sleep(300)\n")
    out = _launch(["--gloo", "-np", "2"], [sys.executable, str(script)])
    assert out.returncode == 128 + 9, out.stdout
    assert "rank 0 on host localhost was killed by signal 9 (SIGKILL)" in out.stdout, out.stdout


def test_missing_program_fails_cleanly(tmp_path):
    out = _launch(["--gloo", "-np", "2"], ["/nonexistent/program"])
    assert out.returncode == 127 and "cannot start /nonexistent/program" in out.stdout, out.stdout


def test_remote_ranks_through_the_launch_agent(tmp_path):
    """Hosts that are not this machine are reached through the agent (here a
    stand-in for ssh that runs the command locally): the command carries the
    environment and the working directory; ranks end with their job."""
    agent, log = _fake_agent(tmp_path)
    env = clean_env(OMPI_MCA_plm_rsh_agent=str(agent), HOROVODLITE_FROM_CALLER="y")
    out = _launch(["--gloo", "-np", "3", "-H", "fakehost-a:2,fakehost-b:1", "-p", "2222"], _worker(tmp_path),
                  env=env)
    assert out.returncode == 0, out.stdout
    reports = _reports(tmp_path, 3)
    assert [r["env"]["HOROVOD_HOSTNAME"] for r in reports] == ["fakehost-a", "fakehost-a", "fakehost-b"]
    assert [r["env"]["HOROVOD_CROSS_RANK"] for r in reports] == ["0", "0", "1"]
    assert [r["env"]["HOROVOD_CROSS_SIZE"] for r in reports] == ["2", "1", "2"]
    assert all(r["env"]["HOROVODLITE_FROM_CALLER"] == "y" for r in reports)
    assert all(r["cwd"] == os.getcwd() for r in reports)
    assert all(r["seen"] == ["value-0", "value-1", "value-2"] for r in reports)
    # One secret per job, to every rank, never on the agent's command line.
    secrets = {r["env"]["HOROVODLITE_SECRET_KEY"] for r in reports}
    assert len(secrets) == 1 and len(secrets.pop()) == 64
    assert reports[0]["env"]["HOROVODLITE_SECRET_KEY"] not in (tmp_path / "agent.log.argv").read_text()
    # Reachability probes, then one launch per rank.
    hosts = log.read_text().split()
    assert sorted(hosts) == ["fakehost-a", "fakehost-a", "fakehost-a", "fakehost-b", "fakehost-b"]


def test_remote_failure_ends_remote_ranks(tmp_path):
    agent, _ = _fake_agent(tmp_path)
    env = clean_env(OMPI_MCA_plm_rsh_agent=str(agent))
    out = _launch(["--gloo", "-np", "3", "-H", "fakehost-a:1,fakehost-b:2"], _worker(tmp_path) + ["fail1"], env=env)
    assert out.returncode == 7, out.stdout
    assert "rank 1 on host fakehost-b exited with code 7" in out.stdout, out.stdout
    assert _wait_gone([r["pid"] for r in _reports(tmp_path, 3)], 5)


def test_killed_launcher_leaves_no_ranks(tmp_path):
    """SIGKILL to the launcher: local ranks die with it (PR_SET_PDEATHSIG), remote
    ones when their agent's stdin closes (runner/task.py)."""
    agent, _ = _fake_agent(tmp_path)
    env = clean_env(OMPI_MCA_plm_rsh_agent=str(agent))
    cmd = [sys.executable, "-m", "horovodlite.run", "--gloo", "-np", "3", "-H", "localhost:2,fakehost-b:1"] + \
        _worker(tmp_path) + ["hang"]
    launcher = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / ("gloo.%d.json" % r)).exists() for r in range(3)):
            assert time.monotonic() < deadline and launcher.poll() is None
            time.sleep(0.1)
        time.sleep(0.2)  # the files are complete
        pids = [r["pid"] for r in _reports(tmp_path, 3)]
        assert all(_alive(p) for p in pids)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        assert _wait_gone(pids, 10), [p for p in pids if _alive(p)]
    finally:
        if launcher.poll() is None:
            launcher.kill()


def test_sigterm_to_the_launcher_ends_the_job(tmp_path):
    cmd = [sys.executable, "-m", "horovodlite.run", "--gloo", "-np", "2"] + _worker(tmp_path) + ["hang"]
    launcher = subprocess.Popen(cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / ("gloo.%d.json" % r)).exists() for r in range(2)):
            assert time.monotonic() < deadline and launcher.poll() is None
            time.sleep(0.1)
        time.sleep(0.2)
        pids = [r["pid"] for r in _reports(tmp_path, 2)]
        launcher.send_signal(signal.SIGTERM)
        out, _ = launcher.communicate(timeout=20)
        assert launcher.returncode == 128 + signal.SIGTERM, out
        assert "interrupted (SIGTERM): ending the ranks" in out, out
        assert _wait_gone(pids, 5)
    finally:
        if launcher.poll() is None:
            launcher.kill()
