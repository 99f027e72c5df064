"""`GET /v1/models` in-process (docs/design.md §2, "Model list"): a live roleplay key gets
the models its principal may use from the edge; an unknown or revoked key of the reserved
format is a 401 and never reaches the origin; every other request reaches the origin
exactly as a request without a key would."""

import base64
import json

import pytest

from devkit import roleplay as rp
from tests.handlers.conftest import KEY, MODEL, SESSION
from tests.support.inprocess import Answer, LocalEdge

ORIGIN = "http://origin.test"
ORIGIN_LIST = b'{"object":"list","data":[{"id":"flask-model","object":"model"}]}'
# What the edge answers for the handlers' key: "fake" and "bare" are configured providers
# (rp.edge_vars), "nobody" is not, and a name that is not provider:model never lists.
LISTED = (b'{"object":"list","data":['
          b'{"id":"bare:m-2","object":"model","created":0,"owned_by":"bare"},'
          b'{"id":"fake:rp-small","object":"model","created":0,"owned_by":"fake"},'
          b'{"id":"fake:z\xc3\xa9","object":"model","created":0,"owned_by":"fake"}]}')
FORBIDDEN = (b'{"error":{"type":"permission_error","code":"chat_not_granted",'
             b'"message":"This key\'s policy does not grant chat."}}')


def origin_answer(sent):
    return Answer(headers=[("content-type", "application/json"), ("x-origin", "flask")], body=ORIGIN_LIST)


def new_edge(**vars):
    base = rp.edge_vars("http://provider.test", ORIGIN)
    edge = LocalEdge({k: v for k, v in {**base, **vars}.items() if v is not None}, origin_answer)
    edge.seed_player("p_models", KEY, SESSION)
    for name in (MODEL, "fake:zé", "bare:m-2", "nobody:m", "no-colon", "fake: spaced"):
        edge.set_model(name, 6000, 1000)
    return edge


@pytest.fixture
def edge():
    with new_edge() as edge:
        yield edge


def seen(edge, r):
    """What a client can observe of an answer, and what the origin received."""
    sent = [(s.url, s.method, s.headers, s.body) for s in edge.sent]
    return r.status, r.headers, r.body, sent


@pytest.mark.parametrize("headers", [{"Authorization": f"Bearer {KEY}"}, {"authorization": f"bearer  {KEY} "},
                                     {"x-api-key": KEY}, {"Authorization": "Basic eA==", "x-api-key": KEY}])
def test_a_live_roleplay_key_gets_its_models_from_the_edge(edge, headers):
    r = edge.request("GET", "/v1/models", headers)
    assert r.status == 200 and r.body == LISTED
    assert r.headers == [("content-type", "application/json"), ("cache-control", "private, no-store")]
    assert not edge.sent                                   # the origin never sees it
    [line] = edge.logs
    assert line["route"] == "list_models" and line["status"] == 200 and line["models"] == 3
    assert KEY not in repr(line) and "rp-small" not in repr(line)


def test_the_list_is_what_generation_accepts(edge):
    """Every listed id dispatches; a name left out is generation's `unknown_model`."""
    ids = [m["id"] for m in json.loads(edge.request("GET", "/v1/models", {"x-api-key": KEY}).body)["data"]]
    for model, status in [(i, 200) for i in ids] + [("nobody:m", 400)]:
        r = edge.request("POST", "/v1/chat/completions",
                         {"Authorization": f"Bearer {KEY}", "X-Roleplay-Session-ID": SESSION},
                         rp.chat_body(1, model=model))
        assert r.status == status, (model, r.body)


def test_a_query_string_is_ignored(edge):
    assert edge.request("GET", "/v1/models?limit=1", {"x-api-key": KEY}).body == LISTED


@pytest.mark.parametrize("grants", [(), ("search",), ("Chat",)])
def test_a_key_without_the_chat_grant_is_refused_by_the_edge(grants):
    with new_edge() as edge:
        rp.set_policy(edge, "p_models", grants)
        r = edge.request("GET", "/v1/models", {"Authorization": f"Bearer {KEY}"})
        assert (r.status, r.body) == (403, FORBIDDEN) and not edge.sent


def test_a_key_without_a_policy_is_refused_by_the_edge(edge):
    edge.sql("DELETE FROM principal_policies")
    r = edge.request("GET", "/v1/models", {"x-api-key": KEY})
    assert (r.status, r.body) == (403, FORBIDDEN) and not edge.sent


def revoke(edge):
    edge.sql("UPDATE roleplay_keys SET revoked_at = 1")


# Requests with no key of the reserved format: each must reach the origin exactly as the
# same request without any key does (no storage call, the client's headers untouched).
NOT_ROLEPLAY = {
    "origin_key": ({"Authorization": "Bearer sk-flask-1"}, None),
    "origin_x_api_key": ({"x-api-key": "sk-flask-1"}, None),
    "prefix_inside_a_key": ({"Authorization": "Bearer sk-rpk_1"}, None),
    "empty_bearer": ({"Authorization": "Bearer  "}, None),
    "basic_auth": ({"Authorization": "Basic cnBrOng="}, None),          # rpk:x
    "d1_failing": ({"Authorization": "Bearer sk-flask-1"}, lambda e: setattr(e.executor, "failing", True)),
}


@pytest.mark.parametrize("case", list(NOT_ROLEPLAY))
def test_any_other_key_is_forwarded_as_a_request_without_one(case):
    headers, prepare = NOT_ROLEPLAY[case]
    common = {"accept": "application/json", "user-agent": "SillyTavern"}
    with new_edge() as without:
        baseline = seen(without, without.request("GET", "/v1/models?x=1", common))
    with new_edge() as edge:
        if prepare:
            prepare(edge)
        got = seen(edge, edge.request("GET", "/v1/models?x=1", {**common, **headers}))
    # the same answer, byte for byte and header for header; the origin got the same
    # request plus the client's own authorization header, untouched
    assert got[:3] == baseline[:3] == (200, [("content-type", "application/json"), ("x-origin", "flask")],
                                       ORIGIN_LIST)
    [(url, method, sent, body)] = got[3]
    assert (url, method, body) == (ORIGIN + "/v1/models?x=1", "GET", b"")
    assert sent == list(common.items()) + [(k.lower(), v) for k, v in headers.items()]
    assert edge.logs[-1]["route"] == "list_models" and "models" not in edge.logs[-1]
    assert "d1_ms" not in edge.logs[-1]                    # no storage call


# Keys of the reserved format the edge does not know: 401, the origin never sees them.
UNKNOWN = {
    "unknown_key": ({"Authorization": "Bearer rpk_someone_else"}, None),
    "unknown_x_api_key": ({"x-api-key": "rpk_someone_else"}, None),
    "revoked_key": ({"Authorization": f"Bearer {KEY}"}, revoke),
    "upper_case_prefix": ({"Authorization": "Bearer RPK_someone_else"}, None),
    "tab_after_scheme": ({"Authorization": f"Bearer\t{KEY}"}, None),
    "no_scheme": ({"Authorization": KEY}, None),
    "origin_key_first": ({"Authorization": "Bearer sk-flask-1", "x-api-key": KEY}, None),
    "basic_of_the_key": ({"Authorization": "Basic " + base64.b64encode(f"{KEY}:".encode()).decode()}, None),
}


@pytest.mark.parametrize("case", list(UNKNOWN))
def test_an_unknown_or_revoked_roleplay_key_is_a_401_never_forwarded(case):
    headers, prepare = UNKNOWN[case]
    with new_edge() as edge:
        if prepare:
            prepare(edge)
        r = edge.request("GET", "/v1/models", headers)
        err = r.json()["error"]
        assert (r.status, err["type"], err["code"]) == (401, "authentication_error", "invalid_api_key")
        assert "rpk_" in err["message"] and not edge.sent
        assert KEY not in repr(edge.logs)


@pytest.mark.parametrize("unbound", [True, False])
def test_without_d1_a_roleplay_key_is_a_503_never_forwarded(unbound):
    with new_edge() as edge:
        if unbound:
            edge.unbound.add("INTELLIGENCE_DB")
        else:
            edge.executor.failing = True
        r = edge.request("GET", "/v1/models", {"x-api-key": KEY})
        assert r.status == 503 and not edge.sent
        assert r.json()["error"]["code"] == ("storage_unavailable" if unbound else "storage_failed")


def test_without_an_origin_a_request_the_edge_does_not_answer_is_a_503():
    with new_edge(FLASK_ORIGIN="") as edge:
        assert edge.request("GET", "/v1/models", {"x-api-key": KEY}).status == 200
        assert edge.request("GET", "/v1/models", {"x-api-key": "rpk_unknown"}).status == 401
        r = edge.request("GET", "/v1/models", {"x-api-key": "sk-flask-1"})
        assert (r.status, r.json()["error"]["code"]) == (503, "origin_not_configured")


@pytest.mark.parametrize("method,path", [("HEAD", "/v1/models"), ("POST", "/v1/models"),
                                         ("GET", "/v1/models/fake:rp-small"), ("GET", "/v1/models/"),
                                         ("GET", "/v2/models")])
def test_other_methods_and_paths_refuse_a_roleplay_key(edge, method, path):
    """A live key: 403 (valid, not for this path); an unknown one: 401. Never forwarded;
    an origin key on the same request is (docs/design.md §2)."""
    r = edge.request(method, path, {"Authorization": f"Bearer {KEY}"})
    assert r.status == 403 and not edge.sent
    if method != "HEAD":
        assert r.json()["error"]["code"] == "roleplay_key_not_accepted"
    assert edge.request(method, path, {"Authorization": "Bearer rpk_unknown"}).status == 401 and not edge.sent
    r = edge.request(method, path, {"Authorization": "Bearer sk-flask-1"})
    assert (r.status, r.body) == (200, ORIGIN_LIST)
    [sent] = edge.sent
    assert sent.url == ORIGIN + path and ("authorization", "Bearer sk-flask-1") in sent.headers


def test_a_malformed_providers_setting_is_a_503_naming_it():
    with new_edge(PROVIDERS='{"fake": []}') as edge:
        r = edge.request("GET", "/v1/models", {"x-api-key": KEY})
        assert r.status == 503 and r.json()["error"]["code"] == "providers_misconfigured"
        assert "PROVIDERS" in r.json()["error"]["message"] and not edge.sent


def test_no_provider_configured_is_an_empty_list():
    with new_edge(PROVIDERS=None) as edge:
        r = edge.request("GET", "/v1/models", {"x-api-key": KEY})
        assert (r.status, r.body) == (200, b'{"object":"list","data":[]}')


def test_no_cors_headers_for_a_listed_origin():
    """SillyTavern's server calls it, not the browser: not a CORS route (docs/design.md §3)."""
    with new_edge(CORS_ALLOWED_ORIGINS="http://127.0.0.1:8000") as edge:
        r = edge.request("GET", "/v1/models", {"x-api-key": KEY, "Origin": "http://127.0.0.1:8000"})
        assert r.status == 200 and r.body == LISTED
        assert not [k for k, _ in r.headers if k.startswith("access-control-") or k == "vary"]
