"""The rendezvous key-value store that a Gloo job's launcher serves over HTTP.

Workers started without mpirun find each other through it (the Gloo-launch
contract, notes/contract-gloo.md; Horovod 0.28's KVStoreHandler shape):

    PUT    /<scope>/<key>   body = raw bytes   -> 200
    GET    /<scope>/<key>                      -> 200 + the bytes, or 404 if not yet set
    DELETE /<scope>/<key>                      -> 200 (whether or not it was set)

A scope is one world: "global", or one per process set or elastic generation
("global.3"). Keys may contain "/" (everything after the first "/" following the
scope is the key). The server holds everything in memory; no shared file system
is assumed.

    server = RendezvousServer(bind_host="0.0.0.0", port=0)
    port = server.start()        # serves in a daemon thread
    server.reset("global.2")     # drop one scope's keys (reset() drops all)
    server.stop()
"""

import http.server
import socketserver
import threading
from urllib.parse import unquote

# Largest value accepted by PUT: a rendezvous value is an address or a small
# blob; anything this large is a client bug, not data.
MAX_VALUE_BYTES = 64 * 1024 * 1024


class KVStore:
    """Thread-safe {scope: {key: bytes}} with a condition variable so that
    in-process readers can wait for a key."""

    def __init__(self):
        self._lock = threading.Condition()
        self._scopes = {}

    def put(self, scope, key, value):
        with self._lock:
            self._scopes.setdefault(scope, {})[key] = bytes(value)
            self._lock.notify_all()

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
                keys.pop(key, None)
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
            else:
                self._scopes.pop(scope, None)


def split_path(path):
    """'/scope/key/with/slashes?x' -> ('scope', 'key/with/slashes'); None if
    the path has no scope or no key."""
    path = path.split("?", 1)[0]
    parts = path.lstrip("/").split("/", 1)
    if len(parts) != 2 or not parts[0] or not parts[1]:
        return None
    return unquote(parts[0]), unquote(parts[1])


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the C++ client may poll on one connection

    def _reply(self, code, body=b"", content_type="application/octet-stream"):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _target(self):
        target = split_path(self.path)
        if target is None:
            self._reply(400, b"expected /<scope>/<key>\n", "text/plain")
        return target

    def do_GET(self):
        hook = self.server.get_hook
        if hook is not None:
            handled = hook(self)
            if handled:
                return
        target = self._target()
        if target is None:
            return
        value = self.server.store.get(*target)
        if value is None:
            self._reply(404, b"not set\n", "text/plain")
        else:
            self._reply(200, value)

    def do_PUT(self):
        target = self._target()
        if target is None:
            self._drain()
            return
        length = self.headers.get("Content-Length")
        if length is None:
            self._reply(411, b"Content-Length required\n", "text/plain")
            self.close_connection = True
            return
        try:
            n = int(length)
        except ValueError:
            n = -1
        if n < 0 or n > MAX_VALUE_BYTES:
            self._reply(413, b"bad Content-Length\n", "text/plain")
            self.close_connection = True
            return
        value = self.rfile.read(n)
        if len(value) != n:
            self.close_connection = True
            return
        self.server.store.put(target[0], target[1], value)
        self._reply(200)

    do_POST = do_PUT

    def do_DELETE(self):
        target = self._target()
        if target is None:
            return
        self.server.store.delete(*target)
        self._reply(200)

    def _drain(self):
        try:
            n = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            n = 0
        if 0 < n <= MAX_VALUE_BYTES:
            self.rfile.read(n)

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        if self.server.verbose:
            super().log_message(format, *args)


class _ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # A client that went away mid-request (a rank ended) is no error.
        import sys
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class RendezvousServer:
    """The launcher's rendezvous KV store: an HTTP server in a daemon thread.

    `get_hook(handler) -> bool`, when given, sees every GET first and may answer
    it itself (the elastic driver serves /rendezvous/... that way); returning
    False leaves the request to the store."""

    def __init__(self, bind_host="0.0.0.0", port=0, verbose=False, get_hook=None):
        self.bind_host = bind_host
        self.requested_port = port
        self.verbose = verbose
        self.get_hook = get_hook
        self.store = KVStore()
        self._httpd = None
        self._thread = None

    @property
    def port(self):
        return self._httpd.server_address[1] if self._httpd else None

    def start(self):
        """Binds, starts serving, returns the bound port."""
        if self._httpd is not None:
            return self.port
        httpd = _ThreadingServer((self.bind_host, self.requested_port), _Handler)
        httpd.store = self.store
        httpd.verbose = self.verbose
        httpd.get_hook = self.get_hook
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

    def stop(self):
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        self._thread.join()
        self._thread = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


class RendezvousClient:
    """A small client for Python workers and tests (http.client, keep-alive)."""

    def __init__(self, addr, port, timeout=30.0):
        self.addr = addr
        self.port = int(port)
        self.timeout = timeout

    def _request(self, method, scope, key, body=None):
        import http.client
        from urllib.parse import quote
        conn = http.client.HTTPConnection(self.addr, self.port, timeout=self.timeout)
        try:
            conn.request(method, "/%s/%s" % (quote(scope, safe=""), quote(key, safe="/")), body=body)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def put(self, scope, key, value):
        if isinstance(value, str):
            value = value.encode()
        status, body = self._request("PUT", scope, key, value)
        if status != 200:
            raise RuntimeError("rendezvous %s:%d: PUT /%s/%s answered %d: %s" % (
                self.addr, self.port, scope, key, status, body[:200]))

    def get(self, scope, key):
        """The bytes, or None when not set (404)."""
        status, body = self._request("GET", scope, key)
        if status == 404:
            return None
        if status != 200:
            raise RuntimeError("rendezvous %s:%d: GET /%s/%s answered %d: %s" % (
                self.addr, self.port, scope, key, status, body[:200]))
        return body

    def wait(self, scope, key, timeout):
        """Polls GET with back-off until set; TimeoutError naming key and address."""
        import time
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            value = self.get(scope, key)
            if value is not None:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError("rendezvous: /%s/%s not set at %s:%d within %.0f s" % (
                    scope, key, self.addr, self.port, timeout))
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def delete(self, scope, key):
        self._request("DELETE", scope, key)
