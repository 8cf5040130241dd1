"""The world hvd.init() joins: the one its launcher made (docs/launchers.md).

Precedence, first match wins (HOROVODLITE_LAUNCHER=<kind> names one instead):

  horovodlite  horovodlite-run, horovodlite.spark/.ray: the Gloo-launch
               contract's HOROVOD_* variables (the core reads them itself);
  mpi          mpirun / mpiexec (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK);
  torchrun     torchrun, Kubeflow's PyTorchJob, TorchDistributor, Ray Train:
               RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (LOCAL_RANK,
               GROUP_RANK, TORCHELASTIC_* where torchrun sets them);
  slurm        one task of an srun step (SLURM_STEP_ID, SLURM_PROCID,
               SLURM_STEP_NUM_TASKS or SLURM_NTASKS, SLURM_NODEID,
               SLURM_STEP_NODELIST or SLURM_NODELIST);
  torch        an initialised torch.distributed default group (its rank, size
               and store);
  single       none of these: a world of one.

torchrun, slurm and torch worlds run on the Gloo transport. They meet through a
torch.distributed store (the initialised group's, torchrun's agent store, or one
that rank 0 serves at MASTER_ADDR:MASTER_PORT): each rank claims its rank and
tells its host, rank 0 starts the job's signed rendezvous server
(runner/rendezvous.py) and publishes its address there, and every rank then
joins through the Gloo-launch contract's variables, which this module sets.
The job's secret is HOROVODLITE_SECRET_KEY when every rank has it; else rank 0
makes one and publishes it in that store, which is as open as torch.distributed's
own (set HOROVODLITE_SECRET_KEY to keep it off the network).
"""

import collections
import datetime
import os
import socket
import sys

KINDS = ("horovodlite", "mpi", "torchrun", "slurm", "torch", "single")
# The kinds this module joins (the others the core joins by itself).
JOINED = ("torchrun", "slurm", "torch")

# A launcher of ours gave this rank its place (HOROVOD_CONTROLLER alone is a
# choice of transport, not a place).
_CONTRACT = ("HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_RANK", "HOROVODLITE_GLOO_RENDEZVOUS_ADDR", "HOROVODLITE_RANK")
_MPI = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")


class LaunchError(RuntimeError):
    """The environment names a launcher's world that this process cannot join."""


Launch = collections.namedtuple("Launch", "kind why rank size node master_addr master_port restart run_id")


def _int(environ, name, minimum=0):
    text = environ.get(name)
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise LaunchError("horovodlite.init(): %s=%r is not an integer" % (name, text)) from None
    if value < minimum:
        raise LaunchError("horovodlite.init(): %s=%d must be at least %d" % (name, value, minimum))
    return value


def first_slurm_host(nodelist):
    """The first host of a Slurm host list ("node[03-05,9],gpu1" -> "node03")."""
    item = ""
    depth = 0
    for ch in nodelist.strip():
        if ch == "," and depth == 0:
            break
        depth += ch == "["
        depth -= ch == "]"
        item += ch
    while "[" in item and "]" in item:  # each bracket group by its first member
        prefix, rest = item.split("[", 1)
        group, suffix = rest.split("]", 1)
        item = prefix + group.split(",", 1)[0].split("-", 1)[0] + suffix
    return item


def slurm_port(environ):
    """MASTER_PORT, else 15000 plus the job id's last four digits (Lightning's
    SLURMEnvironment), else 29500 (torch.distributed's default)."""
    if environ.get("MASTER_PORT"):
        return _int(environ, "MASTER_PORT", 1)
    job = environ.get("SLURM_JOB_ID", "")
    digits = "".join(c for c in job if c.isdigit())
    return 15000 + int(digits[-4:]) if digits else 29500


def _dist_world():
    """(rank, size) of an initialised torch.distributed default group, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:  # noqa: BLE001  (a half-torn-down group: not a world to join)
        return None
    return None


def detect(environ=None, dist_world=None):
    """The world init() would join, as a Launch. `dist_world`: (rank, size) of
    torch.distributed's default group (None: ask torch.distributed). A half-set
    or contradictory environment raises LaunchError naming the variables."""
    environ = os.environ if environ is None else environ
    if dist_world is None:
        dist_world = _dist_world()
    forced = environ.get("HOROVODLITE_LAUNCHER", "").strip().lower() or "auto"
    if forced not in KINDS + ("auto",):
        raise LaunchError("horovodlite.init(): HOROVODLITE_LAUNCHER=%r: expected auto or one of %s"
                          % (environ.get("HOROVODLITE_LAUNCHER"), ", ".join(KINDS)))

    def wanted(kind):
        return forced in ("auto", kind)

    if wanted("horovodlite") and any(environ.get(v) for v in _CONTRACT):
        return Launch("horovodlite", "the Gloo-launch contract's HOROVOD_* variables", None, None, None, None,
                      None, 0, None)
    if wanted("mpi") and any(v in environ for v in _MPI) or forced == "mpi":
        return Launch("mpi", "mpirun's variables", None, None, None, None, None, 0, None)
    torchrun_vars = [v for v in ("RANK", "WORLD_SIZE") if environ.get(v) not in (None, "")]
    if wanted("torchrun") and (torchrun_vars or forced == "torchrun"):
        return _torchrun(environ, torchrun_vars, dist_world)
    # SLURM_NTASKS alone: salloc's shell or sbatch's script, one process of an allocation for several.
    if wanted("slurm") and ("SLURM_PROCID" in environ or environ.get("SLURM_NTASKS") or forced == "slurm"):
        launch = _slurm(environ)
        if launch is not None:
            return launch
    if wanted("torch") and (dist_world is not None or forced == "torch"):
        if dist_world is None:
            raise LaunchError("horovodlite.init(): HOROVODLITE_LAUNCHER=torch but torch.distributed is not "
                              "initialised (call torch.distributed.init_process_group first)")
        rank, size = dist_world
        if size > 1:
            return Launch("torch", "torch.distributed's default group (rank %d of %d)" % (rank, size), rank, size,
                          None, environ.get("MASTER_ADDR"), None, 0, None)
    return Launch("single", "no launcher's variables", 0, 1, None, None, None, 0, None)


def _torchrun(environ, present, dist_world):
    missing = [v for v in ("RANK", "WORLD_SIZE") if v not in present]
    if missing:
        raise LaunchError("horovodlite.init(): %s is set but %s is not: a torchrun-style launch sets RANK, "
                          "WORLD_SIZE, MASTER_ADDR and MASTER_PORT together (HOROVODLITE_LAUNCHER=single "
                          "ignores them)" % (" and ".join(present), " and ".join(missing)))
    rank = _int(environ, "RANK")
    size = _int(environ, "WORLD_SIZE", 1)
    if rank >= size:
        raise LaunchError("horovodlite.init(): RANK=%d is not below WORLD_SIZE=%d" % (rank, size))
    if dist_world is not None and tuple(dist_world) != (rank, size):
        raise LaunchError("horovodlite.init(): RANK=%d WORLD_SIZE=%d disagree with torch.distributed's default "
                          "group (rank %d of %d)" % (rank, size, dist_world[0], dist_world[1]))
    why = "torchrun's variables (RANK=%d WORLD_SIZE=%d)" % (rank, size)
    if size == 1:
        return Launch("single", why, 0, 1, None, None, None, 0, None)
    addr, port = environ.get("MASTER_ADDR"), None
    if dist_world is None:
        lacking = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not environ.get(v)]
        if lacking:
            raise LaunchError("horovodlite.init(): %s set but %s not: rank 0's store is at MASTER_ADDR:MASTER_PORT "
                              "(or initialise torch.distributed first)" % (why, " and ".join(lacking)))
        port = _int(environ, "MASTER_PORT", 1)
    node = environ.get("GROUP_RANK") or None
    restart = _int(environ, "TORCHELASTIC_RESTART_COUNT") if environ.get("TORCHELASTIC_RESTART_COUNT") else 0
    return Launch("torchrun", why, rank, size, node, addr, port, restart, environ.get("TORCHELASTIC_RUN_ID"))


def _slurm(environ):
    in_step = bool(environ.get("SLURM_STEP_ID"))
    ntasks_var = "SLURM_STEP_NUM_TASKS" if environ.get("SLURM_STEP_NUM_TASKS") else "SLURM_NTASKS"
    if not environ.get(ntasks_var):
        return None
    size = _int(environ, ntasks_var, 1)
    if size == 1:
        return None
    if not in_step:
        raise LaunchError("horovodlite.init(): %s=%d but this process is not a task of an srun step (no "
                          "SLURM_STEP_ID): start it with srun -n %d, or set HOROVODLITE_LAUNCHER=single for a "
                          "world of one" % (ntasks_var, size, size))
    if not environ.get("SLURM_PROCID"):
        raise LaunchError("horovodlite.init(): SLURM_STEP_ID is set but SLURM_PROCID is not: not a task of an srun "
                          "step")
    rank = _int(environ, "SLURM_PROCID")
    if rank >= size:
        raise LaunchError("horovodlite.init(): SLURM_PROCID=%d is not below %s=%d" % (rank, ntasks_var, size))
    nodes = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_NODELIST") or environ.get("SLURM_JOB_NODELIST")
    addr = environ.get("MASTER_ADDR") or (first_slurm_host(nodes) if nodes else None)
    if not addr:
        raise LaunchError("horovodlite.init(): an srun step of %d tasks without MASTER_ADDR, SLURM_STEP_NODELIST "
                          "or SLURM_NODELIST: nowhere to meet" % size)
    why = "Slurm's variables (SLURM_PROCID=%d %s=%d, job %s)" % (rank, ntasks_var, size,
                                                                 environ.get("SLURM_JOB_ID", "?"))
    return Launch("slurm", why, rank, size, environ.get("SLURM_NODEID") or None, addr, slurm_port(environ), 0,
                  "slurm-%s.%s" % (environ.get("SLURM_JOB_ID", ""), environ.get("SLURM_STEP_ID", "")))


# ---------------------------------------------------------------------------
# Joining: what this process keeps alive while initialised.

_state = {"generation": 0, "server": None, "store": None, "set": {}}


def _timeout_s(environ):
    for name in ("HOROVODLITE_GLOO_TIMEOUT_SECONDS", "HOROVOD_GLOO_TIMEOUT_SECONDS"):
        if environ.get(name):
            try:
                return float(environ[name])
            except ValueError:
                raise LaunchError("horovodlite.init(): %s=%r is not a number of seconds"
                                  % (name, environ[name])) from None
    from horovodlite.runner.worker_env import DEFAULT_GLOO_TIMEOUT_S
    return float(DEFAULT_GLOO_TIMEOUT_S)


def _interface_of(addr):
    from horovodlite.runner import worker_env
    for _, name in socket.if_nameindex():
        if worker_env.interface_address(name) == addr:
            return name
    return None


def _store(launch, timeout):
    """The torch.distributed store the ranks meet in."""
    import torch.distributed as dist
    delta = datetime.timedelta(seconds=timeout)
    if _dist_world() is not None:
        return dist.distributed_c10d._get_default_store()
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    serve = launch.rank == 0 and not (launch.kind == "torchrun" and agent)
    # multi_tenant: a later init_process_group("env://") of this process
    # shares the server at MASTER_PORT instead of failing to bind it.
    kwargs = {"multi_tenant": True} if serve else {}
    try:
        try:
            return dist.TCPStore(launch.master_addr, launch.master_port, launch.size, is_master=serve, timeout=delta,
                                 wait_for_workers=False, **kwargs)
        except TypeError:  # torch without multi_tenant
            return dist.TCPStore(launch.master_addr, launch.master_port, launch.size, is_master=serve, timeout=delta,
                                 wait_for_workers=False)
    except Exception as e:  # noqa: BLE001  (torch raises several kinds: all mean "no store there")
        what = "serve" if serve else "reach"
        raise LaunchError("horovodlite.init(): rank %d of %d (%s) cannot %s the store at MASTER_ADDR:MASTER_PORT=%s:%d "
                          "within %g s (HOROVOD_GLOO_TIMEOUT_SECONDS): %s"
                          % (launch.rank, launch.size, launch.why, what, launch.master_addr, launch.master_port,
                             timeout, e)) from e


def _present(store, key):
    try:
        return store.check([key])
    except AttributeError:  # torch 1.13's TCPStore has no check()
        try:
            store.wait([key], datetime.timedelta(milliseconds=1))
            return True
        except Exception:  # noqa: BLE001  (a timeout: not set)
            return False


def _wait(store, keys, timeout, launch, what):
    try:
        store.wait(keys, datetime.timedelta(seconds=timeout))
    except Exception as e:  # noqa: BLE001
        late = [k.rsplit("/", 1)[-1] for k in keys if not _present(store, k)]
        raise LaunchError("horovodlite.init(): rank %d of %d (%s): %s within %g s (HOROVOD_GLOO_TIMEOUT_SECONDS)%s"
                          % (launch.rank, launch.size, launch.why, what, timeout,
                             ": ranks %s did not arrive" % ", ".join(late) if late and len(keys) > 1 else "")) from e


def _restore_environment():
    """Takes back the variables the previous join set (a re-init detects afresh)."""
    for name, value in _state["set"].items():
        if os.environ.get(name) == value:
            del os.environ[name]
    _state["set"] = {}


def leave():
    """Stops what the last join keeps (rank 0's rendezvous server) and takes its variables back."""
    server, _state["server"] = _state["server"], None
    if server is not None:
        server.stop()
    _state["store"] = None
    _restore_environment()


def prepare():
    """Called by init() before the core starts: finds the launcher's world and,
    for those this module joins, meets the other ranks and sets the Gloo-launch
    contract's variables. Returns the Launch."""
    leave()
    launch = detect()
    if launch.kind in JOINED:
        _join(launch)
    _log("horovodlite.init(): joins the %s world (%s)" % (launch.kind, launch.why))
    return launch


def _log(message):
    level = (os.environ.get("HOROVODLITE_LOG_LEVEL") or os.environ.get("HOROVOD_LOG_LEVEL") or "warning").lower()
    if level in ("trace", "debug", "info"):
        sys.stderr.write("[horovodlite info] %s\n" % message)
        sys.stderr.flush()


def _join(launch):
    from horovodlite.runner import gloo_run, worker_env
    from horovodlite.runner import secret as auth
    from horovodlite.runner.rendezvous import RendezvousServer

    environ = os.environ
    timeout = _timeout_s(environ)
    store = _store(launch, timeout)
    _state["store"] = store
    _state["generation"] += 1
    ns = "horovodlite/%s/%d/%d" % (launch.run_id or launch.kind, launch.restart, _state["generation"])
    rank, size = launch.rank, launch.size
    if store.add("%s/claim/%d" % (ns, rank), 1) != 1:
        raise LaunchError("horovodlite.init(): two processes claim rank %d of %d (%s): each rank must be started "
                          "once" % (rank, size, launch.why))
    node = worker_env.host_identity() + ("#%s" % launch.node if launch.node is not None else "")
    store.set("%s/host/%d" % (ns, rank), node)
    user_secret = auth.secret_from_env(environ) is not None
    if rank == 0:
        hosts_keys = ["%s/host/%d" % (ns, r) for r in range(size)]
        _wait(store, hosts_keys, timeout, launch, "not every rank joined")
        names = [store.get(k).decode() for k in hosts_keys]
        one_host = all(n == names[0] for n in names)
        if one_host:
            addr = "127.0.0.1"
        else:
            addr = worker_env.route_source(launch.master_addr) if launch.master_addr else None
            if not addr or addr.startswith("127."):
                addr = worker_env.driver_address()
        secret = next(environ[n] for n in auth.SECRET_ENV_NAMES if environ.get(n)) if user_secret else None
        server = RendezvousServer(bind_host=gloo_run.bind_address(addr), port=0, secret=secret)
        port = server.start()
        _state["server"] = server
        published = "%s %d %d %s" % (addr, port, int(one_host), "" if user_secret else server.secret)
        store.set("%s/rendezvous" % ns, published)
    else:
        _wait(store, ["%s/rendezvous" % ns], timeout, launch,
              "rank 0 did not publish the rendezvous (it waits for all %d ranks to arrive)" % size)
        published = store.get("%s/rendezvous" % ns).decode()
    addr, port, one_host, secret = (published.split(" ") + [""])[:4]
    contract = {
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_RANK": str(rank),
        "HOROVOD_SIZE": str(size),
        "HOROVOD_HOSTNAME": node,
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": port,
        "HOROVOD_GLOO_TIMEOUT_SECONDS": "%g" % timeout,
    }
    if not user_secret:
        contract[auth.SECRET_ENV] = secret
    if one_host != "1" and not (environ.get("HOROVOD_GLOO_IFACE") or environ.get("HOROVODLITE_GLOO_IFACE")):
        # Host names made unique per node (name#node) do not resolve: bind the
        # interface that reaches rank 0's host.
        iface = _interface_of(worker_env.route_source(addr) or "")
        if iface:
            contract["HOROVOD_GLOO_IFACE"] = iface
    for name, value in contract.items():
        environ[name] = value
    _state["set"] = contract
