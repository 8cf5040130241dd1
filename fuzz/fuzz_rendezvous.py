"""Fuzzes the rendezvous store's request parser and handler
(python/horovodlite/runner/rendezvous.py) with atheris: each input is the raw
bytes a peer sends on one connection, fed to the real handler through a socket
pair, twice:

- as an outsider, to a store whose secret the input cannot know: no reply may
  be 2xx and the store must be unchanged;
- as the job, to a store with a fixed secret and clock (so that the signed
  seeds in fuzz/corpus_rendezvous reach the store's code): the handler must
  neither raise nor hang, and the store's byte count must match its values.

    ci/fuzz.sh runs it (pip install atheris);
    python fuzz/fuzz_rendezvous.py --write-seeds DIR   writes the seed corpus;
    tests/python/launcher/test_fuzz_rendezvous_corpus.py replays the corpus.
"""

import os
import socket
import sys
import threading
import time
import types

# The source tree's package, unless a built one (PYTHONPATH) comes first: the
# store is pure Python, either serves.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from horovodlite.runner import rendezvous  # noqa: E402
from horovodlite.runner import secret as auth  # noqa: E402

# The job's side: a fixed secret and clock, so that signed seeds stay valid.
JOB_KEY = bytes(range(32))
JOB_CLOCK = 1_900_000_000
OUTSIDER_KEY = os.urandom(32)
PRESET = {("global", "rank_0"): b"198.18.0.1:1234", ("global.1", "0"): b"x" * 100}


class _NoDeadlines:
    def arm(self, conn, seconds):
        pass

    def disarm(self, conn):
        pass


def _hook(handler):
    if handler.path.startswith("/rendezvous/"):
        handler._reply(200, b"driver")
        return True
    return False


def _server(key, clock):
    srv = types.SimpleNamespace()
    store = rendezvous.KVStore(max_bytes=64 * 1024)
    for (scope, k), v in PRESET.items():
        store.put(scope, k, v)
    rendezvous.equip(srv, store, auth.Verifier(key, clock=clock), lambda message: None, _hook,
                     max_value_bytes=8 * 1024, deadlines=_NoDeadlines())
    srv.note_refused = types.MethodType(rendezvous._ThreadingServer.note_refused, srv)
    return srv


def _snapshot(store):
    return {(scope, k): store.get(scope, k) for scope in store.scopes() for k in store.keys(scope)}


def _feed(srv, data):
    """Runs the handler on one connection carrying `data`; the peer's received bytes."""
    mine, theirs = socket.socketpair()
    got = []

    def drain():
        while True:
            chunk = mine.recv(65536)
            if not chunk:
                return
            got.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    mine.sendall(data)
    mine.shutdown(socket.SHUT_WR)
    try:
        rendezvous._Handler(theirs, ("198.18.0.66", 40000), srv)
    finally:
        # End the reply, let the reader see it all, and only then close: closing
        # a socket with input unread would reset the peer.
        try:
            theirs.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        reader.join(10)
        theirs.close()
        mine.close()
    assert not reader.is_alive(), "the handler's reply never ended"
    return b"".join(got)


def _heads(reply):
    """[(status, header lines)] of each response in `reply`, read as a client
    reads them (a head, then Content-Length bytes of body)."""
    heads = []
    while reply.startswith(b"HTTP/"):
        end = reply.find(b"\r\n\r\n")
        assert end >= 0, reply[:200]
        lines = reply[:end].split(b"\r\n")
        code = int(lines[0].split(b" ", 2)[1])
        heads.append((code, lines[1:]))
        length = [int(line.split(b":", 1)[1]) for line in lines[1:] if line.lower().startswith(b"content-length:")]
        reply = reply[end + 4 + (length[0] if length and code >= 200 else 0):]
    # A request that parses as HTTP/0.9 (no version, so no headers and no
    # signature) gets an answer without a head: an error page or the refusal.
    assert not reply or reply.startswith((b"<!DOCTYPE HTML>", b"refused: ")), \
        "bytes after the last response: %r" % reply[:200]
    return heads


_outsider = None


def check(data):
    """The properties, for one input (raises AssertionError when one fails)."""
    global _outsider
    if _outsider is None:
        _outsider = _server(OUTSIDER_KEY, time.time)
    before = _snapshot(_outsider.store)
    reply = _feed(_outsider, data)
    heads = _heads(reply)
    assert not any(200 <= code < 300 for code, _ in heads), (heads, data[:200])
    assert _snapshot(_outsider.store) == before, data[:200]
    # No reply is signed (an error page may quote the request, and so the header's name).
    assert not any(line.lower().startswith(auth.AUTH_HEADER.lower().encode() + b":")
                   for _, lines in heads for line in lines), (heads, data[:200])

    job = _server(JOB_KEY, lambda: JOB_CLOCK)
    _feed(job, data)
    values = _snapshot(job.store)
    assert job.store.total_bytes == sum(len(v) for v in values.values()), data[:200]
    assert job.store.total_bytes <= job.store.max_bytes


def _signed(method, path, body=b"", signer=None, extra=""):
    signer = signer or auth.Signer(JOB_KEY)
    real = auth.time.time
    auth.time.time = lambda: JOB_CLOCK
    try:
        header, _ = signer.sign(method, path, body)
    finally:
        auth.time.time = real
    return ("%s %s HTTP/1.1\r\nHost: s\r\n%s: %s\r\nContent-Length: %d\r\n%s\r\n" % (
        method, path, auth.AUTH_HEADER, header, len(body), extra)).encode() + body


def seeds():
    """name -> bytes: the corpus's starting points."""
    signer = auth.Signer(JOB_KEY)
    keep_alive = _signed("PUT", "/global/a", b"1", signer) + _signed("GET", "/global/a", b"", signer) + \
        _signed("DELETE", "/global/a", b"", signer)
    return {
        "plain_get": b"GET /global/rank_0 HTTP/1.1\r\nHost: s\r\n\r\n",
        "plain_put": b"PUT /global/rank_0 HTTP/1.1\r\nContent-Length: 4\r\n\r\nevil",
        "plain_huge_length": b"PUT /global/x HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\nx",
        "plain_negative_length": b"PUT /global/x HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        "plain_http10": b"GET /global/rank_0 HTTP/1.0\r\n\r\n",
        "bad_header": b"GET /global/rank_0 HTTP/1.1\r\nX-HVL-Auth: v1 zz 1 2 ab cd\r\n\r\n",
        "signed_get": _signed("GET", "/global/rank_0"),
        "signed_put": _signed("PUT", "/global/new", b"value"),
        "signed_delete": _signed("DELETE", "/global.1/0"),
        "signed_driver": _signed("GET", "/rendezvous/hosts_updated"),
        "signed_no_key": _signed("GET", "/global"),
        "signed_too_big": _signed("PUT", "/global/big", b"y" * 9000),
        "signed_expect": _signed("PUT", "/global/e", b"abc", extra="Expect: 100-continue\r\n"),
        "signed_keep_alive": keep_alive,
        "signed_quoted": _signed("PUT", "/glo%62al/k%2Fx?q=1", b"q"),
    }


def main():
    if sys.argv[1:2] == ["--write-seeds"]:
        os.makedirs(sys.argv[2], exist_ok=True)
        for name, data in seeds().items():
            with open(os.path.join(sys.argv[2], name), "wb") as f:
                f.write(data)
        return
    import atheris
    atheris.instrument_all()
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
