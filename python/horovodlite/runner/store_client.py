"""The signed client of the rendezvous store (runner/rendezvous.py): for
workers, drivers and tests. Kept apart from the server so that a worker's
first request (an elastic reset's) imports http.client only, not http.server."""

import http.client
import time
from urllib.parse import quote

from horovodlite.runner import secret as auth


def _key_of(secret):
    if secret is None:
        key = auth.secret_from_env()
        if key is None:
            raise ValueError("horovodlite: no job secret: %s is not set (a worker gets it from the launcher that "
                             "started it: horovodlite-run, horovodlite.spark or horovodlite.ray)" % auth.SECRET_ENV)
        return key
    return secret if isinstance(secret, bytes) else auth.parse_secret(secret)


def signed_request(addr, port, signer, method, path, body=None, timeout=30.0):
    """One signed request; (status, body) of a reply that is signed for it.
    AuthError when the server refused the signature or the reply is not the
    job's; OSError when it cannot be reached."""
    body = b"" if body is None else body
    header, mac = signer.sign(method, path, body)
    conn = http.client.HTTPConnection(addr, int(port), timeout=timeout)
    try:
        conn.request(method, path, body=body if body or method in ("PUT", "POST") else None,
                     headers={auth.AUTH_HEADER: header})
        resp = conn.getresponse()
        data = resp.read()
        reply_auth = resp.getheader(auth.AUTH_HEADER)
    finally:
        conn.close()
    if resp.status == 401 and reply_auth is None:
        raise auth.AuthError("the rendezvous store at %s:%s refused %s %s: it is not signed with that job's secret "
                             "(%s differs: was this process started by the job's launcher?)" % (
                                 addr, port, method, path, auth.SECRET_ENV))
    try:
        signer.check_reply(mac, resp.status, reply_auth, data)
    except auth.AuthError as e:
        raise auth.AuthError("rendezvous %s:%s: %s %s: %s" % (addr, port, method, path, e)) from None
    return resp.status, data


class RendezvousClient:
    """A small client for Python workers, drivers and tests: every request
    signed with the job's secret (`secret`: hex or key bytes; default: the
    environment's), every reply checked."""

    def __init__(self, addr, port, timeout=30.0, secret=None):
        self.addr = addr
        self.port = int(port)
        self.timeout = timeout
        self.key = _key_of(secret)
        self._signer = auth.Signer(self.key)

    def _request(self, method, scope, key, body=None):
        path = "/%s/%s" % (quote(scope, safe=""), quote(key, safe="/"))
        return signed_request(self.addr, self.port, self._signer, method, path, body, self.timeout)

    def request(self, method, path, body=None):
        """A request to any path (the elastic driver's /rendezvous/...)."""
        return signed_request(self.addr, self.port, self._signer, method, path, body, self.timeout)

    def put(self, scope, key, value):
        if isinstance(value, str):
            value = value.encode()
        status, body = self._request("PUT", scope, key, value)
        if status != 200:
            raise RuntimeError("rendezvous %s:%d: PUT /%s/%s answered %d: %s" % (
                self.addr, self.port, scope, key, status, body[:300].decode(errors="replace").strip()))

    def get(self, scope, key):
        """The bytes, or None when not set (404)."""
        status, body = self._request("GET", scope, key)
        if status == 404:
            return None
        if status != 200:
            raise RuntimeError("rendezvous %s:%d: GET /%s/%s answered %d: %s" % (
                self.addr, self.port, scope, key, status, body[:300].decode(errors="replace").strip()))
        return body

    def wait(self, scope, key, timeout):
        """Polls GET with back-off until set; TimeoutError naming key and address."""
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

    def seal(self, name, payload):
        return auth.seal(self.key, name, payload)

    def unseal(self, name, record):
        return auth.unseal(self.key, name, record)
