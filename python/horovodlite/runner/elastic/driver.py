"""The elastic driver: keeps a world of workers over the hosts that discovery
reports, re-forms it when a worker fails or hosts come and go (Horovod 0.28's
horovod/runner/elastic/{driver,registration}.py semantics, our own code).

Generations. Each world is a generation g with its own rendezvous scope
"global.<g>" (and the plain "global" scope is cleared when a generation forms).
Every worker of generation g reports exactly once: READY when it asks the driver
for its next place (GET /rendezvous/rank_and_size/<host>:<local_rank>, after a
collective failed or the hosts changed), SUCCESS or FAILURE when its process
exits. Once all have reported, the driver decides (the "barrier action"):
  - any SUCCESS: the job is over (exit code 0 unless a worker failed);
  - all FAILURE: the job failed;
  - otherwise the hosts of failed workers are blacklisted (with the cooldown),
    and unless every host is blacklisted or the reset limit is reached, the next
    generation forms: wait (up to --elastic-timeout) for at least --min-np slots,
    assign up to --max-np ranks (old hosts keep the lowest ranks), start workers
    on new slots, and answer the READY workers with their new places.
Workers whose slot is no longer assigned get rank -1 and leave.

Host changes reach the workers through GET /rendezvous/hosts_updated (a JSON
{timestamp, update}); they poll it every second and raise HostsUpdatedInterrupt
at their next commit (horovodlite.common.elastic).
"""

import json
import os
import sys
import threading
import time

from horovodlite.common.host_update import HostUpdateResult
from horovodlite.runner import horovod_messages
from horovodlite.runner.elastic.discovery import DiscoveryError, HostManager
from horovodlite.runner.worker_env import host_assignments

DISCOVER_HOSTS_FREQUENCY_S = 1.0
DEFAULT_ELASTIC_TIMEOUT_S = 600

READY, SUCCESS, FAILURE = "READY", "SUCCESS", "FAILURE"
RANK_AND_SIZE = "/rendezvous/rank_and_size/"
HOSTS_UPDATED = "/rendezvous/hosts_updated"


class JobEnded(Exception):
    pass


class ElasticDriver:
    def __init__(self, host_manager, min_np, max_np, start_worker, *, timeout_s=DEFAULT_ELASTIC_TIMEOUT_S,
                 reset_limit=None, rendezvous=None, log=None, discovery_interval_s=DISCOVER_HOSTS_FREQUENCY_S,
                 blacklist_failed_hosts=True, timeout_name="--elastic-timeout"):
        """start_worker(slot_info, generation, env_extra) starts a worker process
        and returns an object with terminate(); the caller reports its exit
        through on_worker_exit(host, local_rank, returncode).

        blacklist_failed_hosts=False: a failed worker frees its slot and nothing
        more; discovery alone says what the host can take (Ray: a dead actor is a
        process failure, and Ray drops dead nodes itself). timeout_name: how the
        messages name the elastic timeout (the caller's flag or argument)."""
        assert isinstance(host_manager, HostManager)
        self.hosts = host_manager
        self.min_np = min_np
        self.max_np = max_np
        self.timeout_s = timeout_s
        self.reset_limit = reset_limit
        self.rendezvous = rendezvous
        self._start_worker = start_worker
        self._log = log or (lambda level, msg: print("horovodlite-run: %s%s" % (
            "" if level == "info" else level + ": ", msg), file=sys.stderr, flush=True))
        self._interval = discovery_interval_s
        self._blacklist_failed_hosts = blacklist_failed_hosts
        self._timeout_name = timeout_name

        self._hosts_cond = threading.Condition()   # host list changes
        self._lock = threading.Condition()          # generation, assignments, registry
        self._generation = 0
        self._slots = {}           # (host, local_rank) -> SlotInfo of the current generation
        self._states = {}          # (host, local_rank) -> READY/SUCCESS/FAILURE in this generation
        self._exit_codes = {}      # (host, local_rank) -> rc recorded in this generation
        self._workers = {}         # (host, local_rank) -> started worker (running)
        self._reset_count = 0
        self._last_update = (0, int(HostUpdateResult.no_update))
        self._finished = threading.Event()
        self._result = None        # (exit_code, message)
        self._failures = []        # [(generation, host, local_rank, rc)] of the last generation with one
        self._discovery_error = None
        self._thread = None
        self._deciding = False
        self._first_record = None  # monotonic time of this generation's first report

    # --- lifecycle ---------------------------------------------------------

    def start(self, np):
        """Runs discovery once (a failure here ends the job at once: nothing to
        fall back on), starts the discovery thread, then the first generation
        with at least np slots."""
        try:
            self.hosts.update_available_hosts()
        except DiscoveryError as e:
            raise JobEnded("%s (at start: no earlier host set to go on with)" % e) from e
        self._thread = threading.Thread(target=self._discover, name="hvl-discovery", daemon=True)
        self._thread.start()
        with self._lock:
            self._activate(np)

    def first_failure(self):
        """(host, local_rank, exit code) of the first worker that exited non-zero
        in the last generation that had one (Horovod's "first process to do so"),
        or None."""
        with self._lock:
            return tuple(self._failures[0][1:]) if self._failures else None

    def wait(self):
        """Blocks until the job ends; returns (exit_code, message or None)."""
        self._finished.wait()
        return self._result

    def stop(self, exit_code, message=None):
        """Ends the job (idempotent): every worker is terminated."""
        with self._lock:
            if self._finished.is_set():
                return
            self._result = (exit_code, message)
            self._finished.set()
            workers = list(self._workers.values())
            self._lock.notify_all()
        with self._hosts_cond:
            self._hosts_cond.notify_all()
        for w in workers:
            w.terminate()

    def finished(self):
        return self._finished.is_set()

    # --- discovery ------------------------------------------------------------

    def _discover(self):
        while not self._finished.wait(self._interval):
            self.discover_once()
            self.check_rendezvous_timeout()

    def check_rendezvous_timeout(self):
        """Once a worker of this generation has reported (failed, finished or
        asked for its next place), all must within --elastic-timeout: otherwise
        (a survivor stuck in a collective that never fails, say) the job ends,
        naming those that did not."""
        with self._lock:
            if self._deciding or self._first_record is None or self._finished.is_set():
                return
            if time.monotonic() - self._first_record < self.timeout_s:
                return
            missing = sorted("%s[%d] (rank %d)" % (k[0], k[1], s.rank) for k, s in self._slots.items()
                             if k not in self._states)
            message = ("workers of generation %d did not report within %s %g s after the first "
                       "one did: %s" % (self._generation, self._timeout_name, self.timeout_s, ", ".join(missing)))
        self.stop(1, message)

    def discover_once(self):
        with self._hosts_cond:
            try:
                update = self.hosts.update_available_hosts()
            except DiscoveryError as e:
                if str(e) != self._discovery_error:
                    self._log("warning", "%s; going on with the last good host set (%s)" % (
                        e, _format(self.hosts.available_hosts())))
                self._discovery_error = str(e)
                return
            if self._discovery_error is not None:
                self._log("info", "host discovery works again: %s" % _format(self.hosts.available_hosts()))
                self._discovery_error = None
            if update != HostUpdateResult.no_update:
                self._hosts_cond.notify_all()
                self._notify_workers(update)

    def _notify_workers(self, update):
        with self._lock:
            if not self._slots:
                return
            current = {k: (s.rank, s.size) for k, s in self._slots.items()}
            nxt = self._next_assignment(self.hosts.available_hosts())
            nxt = {(s.hostname, s.local_rank): (s.rank, s.size) for s in nxt} if nxt else {}
            if nxt == current:
                return
            timestamp = max(int(time.time()), self._last_update[0] + 1)
            self._last_update = (timestamp, int(update))
            self._log("info", "hosts changed (%s): %s; workers are told at their next commit" % (
                update.name if hasattr(update, "name") and update.name else int(update),
                _format(self.hosts.available_hosts())))

    # --- assignments ------------------------------------------------------------

    def _next_assignment(self, available):
        total = sum(slots for _, slots in available)
        if total < self.min_np:
            return None
        return host_assignments(available, min(total, self.max_np))

    def _wait_for_slots(self, np):
        deadline = time.monotonic() + self.timeout_s
        if self._generation > 0:
            # A reset: decide on the hosts as they are now, not as last polled
            # (the failure that caused it may have changed them).
            self.discover_once()
        with self._hosts_cond:
            while True:
                if self._finished.is_set():
                    raise JobEnded(None)
                available = self.hosts.available_hosts()
                if sum(s for _, s in available) >= np:
                    return available
                left = deadline - time.monotonic()
                if left <= 0:
                    raise JobEnded(
                        "fewer than %d slot(s) available after %s %g s: %s%s" % (
                            np, self._timeout_name, self.timeout_s, _format(available) or "no hosts",
                            "; blacklisted: %s" % ", ".join(self.hosts.blacklisted_hosts())
                            if self.hosts.blacklisted_hosts() else ""))
                self._hosts_cond.wait(min(left, 1.0))

    def _activate(self, np):
        """With self._lock held: the next generation."""
        # Waiting for hosts must not hold the generation lock (discovery's
        # notifications read it); nothing else changes the generation meanwhile:
        # every worker of the current one is waiting for this decision.
        self._lock.release()
        try:
            available = self._wait_for_slots(np)
        finally:
            self._lock.acquire()
        slots = self._next_assignment(available)
        previous_hosts = {h for h, _ in self._slots}
        new_hosts = {s.hostname for s in slots}
        if previous_hosts and not previous_hosts & new_hosts:
            raise JobEnded("no host of the previous world remains (%s -> %s): the state cannot be handed on"
                           % (", ".join(sorted(previous_hosts)), ", ".join(sorted(new_hosts))))
        self._generation += 1
        self._slots = {(s.hostname, s.local_rank): s for s in slots}
        self._states = {}
        self._exit_codes = {}
        self._first_record = None
        if self.rendezvous is not None:
            self.rendezvous.reset()  # every old scope: no worker is inside a rendezvous now
        self._log("info", "generation %d: %d worker(s) on %s" % (
            self._generation, len(slots), ", ".join("%s:%d" % (h, n) for h, n in _count_hosts(slots))))
        for key, slot in self._slots.items():
            if key not in self._workers:
                self._workers[key] = self._start_worker(slot, self._generation, self.worker_env())
        for key in [k for k in self._workers if k not in self._slots]:
            # Leaves when it asks for its place (rank -1); ended for sure here.
            self._workers.pop(key).terminate()

    def worker_env(self):
        return {
            "HOROVOD_ELASTIC": "1",
            "HOROVODLITE_ELASTIC_GENERATION": str(self._generation),
            "HOROVODLITE_GLOO_SCOPE": "global.%d" % self._generation,
            "HOROVODLITE_ELASTIC_LAST_UPDATE": str(self._last_update[0]),
        }

    # --- the registry -------------------------------------------------------------

    def record_ready(self, host, local_rank):
        """A worker asks for its place in the next generation; blocks until it
        forms. Returns a dict (rank -1 when the worker has no place)."""
        key = (host, local_rank)
        with self._lock:
            if self._finished.is_set():
                return {"rank": -1, "reason": "the job has ended"}
            if key not in self._slots:
                return {"rank": -1, "reason": "%s[%d] has no slot in generation %d" % (
                    host, local_rank, self._generation)}
            generation = self._record(key, READY)
            while (self._generation == generation or self._deciding) and not self._finished.is_set():
                self._lock.wait(1.0)
            if self._finished.is_set():
                return {"rank": -1, "reason": "the job has ended"}
            slot = self._slots.get(key)
            if slot is None:
                return {"rank": -1, "reason": "%s[%d] has no slot in generation %d" % (
                    host, local_rank, self._generation)}
            out = slot._asdict()
            out.update(generation=self._generation, scope="global.%d" % self._generation,
                       last_update=self._last_update[0])
            return out

    def on_worker_exit(self, host, local_rank, returncode, worker=None):
        key = (host, local_rank)
        with self._lock:
            if worker is not None:
                if self._workers.get(key) is not worker:
                    return  # an ended worker of an earlier generation
                self._workers.pop(key)
            if self._finished.is_set() or key not in self._slots or self.hosts.is_blacklisted(host):
                return
            if returncode != 0:
                self._log("warning", "worker %s[%d] (rank %d) %s" % (
                    host, local_rank, self._slots[key].rank, _describe(returncode)))
                if not self._failures or self._failures[0][0] != self._generation:
                    self._failures = [(self._generation, host, local_rank, returncode)]
                else:
                    self._failures.append((self._generation, host, local_rank, returncode))
            if self._deciding:
                return  # reported READY already; the next generation starts a new worker there
            self._exit_codes[key] = returncode
            self._record(key, SUCCESS if returncode == 0 else FAILURE)

    def _record(self, key, state):
        """With self._lock held. FAILURE overrides READY; returns the generation."""
        if key not in self._states or state == FAILURE:
            self._states[key] = state
        if self._first_record is None:
            self._first_record = time.monotonic()
        generation = self._generation
        if len(self._states) == len(self._slots) and not self._deciding:
            self._deciding = True
            try:
                self._on_all_recorded()
            except JobEnded as e:
                if e.args and e.args[0]:
                    threading.Thread(target=self.stop, args=(1, e.args[0]), daemon=True).start()
            finally:
                self._deciding = False
                self._lock.notify_all()
        return generation

    def _on_all_recorded(self):
        states = self._states
        successes = [k for k, s in states.items() if s == SUCCESS]
        failures = [k for k, s in states.items() if s == FAILURE]
        if successes:
            failed = [self._exit_codes[k] for k in sorted(failures)]
            threading.Thread(target=self.stop, args=(failed[0] if failed else 0, None), daemon=True).start()
            raise JobEnded(None)
        if len(failures) == len(states):
            raise JobEnded("all %d worker(s) of generation %d failed" % (len(states), self._generation))
        for host in sorted({h for h, _ in failures}) if self._blacklist_failed_hosts else ():
            self.hosts.blacklist(host)
            self._log("warning", "blacklisted host %s (a worker failed there)" % host)
        for key in [k for k in self._workers if self.hosts.is_blacklisted(k[0])]:
            self._workers.pop(key).terminate()
        if all(self.hosts.is_blacklisted(h) for h, _ in states):
            raise JobEnded("every host of generation %d is blacklisted (%s)" % (
                self._generation, ", ".join(sorted({h for h, _ in states}))))
        if self.reset_limit is not None and self._reset_count >= self.reset_limit:
            raise JobEnded("the world was re-formed %d time(s): --reset-limit %d reached\n%s" % (
                self._reset_count, self.reset_limit, horovod_messages.reset_limit_exceeded(self.reset_limit)))
        self._reset_count += 1
        self._activate(self.min_np)

    # --- HTTP ---------------------------------------------------------------------

    def http_get_hook(self, handler):
        """RendezvousServer get_hook: serves /rendezvous/..."""
        path = handler.path.split("?", 1)[0]
        if path.startswith(RANK_AND_SIZE):
            host, _, local_rank = path[len(RANK_AND_SIZE):].rpartition(":")
            try:
                local_rank = int(local_rank)
            except ValueError:
                handler._reply(400, b"expected /rendezvous/rank_and_size/<host>:<local_rank>\n", "text/plain")
                return True
            body = json.dumps(self.record_ready(host, local_rank)).encode()
            handler._reply(200, body, "application/json")
            return True
        if path == HOSTS_UPDATED:
            with self._lock:
                timestamp, update = self._last_update
            handler._reply(200, json.dumps({"timestamp": timestamp, "update": update}).encode(),
                           "application/json")
            return True
        return False

    # --- introspection (tests) --------------------------------------------------------

    @property
    def generation(self):
        return self._generation

    @property
    def reset_count(self):
        return self._reset_count

    def current_slots(self):
        with self._lock:
            return sorted(self._slots.values(), key=lambda s: s.rank)


def _count_hosts(slots):
    out = []
    for s in slots:
        if out and out[-1][0] == s.hostname:
            out[-1] = (s.hostname, out[-1][1] + 1)
        else:
            out.append((s.hostname, 1))
    return out


def _format(hosts):
    return ",".join("%s:%d" % (h, n) for h, n in hosts)


def _describe(rc):
    from horovodlite.runner.gloo_run import describe_exit
    return describe_exit(rc)


def env_flag(name):
    return os.environ.get(name, "") not in ("", "0")
