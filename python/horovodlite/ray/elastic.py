"""Elastic jobs on Ray actors: RayExecutor(settings, min_workers=..., max_workers=...)
(Horovod 0.28's elastic Ray executor semantics, our own code).

The elastic driver of horovodlite-run (horovodlite.runner.elastic.driver) runs in
the Ray driver process with its rendezvous server. Its "hosts" are the alive
Ray nodes (by IP, as Horovod names them), each with as many slots as Ray can
place workers there now: the node's available CPUs (GPUs) plus those our own
running workers hold, divided by cpus_per_worker (gpus_per_worker). The driver
asks for at least min_workers slots (waiting up to elastic_timeout) and takes
up to max_workers; each slot gets a new actor pinned to its node (the
"node:<ip>" resource) that runs fn under the elastic worker environment
(HOROVOD_ELASTIC=1, HOROVOD_HOSTNAME, HOROVOD_LOCAL_RANK, the rendezvous
address and the generation's scope); fn uses hvd.elastic.run and a State.

A worker whose actor dies (ray.kill, os._exit, a crash) or whose fn raises is a
failed worker: the survivors' collectives fail, they roll back to their last
commit and ask the driver for their next place; the driver forms the next
world from the slots discovery reports then (a dead actor's CPU counts again
once Ray has it back: the job grows back to max_workers, at once or at a later
commit through hosts_updated). Failed workers do not blacklist their node.
"""

import threading

from horovodlite.runner import gloo_run
from horovodlite.runner.elastic.discovery import HostManager
from horovodlite.runner.elastic.driver import ElasticDriver, JobEnded
from horovodlite.runner.rendezvous import RendezvousServer


class RayHostDiscovery:
    """{node ip: slots} over the alive Ray nodes; `held(ip)` -> {"CPU": n, "GPU": m}
    that our running workers hold on that node (they count as placeable)."""

    def __init__(self, cpus_per_worker, gpus_per_worker=0, held=None):
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = gpus_per_worker
        self.held = held or (lambda ip: {})
        self._seen = None  # the previous poll's counts

    def find_available_hosts_and_slots(self):
        """A node's slots grow only when two polls in a row see the room (Ray's
        resource view lags: a CPU freed by a dead actor shows as free for a moment
        before the actor waiting for it gets it); they shrink at once."""
        now = self._count()
        seen, self._seen = self._seen, now
        if seen is None:
            return now
        out = {ip: min(slots, seen.get(ip, 0)) for ip, slots in now.items()}
        return {ip: slots for ip, slots in out.items() if slots > 0}

    def __str__(self):
        return "Ray nodes (%g CPU%s per worker)" % (
            self.cpus_per_worker, ", %g GPU" % self.gpus_per_worker if self.gpus_per_worker else "")

    def _count(self):
        import ray
        try:
            from ray._private.state import available_resources_per_node
            available = available_resources_per_node()
        except (ImportError, AttributeError):  # another Ray: the cluster's total, right for one node
            available = None
        hosts, addresses = {}, set()
        for node in ray.nodes():
            if not node.get("Alive", node.get("alive")):
                continue
            ip = node["NodeManagerAddress"]
            if ip in addresses:
                continue  # several raylets on one address: the first one's
            addresses.add(ip)
            free = dict(available.get(node["NodeID"], {}) if available is not None else ray.available_resources())
            for resource, amount in self.held(ip).items():
                free[resource] = free.get(resource, 0) + amount
            slots = int(free.get("CPU", 0) // self.cpus_per_worker) if self.cpus_per_worker else 1 << 30
            if self.gpus_per_worker:
                slots = min(slots, int(free.get("GPU", 0) // self.gpus_per_worker))
            if slots > 0:
                hosts[ip] = slots
        return hosts


class _ActorWorker:
    """One slot's actor and the thread that reports its end to the driver."""

    def __init__(self, job, slot, actor):
        self.job = job
        self.slot = slot
        self.actor = actor
        self.placed = False
        self.done = threading.Event()

    def terminate(self):
        import ray
        try:
            ray.kill(self.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


class ElasticRayJob:
    """One elastic run(fn): the driver, the rendezvous server and the actors."""

    def __init__(self, executor, fn, args, kwargs):
        ex = executor
        self.ex = ex
        self.fn, self.args, self.kwargs = fn, tuple(args or ()), dict(kwargs or {})
        self.lock = threading.Lock()
        self.workers = []
        self.results = {}   # (host, local_rank) -> fn's value
        self.errors = []    # "host[local_rank] (rank r): what"
        self.discovery = ex.discovery or RayHostDiscovery(ex.cpus_per_worker, ex.gpus_per_worker, self.held)
        self.server = None
        self.addr = None
        self.driver = ElasticDriver(
            HostManager(self.discovery, ex.cooldown_range), ex.min_workers, ex.max_workers or (1 << 30),
            self.start_worker, timeout_s=ex.elastic_timeout, reset_limit=ex.reset_limit, log=self.log,
            blacklist_failed_hosts=False, timeout_name="elastic_timeout")

    def log(self, level, message):
        import sys
        if level != "debug" and (self.ex.settings.verbose >= 1 or level in ("warning", "error")):
            print("horovodlite.ray: %s%s" % ("" if level == "info" else level + ": ", message), file=sys.stderr,
                  flush=True)

    def held(self, ip):
        # Every worker of ours that has not ended: once Ray has placed it, its
        # CPUs are no longer "available"; before (an instant, unless Ray has no
        # room) they count twice, which only confirms the slots it was given.
        with self.lock:
            mine = [w for w in self.workers if not w.done.is_set() and w.slot.hostname == ip]
        return {"CPU": self.ex.cpus_per_worker * len(mine), "GPU": self.ex.gpus_per_worker * len(mine)}

    def start_worker(self, slot, generation, extra_env):
        import ray
        env = gloo_run.slot_environment(slot, self.addr, self.port, timeout_s=self.ex.settings.timeout_s,
                                        secret=self.server.secret)
        env.update(extra_env)
        env.update(self.ex.extra_env_vars)
        options = {"num_cpus": self.ex.cpus_per_worker, "num_gpus": self.ex.gpus_per_worker,
                   "resources": {"node:%s" % slot.hostname: 0.001}}
        actor = ray.remote(self.ex.worker_cls).options(**options).remote(*self.ex.executable)
        worker = _ActorWorker(self, slot, actor)
        with self.lock:
            self.workers.append(worker)
        threading.Thread(target=self._watch, args=(worker, env, generation), daemon=True,
                         name="hvl-ray-%s-%d" % (slot.hostname, slot.local_rank)).start()
        return worker

    def _watch(self, worker, env, generation):
        """Waits for the actor to be placed (timeout_s), runs fn, reports its end."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
        slot, rc = worker.slot, 1
        where = "%s[%d] (rank %d, generation %d)" % (slot.hostname, slot.local_rank, slot.rank, generation)
        try:
            ray.get(worker.actor.pid.remote(), timeout=self.ex.settings.timeout_s)
            worker.placed = True
            kind, value = ray.get(worker.actor.run_elastic.remote(self.fn, self.args, self.kwargs, env))
            if kind == "result":
                with self.lock:
                    self.results[(slot.hostname, slot.local_rank)] = value
            rc = 0
        except GetTimeoutError:
            self._error(where, "its actor was not placed within timeout_s=%s s" % self.ex.settings.timeout_s)
            worker.terminate()
        except RayTaskError as e:
            cause = getattr(e, "cause", None) or e
            self._error(where, "fn raised %s: %s" % (type(cause).__name__, cause))
        except RayActorError as e:
            self._error(where, "its actor died (%s)" % str(e).strip().splitlines()[0][:200])
        except Exception as e:  # noqa: BLE001 - any other end is a failed worker
            self._error(where, "%s: %s" % (type(e).__name__, e))
        worker.done.set()
        self.driver.on_worker_exit(slot.hostname, slot.local_rank, rc, worker)

    def _error(self, where, what):
        if self.driver.finished():
            return  # ended by the driver itself
        with self.lock:
            self.errors.append("%s: %s" % (where, what))
        self.log("warning", "worker %s: %s" % (where, what))

    def run(self):
        import ray

        from horovodlite.runner import worker_env
        try:
            hosts = self.discovery.find_available_hosts_and_slots()
        except Exception:  # noqa: BLE001 - driver.start reports it
            hosts = {}
        here = ray.util.get_node_ip_address()
        local = (not self.ex.settings.nics and set(hosts) <= {here})
        self.addr = "127.0.0.1" if local else worker_env.driver_address(self.ex.settings.nics)
        # A fresh secret per job (RendezvousServer makes it); Ray's actor calls carry it to the workers.
        self.server = RendezvousServer(bind_host=gloo_run.bind_address(self.addr), port=0)
        self.server.get_hook = self.driver.http_get_hook
        self.driver.rendezvous = self.server
        self.port = self.server.start()
        try:
            try:
                self.driver.start(self.ex.min_workers)
            except JobEnded as e:
                self.driver.stop(1, str(e))
            code, message = self.driver.wait()
        finally:
            self.driver.stop(1, "interrupted")
            with self.lock:
                workers = list(self.workers)
            for w in workers:
                w.terminate()
            self.server.stop()
        if code != 0:
            with self.lock:
                errors = list(self.errors)
            detail = message or "a worker failed"
            if errors and not message:
                detail += ": " + errors[-1]
            return None, detail, errors
        final = {(s.hostname, s.local_rank): s.rank for s in self.driver.current_slots()}
        with self.lock:
            ranked = sorted((final[k], v) for k, v in self.results.items() if k in final)
        return [v for _, v in ranked], None, []
