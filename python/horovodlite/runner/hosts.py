"""Host lists as horovodrun takes them: ``-H host1:2,host2:4`` and hostfiles of
``<host> slots=<n>`` lines."""

import re
import socket

_HOST_SLOTS = re.compile(r"^([\w.-]+):([0-9]+)$")
_HOSTFILE_LINE = re.compile(r"^([\w.-]+)\s+slots\s*=\s*([0-9]+)$")


class HostsError(ValueError):
    """A malformed -H value or hostfile."""


def parse_hosts(text):
    """``host1:2,host2:4`` -> [("host1", 2), ("host2", 4)]."""
    hosts = []
    for item in text.split(","):
        match = _HOST_SLOTS.match(item.strip())
        if not match:
            raise HostsError("-H/--hosts: '%s' is not <hostname>:<slots> (e.g. -H worker-0:2,worker-1:2)" % item)
        hosts.append(_checked(match.group(1), int(match.group(2)), "-H/--hosts"))
    return hosts


def parse_hostfile(path):
    """A hostfile of ``<host> slots=<n>`` lines (blank lines and # comments
    allowed) -> [(host, slots), ...]."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise HostsError("--hostfile %s: %s" % (path, e.strerror or e)) from e
    hosts = []
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = _HOSTFILE_LINE.match(line)
        if not match:
            raise HostsError("--hostfile %s, line %d: '%s' is not '<hostname> slots=<n>'" % (path, number, line))
        hosts.append(_checked(match.group(1), int(match.group(2)), "--hostfile %s, line %d" % (path, number)))
    if not hosts:
        raise HostsError("--hostfile %s lists no hosts" % path)
    return hosts


def _checked(name, slots, where):
    if slots < 1:
        raise HostsError("%s: host '%s' has %d slots (must be >= 1)" % (where, name, slots))
    return name, slots


def format_hosts(hosts):
    """[("a", 2), ("b", 1)] -> "a:2,b:1" (mpirun's -H form)."""
    return ",".join("%s:%d" % (name, slots) for name, slots in hosts)


def check_duplicates(hosts):
    seen = set()
    for name, _ in hosts:
        if name in seen:
            raise HostsError("host '%s' is listed twice" % name)
        seen.add(name)


def is_local(name):
    """Whether `name` is this machine. Decided without resolving names (no DNS
    traffic): localhost, loopback addresses and this machine's hostname."""
    own = socket.gethostname()
    return name in ("localhost", "127.0.0.1", "::1", own, own.split(".")[0]) or name.startswith("127.")
