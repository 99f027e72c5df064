"""CORS on the edge's own roleplay routes, in-process (docs/design.md §3,
CORS_ALLOWED_ORIGINS): listed origins only, preflights answered only for sessions, pages
and search, never on a forwarded path, never `*`."""

import pytest

from devkit import roleplay as rp
from multillm_edge.base import cors
from tests.handlers.conftest import KEY, MODEL, SESSION, WINDOW
from tests.support.inprocess import LocalEdge

ST = "http://127.0.0.1:8000"
OTHER = "https://evil.example"
SETTING = f" {ST} , https://Rp.Example.com:443,https://bad.example/path, *"
SENT_HEADERS = "authorization,content-type,x-roleplay-session-id"
PAGE = "cp_" + "A" * 43


@pytest.fixture
def edge():
    vars_ = rp.edge_vars("http://provider.test", "http://origin.test", CORS_ALLOWED_ORIGINS=SETTING)
    with LocalEdge(vars_) as edge:
        edge.seed_player("p_handlers", KEY, SESSION)
        edge.set_model(MODEL, WINDOW, 1000)
        yield edge


def cors_headers(r) -> dict:
    return {k: v for k, v in r.headers if k.startswith("access-control-")}


def preflight(edge, path, method, origin=ST, headers=SENT_HEADERS):
    h = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers is not None:
        h["Access-Control-Request-Headers"] = headers
    return edge.request("OPTIONS", path, h)


ROUTES = [("/v1/roleplay/sessions", "POST"), ("/v1/roleplay/sessions/rps_x", "DELETE"),
          (f"/v1/context/pages/{PAGE}?roleplay_session_id={SESSION}&exchange=2", "GET"),
          ("/v1/context/search", "POST")]


@pytest.mark.parametrize("path,method", ROUTES)
def test_a_listed_origin_gets_a_preflight_answer_from_the_edge(edge, path, method):
    r = preflight(edge, path, method)
    assert r.status == 204 and r.body == b"" and not edge.sent
    assert cors_headers(r) == {
        "access-control-allow-origin": ST,
        "access-control-allow-methods": method,
        "access-control-allow-headers": "authorization, content-type, x-api-key, x-roleplay-session-id",
        "access-control-max-age": "600"}
    assert "Origin" in r.header("vary") and r.header("cache-control") == "no-store"
    assert edge.logs[-1]["route"] == "preflight" and edge.logs[-1]["status"] == 204


def test_a_configured_origin_matches_as_browsers_send_it(edge):
    """Case and a default port are normalized in the setting; the Origin is compared exactly."""
    assert preflight(edge, "/v1/roleplay/sessions", "POST", "https://rp.example.com").status == 204
    for origin in ("https://RP.example.com", "https://rp.example.com:443", ST + "/", "null", "*", ""):
        assert preflight(edge, "/v1/roleplay/sessions", "POST", origin).status == 200   # forwarded
    assert len(edge.sent) == 6


FORWARDED = [
    ("/v1/context/pages/" + PAGE, "GET", SENT_HEADERS),        # managed retrieval: the origin's
    ("/v1/context/search", "POST", "authorization,content-type"),   # no session header: the origin's
    ("/v1/chat/completions", "POST", SENT_HEADERS),             # generation: never browser-called
    ("/v1/models", "GET", SENT_HEADERS),
    ("/v1/roleplay/sessions", "GET", SENT_HEADERS),             # a method the route does not take
    ("/healthz", "GET", None),
    ("/v1/files", "POST", SENT_HEADERS),
]


@pytest.mark.parametrize("path,method,headers", FORWARDED)
def test_a_preflight_to_a_forwarded_path_is_forwarded_as_before(edge, path, method, headers):
    r = preflight(edge, path, method, headers=headers)
    assert r.status == 200 and r.json()["id"] == "x" and cors_headers(r) == {}
    [sent] = edge.sent
    assert sent.method == "OPTIONS" and sent.url == "http://origin.test" + path
    assert ("origin", ST) in sent.headers


@pytest.mark.parametrize("path,method", ROUTES)
def test_an_unlisted_origin_is_forwarded_as_before(edge, path, method):
    r = preflight(edge, path, method, origin=OTHER)
    assert r.status == 200 and cors_headers(r) == {}
    assert [s.method for s in edge.sent] == ["OPTIONS"]


def test_an_options_without_request_method_is_forwarded(edge):
    r = edge.request("OPTIONS", "/v1/roleplay/sessions", {"Origin": ST})
    assert r.status == 200 and cors_headers(r) == {} and len(edge.sent) == 1


def test_the_actual_requests_carry_cors_headers_for_a_listed_origin(edge):
    auth = {"Authorization": f"Bearer {KEY}", "Origin": ST}
    created = edge.request("POST", "/v1/roleplay/sessions", auth)
    assert created.status == 201
    sid = created.json()["session_id"]
    turn = edge.request("POST", "/v1/chat/completions", {**auth, "X-Roleplay-Session-ID": sid},
                        rp.chat_body(30, tag="CO"))
    page_id = turn.json()["context_pages"][0]["page_id"]
    assert cors_headers(turn) == {}                       # generation: not a CORS route
    answers = [
        edge.request("GET", f"/v1/context/pages/{page_id}?roleplay_session_id={sid}", auth),
        edge.request("POST", "/v1/context/search", {**auth, "X-Roleplay-Session-ID": sid}, {"query": "CO"}),
        edge.request("DELETE", f"/v1/roleplay/sessions/{sid}", auth),
        created]
    for r in answers:
        assert r.status in (200, 201), r.body
        assert cors_headers(r) == {"access-control-allow-origin": ST}
        assert r.header("vary") == "Origin"
        assert all(v != "*" for _, v in r.headers) and "access-control-allow-credentials" not in dict(r.headers)


@pytest.mark.parametrize("request_args,status", [
    (("POST", "/v1/roleplay/sessions", {}), 401),
    (("DELETE", "/v1/roleplay/sessions/rps_nope", {"Authorization": f"Bearer {KEY}"}), 404),
    (("GET", f"/v1/context/pages/{PAGE}?roleplay_session_id={SESSION}", {"Authorization": f"Bearer {KEY}"}), 404),
    (("POST", "/v1/context/search", {"Authorization": f"Bearer {KEY}", "X-Roleplay-Session-ID": ""}), 400),
])
def test_errors_carry_cors_headers_so_the_page_can_read_them(edge, request_args, status):
    method, path, headers = request_args
    r = edge.request(method, path, {**headers, "Origin": ST}, b"{}" if method == "POST" else b"")
    assert r.status == status and r.json()["error"]["code"]
    assert cors_headers(r) == {"access-control-allow-origin": ST}


def test_an_unlisted_origin_gets_no_cors_headers_on_actual_requests(edge):
    r = edge.request("POST", "/v1/roleplay/sessions", {"Authorization": f"Bearer {KEY}", "Origin": OTHER})
    assert r.status == 201 and cors_headers(r) == {} and r.header("vary") == "Origin"


def test_without_the_setting_nothing_changes(edge):
    with LocalEdge(rp.edge_vars("http://provider.test", "http://origin.test")) as plain:
        plain.seed_player("p_plain", KEY, SESSION)
        r = preflight(plain, "/v1/roleplay/sessions", "POST")
        assert r.status == 200 and [s.method for s in plain.sent] == ["OPTIONS"]
        r = plain.request("POST", "/v1/roleplay/sessions", {"Authorization": f"Bearer {KEY}", "Origin": ST})
        assert r.status == 201 and cors_headers(r) == {} and r.header("vary") is None


def test_invalid_entries_warn_once_naming_the_setting_never_a_value(edge, monkeypatch):
    monkeypatch.setattr(cors, "_parsed", (None, frozenset()))
    monkeypatch.setattr(cors, "_warned", False)
    for _ in range(3):
        preflight(edge, "/v1/roleplay/sessions", "POST")
    warnings = [r for r in edge.logs if r.get("level") == "warning"]
    assert len(warnings) == 1
    assert "CORS_ALLOWED_ORIGINS" in warnings[0]["message"]
    assert "bad.example" not in repr(edge.logs) and "127.0.0.1" not in repr(edge.logs)
