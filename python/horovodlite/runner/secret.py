"""The per-job secret and the authentication of every control-plane message.

Each launcher that serves a rendezvous store (horovodlite-run --gloo and elastic,
horovodlite.spark, horovodlite.ray) makes a fresh 256-bit secret per job and
hands it to its workers the way their environment already travels (a child's
environment, the first lines of a remote rank's stdin, Spark's task closure,
Ray's actor call), never on a command line. With it:

- every request carries ``X-HVL-Auth: v1 <client> <counter> <time> <sha256(body)> <mac>``,
  mac = HMAC-SHA256(secret, "hvl1-req" method path client counter time length
  sha256(body), one per line). The server checks the mac before it reads the
  body, then the body against its digest; (client, counter) is accepted once
  (a sliding window per client), and a request more than MAX_SKEW_S away from
  the server's clock is refused, so that a recorded request cannot be replayed;
- every reply carries ``X-HVL-Auth: <mac>``, HMAC over the request's mac, the
  status and sha256(reply body): a client accepts no answer that is not from
  the job, and not for this request;
- a record that a rank hands the driver through the store (Spark's fn, results
  and exceptions) is also sealed end to end (``seal``/``unseal``, bound to its
  key), and nothing is unpickled before its seal checks.

The C++ client (horovodlite/src/transport/auth.cc) computes the same macs.
"""

import collections
import hashlib
import hmac
import os
import re
import secrets
import threading
import time

# The variable a worker finds the secret in (64 hex digits); HOROVOD_SECRET_KEY
# is read too, as every HOROVODLITE_ name has its HOROVOD_ twin.
SECRET_ENV = "HOROVODLITE_SECRET_KEY"
SECRET_ENV_NAMES = (SECRET_ENV, "HOROVOD_SECRET_KEY")
AUTH_HEADER = "X-HVL-Auth"
# How far a request's clock may be from the server's (seconds). Replays are
# refused by the counter window; the clock bound lets the server forget a
# client's window once it has been idle for longer than twice this.
MAX_SKEW_S = 300
# How many counters behind the highest one seen a client's request may be
# (requests of one client on several threads arrive out of order).
REPLAY_WINDOW = 1024
SECRET_BYTES = 32


class AuthError(RuntimeError):
    """A message that does not carry the job's secret (or a damaged one)."""


def make_secret():
    """A fresh secret, as the hex string that travels in SECRET_ENV."""
    return secrets.token_hex(SECRET_BYTES)


def parse_secret(text, where=SECRET_ENV):
    """The key bytes of a hex secret; ValueError naming `where` when malformed."""
    try:
        key = bytes.fromhex(text.strip())
    except (ValueError, AttributeError):
        key = b""
    if len(key) < 16:
        raise ValueError("%s must be at least 32 hex digits (128 bits); got %d characters" % (where, len(text or "")))
    return key


def secret_from_env(environ=None):
    """The key bytes from the environment, or None when no launcher gave one."""
    environ = os.environ if environ is None else environ
    for name in SECRET_ENV_NAMES:
        value = environ.get(name)
        if value:
            return parse_secret(value, name)
    return None


_keyed = {}


def _mac(key, text):
    # A copy of an HMAC already keyed: no digest lookup and key set-up per
    # message (OpenSSL 3 fetches the digest by name on every one-shot call).
    base = _keyed.get(key)
    if base is None:
        base = _keyed.setdefault(key, hmac.new(key, digestmod=hashlib.sha256))
    h = base.copy()
    h.update(text.encode())
    return h.hexdigest()


_EMPTY_DIGEST = hashlib.sha256(b"").hexdigest()


def body_digest(body):
    return hashlib.sha256(body).hexdigest() if body else _EMPTY_DIGEST


def request_mac(key, method, path, client, counter, stamp, length, digest):
    return _mac(key, "hvl1-req\n%s\n%s\n%s\n%d\n%d\n%d\n%s" % (method, path, client, counter, stamp, length, digest))


def reply_mac(key, req_mac, status, digest):
    return _mac(key, "hvl1-rep\n%s\n%d\n%s" % (req_mac, status, digest))


def _record_mac(key, name, payload):
    return _mac(key, "hvl1-rec\n%s\n%s" % (name, body_digest(payload))).encode()


class Signer:
    """A client's side: signs requests, checks replies. One random client id per
    signer; its counter never repeats."""

    def __init__(self, key):
        self.key = key
        self.client = secrets.token_hex(8)
        self._counter = 0
        self._lock = threading.Lock()

    def sign(self, method, path, body):
        """(header value, the request's mac)."""
        with self._lock:
            self._counter += 1
            counter = self._counter
        stamp = int(time.time())
        digest = body_digest(body)
        mac = request_mac(self.key, method, path, self.client, counter, stamp, len(body or b""), digest)
        return "v1 %s %d %d %s %s" % (self.client, counter, stamp, digest, mac), mac

    def check_reply(self, req_mac, status, header, body):
        """Raises AuthError unless the reply carries the job's mac for this request."""
        want = reply_mac(self.key, req_mac, status, body_digest(body))
        if not header or not hmac.compare_digest(header.strip(), want):
            raise AuthError("the reply (status %d) is not signed with this job's secret%s" % (
                status, "" if header else " (it carries no %s header)" % AUTH_HEADER))


ParsedAuth = collections.namedtuple("ParsedAuth", "client counter stamp digest mac")


# "v1 <client: 16 hex> <counter> <time> <sha256: 64 hex> <mac: 64 hex>"; ASCII
# digits only ("\u00b3" passes str.isdigit, not int()).
_AUTH_RE = re.compile(r"v1 ([0-9a-f]{16}) ([0-9]{1,19}) ([0-9]{1,12}) ([0-9a-f]{64}) ([0-9a-f]{64})")


def parse_auth_header(value):
    """ParsedAuth, or raises AuthError saying what is wrong with the header."""
    if not value:
        raise AuthError("no %s header" % AUTH_HEADER)
    m = _AUTH_RE.fullmatch(value.strip())
    if m is None:
        raise AuthError("malformed %s header" % AUTH_HEADER)
    client, counter, stamp, digest, mac = m.groups()
    return ParsedAuth(client, int(counter), int(stamp), digest, mac)


class Verifier:
    """The server's side: checks request heads (before their bodies are read),
    remembers which counters each client has used, signs replies."""

    # At most this many clients' windows are kept; only requests with a valid
    # mac create one, so this bounds what the job's own clients can use.
    MAX_CLIENTS = 1 << 16

    def __init__(self, key, max_skew_s=MAX_SKEW_S, clock=time.time):
        self.key = key
        self.max_skew_s = max_skew_s
        self._clock = clock
        self._lock = threading.Lock()
        self._windows = {}  # client -> [highest counter, bitmask of the window below it, last seen]

    def check_head(self, method, path, header, length):
        """ParsedAuth of a request whose head is the job's; AuthError otherwise.
        Records the counter: the same request is refused the second time."""
        auth = parse_auth_header(header)
        want = request_mac(self.key, method, path, auth.client, auth.counter, auth.stamp, length, auth.digest)
        if not hmac.compare_digest(auth.mac, want):
            raise AuthError("bad signature")
        now = self._clock()
        if abs(now - auth.stamp) > self.max_skew_s:
            raise AuthError("the request's clock is %.0f s away from this server's (at most %d s)" % (
                auth.stamp - now, self.max_skew_s))
        self._accept_counter(auth.client, auth.counter, now)
        return auth

    @staticmethod
    def check_body(auth, body):
        if not hmac.compare_digest(body_digest(body), auth.digest):
            raise AuthError("the body does not match its signature")

    def sign_reply(self, auth, status, body):
        return reply_mac(self.key, auth.mac, status, body_digest(body))

    def _accept_counter(self, client, counter, now):
        with self._lock:
            window = self._windows.get(client)
            if window is None:
                if len(self._windows) >= self.MAX_CLIENTS:
                    self._forget_idle(now)
                    if len(self._windows) >= self.MAX_CLIENTS:
                        raise AuthError("too many clients")
                self._windows[client] = [counter, 0, now]
                return
            top, mask, _ = window
            if counter > top:
                shift = counter - top
                mask = ((mask << shift) | (1 << (shift - 1))) & ((1 << REPLAY_WINDOW) - 1) if shift <= REPLAY_WINDOW \
                    else 0
                window[0], window[1] = counter, mask
            else:
                behind = top - counter
                if behind == 0 or behind > REPLAY_WINDOW or (mask >> (behind - 1)) & 1:
                    raise AuthError("replayed request")
                window[1] = mask | (1 << (behind - 1))
            window[2] = now

    def _forget_idle(self, now):
        # A window idle for more than twice the skew bound can go: any request it
        # would refuse is by now too old to pass the clock check.
        idle = [c for c, w in self._windows.items() if now - w[2] > 2 * self.max_skew_s]
        for c in idle:
            del self._windows[c]


def seal(key, name, payload):
    """`payload` (bytes) with a mac bound to `name` (the store key it travels
    under): b"hvl1:" + mac + b":" + payload."""
    return b"hvl1:" + _record_mac(key, name, payload) + b":" + payload


def unseal(key, name, record):
    """The payload of a sealed record; AuthError when it was not sealed with the
    job's secret under `name` (changed, moved to another key, or forged)."""
    if not isinstance(record, (bytes, bytearray)) or not record.startswith(b"hvl1:") or len(record) < 70 \
            or record[69:70] != b":":
        raise AuthError("the record %s is not sealed" % name)
    mac, payload = bytes(record[5:69]), bytes(record[70:])
    if not hmac.compare_digest(mac, _record_mac(key, name, payload)):
        raise AuthError("the record %s is not sealed with this job's secret" % name)
    return payload
