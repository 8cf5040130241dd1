"""horovodlite.ray.RayExecutor: a horovodlite job on Ray actors (horovod.ray's API).

Control plane (docs/engines.md): the Gloo launch of
docs/elastic.md#the-gloo-launch-contract. The
executor (in the Ray driver) serves the rendezvous KV store; start() places
`num_workers` actors (a placement group: PACK for num_workers, STRICT_SPREAD
over num_hosts), asks each for its host, gives out ranks contiguous per host and
sets the contract's HOROVOD_* variables in every actor's process. Functions then
run inside the actors (fn calls hvd.init(), the first time with those variables;
later functions find horovodlite already initialised), so the same workers run
several functions in a row and keep their state.
"""

import os
import sys
import time

from horovodlite.runner import worker_env
from horovodlite.runner.gloo_run import bind_address
from horovodlite.runner.rendezvous import RendezvousServer


class RayJobError(RuntimeError):
    """fn failed on one or more ranks (`ranks`)."""

    def __init__(self, message, ranks=()):
        super().__init__(message)
        self.ranks = list(ranks)


class RaySettings:
    """What create_settings() returns (Horovod's RayExecutor settings)."""

    def __init__(self, timeout_s=30, placement_group_timeout_s=100, nics=None, verbose=1):
        self.timeout_s = timeout_s
        self.placement_group_timeout_s = placement_group_timeout_s
        self.nics = set(nics) if nics else None
        self.verbose = verbose

    def __repr__(self):
        return "RaySettings(timeout_s=%r, placement_group_timeout_s=%r, nics=%r)" % (
            self.timeout_s, self.placement_group_timeout_s, self.nics)


class BaseHorovodWorker:
    """The actor class: one per rank. `executable` is the object that
    start(executable_cls=...) made in this worker (None by default)."""

    def __init__(self, executable_cls=None, executable_args=None, executable_kwargs=None):
        self.executable = None
        if executable_cls is not None:
            self.executable = executable_cls(*(executable_args or ()), **(executable_kwargs or {}))

    def hostname(self):
        return worker_env.host_identity()

    def node_id(self):
        import ray
        return ray.get_runtime_context().get_node_id()

    def pid(self):
        return os.getpid()

    def update_env_vars(self, env):
        os.environ.update({str(k): str(v) for k, v in env.items()})

    def env_vars(self):
        return dict(os.environ)

    def execute(self, fn):
        """fn(executable): Horovod's execute()."""
        return fn(self.executable)

    def run(self, fn, args, kwargs):
        return fn(*args, **kwargs)

    def run_elastic(self, fn, args, kwargs, env):
        """A worker of an elastic job: fn under the driver's environment.
        ("result", value), or ("left", code) when fn ended the worker (no place
        in the next world: SystemExit(0))."""
        self.update_env_vars(env)
        try:
            return "result", fn(*args, **kwargs)
        except SystemExit as e:
            if e.code not in (None, 0):
                raise RuntimeError("fn called sys.exit(%r)" % (e.code,)) from None
            return "left", 0

    def shutdown_horovodlite(self):
        mod = sys.modules.get("horovodlite.torch")
        if mod is not None and mod.is_initialized():
            mod.shutdown()


class RayExecutor:
    """Runs functions on `num_workers` Ray actors with horovodlite's Gloo
    environment set up among them.

        settings = RayExecutor.create_settings(timeout_s=30)
        executor = RayExecutor(settings, num_workers=2, cpus_per_worker=1)
        executor.start()
        results = executor.run(train_fn, args=(...,))   # one result per rank, by rank
        executor.shutdown()

    Either num_workers, or num_hosts with num_workers_per_host; or, for an
    elastic job (horovodlite.ray.elastic), min_workers with an optional
    max_workers: run(fn) then starts between min_workers and max_workers actors
    (as many as Ray can place) running fn, which uses hvd.elastic.run and a
    State; a failed worker re-forms the world with the others, and a new actor
    takes its place when Ray can place one again.
    """

    @staticmethod
    def create_settings(timeout_s=30, ssh_identity_file=None, ssh_str=None, placement_group_timeout_s=100,
                        nics=None, verbose=1):
        """timeout_s: seconds for the workers to start and for Gloo's rendezvous;
        placement_group_timeout_s: seconds for Ray to reserve the workers' resources;
        nics: network interfaces for the rendezvous address and Gloo. (ssh_* are
        accepted for Horovod's signature and unused: Ray starts the workers.)"""
        return RaySettings(timeout_s=timeout_s, placement_group_timeout_s=placement_group_timeout_s, nics=nics,
                           verbose=verbose)

    def __init__(self, settings=None, num_workers=None, num_hosts=None, num_workers_per_host=1, cpus_per_worker=1,
                 use_gpu=False, gpus_per_worker=None, use_current_placement_group=True, min_workers=None,
                 max_workers=None, reset_limit=None, cooldown_range=None, elastic_timeout=1200,
                 override_discovery=True):
        self.settings = settings or RaySettings()
        self.elastic = min_workers is not None or max_workers is not None
        if self.elastic:
            self._init_elastic(num_workers, num_hosts, cpus_per_worker, min_workers, max_workers, reset_limit,
                               cooldown_range, elastic_timeout, override_discovery)
            self.gpus_per_worker = gpus_per_worker if gpus_per_worker is not None else (1 if use_gpu else 0)
            self.use_gpu = use_gpu
            return
        if (num_workers is None) == (num_hosts is None):
            raise ValueError("horovodlite.ray.RayExecutor: pass either num_workers or num_hosts (with "
                             "num_workers_per_host), not %s" % ("both" if num_workers is not None else "neither"))
        for name, value in (("num_workers", num_workers), ("num_hosts", num_hosts),
                            ("num_workers_per_host", num_workers_per_host)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError("horovodlite.ray.RayExecutor: %s must be a positive int, got %r" % (name, value))
        if cpus_per_worker <= 0:
            raise ValueError("horovodlite.ray.RayExecutor: cpus_per_worker must be > 0, got %r" % (cpus_per_worker,))
        self.num_hosts = num_hosts
        self.num_workers_per_host = num_workers_per_host
        self.num_workers = num_workers if num_workers is not None else num_hosts * num_workers_per_host
        self.cpus_per_worker = cpus_per_worker
        self.use_gpu = use_gpu
        self.gpus_per_worker = gpus_per_worker if gpus_per_worker is not None else (1 if use_gpu else 0)
        self.use_current_placement_group = use_current_placement_group
        self.workers = []
        self.slots = []
        self._server = None
        self._placement_group = None
        self._owns_placement_group = False

    def _init_elastic(self, num_workers, num_hosts, cpus_per_worker, min_workers, max_workers, reset_limit,
                      cooldown_range, elastic_timeout, override_discovery):
        name = "horovodlite.ray.RayExecutor"
        if not isinstance(min_workers, int) or min_workers < 1:
            raise ValueError("%s: max_workers needs a positive int min_workers, got min_workers=%r"
                             % (name, min_workers))
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < min_workers):
            raise ValueError("%s: max_workers must be an int >= min_workers (%d), got %r"
                             % (name, min_workers, max_workers))
        if num_workers is not None or num_hosts is not None:
            raise ValueError("%s: pass either num_workers/num_hosts (a fixed job) or min_workers/max_workers "
                             "(an elastic job), not both" % name)
        if cpus_per_worker <= 0:
            raise ValueError("%s: cpus_per_worker must be > 0, got %r" % (name, cpus_per_worker))
        if elastic_timeout is None or elastic_timeout <= 0:
            raise ValueError("%s: elastic_timeout must be > 0 s, got %r" % (name, elastic_timeout))
        discovery = None
        if not override_discovery:
            discovery = getattr(self.settings, "discovery", None)
            if discovery is None:
                raise ValueError("%s: override_discovery=False needs settings.discovery (an object with "
                                 "find_available_hosts_and_slots() -> {node ip: slots})" % name)
        self.min_workers, self.max_workers = min_workers, max_workers
        self.reset_limit, self.cooldown_range, self.elastic_timeout = reset_limit, cooldown_range, elastic_timeout
        self.discovery = discovery
        self.cpus_per_worker = cpus_per_worker
        self.num_workers = None
        self.workers = []
        self.slots = []
        self.worker_cls = BaseHorovodWorker
        self.executable = (None, None, None)
        self.extra_env_vars = {}
        self._started = False
        self._server = None
        self._placement_group = None

    # ------------------------------------------------------------ lifecycle

    def _bundle(self, workers):
        bundle = {"CPU": self.cpus_per_worker * workers}
        if self.gpus_per_worker:
            bundle["GPU"] = self.gpus_per_worker * workers
        return bundle

    def _reserve(self, ray):
        from ray.util.placement_group import get_current_placement_group, placement_group
        current = get_current_placement_group() if self.use_current_placement_group else None
        if current is not None:
            self._placement_group, self._owns_placement_group = current, False
            return
        if self.num_hosts is not None:
            bundles = [self._bundle(self.num_workers_per_host) for _ in range(self.num_hosts)]
            strategy = "STRICT_SPREAD"
        else:
            bundles = [self._bundle(1) for _ in range(self.num_workers)]
            strategy = "PACK"
        pg = placement_group(bundles, strategy=strategy)
        self._placement_group, self._owns_placement_group = pg, True
        timeout = self.settings.placement_group_timeout_s
        ready, _ = ray.wait([pg.ready()], timeout=timeout)
        if not ready:
            raise TimeoutError(
                "horovodlite.ray.RayExecutor.start: 0 of %d workers started: Ray could not reserve %s "
                "(%s) within placement_group_timeout_s=%s s; the cluster has %s"
                % (self.num_workers, bundles, strategy, timeout, ray.cluster_resources()))

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None, extra_env_vars=None):
        """Starts the workers (Ray actors), gives them ranks and the Gloo
        environment. executable_cls is instantiated in every worker (see execute())."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        if self.elastic:
            # The actors start in run(), as many as Ray can place then.
            if self._started:
                raise RuntimeError("horovodlite.ray.RayExecutor.start: already started; call shutdown() first")
            if not ray.is_initialized():
                ray.init()
            self.executable = (executable_cls, executable_args, executable_kwargs)
            self.extra_env_vars = {str(k): str(v) for k, v in (extra_env_vars or {}).items()}
            self._started = True
            return
        if self.workers:
            raise RuntimeError("horovodlite.ray.RayExecutor.start: already started; call shutdown() first")
        t0 = time.monotonic()
        if not ray.is_initialized():
            ray.init()
        try:
            self._reserve(ray)
            actor_cls = ray.remote(BaseHorovodWorker)
            for index in range(self.num_workers):
                bundle = index // self.num_workers_per_host if self.num_hosts is not None else index
                if not self._owns_placement_group:
                    bundle = -1
                options = {"num_cpus": self.cpus_per_worker, "num_gpus": self.gpus_per_worker,
                           "scheduling_strategy": PlacementGroupSchedulingStrategy(
                               placement_group=self._placement_group, placement_group_bundle_index=bundle)}
                self.workers.append(actor_cls.options(**options).remote(executable_cls, executable_args,
                                                                        executable_kwargs))
            refs = [w.hostname.remote() for w in self.workers]
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.settings.timeout_s)
            if len(ready) < len(refs):
                raise TimeoutError("horovodlite.ray.RayExecutor.start: %d of %d workers started within "
                                   "timeout_s=%s s" % (len(ready), len(refs), self.settings.timeout_s))
            hosts = ray.get(refs)
            self.slots = worker_env.assign_ranks(hosts)
            # Actor index order is rank order from here on.
            order = sorted(range(len(self.workers)), key=lambda i: self.slots[i].rank)
            self.workers = [self.workers[i] for i in order]
            self.slots = [self.slots[i] for i in order]
            local = all(h == hosts[0] for h in hosts) and hosts[0] == worker_env.host_identity()
            addr = "127.0.0.1" if local and not self.settings.nics else worker_env.driver_address(self.settings.nics)
            # A fresh secret per job (RendezvousServer makes it); Ray's actor calls carry it to the workers.
            self._server = RendezvousServer(bind_host=bind_address(addr), port=0)
            port = self._server.start()
            iface = sorted(self.settings.nics)[0] if self.settings.nics else None
            envs = []
            for slot in self.slots:
                env = worker_env.gloo_env(slot, addr, port, timeout_s=self.settings.timeout_s, iface=iface,
                                          secret=self._server.secret)
                env.update({str(k): str(v) for k, v in (extra_env_vars or {}).items()})
                envs.append(env)
            ray.get([w.update_env_vars.remote(env) for w, env in zip(self.workers, envs)])
        except BaseException:
            self.shutdown()
            raise
        if self.settings.verbose >= 2:
            sys.stderr.write("horovodlite.ray: %d workers started in %.2f s\n" % (self.num_workers,
                                                                                 time.monotonic() - t0))

    def shutdown(self):
        """Ends the workers (their horovodlite runtime with them) and the rendezvous server."""
        import ray
        if self.elastic:
            self._started = False
            return
        workers, self.workers = self.workers, []
        for w in workers:
            try:
                ray.kill(w)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if self._placement_group is not None and self._owns_placement_group:
            from ray.util.placement_group import remove_placement_group
            try:
                remove_placement_group(self._placement_group)
            except Exception:  # noqa: BLE001 - already removed
                pass
        self._placement_group = None
        if self._server is not None:
            self._server.stop()
            self._server = None
        self.slots = []

    # ------------------------------------------------------------ running functions

    def _check_started(self, what):
        if self.elastic:
            if what != "run":
                raise NotImplementedError("horovodlite.ray.RayExecutor.%s: not available in an elastic job "
                                          "(min_workers/max_workers): use run(fn)" % what)
            if self._started:
                return
        if not self.workers:
            raise RuntimeError("horovodlite.ray.RayExecutor.%s: the executor is not started; call start() first"
                               % what)

    def _gather(self, refs, what):
        """ray.get over the ranks' refs; the first failure names its rank. If the
        others do not finish soon after (stuck in a collective with the failed
        rank), the workers are ended and the executor must be started again."""
        import ray
        pending = list(refs)
        index_of = {ref: i for i, ref in enumerate(refs)}
        failed = {}
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    ray.get(ref)
                except Exception as e:  # noqa: BLE001 - collected per rank
                    failed[index_of[ref]] = e
            if failed:
                break
        if failed:
            grace = min(5.0, float(self.settings.timeout_s))
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=grace) if pending else ([], [])
            for ref in done:
                try:
                    ray.get(ref)
                except Exception as e:  # noqa: BLE001
                    failed[index_of[ref]] = e
            ranks = sorted(failed)
            first = failed[ranks[0]]
            cause = getattr(first, "cause", None)  # a RayTaskError's original exception
            if not isinstance(cause, BaseException):
                cause = first  # e.g. RayActorError: the worker died
            note = ""
            if pending:
                note = ("; ranks %s did not finish within %.0f s after it and the workers were shut down "
                        "(call start() again)" % (sorted(index_of[r] for r in pending), grace))
                self.shutdown()
            raise RayJobError("horovodlite.ray.RayExecutor.%s: fn failed on rank%s %s (first: rank %d): %s: %s%s"
                              % (what, "s" if len(ranks) > 1 else "", ", ".join(map(str, ranks)), ranks[0],
                                 type(cause).__name__, cause, note), ranks=ranks) from cause
        return ray.get(list(refs))

    def run_remote(self, fn, args=None, kwargs=None):
        """fn(*args, **kwargs) on every worker; the object refs, by rank."""
        self._check_started("run_remote")
        return [w.run.remote(fn, tuple(args or ()), dict(kwargs or {})) for w in self.workers]

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """fn(*args, **kwargs) on every worker; the results, by rank."""
        if callbacks:
            raise NotImplementedError("horovodlite.ray.RayExecutor.run: callbacks are not supported")
        if self.elastic:
            return self._run_elastic(fn, args, kwargs)
        return self._gather(self.run_remote(fn, args, kwargs), "run")

    def _run_elastic(self, fn, args, kwargs):
        """fn(*args, **kwargs) as an elastic job; the results of the last world's
        workers, by rank. RayJobError when the job fails (the driver's reason,
        e.g. fewer than min_workers after elastic_timeout, and the workers' failures)."""
        from horovodlite.ray.elastic import ElasticRayJob
        self._check_started("run")
        results, message, errors = ElasticRayJob(self, fn, args, kwargs).run()
        if message is not None:
            raise RayJobError("horovodlite.ray.RayExecutor.run: the elastic job failed: %s%s" % (
                message, "".join("\n  worker %s" % e for e in errors)))
        return results

    def execute(self, fn, callbacks=None):
        """fn(executable) on every worker (the executable_cls object of start()); the results, by rank."""
        if callbacks:
            raise NotImplementedError("horovodlite.ray.RayExecutor.execute: callbacks are not supported")
        self._check_started("execute")
        return self._gather([w.execute.remote(fn) for w in self.workers], "execute")

    def execute_single(self, fn):
        """fn(executable) on rank 0 only."""
        import ray
        self._check_started("execute_single")
        return ray.get(self.workers[0].execute.remote(fn))
