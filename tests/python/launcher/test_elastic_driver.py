"""Elastic mode of horovodlite-run without the core: host discovery and its bad
input, blacklisting with cooldown, the driver's generations (unit tests with
fake workers), and real elastic jobs of plain Python workers on "hosts"
127.0.0.x (all this machine) that play the collective failure a dead peer
causes by a key in the KV store."""

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest
from horovodlite.runner.elastic.discovery import (
    DiscoveryError,
    FixedHosts,
    HostDiscoveryScript,
    HostManager,
    HostState,
    HostUpdateResult,
    parse_discovery_output,
)
from horovodlite.runner.elastic.driver import ElasticDriver, JobEnded
from launch_util import clean_env

# --- discovery -----------------------------------------------------------------


def test_parse_discovery_output():
    assert parse_discovery_output("h1:2\nh2\n\n  h-3.x:4  \n", 3) == {"h1": 2, "h2": 3, "h-3.x": 4}
    assert parse_discovery_output("", 1) == {}
    assert parse_discovery_output("h1:2\nh1:2\n", 1) == {"h1": 2}
    for text, bad in (("h1:2\nh2:x\n", "line 2: 'h2:x'"), ("hello world\n", "line 1: 'hello world'"),
                      ("h1:0\n", "slots must be >= 1"), ("h1:2\nh1:3\n", "twice")):
        with pytest.raises(DiscoveryError, match=bad):
            parse_discovery_output(text, 1, "discovery script d.sh")


def _script(tmp_path, body, name="discover.sh"):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_discovery_script_good_failing_hanging_garbage(tmp_path):
    good = HostDiscoveryScript(_script(tmp_path, "echo a:2; echo b\n"), default_slots=4)
    assert good.find_available_hosts_and_slots() == {"a": 2, "b": 4}
    failing = _script(tmp_path, "echo a:2; echo 'cannot list the pool' >&2; exit 3\n", "fail.sh")
    with pytest.raises(DiscoveryError) as info:
        HostDiscoveryScript(failing).find_available_hosts_and_slots()
    assert failing in str(info.value) and "exit status 3" in str(info.value)
    assert "cannot list the pool" in str(info.value)
    hanging = _script(tmp_path, "sleep 60\n", "hang.sh")
    start = time.monotonic()
    with pytest.raises(DiscoveryError, match="did not finish within 0.5 s"):
        HostDiscoveryScript(hanging, timeout_s=0.5).find_available_hosts_and_slots()
    assert time.monotonic() - start < 5
    garbage = _script(tmp_path, "echo a:2; echo '%%%% not a host'\n", "garbage.sh")
    with pytest.raises(DiscoveryError, match=r"garbage.sh printed a bad line 2: '%%%% not a host'"):
        HostDiscoveryScript(garbage).find_available_hosts_and_slots()


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_blacklist_cooldown_doubles_and_clamps():
    clock = FakeClock()
    host = HostState((2, 10), clock=clock, rng=lambda: 0.5)
    host.blacklist()
    assert host.is_blacklisted() and not host.is_resurrected()
    assert host.cooldown_end == 1000 + 2 * 2 + 1  # LOW*2^1 + 0.5*LOW
    clock.now += 5
    assert host.is_resurrected()
    host.whitelist()
    assert not host.is_blacklisted()
    host.blacklist()
    assert host.cooldown_end == clock.now + 9  # LOW*2^2 + 1 = 9 <= HIGH
    clock.now += 9
    host.whitelist()
    host.blacklist()
    assert host.cooldown_end == clock.now + 10  # 17 clamped to HIGH
    forever = HostState(None, clock=clock)
    forever.blacklist()
    clock.now += 10 ** 6
    assert forever.is_blacklisted() and not forever.is_resurrected()
    with pytest.raises(ValueError, match="lower limit 0"):
        HostState((0, 5))
    with pytest.raises(ValueError, match="upper limit 7200"):
        HostState((1, 7200))


class MutableHosts:
    def __init__(self, hosts):
        self.hosts = dict(hosts)
        self.error = None

    def find_available_hosts_and_slots(self):
        if self.error:
            raise DiscoveryError(self.error)
        return dict(self.hosts)


def test_host_manager_order_updates_blacklist_and_resurrection():
    clock = FakeClock()
    disc = MutableHosts({"a": 1, "b": 2})
    manager = HostManager(disc, (1, 4), clock=clock, rng=lambda: 0.0)
    assert manager.update_available_hosts() == HostUpdateResult.added
    assert manager.available_hosts() == [("a", 1), ("b", 2)]
    assert manager.update_available_hosts() == HostUpdateResult.no_update
    disc.hosts = {"c": 1, "b": 2}
    assert manager.update_available_hosts() == HostUpdateResult.mixed
    assert manager.available_hosts() == [("b", 2), ("c", 1)]  # the older host first
    disc.hosts = {"c": 1, "b": 1}
    assert manager.update_available_hosts() == HostUpdateResult.removed
    manager.blacklist("b")
    assert manager.available_hosts() == [("c", 1)] and manager.count_available_slots() == 1
    assert manager.update_available_hosts() == HostUpdateResult.no_update
    clock.now += 2.5  # cooldown 1*2 + 0 = 2 s
    assert manager.update_available_hosts() == HostUpdateResult.added
    assert manager.available_hosts() == [("c", 1), ("b", 1)]
    disc.error = "boom"
    with pytest.raises(DiscoveryError):
        manager.update_available_hosts()
    assert manager.available_hosts() == [("c", 1), ("b", 1)]  # unchanged


# --- the driver with fake workers -----------------------------------------------


class FakeWorker:
    def __init__(self, slot, generation):
        self.slot = slot
        self.generation = generation
        self.terminated = False

    def terminate(self):
        self.terminated = True


class Harness:
    def __init__(self, hosts, min_np, max_np, **kw):
        self.disc = MutableHosts(hosts)
        self.started = []
        self.logs = []
        self.driver = ElasticDriver(HostManager(self.disc, kw.pop("cooldown", None)), min_np, max_np, self._start,
                                    log=lambda level, msg: self.logs.append((level, msg)),
                                    discovery_interval_s=0.05, **kw)

    def _start(self, slot, generation, env):
        worker = FakeWorker(slot, generation)
        self.started.append(worker)
        return worker

    def ready_async(self, *keys):
        """Workers that ask for their next place (each blocks until it forms)."""
        results = {}

        def ask(key):
            results[key] = self.driver.record_ready(*key)

        threads = [threading.Thread(target=ask, args=(k,), daemon=True) for k in keys]
        for t in threads:
            t.start()
        return threads, results

    def exit(self, key, rc):
        worker = [w for w in self.started if (w.slot.hostname, w.slot.local_rank) == key][-1]
        self.driver.on_worker_exit(key[0], key[1], rc, worker)

    def slots(self):
        return [(s.hostname, s.local_rank, s.rank, s.size) for s in self.driver.current_slots()]


def _join(threads, timeout=10):
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads)


def test_driver_failure_blacklists_and_reforms():
    h = Harness({"a": 2, "b": 1}, min_np=2, max_np=8)
    h.driver.start(2)
    assert h.driver.generation == 1
    assert h.slots() == [("a", 0, 0, 3), ("a", 1, 1, 3), ("b", 0, 2, 3)]
    assert len(h.started) == 3
    threads, results = h.ready_async(("a", 0), ("a", 1))
    time.sleep(0.2)
    assert h.driver.generation == 1 and not results  # b has not reported yet
    h.exit(("b", 0), 1)
    _join(threads)
    assert h.driver.generation == 2 and h.driver.reset_count == 1
    assert results[("a", 0)]["rank"] == 0 and results[("a", 1)]["rank"] == 1
    assert results[("a", 1)]["size"] == 2 and results[("a", 1)]["scope"] == "global.2"
    assert h.driver.hosts.is_blacklisted("b")
    assert len(h.started) == 3  # survivors keep their processes; nothing new to start
    assert any("blacklisted host b" in m for _, m in h.logs)
    # Both finish: the job ends with 0.
    h.exit(("a", 0), 0)
    h.exit(("a", 1), 0)
    assert h.driver.wait() == (0, None)


def test_driver_host_added_notifies_and_starts_new_workers():
    h = Harness({"a": 1}, min_np=1, max_np=3)
    h.driver.start(1)
    assert h.driver._last_update[0] == 0
    h.disc.hosts = {"a": 1, "b": 2}
    h.driver.discover_once()
    timestamp, update = h.driver._last_update
    assert timestamp > 0 and update == HostUpdateResult.added
    threads, results = h.ready_async(("a", 0))
    _join(threads)
    assert results[("a", 0)]["rank"] == 0 and results[("a", 0)]["size"] == 3
    assert results[("a", 0)]["last_update"] == timestamp
    new = [(w.slot.hostname, w.slot.local_rank, w.slot.rank, w.generation) for w in h.started[1:]]
    assert new == [("b", 0, 1, 2), ("b", 1, 2, 2)]
    # Capped at --max-np: a further host changes nothing, no notification.
    h.disc.hosts = {"a": 1, "b": 2, "c": 4}
    h.driver.discover_once()
    assert h.driver._last_update[0] == timestamp


def test_driver_host_removed_gives_leavers_no_place():
    h = Harness({"a": 1, "b": 1}, min_np=1, max_np=4)
    h.driver.start(2)
    h.disc.hosts = {"a": 1}
    h.driver.discover_once()
    assert h.driver._last_update[1] == HostUpdateResult.removed
    threads, results = h.ready_async(("a", 0), ("b", 0))
    _join(threads)
    assert results[("a", 0)]["size"] == 1 and results[("b", 0)]["rank"] == -1
    assert [w.terminated for w in h.started] == [False, True]


def test_driver_min_np_timeout_ends_the_job():
    h = Harness({"a": 1, "b": 1}, min_np=2, max_np=2, timeout_s=1)
    h.driver.start(2)
    threads, results = h.ready_async(("a", 0))
    h.exit(("b", 0), 137)
    _join(threads)
    code, message = h.driver.wait()
    assert code == 1 and "fewer than 2 slot(s) available after --elastic-timeout 1 s: a:1; blacklisted: b" \
        in message, message
    assert results[("a", 0)]["rank"] == -1


def test_driver_reset_limit():
    h = Harness({"a": 1, "b": 1, "c": 1}, min_np=1, max_np=3, reset_limit=1)
    h.driver.start(3)
    threads, _ = h.ready_async(("a", 0), ("b", 0))
    h.exit(("c", 0), 1)
    _join(threads)
    assert h.driver.generation == 2
    threads, results = h.ready_async(("a", 0))
    h.exit(("b", 0), 1)
    _join(threads)
    code, message = h.driver.wait()
    assert code == 1 and "--reset-limit 1 reached" in message and results[("a", 0)]["rank"] == -1
    # Horovod's text beside ours (scripts grep it); the first failure of the last generation
    assert "Job has been reset 1 times, exceeding the limit." in message, message
    assert h.driver.first_failure() == ("b", 0, 1)


def test_driver_all_failed_and_all_blacklisted():
    h = Harness({"a": 1, "b": 1}, min_np=1, max_np=2)
    h.driver.start(2)
    h.exit(("a", 0), 1)
    h.exit(("b", 0), 2)
    code, message = h.driver.wait()
    assert code == 1 and "all 2 worker(s) of generation 1 failed" in message
    h = Harness({"a": 2}, min_np=1, max_np=2)
    h.driver.start(2)
    threads, _ = h.ready_async(("a", 0))
    h.exit(("a", 1), 1)
    _join(threads)
    code, message = h.driver.wait()
    assert code == 1 and "every host of generation 1 is blacklisted (a)" in message


def test_driver_success_with_a_failure_reports_the_failure_code():
    h = Harness({"a": 1, "b": 1}, min_np=1, max_np=2)
    h.driver.start(2)
    h.exit(("a", 0), 0)
    h.exit(("b", 0), 5)
    assert h.driver.wait() == (5, None)


def test_driver_rendezvous_timeout_names_missing_workers():
    h = Harness({"a": 1, "b": 1}, min_np=1, max_np=2, timeout_s=1)
    h.driver.start(2)
    h.exit(("a", 0), 1)  # b never reports (stuck in a collective that does not fail)
    deadline = time.monotonic() + 10
    while not h.driver.finished() and time.monotonic() < deadline:
        h.driver.check_rendezvous_timeout()
        time.sleep(0.1)
    code, message = h.driver.wait()
    assert code == 1 and "did not report within --elastic-timeout 1 s" in message and "b[0] (rank 1)" in message


def test_driver_bad_discovery_keeps_the_last_good_hosts():
    h = Harness({"a": 1}, min_np=1, max_np=2)
    h.driver.start(1)
    h.disc.error = "discovery script d.sh printed a bad line 1: 'xx yy'"
    h.driver.discover_once()
    h.driver.discover_once()
    warnings = [m for level, m in h.logs if level == "warning"]
    assert len(warnings) == 1 and "'xx yy'" in warnings[0] and "last good host set (a:1)" in warnings[0]
    h.disc.error = None
    h.driver.discover_once()
    assert any("host discovery works again" in m for _, m in h.logs)


def test_driver_first_discovery_failure_is_fatal():
    h = Harness({}, min_np=1, max_np=2)
    h.disc.error = "discovery script d.sh failed (exit status 2)"
    with pytest.raises(JobEnded, match="exit status 2.*at start"):
        h.driver.start(1)


def test_fixed_hosts():
    assert FixedHosts([("a", 2)]).find_available_hosts_and_slots() == {"a": 2}


# --- real elastic jobs of plain Python workers ----------------------------------

# argv: OUTDIR STEPS FAILS where FAILS is "host@generation,..." (that worker exits
# 3 at its first step in that generation, after telling the others through the
# KV store, as a dead peer makes their collective fail).
SIM_WORKER = r"""
import json, os, sys, time
from horovodlite.common import elastic
from horovodlite.runner.rendezvous import RendezvousClient
outdir, steps = sys.argv[1], int(sys.argv[2])
fails = {tuple(x.split("@")) for x in sys.argv[3].split(",") if x}
e = os.environ
kv = RendezvousClient(e["HOROVOD_GLOO_RENDEZVOUS_ADDR"], e["HOROVOD_GLOO_RENDEZVOUS_PORT"])
class Listener:
    messages = []
    def on_hosts_updated(self, timestamp, update):
        self.messages.append((timestamp, int(update)))
listener = Listener()
elastic.notification_manager.init()
elastic.notification_manager.register_listener(listener)
me = "%s_%s" % (e["HOROVOD_HOSTNAME"], e["HOROVOD_LOCAL_RANK"])
def record(event):
    with open(os.path.join(outdir, me + ".log"), "a") as f:
        f.write(json.dumps({"event": event, "gen": int(e["HOROVODLITE_ELASTIC_GENERATION"]), "t": time.time(),
                            "rank": int(e["HOROVOD_RANK"]), "size": int(e["HOROVOD_SIZE"]), "pid": os.getpid(),
                            "scope": e.get("HOROVODLITE_GLOO_SCOPE")}) + "\n")
record("start")
step = 0
while step < steps:
    gen = e["HOROVODLITE_ELASTIC_GENERATION"]
    if (e["HOROVOD_HOSTNAME"], gen) in fails:
        kv.put("sim", "failed." + gen, me)
        record("fail")
        sys.exit(3)
    time.sleep(0.2)
    if kv.get("sim", "failed." + gen) is not None or listener.messages:
        listener.messages.clear()
        elastic.rendezvous()
        record("reset")
        continue
    step += 1
record("done")
"""


def _sim(tmp_path, steps, fails=""):
    script = tmp_path / "sim_worker.py"
    script.write_text(SIM_WORKER)
    return [sys.executable, str(script), str(tmp_path), str(steps), fails]


def _logs(tmp_path):
    out = {}
    for name in os.listdir(str(tmp_path)):
        if name.endswith(".log"):
            with open(os.path.join(str(tmp_path), name)) as f:
                out[name[:-4]] = [json.loads(line) for line in f]
    return out


def _discovery_file(tmp_path, text):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(text)
    return _script(tmp_path, "cat %s\n" % hosts, "discover.sh"), hosts


def _elastic(options, command, timeout=120):
    cmd = [sys.executable, "-m", "horovodlite.run"] + options + command
    return subprocess.Popen(cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _pids_gone(logs, timeout=10):
    pids = {r["pid"] for records in logs.values() for r in records}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if os.path.exists("/proc/%d" % p) and
                 open("/proc/%d/stat" % p).read().split(")")[-1].split()[0] != "Z"]
        if not alive:
            return True
        time.sleep(0.1)
    return False


def test_elastic_job_survives_a_failed_worker(tmp_path):
    script, _ = _discovery_file(tmp_path, "127.0.0.1:2\n127.0.0.2:1\n")
    proc = _elastic(["--min-np", "2", "--max-np", "3", "--host-discovery-script", script, "--elastic-timeout", "30"],
                    _sim(tmp_path, 10, "127.0.0.2@1"))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "worker 127.0.0.2[0] (rank 2) exited with code 3" in out, out
    assert "blacklisted host 127.0.0.2" in out and "generation 2: 2 worker(s) on 127.0.0.1:2" in out, out
    logs = _logs(tmp_path)
    for name in ("127.0.0.1_0", "127.0.0.1_1"):
        events = [(r["event"], r["gen"], r["rank"], r["size"]) for r in logs[name]]
        rank = int(name[-1])
        assert events[0] == ("start", 1, rank, 3) and events[-1] == ("done", 2, rank, 2), events
        assert ("reset", 2, rank, 2) in events
        assert logs[name][-1]["scope"] == "global.2"
    assert [r["event"] for r in logs["127.0.0.2_0"]] == ["start", "fail"]
    assert _pids_gone(logs)


def test_elastic_job_takes_in_a_new_host(tmp_path):
    script, hosts = _discovery_file(tmp_path, "127.0.0.1:2\n")
    proc = _elastic(["-np", "2", "--min-np", "2", "--host-discovery-script", script], _sim(tmp_path, 25))
    try:
        deadline = time.monotonic() + 60
        while len(_logs(tmp_path)) < 2:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        added = time.time()
        hosts.write_text("127.0.0.1:2\n127.0.0.3:1\n")
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    logs = _logs(tmp_path)
    new = logs["127.0.0.3_0"]
    assert (new[0]["event"], new[0]["gen"], new[0]["rank"], new[0]["size"]) == ("start", 2, 2, 3), new
    assert new[-1]["event"] == "done"
    for name in ("127.0.0.1_0", "127.0.0.1_1"):
        resets = [r for r in logs[name] if r["event"] == "reset"]
        assert [(r["gen"], r["size"]) for r in resets] == [(2, 3)], logs[name]
    # Discovery is polled every second, workers poll every second: a few seconds.
    joined = max(r["t"] for name in logs for r in logs[name] if r["event"] in ("reset",) or
                 (name == "127.0.0.3_0" and r["event"] == "start"))
    assert joined - added < 10, joined - added
    print("host added -> all 3 workers in generation 2: %.2f s" % (joined - added))


def test_elastic_min_np_not_reached_ends_with_a_message(tmp_path):
    script, _ = _discovery_file(tmp_path, "127.0.0.1:1\n127.0.0.2:1\n")
    start = time.monotonic()
    proc = _elastic(["--min-np", "2", "--host-discovery-script", script, "--elastic-timeout", "3"],
                    _sim(tmp_path, 100, "127.0.0.2@1"))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out
    assert "error: fewer than 2 slot(s) available after --elastic-timeout 3 s: 127.0.0.1:1; blacklisted: " \
           "127.0.0.2" in out, out
    assert time.monotonic() - start < 30
    assert _pids_gone(_logs(tmp_path))


def test_elastic_reset_limit(tmp_path):
    script, _ = _discovery_file(tmp_path, "127.0.0.1:1\n127.0.0.2:1\n127.0.0.3:1\n")
    proc = _elastic(["--min-np", "1", "--host-discovery-script", script, "--reset-limit", "1"],
                    _sim(tmp_path, 100, "127.0.0.3@1,127.0.0.2@2"))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out
    assert "error: the world was re-formed 1 time(s): --reset-limit 1 reached" in out, out
    assert "Job has been reset 1 times, exceeding the limit." in out, out
    assert "one or more processes exited with non-zero status" not in out, out  # as Horovod: the limit's text only
    assert _pids_gone(_logs(tmp_path))


def test_elastic_all_workers_failing(tmp_path):
    script, _ = _discovery_file(tmp_path, "127.0.0.1:1\n127.0.0.2:1\n")
    proc = _elastic(["--min-np", "1", "--host-discovery-script", script],
                    _sim(tmp_path, 100, "127.0.0.1@1,127.0.0.2@1"))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "error: all 2 worker(s) of generation 1 failed" in out, out
    assert re.search(r"Horovod detected that one or more processes exited with non-zero status, thus causing the "
                     r"job to be terminated\. The first process to do so was:\nProcess name: 127\.0\.0\.[12]\[0\]\n"
                     r"Exit code: \d+", out), out


def test_elastic_bad_discovery_output_warns_and_goes_on(tmp_path):
    script, hosts = _discovery_file(tmp_path, "127.0.0.1:2\n")
    proc = _elastic(["--min-np", "2", "--host-discovery-script", script], _sim(tmp_path, 25))
    try:
        deadline = time.monotonic() + 60
        while len(_logs(tmp_path)) < 2:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        hosts.write_text("127.0.0.1:2\nthis is not a host\n")
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "printed a bad line 2: 'this is not a host'" in out and script in out, out
    assert "going on with the last good host set (127.0.0.1:2)" in out, out
    assert all(r["gen"] == 1 for records in _logs(tmp_path).values() for r in records)


def test_elastic_fixed_hosts_and_default_np(tmp_path):
    proc = _elastic(["--min-np", "2", "-H", "127.0.0.1:1,127.0.0.2:1"], _sim(tmp_path, 2))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert sorted(_logs(tmp_path)) == ["127.0.0.1_0", "127.0.0.2_0"]


def test_elastic_worker_killed_with_sigkill(tmp_path):
    """SIGKILL to a worker: the driver records the failure, blacklists its host
    and re-forms the world; the test plays the survivors' failing collective
    (the core's HorovodInternalError) through the KV store."""
    from horovodlite.runner.rendezvous import RendezvousClient
    script, _ = _discovery_file(tmp_path, "127.0.0.1:1\n127.0.0.2:1\n127.0.0.3:1\n")
    proc = _elastic(["--min-np", "2", "--host-discovery-script", script], _sim(tmp_path, 30))
    try:
        deadline = time.monotonic() + 60
        while len(_logs(tmp_path)) < 3:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        victim = _logs(tmp_path)["127.0.0.3_0"][0]
        env = {}
        with open("/proc/%d/environ" % victim["pid"], "rb") as f:
            for item in f.read().split(b"\0"):
                key, _, value = item.decode(errors="replace").partition("=")
                env[key] = value
        killed = time.time()
        os.kill(victim["pid"], 9)
        kv = RendezvousClient(env["HOROVOD_GLOO_RENDEZVOUS_ADDR"], env["HOROVOD_GLOO_RENDEZVOUS_PORT"],
                              secret=env["HOROVODLITE_SECRET_KEY"])
        kv.put("sim", "failed.1", "killed")
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "worker 127.0.0.3[0] (rank 2) was killed by signal 9 (SIGKILL)" in out, out
    assert "blacklisted host 127.0.0.3" in out, out
    logs = _logs(tmp_path)
    resets = [r for n in ("127.0.0.1_0", "127.0.0.2_0") for r in logs[n] if r["event"] == "reset"]
    assert sorted((r["gen"], r["rank"], r["size"]) for r in resets) == [(2, 0, 2), (2, 1, 2)]
    print("worker killed -> survivors in generation 2: %.2f s" % (max(r["t"] for r in resets) - killed))
