"""A worker's place in the job and its environment: the one place every launcher
builds them (horovodlite-run's Gloo and mpirun launchers, the elastic driver,
horovodlite.spark and horovodlite.ray).

Ranks are contiguous per host, hosts in order of their first worker (Horovod's
Gloo launcher does the same): from a host list with slots (host_assignments,
horovodlite-run) or from one host name per worker in the engine's own order
(assign_ranks: Spark's partition index, Ray's actor index). A worker's
environment is the caller's (rank_environment: all of it for a local rank, the
FORWARDED part for a remote one), the job's variables and the Gloo-launch
contract's HOROVOD_* variables (docs/elastic.md#the-gloo-launch-contract; gloo_env).
"""

import collections
import os
import socket

from horovodlite.runner.secret import SECRET_ENV, SECRET_ENV_NAMES

DEFAULT_GLOO_TIMEOUT_S = 30

# Variables of the caller that reach remote ranks too (local ranks inherit all).
FORWARDED = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH")
FORWARDED_PREFIXES = ("HOROVODLITE_", "HOROVOD_")


class SlotInfo(collections.namedtuple("SlotInfo", "hostname rank local_rank cross_rank size local_size cross_size")):
    """Where one worker sits in the job (Horovod's SlotInfo)."""

    __slots__ = ()

    def to_dict(self):
        return dict(self._asdict())

    @classmethod
    def from_dict(cls, d):
        return cls(**{k: d[k] for k in cls._fields})


def assign_ranks(worker_hosts):
    """worker_hosts: one host name per worker, by worker index. Returns one
    SlotInfo per worker (same order). Hosts are ordered by their first worker;
    a host's workers get consecutive ranks in worker order. cross_rank /
    cross_size count the hosts that have a worker with the same local rank
    (Horovod's definition, right for hosts with different worker counts too)."""
    if not worker_hosts:
        raise ValueError("assign_ranks: no workers")
    by_host = collections.OrderedDict()
    for index, host in enumerate(worker_hosts):
        by_host.setdefault(host, []).append(index)
    size = len(worker_hosts)
    slots = [None] * size
    rank = 0
    hosts = list(by_host)
    for host in hosts:
        workers = by_host[host]
        for local_rank, index in enumerate(workers):
            with_local_rank = [h for h in hosts if len(by_host[h]) > local_rank]
            slots[index] = SlotInfo(hostname=host, rank=rank, local_rank=local_rank,
                                    cross_rank=with_local_rank.index(host), size=size,
                                    local_size=len(workers), cross_size=len(with_local_rank))
            rank += 1
    return slots


def host_assignments(hosts, np):
    """`np` ranks over `hosts` ([(name, slots)]): they fill the hosts in order,
    each up to its slots (Horovod's get_host_assignments), then take their
    places as assign_ranks gives them. One SlotInfo per rank, by rank."""
    total = sum(slots for _, slots in hosts)
    if np > total:
        raise ValueError("-np %d is more than the %d slots of the hosts given" % (np, total))
    worker_hosts = []
    for name, slots in hosts:
        worker_hosts += [name] * min(slots, np - len(worker_hosts))
    return assign_ranks(worker_hosts) if worker_hosts else []


def gloo_env(slot, rendezvous_addr, rendezvous_port, timeout_s=None, iface=None, secret=None):
    """The contract's variables for one worker (both spellings of the
    controller), with the job's secret (runner/secret.py) when given.
    timeout_s None (or 0) is DEFAULT_GLOO_TIMEOUT_S."""
    env = {
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_RANK": str(slot.rank),
        "HOROVOD_SIZE": str(slot.size),
        "HOROVOD_LOCAL_RANK": str(slot.local_rank),
        "HOROVOD_LOCAL_SIZE": str(slot.local_size),
        "HOROVOD_CROSS_RANK": str(slot.cross_rank),
        "HOROVOD_CROSS_SIZE": str(slot.cross_size),
        "HOROVOD_HOSTNAME": slot.hostname,
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": str(rendezvous_addr),
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(int(rendezvous_port)),
        "HOROVOD_GLOO_TIMEOUT_SECONDS": str(int(timeout_s or DEFAULT_GLOO_TIMEOUT_S)),
    }
    if iface:
        env["HOROVOD_GLOO_IFACE"] = iface
    if secret:
        env[SECRET_ENV] = secret
    return env


# Variables a worker must not inherit from the process that started its engine:
# an mpirun rank's own identity would make horovodlite join that MPI job.
_STRIP_PREFIXES = ("OMPI_COMM_WORLD_", "PMIX_RANK", "PMI_RANK", "PMI_SIZE")


def strip_inherited(environ):
    """A copy of `environ` without the variables of an enclosing MPI job or of a
    previous Gloo job's identity."""
    out = {}
    for k, v in environ.items():
        if k.startswith(_STRIP_PREFIXES):
            continue
        if k in ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                 "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE") or k in SECRET_ENV_NAMES:
            continue
        out[k] = v
    return out


def forwarded_environment(environ=None):
    """The part of `environ` (default: this process's) that a remote rank gets:
    FORWARDED and the FORWARDED_PREFIXES variables."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k in FORWARDED or k.startswith(FORWARDED_PREFIXES)}


def rank_environment(remote, *layers, environ=None):
    """What a rank started by horovodlite-run runs with: the caller's environment
    (all of it for a local rank, forwarded_environment for a remote one), then
    each of `layers` over it in turn (the job's variables, the contract's, ...)."""
    environ = os.environ if environ is None else environ
    env = forwarded_environment(environ) if remote else dict(environ)
    for layer in layers:
        env.update(layer)
    return env


def driver_address(nics=None):
    """An address of this (driver) host that workers can reach: the first IPv4
    address of one of `nics` (names of network interfaces) when given, else the
    address the host name resolves to, else loopback."""
    if nics:
        addr = _iface_address(nics)
        if addr:
            return addr
        raise ValueError("horovodlite: none of the network interfaces %s has an IPv4 address" % sorted(nics))
    try:
        addr = socket.gethostbyname(socket.gethostname())
        if addr and not addr.startswith("127."):
            return addr
    except OSError:
        pass
    return "127.0.0.1"


def _iface_address(nics):
    for name in sorted(nics):
        addr = interface_address(name)
        if addr:
            return addr
    return None


def route_source(host):
    """This machine's IPv4 address on the route to `host` (no packet is sent), or None."""
    try:
        target = socket.getaddrinfo(host, 1, socket.AF_INET, socket.SOCK_DGRAM)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, 1))
            return s.getsockname()[0]
    except OSError:
        return None


def interface_address(name):
    """The IPv4 address of this machine's interface `name`, or None."""
    import fcntl
    import struct
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            return socket.inet_ntoa(packed[20:24])
    except OSError:
        return None


def host_identity():
    """The name workers on one host share (HOROVOD_HOSTNAME)."""
    return os.environ.get("HOROVODLITE_HOSTNAME_OVERRIDE") or socket.gethostname()
