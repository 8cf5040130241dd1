"""Which hosts an elastic job may use: a discovery script polled every second
(or a fixed host list), with the hosts whose workers failed blacklisted for a
cooldown period (Horovod 0.28's horovod/runner/elastic/discovery.py semantics).

A discovery script prints one host per line, ``<hostname>`` (--slots-per-host
slots) or ``<hostname>:<slots>``; blank lines are ignored. A script that fails,
hangs or prints something else raises DiscoveryError naming the script, its exit
status and the bad line: the driver warns and goes on with the last good set.
"""

import os
import random
import re
import signal
import subprocess
import time

from horovodlite.common.host_update import HostUpdateResult

DEFAULT_COOLDOWN_LOWER_LIMIT_S = 1
DEFAULT_COOLDOWN_UPPER_LIMIT_S = 60 * 60
DISCOVERY_TIMEOUT_S = 10.0

_LINE = re.compile(r"^([A-Za-z0-9_.\-\[\]:]+?)(?::([0-9]+))?$")
_HOSTNAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


class DiscoveryError(RuntimeError):
    """The discovery script failed, hung or printed a bad line."""


def parse_discovery_output(text, default_slots, source="discovery script"):
    """'h1:2\\nh2\\n' -> {'h1': 2, 'h2': default_slots}. DiscoveryError names the
    first bad line."""
    hosts = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        name, sep, slots = line.partition(":")
        if not _HOSTNAME.match(name) or (sep and not slots.isdigit()):
            raise DiscoveryError("%s printed a bad line %d: '%s' (expected <hostname> or <hostname>:<slots>)"
                                 % (source, number, raw[:200]))
        count = int(slots) if sep else default_slots
        if count < 1:
            raise DiscoveryError("%s printed a bad line %d: '%s' (slots must be >= 1)" % (source, number, raw[:200]))
        if name in hosts and hosts[name] != count:
            raise DiscoveryError("%s printed host '%s' twice with different slots (line %d: '%s')"
                                 % (source, name, number, raw[:200]))
        hosts[name] = count
    return hosts


class HostDiscoveryScript:
    """Runs the script (through the shell, as Horovod does) with a timeout."""

    def __init__(self, script, default_slots=1, timeout_s=DISCOVERY_TIMEOUT_S):
        self.script = script
        self.default_slots = default_slots
        self.timeout_s = timeout_s

    def __str__(self):
        return "--host-discovery-script %s" % self.script

    def find_available_hosts_and_slots(self):
        try:
            proc = subprocess.Popen(self.script, shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as e:
            raise DiscoveryError("discovery script %s cannot be run: %s" % (self.script, e)) from e
        try:
            out, err = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.communicate()
            raise DiscoveryError("discovery script %s did not finish within %g s (killed)"
                                 % (self.script, self.timeout_s)) from None
        if proc.returncode != 0:
            last = err.decode(errors="replace").strip().splitlines()
            status = ("killed by signal %d" % -proc.returncode if proc.returncode < 0
                      else "exit status %d" % proc.returncode)
            raise DiscoveryError("discovery script %s failed (%s)%s" % (
                self.script, status, ": " + last[-1][:200] if last else ""))
        return parse_discovery_output(out.decode(errors="replace"), self.default_slots,
                                      "discovery script %s" % self.script)


class FixedHosts:
    """-H / --hostfile in an elastic job: the same hosts every time."""

    def __init__(self, host_slots):
        self.host_slots = dict(host_slots)

    def __str__(self):
        return "the fixed host list"

    def find_available_hosts_and_slots(self):
        return dict(self.host_slots)


class HostState:
    """Blacklisting with an optional cooldown (--blacklist-cooldown-range LOW HIGH):
    the n-th time a host is blacklisted it stays out for LOW * 2^n + U(0, LOW)
    seconds, clamped to [LOW, HIGH]; without a range, for good."""

    def __init__(self, cooldown_range=None, clock=time.time, rng=random.random):
        if cooldown_range:
            validate_cooldown_range(cooldown_range)
            self._low, self._high = cooldown_range
        else:
            self._low = self._high = None
        self._clock = clock
        self._rng = rng
        self._blacklisted = False
        self._count = 0
        self._cooldown_end = 0.0

    def blacklist(self):
        self._blacklisted = True
        now = self._clock()
        if self._cooldown_end > now or self._low is None:
            return
        self._count += 1
        delay = self._low * (1 << self._count) + self._rng() * self._low
        self._cooldown_end = now + max(self._low, min(self._high, delay))

    def whitelist(self):
        self._blacklisted = False
        self._cooldown_end = 0.0

    def is_blacklisted(self):
        return self._blacklisted

    def is_resurrected(self):
        """Blacklisted, with a cooldown that has run out."""
        return self._cooldown_end > 0 and self._cooldown_end <= self._clock()

    @property
    def cooldown_end(self):
        return self._cooldown_end


def validate_cooldown_range(cooldown_range):
    low, high = cooldown_range
    if low < DEFAULT_COOLDOWN_LOWER_LIMIT_S:
        raise ValueError("--blacklist-cooldown-range: the lower limit %s is below %d s"
                         % (low, DEFAULT_COOLDOWN_LOWER_LIMIT_S))
    if high > DEFAULT_COOLDOWN_UPPER_LIMIT_S:
        raise ValueError("--blacklist-cooldown-range: the upper limit %s is above %d s"
                         % (high, DEFAULT_COOLDOWN_UPPER_LIMIT_S))
    if low > high:
        raise ValueError("--blacklist-cooldown-range: the lower limit %s is above the upper limit %s" % (low, high))


class HostManager:
    """The current hosts (in a stable assignment order: the oldest hosts get the
    lowest ranks) and each host's blacklist state."""

    def __init__(self, discovery, cooldown_range=None, clock=time.time, rng=random.random):
        self.discovery = discovery
        self._cooldown_range = cooldown_range
        self._clock = clock
        self._rng = rng
        self._states = {}
        self._host_slots = {}
        self._order = []

    def _state(self, host):
        if host not in self._states:
            self._states[host] = HostState(self._cooldown_range, self._clock, self._rng)
        return self._states[host]

    def update_available_hosts(self):
        """Runs discovery once (DiscoveryError propagates, nothing changes);
        returns a HostUpdateResult."""
        host_slots = self.discovery.find_available_hosts_and_slots()
        prev = self._host_slots
        resurrected = [h for h in host_slots if self._state(h).is_resurrected()]
        if host_slots == prev and not resurrected:
            return HostUpdateResult.no_update
        for h in resurrected:
            self._state(h).whitelist()
        result = HostUpdateResult.no_update
        for h in prev:
            if h not in host_slots:
                result |= HostUpdateResult.removed
        for h, slots in host_slots.items():
            if h not in prev or slots > prev[h] or h in resurrected:
                result |= HostUpdateResult.added
            elif slots < prev[h]:
                result |= HostUpdateResult.removed
        available = [h for h in host_slots if not self._state(h).is_blacklisted()]
        order = [h for h in self._order if h in available]
        order += [h for h in available if h not in order]
        self._host_slots = dict(host_slots)
        self._order = order
        return result

    @property
    def host_slots(self):
        return dict(self._host_slots)

    def available_hosts(self):
        """[(host, slots)] in assignment order, blacklisted hosts left out."""
        return [(h, self._host_slots[h]) for h in self._order if not self._state(h).is_blacklisted()]

    def count_available_slots(self):
        return sum(slots for _, slots in self.available_hosts())

    def blacklist(self, host):
        """Out of the assignment order: when it comes back it ranks last."""
        self._state(host).blacklist()
        self._order = [h for h in self._order if h != host]

    def is_blacklisted(self, host):
        return host in self._states and self._states[host].is_blacklisted()

    def blacklisted_hosts(self):
        return sorted(h for h, s in self._states.items() if s.is_blacklisted())
