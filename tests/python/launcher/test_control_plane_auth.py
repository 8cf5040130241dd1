"""The control plane lets no one in (runner/secret.py, runner/rendezvous.py):
requests without the job's signature are refused on every endpoint and change
nothing, replays and tampering are refused, a client believes no reply that is
not the job's, the store's bounds answer with clear errors, slow clients lose
their connection, and a Spark result that is not sealed is never unpickled."""

import http.client
import os
import pickle
import socket
import threading
import time

import pytest
from horovodlite.runner import rendezvous
from horovodlite.runner import secret as auth
from horovodlite.runner.rendezvous import RendezvousClient, RendezvousServer, signed_request


class _Log:
    def __init__(self):
        self.lines = []
        self._lock = threading.Lock()

    def __call__(self, message):
        with self._lock:
            self.lines.append(message)


@pytest.fixture
def logged():
    log = _Log()
    hook_calls = []

    def hook(handler):
        hook_calls.append(handler.path)
        if handler.path.startswith("/rendezvous/"):
            handler._reply(200, b"driver")
            return True
        return False

    s = RendezvousServer(bind_host="127.0.0.1", port=0, log=log, get_hook=hook)
    s.start()
    s.put("global", "rank_0", b"10.0.0.1:1234")
    s.hook_calls = hook_calls
    yield s, log
    s.stop()


def plain(port, method, path, body=None, headers=None):
    """An unsigned request, as anyone on the network could send: (status, body, headers)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read(), dict(resp.getheaders())
    finally:
        conn.close()


ENDPOINTS = [
    ("GET", "/global/rank_0", None),
    ("GET", "/global/missing", None),
    ("PUT", "/global/rank_0", b"6.6.6.6:666"),
    ("PUT", "/global/new_key", b"x"),
    ("POST", "/global/rank_0", b"6.6.6.6:666"),
    ("DELETE", "/global/rank_0", None),
    ("GET", "/rendezvous/rank_and_size?host=h&local_rank=0&generation=0", None),
    ("GET", "/rendezvous/hosts_updated", None),
    ("GET", "/", None),
    ("GET", "/../../etc/passwd", None),
]


@pytest.mark.parametrize("method,path,body", ENDPOINTS)
def test_unsigned_requests_are_refused_on_every_endpoint_and_change_nothing(logged, method, path, body):
    server, _ = logged
    status, reply, headers = plain(server.port, method, path, body)
    assert status == 401, (method, path, status, reply)
    assert auth.AUTH_HEADER not in headers
    assert server.get("global", "rank_0") == b"10.0.0.1:1234"
    assert server.get("global", "new_key") is None
    assert server.hook_calls == []
    assert server.refused == 1


def test_other_methods_get_no_2xx(logged):
    server, _ = logged
    for method in ("HEAD", "OPTIONS", "PATCH", "TRACE", "CONNECT"):
        status, _, _ = plain(server.port, method, "/global/rank_0")
        assert not 200 <= status < 300, (method, status)
    assert server.get("global", "rank_0") == b"10.0.0.1:1234"


def test_a_wrong_secret_is_refused_and_the_client_says_why(logged):
    server, _ = logged
    outsider = RendezvousClient("127.0.0.1", server.port, timeout=10, secret=auth.make_secret())
    with pytest.raises(auth.AuthError, match="not signed with that job's secret"):
        outsider.get("global", "rank_0")
    with pytest.raises(auth.AuthError):
        outsider.put("global", "rank_0", b"6.6.6.6:666")
    with pytest.raises(auth.AuthError):
        outsider.delete("global", "rank_0")
    with pytest.raises(auth.AuthError):
        outsider.request("GET", "/rendezvous/hosts_updated")
    assert server.get("global", "rank_0") == b"10.0.0.1:1234"
    assert server.hook_calls == []
    assert server.refused == 4


def test_refusals_are_logged_once_per_peer_at_warning_level(logged):
    server, log = logged
    for _ in range(5):
        assert plain(server.port, "GET", "/global/rank_0")[0] == 401
    assert server.refused == 5
    assert len(log.lines) == 1, log.lines
    line = log.lines[0]
    assert line.startswith("warning: rendezvous store: refused GET /global/rank_0 from 127.0.0.1"), line
    # The secret is never what is logged.
    assert server.secret not in line


def test_the_job_goes_on_while_outsiders_knock(logged):
    server, _ = logged
    client = RendezvousClient("127.0.0.1", server.port, timeout=10, secret=server.secret)
    stop = threading.Event()

    def knock():
        while not stop.is_set():
            plain(server.port, "PUT", "/global/rank_0", b"6.6.6.6:666")

    t = threading.Thread(target=knock)
    t.start()
    try:
        for i in range(50):
            client.put("global", "k%d" % i, b"v%d" % i)
        assert [client.get("global", "k%d" % i) for i in range(50)] == [b"v%d" % i for i in range(50)]
    finally:
        stop.set()
        t.join()
    assert client.get("global", "rank_0") == b"10.0.0.1:1234"
    assert server.refused > 0


def _send_raw(port, data, read=True):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        if not read:
            return b""
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def _signed_bytes(key, method, path, body=b"", signer=None):
    signer = signer or auth.Signer(key)
    header, _ = signer.sign(method, path, body)
    return ("%s %s HTTP/1.1\r\nHost: x\r\n%s: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (
        method, path, auth.AUTH_HEADER, header, len(body))).encode() + body


def _status(reply):
    return int(reply.split(b" ", 2)[1])


def test_a_replayed_request_is_refused_and_changes_nothing(logged):
    server, _ = logged
    request = _signed_bytes(server.key, "PUT", "/global/rank_0", b"10.0.0.9:99")
    assert _status(_send_raw(server.port, request)) == 200
    assert server.get("global", "rank_0") == b"10.0.0.9:99"
    server.put("global", "rank_0", b"10.0.0.1:1234")
    # The same bytes again, as someone who recorded them would send them.
    assert _status(_send_raw(server.port, request)) == 401
    assert server.get("global", "rank_0") == b"10.0.0.1:1234"
    delete = _signed_bytes(server.key, "DELETE", "/global/rank_0")
    assert _status(_send_raw(server.port, delete)) == 200
    server.put("global", "rank_0", b"10.0.0.1:1234")
    assert _status(_send_raw(server.port, delete)) == 401
    assert server.get("global", "rank_0") == b"10.0.0.1:1234"


def test_requests_out_of_order_within_the_window_pass_once_each(logged):
    server, _ = logged
    signer = auth.Signer(server.key)
    requests = [_signed_bytes(server.key, "PUT", "/global/o%d" % i, b"%d" % i, signer) for i in range(5)]
    for i in (4, 0, 2, 1, 3):
        assert _status(_send_raw(server.port, requests[i])) == 200
    for i in range(5):
        assert _status(_send_raw(server.port, requests[i])) == 401
    assert [server.get("global", "o%d" % i) for i in range(5)] == [b"%d" % i for i in range(5)]


def test_tampered_requests_are_refused(logged):
    server, _ = logged
    signer = auth.Signer(server.key)
    # Another body under the signature of the first.
    request = _signed_bytes(server.key, "PUT", "/global/rank_0", b"10.0.0.9:99", signer)
    forged = request.replace(b"10.0.0.9:99", b"66.6.6.6:66")
    assert _status(_send_raw(server.port, forged)) == 401
    # Another path under the same signature.
    request = _signed_bytes(server.key, "PUT", "/global/rank_0", b"x", signer)
    assert _status(_send_raw(server.port, request.replace(b"/global/rank_0", b"/global/rank_1"))) == 401
    # Another method.
    request = _signed_bytes(server.key, "GET", "/global/rank_0", b"", signer)
    assert _status(_send_raw(server.port, request.replace(b"GET /", b"DELETE /", 1))) == 401
    assert server.get("global", "rank_0") == b"10.0.0.1:1234"
    assert server.get("global", "rank_1") is None


def test_a_request_from_a_stale_clock_is_refused(logged, monkeypatch):
    server, _ = logged
    signer = auth.Signer(server.key)
    monkeypatch.setattr(auth.time, "time", lambda: 1_000_000_000.0)
    header, _ = signer.sign("PUT", "/global/rank_0", b"x")
    monkeypatch.undo()
    request = ("PUT /global/rank_0 HTTP/1.1\r\n%s: %s\r\nContent-Length: 1\r\n\r\nx" % (
        auth.AUTH_HEADER, header)).encode()
    assert _status(_send_raw(server.port, request)) == 401
    assert server.get("global", "rank_0") == b"10.0.0.1:1234"


class _FakeStore(threading.Thread):
    """A server that answers every request with `reply` (bytes of a whole HTTP
    response): to show that the client believes only the job's replies."""

    def __init__(self, make_reply):
        super().__init__(daemon=True)
        self.make_reply = make_reply
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.start()

    def run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                conn.sendall(self.make_reply(data))

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept()
        except OSError:
            pass
        self.sock.close()
        self.join(10)


def _response(status, body, extra=""):
    head = "HTTP/1.1 %d X\r\nContent-Length: %d\r\nConnection: close\r\n%s\r\n" % (status, len(body), extra)
    return head.encode() + body


def _signed_by(key):
    """A fake store's reply, signed properly but with `key`, for the request it got."""
    def reply(request):
        head = request.decode(errors="replace")
        value = [line.split(":", 1)[1].strip() for line in head.split("\r\n")
                 if line.lower().startswith(auth.AUTH_HEADER.lower() + ":")][0]
        req_mac = value.split()[-1]
        body = b"6.6.6.6:666"
        return _response(200, body, "%s: %s\r\n" % (auth.AUTH_HEADER, auth.reply_mac(key, req_mac, 200,
                                                                                      auth.body_digest(body))))
    return reply


def test_the_client_rejects_unsigned_and_forged_replies():
    secret = auth.make_secret()
    client = RendezvousClient("127.0.0.1", 1, timeout=10, secret=secret)
    fakes = [_FakeStore(lambda req: _response(200, b"6.6.6.6:666")),
             _FakeStore(lambda req: _response(200, b"6.6.6.6:666", "%s: %s\r\n" % (auth.AUTH_HEADER, "0" * 64))),
             _FakeStore(_signed_by(auth.parse_secret(auth.make_secret())))]
    try:
        for fake in fakes:
            client.port = fake.port
            with pytest.raises(auth.AuthError, match="not signed with this job's secret"):
                client.get("global", "rank_0")
            with pytest.raises(auth.AuthError):
                client.put("global", "rank_0", b"v")
        # The same fake, signing with the job's key, is believed: the check is the key, not the shape.
        good = _FakeStore(_signed_by(client.key))
        fakes.append(good)
        client.port = good.port
        assert client.get("global", "rank_0") == b"6.6.6.6:666"
    finally:
        for fake in fakes:
            fake.close()


def test_a_reply_for_another_request_is_rejected(logged):
    # A genuine reply of the job's store, recorded, then played back as the
    # answer to a later request: its mac is for the first request only.
    server, _ = logged
    signer = auth.Signer(server.key)
    header, _ = signer.sign("GET", "/global/rank_0", b"")
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", "/global/rank_0", headers={auth.AUTH_HEADER: header})
    resp = conn.getresponse()
    body = resp.read()
    recorded = _response(resp.status, body, "%s: %s\r\n" % (auth.AUTH_HEADER, resp.getheader(auth.AUTH_HEADER)))
    conn.close()
    assert (resp.status, body) == (200, b"10.0.0.1:1234")
    fake = _FakeStore(lambda req: recorded)
    try:
        with pytest.raises(auth.AuthError, match="not signed with this job's secret"):
            signed_request("127.0.0.1", fake.port, signer, "GET", "/global/rank_0")
    finally:
        fake.close()


def test_values_over_the_limit_get_413_and_a_full_store_507():
    server = RendezvousServer(bind_host="127.0.0.1", port=0, max_value_bytes=1000, max_store_bytes=2500)
    server.start()
    try:
        client = RendezvousClient("127.0.0.1", server.port, timeout=10, secret=server.secret)
        with pytest.raises(RuntimeError, match="answered 413: a value of 1001 bytes is larger than the rendezvous "
                                               "store's limit of 1000 bytes"):
            client.put("global", "big", b"x" * 1001)
        assert client.get("global", "big") is None
        client.put("global", "a", b"x" * 1000)
        client.put("global", "b", b"x" * 1000)
        with pytest.raises(RuntimeError, match="answered 507: .*would pass its limit of 2500 "
                                               "\\(HOROVODLITE_STORE_MAX_BYTES\\)"):
            client.put("global", "c", b"x" * 1000)
        assert client.get("global", "c") is None
        # Overwriting within the limit is fine; deleting frees space.
        client.put("global", "a", b"y" * 400)
        client.delete("global", "b")
        client.put("global", "c", b"z" * 1000)
        assert server.store.total_bytes == 1400
    finally:
        server.stop()


def test_an_unsigned_huge_body_is_not_read(logged):
    server, _ = logged
    # Claims 1 GiB and sends a little: refused at once, without waiting for the rest.
    start = time.monotonic()
    reply = _send_raw(server.port, b"PUT /global/x HTTP/1.1\r\nContent-Length: 1073741824\r\n\r\nxxxx")
    assert _status(reply) == 401
    assert time.monotonic() - start < 5
    assert server.store.total_bytes == len(b"10.0.0.1:1234")


def test_a_slow_client_loses_its_connection(monkeypatch):
    monkeypatch.setattr(rendezvous, "REQUEST_DEADLINE_S", 1.0)
    server = RendezvousServer(bind_host="127.0.0.1", port=0)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as s:
            s.sendall(b"GET /global/x HTTP/1.1\r\n")  # and never the rest
            start = time.monotonic()
            assert s.recv(1024) == b""
            assert time.monotonic() - start < 10
    finally:
        server.stop()


def test_connections_are_bounded_and_the_job_is_served_after(monkeypatch):
    monkeypatch.setattr(rendezvous, "MAX_CONNECTIONS", 4)
    monkeypatch.setattr(rendezvous, "REQUEST_DEADLINE_S", 2.0)
    server = RendezvousServer(bind_host="127.0.0.1", port=0)
    server.start()
    idle = []
    try:
        for _ in range(12):
            idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=20))
        time.sleep(0.5)
        handlers = [t for t in threading.enumerate() if "process_request_thread" in t.name]
        assert len(handlers) == 4, [t.name for t in handlers]
        # The idle ones time out; the job's client then gets through.
        client = RendezvousClient("127.0.0.1", server.port, timeout=30, secret=server.secret)
        client.put("global", "after", b"1")
        assert client.get("global", "after") == b"1"
    finally:
        for s in idle:
            s.close()
        server.stop()


def test_sealed_records_bind_their_key_and_secret():
    key = auth.parse_secret(auth.make_secret())
    record = auth.seal(key, "result/0", b"payload")
    assert auth.unseal(key, "result/0", record) == b"payload"
    with pytest.raises(auth.AuthError, match="result/1 is not sealed with this job's secret"):
        auth.unseal(key, "result/1", record)
    with pytest.raises(auth.AuthError):
        auth.unseal(auth.parse_secret(auth.make_secret()), "result/0", record)
    with pytest.raises(auth.AuthError):
        auth.unseal(key, "result/0", record[:-1] + b"X")
    with pytest.raises(auth.AuthError, match="is not sealed"):
        auth.unseal(key, "result/0", b"payload")


class _Boom:
    """Unpickling this writes a marker file: the proof that a record was loaded."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_tampered_spark_result_is_refused_and_not_unpickled(tmp_path):
    from horovodlite.spark import runner as spark_runner
    marker = str(tmp_path / "unpickled")
    payload = pickle.dumps(_Boom(marker))
    server = RendezvousServer(bind_host="127.0.0.1", port=0)
    name = "%s/result/1" % spark_runner.SCOPE
    other = auth.parse_secret(auth.make_secret())
    for record in (payload,  # not sealed at all
                   auth.seal(other, name, payload),  # sealed with another secret
                   server.seal("%s/result/0" % spark_runner.SCOPE, payload)):  # another rank's record
        server.put(spark_runner.SCOPE, "result/1", record)
        with pytest.raises(spark_runner.SparkJobError, match="result of rank 1 was refused, not unpickled"):
            spark_runner._result_record(server, 1)
        assert not os.path.exists(marker)
    # Sealed by the job for this rank it passes, and only then is it loaded.
    server.put(spark_runner.SCOPE, "result/1", server.seal(name, payload))
    pickle.loads(spark_runner._result_record(server, 1))
    assert os.path.exists(marker)


def test_the_secret_is_never_in_a_refusal_or_an_error(logged):
    server, log = logged
    outsider = RendezvousClient("127.0.0.1", server.port, timeout=10, secret=auth.make_secret())
    with pytest.raises(auth.AuthError) as err:
        outsider.get("global", "rank_0")
    assert server.secret not in str(err.value)
    assert outsider.key.hex() not in str(err.value)
    assert all(server.secret not in line for line in log.lines)


def test_a_client_without_a_secret_says_where_it_comes_from(monkeypatch):
    for name in auth.SECRET_ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="HOROVODLITE_SECRET_KEY is not set"):
        RendezvousClient("127.0.0.1", 1)
    monkeypatch.setenv(auth.SECRET_ENV, "abc")
    with pytest.raises(ValueError, match="HOROVODLITE_SECRET_KEY must be at least 32 hex digits"):
        RendezvousClient("127.0.0.1", 1)


def test_bind_address_is_the_jobs_interface(monkeypatch):
    from horovodlite.runner import gloo_run
    monkeypatch.delenv("HOROVODLITE_RENDEZVOUS_BIND", raising=False)
    assert gloo_run.bind_address("127.0.0.1") == "127.0.0.1"
    assert gloo_run.bind_address("198.18.0.1") == "198.18.0.1"
    monkeypatch.setenv("HOROVODLITE_RENDEZVOUS_BIND", "0.0.0.0")
    assert gloo_run.bind_address("198.18.0.1") == "0.0.0.0"


def test_malformed_signature_headers_are_refused_not_crashed(logged):
    server, _ = logged
    good, _ = auth.Signer(server.key).sign("GET", "/global/rank_0", b"")
    parts = good.split()
    for bad in ["", "v1", "v2 " + " ".join(parts[1:]), " ".join(parts[:2] + ["\u00b3"] + parts[3:]),
                " ".join(parts[:3] + ["1" * 40] + parts[4:]), " ".join(parts[:5] + ["G" * 64]), good + " extra"]:
        request = ("GET /global/rank_0 HTTP/1.1\r\n%s: %s\r\nConnection: close\r\n\r\n" % (
            auth.AUTH_HEADER, bad)).encode("latin-1")  # as http.server decodes heads
        assert _status(_send_raw(server.port, request)) == 401, bad
    assert server.refused == 7
