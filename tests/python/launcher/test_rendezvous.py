"""The rendezvous KV store (horovodlite.runner.rendezvous): the Gloo-launch
contract's PUT/GET/DELETE protocol, scopes, reset, concurrency, for the job's
signed requests (test_control_plane_auth.py: everyone else's)."""

import http.client
import os
import threading

import pytest
from horovodlite.runner import secret as auth
from horovodlite.runner.rendezvous import RendezvousClient, RendezvousServer, signed_request, split_path


@pytest.fixture
def server():
    s = RendezvousServer(bind_host="127.0.0.1", port=0)
    port = s.start()
    assert isinstance(port, int) and port > 0
    yield s
    s.stop()


def raw(server, method, path, body=None):
    """One request signed with the server's secret, its reply checked."""
    return signed_request("127.0.0.1", server.port, auth.Signer(server.key), method, path, body, timeout=10)


def client_of(server):
    return RendezvousClient("127.0.0.1", server.port, timeout=10, secret=server.secret)


def test_get_is_404_until_set_then_200(server):
    assert raw(server, "GET", "/global/rank_0")[0] == 404
    assert raw(server, "PUT", "/global/rank_0", b"10.0.0.1:1234")[0] == 200
    assert raw(server, "GET", "/global/rank_0") == (200, b"10.0.0.1:1234")
    # Overwrite.
    assert raw(server, "PUT", "/global/rank_0", b"x")[0] == 200
    assert raw(server, "GET", "/global/rank_0") == (200, b"x")


def test_delete(server):
    raw(server, "PUT", "/global/k", b"v")
    assert raw(server, "DELETE", "/global/k")[0] == 200
    assert raw(server, "GET", "/global/k")[0] == 404
    # Deleting what is not there is fine too.
    assert raw(server, "DELETE", "/global/never")[0] == 200


def test_binary_bodies_round_trip(server):
    blobs = [b"", b"\x00", bytes(range(256)) * 17, os.urandom(1 << 20)]
    for i, blob in enumerate(blobs):
        assert raw(server, "PUT", "/bin/blob%d" % i, blob)[0] == 200
    for i, blob in enumerate(blobs):
        assert raw(server, "GET", "/bin/blob%d" % i) == (200, blob)


def test_scopes_are_separate_and_reset_drops_one_or_all(server):
    raw(server, "PUT", "/global/a", b"1")
    raw(server, "PUT", "/global.1/a", b"2")
    raw(server, "PUT", "/ps.3/a", b"3")
    assert raw(server, "GET", "/global/a") == (200, b"1")
    assert raw(server, "GET", "/global.1/a") == (200, b"2")
    server.reset("global.1")
    assert raw(server, "GET", "/global.1/a")[0] == 404
    assert raw(server, "GET", "/global/a") == (200, b"1")
    assert raw(server, "GET", "/ps.3/a") == (200, b"3")
    server.reset()
    assert raw(server, "GET", "/global/a")[0] == 404
    assert raw(server, "GET", "/ps.3/a")[0] == 404
    assert server.store.scopes() == []


def test_keys_may_contain_slashes(server):
    raw(server, "PUT", "/global/rank/0/addr", b"a")
    assert raw(server, "GET", "/global/rank/0/addr") == (200, b"a")
    assert raw(server, "GET", "/global/rank/0")[0] == 404
    assert split_path("/s/k/x?q=1") == ("s", "k/x")
    assert split_path("/onlyscope") is None
    assert split_path("/") is None


def test_bad_paths_are_400(server):
    assert raw(server, "GET", "/")[0] == 400
    assert raw(server, "PUT", "/noscope", b"x")[0] == 400
    assert raw(server, "DELETE", "/s/")[0] == 400


def test_keep_alive_connection_serves_many_requests(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    signer = auth.Signer(server.key)

    def request(method, path, body=None):
        header, mac = signer.sign(method, path, body or b"")
        conn.request(method, path, body=body, headers={auth.AUTH_HEADER: header})
        resp = conn.getresponse()
        data = resp.read()
        signer.check_reply(mac, resp.status, resp.getheader(auth.AUTH_HEADER), data)
        return resp.status, data

    try:
        for i in range(50):
            assert request("PUT", "/global/k%d" % i, b"%d" % i)[0] == 200
            assert request("GET", "/global/k%d" % i) == (200, b"%d" % i)
    finally:
        conn.close()


def test_concurrent_clients_full_exchange(server):
    """Like a Gloo rendezvous: every rank PUTs its address, then waits for every
    other rank's (GET polled until present)."""
    n = 16
    errors = []
    results = {}
    start = threading.Barrier(n)

    def rank(r):
        try:
            client = client_of(server)
            start.wait()
            client.put("global", "rank_%d" % r, b"addr-%d" % r)
            seen = [client.wait("global", "rank_%d" % p, timeout=20) for p in range(n)]
            results[r] = seen
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((r, e))

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert all(not t.is_alive() for t in threads)
    expected = [b"addr-%d" % p for p in range(n)]
    assert len(results) == n and all(v == expected for v in results.values())


def test_client_wait_times_out_naming_key_and_address(server):
    client = client_of(server)
    with pytest.raises(TimeoutError, match=r"/global/missing .*127\.0\.0\.1:%d" % server.port):
        client.wait("global", "missing", timeout=0.3)


def test_client_put_get_delete(server):
    client = client_of(server)
    assert client.get("s", "k") is None
    client.put("s", "k", "text")
    assert client.get("s", "k") == b"text"
    client.delete("s", "k")
    assert client.get("s", "k") is None


def test_stop_frees_the_port_and_restart_works():
    s = RendezvousServer(bind_host="127.0.0.1")
    port = s.start()
    s.put("global", "k", "v")
    s.stop()
    s.stop()  # idempotent
    with pytest.raises(OSError):
        http.client.HTTPConnection("127.0.0.1", port, timeout=2).request("GET", "/global/k")
    with RendezvousServer(bind_host="127.0.0.1") as s2:
        assert raw(s2, "GET", "/global/k")[0] == 404


def test_get_hook_answers_first(server):
    def hook(handler):
        if handler.path.startswith("/rendezvous/"):
            handler._reply(200, b"hooked")
            return True
        return False
    s = RendezvousServer(bind_host="127.0.0.1", get_hook=hook)
    s.start()
    try:
        assert raw(s, "GET", "/rendezvous/x") == (200, b"hooked")
        assert raw(s, "GET", "/global/x")[0] == 404
    finally:
        s.stop()
