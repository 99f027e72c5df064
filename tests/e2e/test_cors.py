"""CORS_ALLOWED_ORIGINS through the runner (real Pyodide, real local D1): a listed
origin's preflight is the edge's, its answers carry the origin back, errors included;
anything else is forwarded as before (docs/design.md §3)."""

import pytest

from devkit import roleplay as rp
from devkit.fakes import FakeServer
from devkit.runner import Edge

LISTED, OTHER = "http://127.0.0.1:8000", "https://evil.example"
REQUEST_HEADERS = "authorization,content-type,x-roleplay-session-id"


@pytest.fixture(scope="module")
def origin():
    with FakeServer() as server:
        yield server


@pytest.fixture(scope="module")
def edge(origin, tmp_path_factory):
    vars_ = rp.edge_vars("http://127.0.0.1:9", origin.url, CORS_ALLOWED_ORIGINS=f"{LISTED}, https://bad.example/x")
    with Edge(tmp_path_factory.mktemp("cors"), vars=vars_) as edge:
        yield edge


def preflight(edge, path, method, origin=LISTED):
    return edge.client.options(path, headers={"Origin": origin, "Access-Control-Request-Method": method,
                                              "Access-Control-Request-Headers": REQUEST_HEADERS})


def test_a_listed_origin_is_answered_by_the_edge(edge, origin):
    origin.clear()
    r = preflight(edge, "/v1/context/search", "POST")
    assert r.status_code == 204 and r.content == b""
    assert r.headers["access-control-allow-origin"] == LISTED
    assert r.headers["access-control-allow-methods"] == "POST"
    assert r.headers["access-control-allow-headers"] == "authorization, content-type, x-api-key, x-roleplay-session-id"
    assert r.headers["access-control-max-age"] == "600"
    assert origin.received == []
    edge.wait_for_log(lambda rec: rec.get("route") == "preflight")
    warnings = [line for line in edge.logs() if line.get("level") == "warning"]
    assert len(warnings) == 1 and "CORS_ALLOWED_ORIGINS" in warnings[0]["message"]
    assert "bad.example" not in repr(edge.logs())


def test_answers_and_errors_carry_the_origin(edge):
    key, _ = rp.seed_principal(edge)
    made = edge.client.post("/v1/roleplay/sessions", headers={"Authorization": f"Bearer {key}", "Origin": LISTED})
    refused = edge.client.post("/v1/roleplay/sessions", headers={"Origin": LISTED})
    for r, status in ((made, 201), (refused, 401)):
        assert r.status_code == status
        assert r.headers["access-control-allow-origin"] == LISTED and r.headers["vary"] == "Origin"
        assert "access-control-allow-credentials" not in r.headers
    other = edge.client.post("/v1/roleplay/sessions", headers={"Authorization": f"Bearer {key}", "Origin": OTHER})
    assert other.status_code == 201 and "access-control-allow-origin" not in other.headers


@pytest.mark.parametrize("path,method,who", [
    ("/v1/context/pages/cp_" + "A" * 43, "GET", LISTED),          # managed retrieval: the origin's
    ("/v1/chat/completions", "POST", LISTED),
    ("/v1/roleplay/sessions", "POST", OTHER),
])
def test_anything_else_is_forwarded_as_before(edge, origin, path, method, who):
    origin.clear()
    r = preflight(edge, path, method, who)
    assert r.status_code == 200 and r.json() == {"ok": True}
    assert not [k for k in r.headers if k.startswith("access-control-")]
    [got] = origin.received
    assert got.method == "OPTIONS" and got.path == path
