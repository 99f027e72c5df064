"""Everything the edge does not handle reaches FLASK_ORIGIN unchanged, streamed both ways."""

import http.client
import os
import time
from urllib.parse import urlsplit

import pytest

from devkit.fakes import FakeServer, Reply
from devkit.runner import Edge


@pytest.fixture(scope="module")
def module_origin():
    with FakeServer() as server:
        yield server


@pytest.fixture(scope="module")
def edge(module_origin, tmp_path_factory):
    with Edge(tmp_path_factory.mktemp("forwarding"), vars={"FLASK_ORIGIN": module_origin.url}) as edge:
        yield edge


@pytest.fixture
def origin(module_origin):
    module_origin.clear()
    module_origin.reply = Reply()
    return module_origin


def test_method_path_query_headers_and_body_reach_the_origin(edge, origin):
    r = edge.client.post("/api/things/7?b=2&a=%20x&a=1", content=b"\x00payload\xff",
                         headers={"Authorization": "Bearer managed", "X-Custom": "v1",
                                  "Content-Type": "application/octet-stream"})
    assert r.status_code == 200 and r.json() == {"ok": True}
    got = origin.received[0]
    assert (got.method, got.path) == ("POST", "/api/things/7?b=2&a=%20x&a=1")
    assert got.body == b"\x00payload\xff"
    assert got.headers["authorization"] == "Bearer managed"
    assert got.headers["x-custom"] == "v1"
    assert got.headers["content-type"] == "application/octet-stream"


def test_five_mebibyte_body_passes_byte_exact(edge, origin):
    body = os.urandom(5 << 20)
    r = edge.client.put("/upload", content=body)
    assert r.status_code == 200
    assert origin.received[0].body == body


def test_hop_by_hop_headers_are_dropped_both_ways(edge, origin):
    origin.reply = Reply(headers=[("content-type", "text/plain"), ("x-origin", "yes"),
                                  ("keep-alive", "timeout=99"), ("x-hop", "1"), ("connection", "x-hop")],
                         chunks=[b"fine"])
    r = edge.client.get("/h", headers={"Connection": "keep-alive, X-Drop-Me", "X-Drop-Me": "1",
                                       "Keep-Alive": "timeout=5", "TE": "trailers",
                                       "Proxy-Authorization": "Basic eA==", "X-Keep": "1"})
    assert r.text == "fine" and r.headers["x-origin"] == "yes"
    assert "x-hop" not in r.headers
    seen = origin.received[0].headers
    assert seen["x-keep"] == "1"
    for name in ("x-drop-me", "keep-alive", "te", "proxy-authorization"):
        assert name not in seen


def test_origin_status_and_error_body_pass_through(edge, origin):
    origin.reply = Reply(status=418, headers=[("content-type", "text/plain")], chunks=[b"teapot"])
    r = edge.client.get("/teapot")
    assert (r.status_code, r.text) == (418, "teapot")


def test_redirects_are_returned_not_followed(edge, origin):
    origin.reply = Reply(status=302, headers=[("location", "/elsewhere")], chunks=[b""])
    r = edge.client.get("/moved")
    assert r.status_code == 302 and r.headers["location"] == "/elsewhere"
    assert len(origin.received) == 1


def test_sse_response_streams_chunk_by_chunk(edge, origin):
    events = [b"data: {\"n\": %d}\n\n" % i for i in range(5)]
    origin.reply = Reply(headers=[("content-type", "text/event-stream")], chunks=events, delay=0.4)
    arrivals, received = [], b""
    started = time.monotonic()
    with edge.client.stream("GET", "/v1/stream") as r:
        assert r.headers["content-type"] == "text/event-stream"
        for chunk in r.iter_raw():
            arrivals.append(time.monotonic() - started)
            received += chunk
    assert received == b"".join(events)
    # The first event arrives long before the origin has finished (4 × 0.4 s of gaps),
    # measured between arrivals so a slow machine's request latency does not matter.
    assert arrivals[-1] - arrivals[0] > 1.0
    assert len(arrivals) >= 3


def raw_request(edge, method: str, target: str, headers: list[tuple[str, str]], body: bytes):
    """A request with exactly these headers (http.client adds none when told not to)."""
    conn = http.client.HTTPConnection(urlsplit(edge.url).netloc, timeout=30)
    conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
    for k, v in headers:
        conn.putheader(k, v)
    conn.endheaders(body)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp, data


#: Added by the transport on the way to the origin, in workerd as in the runner.
TRANSPORT = {"host", "connection"}


def test_forwarding_is_byte_exact_with_content_length_both_ways(edge, origin):
    """A WSGI origin that needs Content-Length (Werkzeug's dev server) must get it: the
    body arrives with the client's length, never re-framed as chunked."""
    body = os.urandom(2048)
    answer = b'{"id":7,"name":"Aurore \xe5\xa4\x9c"}' * 40
    origin.reply = Reply(headers=[("content-type", "application/json"), ("x-origin", "1"),
                                  ("set-cookie", "a=1"), ("cache-control", "no-cache")],
                         chunks=[answer], length=True)
    sent = [("Host", "edge.example"), ("Content-Type", "application/octet-stream"),
            ("Content-Length", str(len(body))), ("Authorization", "Bearer managed-key"),
            ("X-Custom", "v 1"), ("Accept", "application/json"), ("User-Agent", "rp-client/1.0"),
            ("Cookie", "s=2"), ("X-Empty", "")]
    resp, data = raw_request(edge, "POST", "/api/characters?id=7&x=%20a", sent, body)
    assert resp.status == 200 and data == answer
    assert resp.getheader("content-length") == str(len(answer))
    assert resp.getheader("transfer-encoding") is None
    assert (resp.getheader("x-origin"), resp.getheader("set-cookie")) == ("1", "a=1")
    got = origin.received[0]
    assert (got.method, got.path, got.body) == ("POST", "/api/characters?id=7&x=%20a", body)
    assert "transfer-encoding" not in got.headers
    received = sorted((k, v) for k, v in got.raw_headers if k not in TRANSPORT)
    assert received == sorted((k.lower(), v) for k, v in sent if k != "Host")


def test_only_true_hop_by_hop_headers_are_removed(edge, origin):
    sent = [("Host", "edge.example"), ("Connection", "keep-alive, X-Named"), ("X-Named", "1"),
            ("Keep-Alive", "timeout=5"), ("TE", "trailers"), ("Trailer", "X-T"),
            ("Upgrade", "h2c"), ("Proxy-Authorization", "Basic eA=="), ("Proxy-Foo", "1"),
            ("X-Kept", "yes"), ("Content-Length", "3")]
    resp, _ = raw_request(edge, "PUT", "/hop", sent, b"abc")
    assert resp.status == 200
    got = origin.received[0]
    assert got.body == b"abc"
    names = {k for k, _ in got.raw_headers} - TRANSPORT
    assert names == {"x-kept", "content-length"}
