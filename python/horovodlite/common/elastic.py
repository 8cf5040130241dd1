"""Elastic training on the worker side (Horovod 0.28's horovod/common/elastic.py
semantics and names, our own code): State / ObjectState, the run_fn loop that
rolls back to the last commit and re-forms the world, and the notification
manager that tells the states about host changes.

A worker of an elastic job (HOROVOD_ELASTIC=1, started by horovodlite-run
--min-np/--max-np/--host-discovery-script) talks to the launcher's rendezvous
server:
  GET /rendezvous/hosts_updated -> {"timestamp": T, "update": U}, polled every
      second; a T newer than the last one seen goes into every registered
      state's _host_messages queue as (T, HostUpdateResult(U)).
  GET /rendezvous/rank_and_size/<HOROVOD_HOSTNAME>:<HOROVOD_LOCAL_RANK> after a
      reset (blocks until the next world forms) -> this worker's rank, size,
      local/cross rank and size, generation and scope, or rank -1 when it has
      no place any more (it then leaves with exit status 0).
Both through the store's signed client (runner/store_client.py): the workers'
half of the store's protocol, apart from the server and the launcher (it needs
http.client and runner/secret.py only). HostUpdateResult is the workers' own
(common/host_update.py), which the driver imports.
"""

import functools
import json
import os
import queue
import sys
import threading

from horovodlite.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from horovodlite.common.host_update import HostUpdateResult
from horovodlite.runner.store_client import RendezvousClient

POLL_INTERVAL_S = 1.0
# How long a worker waits for the next world to form (the driver ends the job
# itself after --elastic-timeout; this only keeps a lost launcher from hanging us).
RENDEZVOUS_WAIT_S = 24 * 3600


def _rendezvous_address():
    addr = os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR")
    port = os.environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT")
    return (addr, int(port)) if addr and port else None


def elastic_enabled():
    return os.environ.get("HOROVOD_ELASTIC", "") not in ("", "0") and _rendezvous_address() is not None


_clients = {}
_clients_lock = threading.Lock()


def _client(timeout):
    """A signed client of the launcher's store (the job's secret from the
    environment), one per timeout."""
    addr, port = _rendezvous_address()
    with _clients_lock:
        key = (addr, port, timeout)
        if key not in _clients:
            _clients[key] = RendezvousClient(addr, port, timeout=timeout)
        return _clients[key]


def _http_get_json(path, timeout):
    client = _client(timeout)
    status, body = client.request("GET", path)
    if status != 200:
        raise RuntimeError("rendezvous %s:%d: GET %s answered %d" % (client.addr, client.port, path, status))
    return json.loads(body.decode())


class WorkerNotificationManager:
    """Polls the driver for host changes and hands them to registered states."""

    def __init__(self):
        self._lock = threading.Lock()
        self._listeners = set()
        self._thread = None
        self._stop = threading.Event()
        self._last_timestamp = 0

    def init(self):
        with self._lock:
            if self._thread is not None or not elastic_enabled():
                return
            self._last_timestamp = int(os.environ.get("HOROVODLITE_ELASTIC_LAST_UPDATE", "0") or 0)
            self._thread = threading.Thread(target=self._poll, name="hvl-elastic-notify", daemon=True)
            self._thread.start()

    def set_baseline(self, timestamp):
        """Updates up to `timestamp` formed the current world: not news."""
        with self._lock:
            self._last_timestamp = max(self._last_timestamp, int(timestamp))

    def register_listener(self, listener):
        with self._lock:
            self._listeners.add(listener)

    def remove_listener(self, listener):
        with self._lock:
            self._listeners.discard(listener)

    def handle_hosts_updated(self, timestamp, update_res):
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener.on_hosts_updated(timestamp, update_res)

    def poll_once(self):
        try:
            news = _http_get_json("/rendezvous/hosts_updated", timeout=10)
        except (OSError, ValueError, RuntimeError):
            return  # the launcher is busy or gone; the next poll tells
        timestamp = int(news.get("timestamp", 0))
        with self._lock:
            if timestamp <= self._last_timestamp:
                return
            self._last_timestamp = timestamp
        self.handle_hosts_updated(timestamp, HostUpdateResult(int(news.get("update", 0))))

    def _poll(self):
        while not self._stop.wait(POLL_INTERVAL_S):
            self.poll_once()


notification_manager = WorkerNotificationManager()


def rendezvous():
    """After a reset: asks the driver for this worker's place in the next world
    (blocks until it forms) and puts it into the environment the core reads at
    init(). A worker without a place leaves (SystemExit(0))."""
    host = os.environ.get("HOROVOD_HOSTNAME", "")
    local_rank = os.environ.get("HOROVOD_LOCAL_RANK", "")
    if not host or not local_rank:
        raise HorovodInternalError("elastic reset: HOROVOD_HOSTNAME/HOROVOD_LOCAL_RANK are not set (was this "
                                   "worker started by horovodlite-run in elastic mode?)")
    try:
        info = _http_get_json("/rendezvous/rank_and_size/%s:%s" % (host, local_rank), timeout=RENDEZVOUS_WAIT_S)
    except (OSError, ValueError, RuntimeError) as e:
        addr, port = _rendezvous_address()
        raise HorovodInternalError("elastic reset: cannot reach the driver at %s:%d: %s" % (addr, port, e)) from e
    if int(info.get("rank", -1)) < 0:
        print("horovodlite: worker %s[%s] leaves the job: %s" % (host, local_rank, info.get("reason", "no place")),
              file=sys.stderr, flush=True)
        raise SystemExit(0)
    for name, key in (("HOROVOD_RANK", "rank"), ("HOROVOD_SIZE", "size"), ("HOROVOD_LOCAL_RANK", "local_rank"),
                      ("HOROVOD_LOCAL_SIZE", "local_size"), ("HOROVOD_CROSS_RANK", "cross_rank"),
                      ("HOROVOD_CROSS_SIZE", "cross_size")):
        os.environ[name] = str(info[key])
    os.environ["HOROVODLITE_ELASTIC_GENERATION"] = str(info["generation"])
    os.environ["HOROVODLITE_GLOO_SCOPE"] = info["scope"]
    os.environ["HOROVODLITE_ELASTIC_LAST_UPDATE"] = str(info.get("last_update", 0))
    notification_manager.set_baseline(info.get("last_update", 0))
    return info


class State:
    """State kept in memory across the workers of an elastic job.

    Args:
        bcast_object: broadcasts a picklable object from rank 0 to all.
        get_rank: this worker's rank.
    """

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._host_messages = queue.Queue()
        self._last_updated_timestamp = 0
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called after each reset (a worker added or removed), e.g. to
        scale the learning rate with the new size."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self._host_messages = queue.Queue()
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        self._host_messages.put((timestamp, update_res))

    def commit(self):
        """Saves the state in memory (the point a failure rolls back to), then
        checks for host changes: HostsUpdatedInterrupt if there were any."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every worker at once (rank 0's view is
        broadcast) when hosts were added or removed since the last check."""
        last = prev = self._last_updated_timestamp
        all_update = HostUpdateResult.no_update
        while not self._host_messages.empty():
            timestamp, update = self._host_messages.get()
            if timestamp > last:
                last = timestamp
                all_update |= update
        prev, self._last_updated_timestamp, all_update = self._bcast_object((prev, last, all_update))
        if self._last_updated_timestamp > prev:
            # Only hosts removed: the survivors' state is current, no sync needed.
            raise HostsUpdatedInterrupt(all_update == HostUpdateResult.removed)

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        """Called after a reset, before the state is synchronized."""


class ObjectState(State):
    """State of plain picklable Python objects, given as keyword arguments and
    exposed as attributes."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._bcast_object = bcast_object
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {attr: getattr(self, attr) for attr in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)


def run_fn(func, reset):
    """The elastic loop: sync the state, run func; on HorovodInternalError roll
    back to the last commit, on HostsUpdatedInterrupt keep the state; then reset
    (re-form the world) and go again."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        notification_manager.init()
        notification_manager.register_listener(state)
        skip_sync = False
        try:
            while True:
                try:
                    if not skip_sync:
                        state.sync()
                    return func(state, *args, **kwargs)
                except HorovodInternalError:
                    state.restore()
                    skip_sync = False
                except HostsUpdatedInterrupt as e:
                    skip_sync = e.skip_sync
                reset()
                state.on_reset()
        finally:
            notification_manager.remove_listener(state)

    return wrapper
