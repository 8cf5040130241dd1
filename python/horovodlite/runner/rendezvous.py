"""The rendezvous key-value store that a Gloo job's launcher serves over HTTP.

Workers started without mpirun find each other through it (the Gloo-launch
contract, docs/elastic.md#the-gloo-launch-contract; Horovod 0.28's
KVStoreHandler shape):

    PUT    /<scope>/<key>   body = raw bytes   -> 200
    GET    /<scope>/<key>                      -> 200 + the bytes, or 404 if not yet set
    DELETE /<scope>/<key>                      -> 200 (whether or not it was set)

A scope is one world: "global", or one per process set or elastic generation
("global.3"). Keys may contain "/" (everything after the first "/" following the
scope is the key). The server holds everything in memory; no shared file system
is assumed.

Only the job gets in (runner/secret.py): every request must carry the job's
signature, or it is refused with 401 and changes nothing (the first refusal from
each address is logged at warning level); every reply is signed. Bounds: a
value's size, the store's total bytes (507 with a message when full), a deadline
per request and per idle connection, and at most MAX_CONNECTIONS handled at once
(further ones wait in the listen queue).

    server = RendezvousServer(bind_host="127.0.0.1", port=0, secret=hex_secret)
    port = server.start()        # serves in a daemon thread
    server.reset("global.2")     # drop one scope's keys (reset() drops all)
    server.stop()
"""

import http.server
import os
import socket
import socketserver
import sys
import threading
import time
from urllib.parse import unquote

from horovodlite.runner import secret as auth

# The client lives apart (no http.server to import in every worker); here too for the store's users.
from horovodlite.runner.store_client import RendezvousClient, signed_request  # noqa: E402, F401, I001

# Largest value accepted by PUT: a rendezvous value is an address or a small
# blob (Spark's pickled fn and results are the largest); anything larger is a
# client bug, not data.
MAX_VALUE_BYTES = 64 * 1024 * 1024
# The most the store holds in all (values' bytes); HOROVODLITE_STORE_MAX_BYTES.
MAX_STORE_BYTES = 1024 * 1024 * 1024
# Connections handled at once; more wait in the kernel's listen queue.
MAX_CONNECTIONS = 256
# A request's head must arrive within this; an idle keep-alive connection is
# closed after it (a slow or silent client holds no thread for longer).
REQUEST_DEADLINE_S = 30.0
# A body may take this long on top, plus a second per MB (slow links).
BODY_DEADLINE_S = 30.0


class StoreFull(Exception):
    pass


class KVStore:
    """Thread-safe {scope: {key: bytes}} with a condition variable so that
    in-process readers can wait for a key."""

    def __init__(self, max_bytes=None):
        self._lock = threading.Condition()
        self._scopes = {}
        self._bytes = 0
        self.max_bytes = max_bytes

    def put(self, scope, key, value):
        """Raises StoreFull (and changes nothing) when the value would take the
        store past max_bytes."""
        value = bytes(value)
        with self._lock:
            keys = self._scopes.setdefault(scope, {})
            old = keys.get(key)
            grown = self._bytes + len(value) - (len(old) if old is not None else 0)
            if self.max_bytes is not None and grown > self.max_bytes:
                if not keys:
                    del self._scopes[scope]
                raise StoreFull("the rendezvous store holds %d bytes; %d more for /%s/%s would pass its limit of "
                                "%d (HOROVODLITE_STORE_MAX_BYTES)" % (self._bytes, len(value), scope, key,
                                                                     self.max_bytes))
            keys[key] = value
            self._bytes = grown
            self._lock.notify_all()

    @property
    def total_bytes(self):
        with self._lock:
            return self._bytes

    def get(self, scope, key):
        """The bytes, or None when not set."""
        with self._lock:
            return self._scopes.get(scope, {}).get(key)

    def wait(self, scope, key, timeout):
        """The bytes once set, or None after `timeout` seconds."""
        with self._lock:
            self._lock.wait_for(lambda: key in self._scopes.get(scope, {}), timeout)
            return self._scopes.get(scope, {}).get(key)

    def delete(self, scope, key):
        with self._lock:
            keys = self._scopes.get(scope)
            if keys is not None:
                old = keys.pop(key, None)
                if old is not None:
                    self._bytes -= len(old)
                if not keys:
                    del self._scopes[scope]

    def keys(self, scope):
        with self._lock:
            return sorted(self._scopes.get(scope, {}))

    def scopes(self):
        with self._lock:
            return sorted(self._scopes)

    def reset(self, scope=None):
        with self._lock:
            if scope is None:
                self._scopes.clear()
                self._bytes = 0
            else:
                dropped = self._scopes.pop(scope, None) or {}
                self._bytes -= sum(len(v) for v in dropped.values())


def split_path(path):
    """'/scope/key/with/slashes?x' -> ('scope', 'key/with/slashes'); None if
    the path has no scope or no key."""
    path = path.split("?", 1)[0]
    parts = path.lstrip("/").split("/", 1)
    if len(parts) != 2 or not parts[0] or not parts[1]:
        return None
    return unquote(parts[0]), unquote(parts[1])


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a client may poll on one connection
    # Per receive; the server's deadlines bound a whole request.
    timeout = REQUEST_DEADLINE_S

    def setup(self):
        super().setup()
        self._auth = None
        self.server.deadlines.arm(self.connection, REQUEST_DEADLINE_S)

    def finish(self):
        try:
            super().finish()
        finally:
            self.server.deadlines.disarm(self.connection)

    def _reply(self, code, body=b"", content_type="application/octet-stream"):
        # The head and the body in one write (send_response and send_header
        # would make two, with a Server and a Date header no client reads).
        self.log_request(code)
        if self.request_version == "HTTP/0.9":  # no head (and never signed: 0.9 has no headers)
            self.wfile.write(body)
            return
        head = "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n" % (
            code, self.responses.get(code, ("",))[0], content_type, len(body))
        if self._auth is not None:
            head += "%s: %s\r\n" % (auth.AUTH_HEADER, self.server.verifier.sign_reply(self._auth, code, body))
        if self.close_connection:
            head += "Connection: close\r\n"
        self.wfile.write(head.encode("latin-1") + b"\r\n" + (body if self.command != "HEAD" else b""))
        if not self.close_connection:
            # The next request on this connection has its own deadline.
            self.server.deadlines.arm(self.connection, REQUEST_DEADLINE_S)

    def _refuse(self, why, length):
        self._auth = None
        self.server.note_refused(self.client_address, self.command, self.path, why)
        # A small body is read so that the client sees the 401 rather than a
        # reset; a large one is not read at all.
        if length is not None and 0 < length <= 65536:
            try:
                self.rfile.read(length)
            except OSError:
                pass
        self.close_connection = True
        self._reply(401, b"refused: this store serves only its job's signed requests\n", "text/plain")

    def _serve(self):
        self._auth = None
        header = self.headers.get(auth.AUTH_HEADER)
        raw_length = self.headers.get("Content-Length")
        try:
            length = int(raw_length) if raw_length is not None else 0
            if length < 0:
                raise ValueError
        except ValueError:
            return self._refuse("bad Content-Length", None)
        try:
            self._auth = self.server.verifier.check_head(self.command, self.path, header, length)
        except auth.AuthError as e:
            return self._refuse(str(e), length)
        limit = self.server.max_value_bytes
        if length > limit:
            self.close_connection = True
            return self._reply(413, ("a value of %d bytes is larger than the rendezvous store's limit of %d bytes\n"
                                     % (length, limit)).encode(), "text/plain")
        self.server.deadlines.arm(self.connection, BODY_DEADLINE_S + length / 1e6)
        body = self.rfile.read(length) if length else b""
        if len(body) != length:
            self.close_connection = True
            return None
        try:
            auth.Verifier.check_body(self._auth, body)
        except auth.AuthError as e:
            return self._refuse(str(e), None)
        return self._dispatch(body)

    def _dispatch(self, body):
        # Signed: the job's own. A long poll (the elastic driver's
        # rank_and_size waits for the next world) has no deadline.
        self.server.deadlines.disarm(self.connection)
        if self.command == "GET":
            hook = self.server.get_hook
            if hook is not None and hook(self):
                return None
        target = split_path(self.path)
        if target is None:
            return self._reply(400, b"expected /<scope>/<key>\n", "text/plain")
        if self.command == "GET":
            value = self.server.store.get(*target)
            if value is None:
                return self._reply(404, b"not set\n", "text/plain")
            return self._reply(200, value)
        if self.command == "DELETE":
            self.server.store.delete(*target)
            return self._reply(200)
        try:
            self.server.store.put(target[0], target[1], body)
        except StoreFull as e:
            return self._reply(507, (str(e) + "\n").encode(), "text/plain")
        return self._reply(200)

    do_GET = do_PUT = do_POST = do_DELETE = _serve

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        if self.server.verbose:
            super().log_message(format, *args)


class _Deadlines:
    """Shuts down connections whose current request (or idle wait) has taken
    longer than its deadline: the handler's thread then sees end-of-file."""

    def __init__(self):
        self._lock = threading.Lock()
        self._until = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hvl-rendezvous-deadlines", daemon=True)
        self._thread.start()

    def arm(self, conn, seconds):
        with self._lock:
            self._until[conn] = time.monotonic() + seconds

    def disarm(self, conn):
        with self._lock:
            self._until.pop(conn, None)

    def _run(self):
        while not self._stop.wait(0.5):
            now = time.monotonic()
            with self._lock:
                late = [c for c, t in self._until.items() if t < now]
                for c in late:
                    del self._until[c]
            for c in late:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self):
        self._stop.set()
        self._thread.join()


class _ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def process_request(self, request, client_address):
        # At most MAX_CONNECTIONS threads; the next connection waits for one.
        while not self.slots.acquire(timeout=0.5):
            if self.stopping:
                self.shutdown_request(request)
                return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def note_refused(self, client_address, method, path, why):
        peer = client_address[0] if client_address else "?"
        with self.refused_lock:
            self.refused += 1
            first = peer not in self.refused_peers
            if first and len(self.refused_peers) < 4096:
                self.refused_peers.add(peer)
        if first:
            self.log("warning: rendezvous store: refused %s %s from %s (%s); further refusals from that address "
                     "are not logged" % (method, path.split("?", 1)[0][:200], peer, why))

    def handle_error(self, request, client_address):
        # A client that went away mid-request (a rank ended, a deadline passed) is no error.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError, OSError)):
            return
        super().handle_error(request, client_address)


def equip(httpd, store, verifier, log, get_hook=None, max_value_bytes=MAX_VALUE_BYTES, verbose=False,
          deadlines=None):
    """What _Handler needs of its server (fuzz/fuzz_rendezvous.py equips a
    stand-in, to feed the handler bytes without a socket server)."""
    httpd.store = store
    httpd.verifier = verifier
    httpd.log = log
    httpd.get_hook = get_hook
    httpd.max_value_bytes = max_value_bytes
    httpd.verbose = verbose
    httpd.deadlines = deadlines
    httpd.refused = 0
    httpd.refused_peers = set()
    httpd.refused_lock = threading.Lock()


def _default_log(message):
    sys.stderr.write("horovodlite: %s\n" % message)
    sys.stderr.flush()


class RendezvousServer:
    """The launcher's rendezvous KV store: an HTTP server in a daemon thread.

    `secret`: the job's secret (hex, runner/secret.py); a fresh one is made
    when not given (`server.secret` then tells it to the workers). Binds
    `bind_host` only: the address the workers are given, or loopback.

    `get_hook(handler) -> bool`, when given, sees every authenticated GET first
    and may answer it itself (the elastic driver serves /rendezvous/... that way);
    returning False leaves the request to the store."""

    def __init__(self, bind_host="127.0.0.1", port=0, verbose=False, get_hook=None, secret=None,
                 max_value_bytes=MAX_VALUE_BYTES, max_store_bytes=None, log=None):
        self.bind_host = bind_host
        self.requested_port = port
        self.verbose = verbose
        self.get_hook = get_hook
        self.secret = secret or auth.make_secret()
        self.key = auth.parse_secret(self.secret, "the rendezvous server's secret")
        if max_store_bytes is None:
            max_store_bytes = int(os.environ.get("HOROVODLITE_STORE_MAX_BYTES", MAX_STORE_BYTES))
        self.max_value_bytes = max_value_bytes
        self.store = KVStore(max_bytes=max_store_bytes)
        self.log = log or _default_log
        self._httpd = None
        self._thread = None

    @property
    def port(self):
        return self._httpd.server_address[1] if self._httpd else None

    @property
    def refused(self):
        """How many requests were refused as not the job's."""
        return self._httpd.refused if self._httpd else 0

    def start(self):
        """Binds, starts serving, returns the bound port."""
        if self._httpd is not None:
            return self.port
        httpd = _ThreadingServer((self.bind_host, self.requested_port), _Handler, bind_and_activate=False)
        httpd.address_family = socket.AF_INET6 if ":" in self.bind_host else socket.AF_INET
        httpd.socket = socket.socket(httpd.address_family, socket.SOCK_STREAM)
        try:
            httpd.server_bind()
            httpd.server_activate()
        except OSError as e:
            httpd.server_close()
            raise OSError(e.errno, "rendezvous store: cannot listen on %s:%d: %s" % (
                self.bind_host, self.requested_port, e.strerror)) from e
        equip(httpd, self.store, auth.Verifier(self.key), self.log, self.get_hook, self.max_value_bytes,
              self.verbose, _Deadlines())
        httpd.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        httpd.stopping = False
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="hvl-rendezvous", daemon=True)
        self._thread.start()
        return self.port

    def reset(self, scope=None):
        """Drops the keys of `scope` (all scopes when None)."""
        self.store.reset(scope)

    def put(self, scope, key, value):
        self.store.put(scope, key, value.encode() if isinstance(value, str) else value)

    def get(self, scope, key):
        return self.store.get(scope, key)

    def seal(self, name, payload):
        """`payload` sealed for `name` with this job's secret (runner/secret.py)."""
        return auth.seal(self.key, name, payload)

    def unseal(self, name, record):
        return auth.unseal(self.key, name, record)

    def stop(self):
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.stopping = True
        httpd.shutdown()
        httpd.server_close()
        httpd.deadlines.stop()
        self._thread.join()
        self._thread = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
