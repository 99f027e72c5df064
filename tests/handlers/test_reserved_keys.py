"""A roleplay key never leaves the edge (docs/design.md §2, "Reserved key format"): a
request carrying a key of the admin CLI's format (`rpk_…`) in any credential header, in
any spelling, is never forwarded; keys of any other form are forwarded byte-identical."""

import base64

import pytest

from devkit import roleplay as rp
from tests.handlers.conftest import KEY, SESSION
from tests.support.inprocess import Answer, LocalEdge

ORIGIN = "http://origin.test"
REVOKED = "rpk_" + "handler_revoked".ljust(43, "0")
PAGE = "/v1/context/pages/cp_" + "A" * 43


@pytest.fixture
def edge():
    with LocalEdge(rp.edge_vars("http://provider.test", ORIGIN, CORS_ALLOWED_ORIGINS="http://st.test"),
                   lambda sent: Answer(body=b'{"origin":true}')) as edge:
        edge.seed_player("p_live", KEY, SESSION)
        edge.seed_player("p_revoked", REVOKED, "rps_revoked")
        edge.sql("UPDATE roleplay_keys SET revoked_at = 1 WHERE principal = 'p_revoked'")
        yield edge


def stored(edge):
    return edge.sql("SELECT COUNT(*) AS n FROM context_pages")[0]["n"], len(edge.bucket.objects)


# -- the edge's roleplay paths without their session: 400 naming what is missing -----

@pytest.mark.parametrize("path,anthropic", [("/v1/chat/completions", False), ("/v1/responses", False),
                                            ("/v1/messages", True), ("/v1/context/search", False)])
@pytest.mark.parametrize("key", [KEY, REVOKED, "rpk_unknown"])
def test_a_generation_or_search_without_a_session_is_a_400_naming_the_header(edge, path, anthropic, key):
    body = rp.chat_body(40, model="fake:rp-small") if "search" not in path else {"query": "x"}
    r = edge.request("POST", path, {"Authorization": f"Bearer {key}"}, body)
    doc = r.json()
    err = doc["error"]
    assert (r.status, err["code"], err["param"]) == (400, "roleplay_session_required", "X-Roleplay-Session-ID")
    assert (doc.get("type") == "error") == anthropic                  # the format's envelope
    assert f"X-Roleplay-Session-ID header on POST {path}" in err["message"]
    assert "POST /v1/roleplay/sessions" in err["message"] and "npm run admin -- session create" in err["message"]
    assert not edge.sent and stored(edge) == (0, 0)
    assert "d1_ms" not in edge.logs[-1] and key not in repr(edge.logs)


def test_a_retrieval_without_its_session_parameter_is_a_400_naming_it(edge):
    r = edge.request("GET", PAGE, {"x-api-key": KEY})
    err = r.json()["error"]
    assert (r.status, err["code"], err["param"]) == (400, "roleplay_session_required", "roleplay_session_id")
    assert "roleplay_session_id query parameter on GET /v1/context/pages/{page_id}" in err["message"]
    assert not edge.sent


# -- every other forwarded path: 401 unless the key is live, then 403 ----------------

FORWARDED = [("GET", "/api/characters?id=7"), ("POST", "/api/chat"), ("GET", "/v1/chat/completions"),
             ("DELETE", "/v1/responses/resp_1"), ("GET", "/v1/messages/batches/b1"), ("PUT", "/v1/models"),
             ("POST", "/v1/files"), ("POST", "/v1/batches"), ("POST", "/v1/messages/batches"),
             ("OPTIONS", "/v1/chat/completions"), ("PATCH", "/"), ("GET", "/healthz/x")]


@pytest.mark.parametrize("method,path", FORWARDED)
@pytest.mark.parametrize("key,status", [(KEY, 403), (REVOKED, 401), ("rpk_unknown", 401)])
def test_a_forwarded_path_refuses_a_roleplay_key(edge, method, path, key, status):
    r = edge.request(method, path, {"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
                     b'{"a":1}' if method in ("POST", "PUT", "PATCH") else b"")
    doc = r.json()
    err = doc["error"]
    assert r.status == status and not edge.sent
    assert err["code"] == ("roleplay_key_not_accepted" if status == 403 else "invalid_api_key")
    assert (doc.get("type") == "error") == path.startswith("/v1/messages")   # Anthropic's paths
    assert "never forwarded to the origin" in err["message"]
    assert key not in repr(edge.logs) and edge.logs[-1]["forwarded"] == "refused_roleplay_key"


def b64(text):
    return base64.b64encode(text.encode()).decode()


# However the key is spelled, the request is not forwarded. (The runner's transport
# joins repeated headers with ", ", as workerd does: "comma_joined".)
SPELLINGS = {
    "bearer": [("authorization", f"Bearer {KEY}")],
    "lower_scheme": [("authorization", f"bearer {KEY}")],
    "upper_scheme": [("authorization", f"BEARER {KEY}")],
    "tab": [("authorization", f"Bearer\t{KEY}")],
    "spaces": [("authorization", f"  Bearer   {KEY}  ")],
    "no_scheme": [("authorization", KEY)],
    "other_scheme": [("authorization", f"Token {KEY}")],
    "key_param": [("authorization", f"Token key={KEY}")],
    "quoted": [("authorization", f'Bearer "{KEY}"')],
    "x_api_key": [("x-api-key", KEY)],
    "x_api_key_spaces": [("x-api-key", f" {KEY}\t")],
    "upper_prefix": [("authorization", "Bearer " + KEY.upper())],
    "repeated": [("authorization", "Bearer sk-origin"), ("authorization", f"Bearer {KEY}")],
    "comma_joined": [("authorization", f"Bearer sk-origin, Bearer {KEY}")],
    "behind_origin_key": [("authorization", "Bearer sk-origin"), ("x-api-key", KEY)],
    "basic_user": [("authorization", "Basic " + b64(f"{KEY}:"))],
    "basic_password": [("authorization", "basic " + b64(f"me:{KEY}"))],
    "basic_unpadded": [("authorization", "Basic " + b64(f"me:{KEY}").rstrip("="))],
    # issue 46: Python's b64decode (Werkzeug's) skips characters outside the alphabet
    "basic_space_inside": [("authorization", "Basic " + b64(f"me:{KEY}")[:9] + " " + b64(f"me:{KEY}")[9:])],
    "basic_tab_inside": [("authorization", "Basic " + b64(f"me:{KEY}")[:9] + "\t" + b64(f"me:{KEY}")[9:])],
    "basic_dot_inside": [("authorization", "Basic " + b64(f"me:{KEY}")[:9] + "." + b64(f"me:{KEY}")[9:])],
    "basic_leading_equals": [("authorization", "Basic =" + b64(f"me:{KEY}"))],
    "basic_after_another": [("authorization", f"Basic {b64('me:sk-origin')}, Basic {b64(KEY + ':')}")],
}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
@pytest.mark.parametrize("method,path", [("GET", "/api/characters"), ("GET", "/v1/models"),
                                         ("POST", "/v1/chat/completions")])
def test_no_spelling_lets_a_roleplay_key_through(edge, spelling, method, path):
    r = edge.request(method, path, SPELLINGS[spelling])
    assert r.status in (200, 400, 401, 403) and not edge.sent, r.body
    assert r.status != 200 or path == "/v1/models"       # a live key's list, from the edge


def test_the_status_follows_the_key_the_edge_reads(edge):
    """Live (Bearer, else x-api-key) → 403; a reserved key behind an origin key, or in a
    spelling the edge does not read as a key, is no live key → 401 without a D1 read."""
    for headers, status in [([("authorization", f"Bearer {KEY}")], 403), ([("x-api-key", KEY)], 403),
                            (SPELLINGS["behind_origin_key"], 401), (SPELLINGS["no_scheme"], 401),
                            (SPELLINGS["basic_user"], 401), (SPELLINGS["upper_prefix"], 401)]:
        r = edge.request("GET", "/api/characters", headers)
        assert r.status == status, headers
        assert ("d1_ms" in edge.logs[-1]) == (status == 403)


def test_only_a_key_of_the_full_format_costs_a_storage_call(edge, monkeypatch):
    """`rpk_` + 43 URL-safe characters is the only key that can be live: anything else
    of the prefix is a 401 without a D1 statement (junk costs no storage call)."""
    statements = []
    real = edge.executor._cursor
    monkeypatch.setattr(edge.executor, "_cursor", lambda sql, params: statements.append(sql) or real(sql, params))
    junk = ["rpk_x", "rpk_" + "a" * 42, "rpk_" + "a" * 44, "rpk_" + "a" * 42 + "!", "rpk_" + "a" * 42 + "=",
            "RPK_" + KEY[4:], "rpk_" + "é" * 43, "rpk_" + "a" * 42 + " b"]
    for key in junk:
        for headers in ({"Authorization": f"Bearer {key}"}, {"x-api-key": key}):
            for method, path in (("GET", "/api/characters"), ("GET", "/v1/models"), ("POST", "/v1/files")):
                r = edge.request(method, path, headers)
                assert (r.status, r.json()["error"]["code"]) == (401, "invalid_api_key"), (key, path)
                assert "d1_ms" not in edge.logs[-1]
    assert statements == [] and not edge.sent
    for key, status in ((KEY, 403), (REVOKED, 401), ("rpk_" + "b" * 43, 401)):   # the format: one read each
        assert edge.request("GET", "/api/characters", {"Authorization": f"Bearer {key}"}).status == status
    assert len(statements) == 3 and not edge.sent


# -- keys of any other form: forwarded byte-identical --------------------------------

OTHER_KEYS = ["Bearer sk-origin-1", "bearer sk-rpk_inside", "Basic " + b64("rpk:x"), "Bearer rpkx_1",
              "Bearer rp_k_1", "Bearer xrpk_1", "Bearer sk-" + "a" * 200]


@pytest.mark.parametrize("auth", OTHER_KEYS)
@pytest.mark.parametrize("method,path", [("GET", "/api/characters?id=7"), ("POST", "/v1/chat/completions"),
                                         ("GET", "/v1/models"), ("GET", PAGE)])
def test_keys_of_any_other_form_are_forwarded_byte_identical(edge, auth, method, path):
    headers = [("authorization", auth), ("x-api-key", "sk-other"), ("x-trace", "t1")]
    body = b'{"model":"m"}' if method == "POST" else b""
    r = edge.request(method, path, headers, body)
    assert (r.status, r.body) == (200, b'{"origin":true}')
    [sent] = edge.sent
    assert (sent.url, sent.method, sent.headers, sent.body) == (ORIGIN + path, method, headers, body)


# -- CORS preflights ------------------------------------------------------------------

def test_a_preflight_for_an_edge_route_is_answered_and_one_with_a_key_is_not_forwarded(edge):
    preflight = {"Origin": "http://st.test", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization,content-type"}
    assert edge.request("OPTIONS", "/v1/roleplay/sessions", preflight).status == 204
    # a preflight carries no key: the origin's paths get it as before
    assert edge.request("OPTIONS", "/api/chat", preflight).status == 200 and len(edge.sent) == 1
    r = edge.request("OPTIONS", "/api/chat", {**preflight, "Authorization": f"Bearer {KEY}"})
    assert r.status == 403 and len(edge.sent) == 1
