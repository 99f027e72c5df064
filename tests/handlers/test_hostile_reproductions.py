"""Issue 8's reproductions, in-process: each is a clear 4xx (or the route's own 500
envelope), nothing stored, nothing dispatched."""

import json

import pytest

from multillm_edge.routes import generation
from tests.handlers.conftest import KEY, MODEL, WINDOW
from tests.support.inprocess import Answer
from devkit import roleplay as rp

CHAT = "/v1/chat/completions"


def nothing_happened(edge):
    assert edge.sent == [] and edge.page_rows() == 0 and edge.bucket.objects == {}


def error(r):
    return r.json()["error"]


def test_1_a_depth_bomb_is_a_400_not_a_dead_isolate(edge, headers):
    r = edge.request("POST", CHAT, headers, b"[" * 100_000 + b"]" * 100_000)
    assert r.status == 400 and error(r)["code"] == "invalid_json" and "256" in error(r)["message"]
    nothing_happened(edge)


@pytest.mark.parametrize("body", [
    {"model": MODEL, "input": "x" * 10_000},
    {"model": MODEL, "input": "x" * 10_000, "capabilities": ["multillm_context_retrieve"]},
])
def test_3_a_long_string_input_is_a_413_window_exceeded(edge, headers, body):
    r = edge.request("POST", "/v1/responses", headers, body)
    assert r.status == 413 and error(r)["code"] == "context_window_exceeded"
    nothing_happened(edge)


def test_3_a_string_input_that_fits_is_dispatched_as_sent(edge, headers):
    body = {"model": MODEL, "input": "Once upon a time", "capabilities": ["multillm_context_retrieve"]}
    r = edge.request("POST", "/v1/responses", headers, body)
    assert r.status == 200 and edge.sent[0].json()["input"] == "Once upon a time"
    assert edge.page_rows() == 0


@pytest.mark.parametrize("path,body,param", [
    (CHAT, {"model": MODEL, "messages": "x" * 10_000}, "messages"),
    (CHAT, {"model": MODEL, "messages": {"role": "user"}}, "messages"),
    (CHAT, {"model": MODEL, "messages": [1, 2, 3]}, "messages[0]"),
    (CHAT, {"model": MODEL, "messages": 12}, "messages"),
    (CHAT, {"model": MODEL, "messages": [{"role": "user", "content": {"text": "hi"}}]}, "messages[0].content"),
    (CHAT, {"model": MODEL, "messages": [{"role": "tool", "tool_call_id": [1], "content": "x"}]},
     "messages[0].tool_call_id"),
    (CHAT, {"model": MODEL, "messages": [{"role": "assistant", "tool_calls": [{"id": {}}]}]},
     "messages[0].tool_calls[0].id"),
    ("/v1/messages", {"model": MODEL, "max_tokens": 5, "messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "id": [1], "name": "d", "input": {}}]}]}, "messages[0].content[0].id"),
    ("/v1/messages", {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": {}}]}]}, "messages[0].content[0].tool_use_id"),
    ("/v1/responses", {"model": MODEL, "input": [{"type": "function_call_output", "call_id": [1]}]},
     "input[0].call_id"),
    ("/v1/responses", {"model": MODEL, "input": [{"type": "mcp_approval_response", "approval_request_id": [1]}]},
     "input[0].approval_request_id"),
    (CHAT, {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": -100_000}, "max_tokens"),
])
def test_3_and_5_wrong_shapes_are_400s_naming_the_field(edge, headers, path, body, param):
    r = edge.request("POST", path, headers, body)
    assert r.status == 400, r.body
    err = r.json()["error"]
    assert err["code"] == "invalid_request" and err["param"] == param and param in err["message"]
    assert (r.json().get("type") == "error") == (path == "/v1/messages")
    nothing_happened(edge)


@pytest.mark.parametrize("value", ["", "   "])
def test_4_an_empty_session_header_is_a_400_and_never_forwarded(edge, headers, value):
    r = edge.request("POST", CHAT, {**headers, "X-Roleplay-Session-ID": value}, rp.chat_body(3))
    assert r.status == 400 and error(r)["code"] == "invalid_request"
    nothing_happened(edge)          # the origin (and its logs) never saw the roleplay key


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity", b"1e400"])
def test_5_non_json_numbers_are_invalid_json(edge, headers, literal):
    raw = b'{"model": "fake:rp-small", "temperature": ' + literal + b', "messages": [{"role": "user", "content": "x"}]}'
    r = edge.request("POST", CHAT, headers, raw)
    assert r.status == 400 and error(r)["code"] == "invalid_json"
    nothing_happened(edge)


def test_5_duplicate_keys_dispatch_the_value_the_edge_validated(edge, headers):
    raw = (b'{"model": "fake:rp-small", "messages": [{"role": "user", "content": "first"}], '
           b'"messages": [{"role": "user", "content": "last"}]}')
    r = edge.request("POST", CHAT, headers, raw)
    assert r.status == 200
    sent = edge.sent[0].body
    assert sent != raw and json.loads(sent)["messages"] == [{"role": "user", "content": "last"}]
    assert b"first" not in sent            # a first-wins parser sees what the edge checked


def test_5_without_duplicates_the_raw_bytes_go(edge, headers):
    raw = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}]}, indent=3).encode()
    assert edge.request("POST", CHAT, headers, raw).status == 200
    assert edge.sent[0].body == raw


@pytest.mark.parametrize("path,anthropic", [(CHAT, False), ("/v1/messages", True)])
def test_6_an_unexpected_exception_is_a_logged_500_in_the_routes_envelope(edge, headers, monkeypatch, path, anthropic):
    def boom(*a, **k):
        raise KeyError("secret-content-never-logged")
    monkeypatch.setattr(generation, "candidates", boom)
    r = edge.request("POST", path, headers, {"model": MODEL, "max_tokens": 5,
                                             "messages": [{"role": "user", "content": "x"}]})
    assert r.status == 500
    doc = r.json()
    assert doc["error"]["code"] == "internal_error" and (doc.get("type") == "error") == anthropic
    assert doc["error"]["type"] == ("api_error" if anthropic else "server_error")
    (line,) = [rec for rec in edge.logs if rec.get("route") == "generate"]
    assert line["status"] == 500 and line["exception"] == "KeyError"
    assert "secret-content" not in json.dumps(edge.logs) and KEY not in json.dumps(edge.logs)
    nothing_happened(edge)


def test_5_every_fallback_gets_the_validated_value_of_a_repeated_key(edge, headers):
    edge.set_model("fake:other", 6000, 1000)
    seen = []

    def upstream(sent):
        seen.append(sent.body)
        return Answer(status=503 if len(seen) == 1 else 200)
    edge.upstream = upstream
    raw = (b'{"model": "fake:rp-small", "models": ["fake:other"], "messages": [{"role": "user", '
           b'"content": "first"}], "messages": [{"role": "user", "content": "last"}]}')
    assert edge.request("POST", CHAT, headers, raw).status == 200
    assert len(seen) == 2 and all(b"first" not in b and b'"last"' in b for b in seen)


@pytest.mark.parametrize("field", ["model", "models"])
def test_an_absurd_model_name_is_a_400_before_any_storage_work(edge, headers, field):
    # 16 fallbacks of 500 KB would be an 8 MB D1 parameter (D1 refuses over 2 MB).
    name = "fake:" + "m" * 500_000
    body = rp.chat_body(2, model=MODEL)
    if field == "model":
        body["model"] = name
    else:
        body["models"] = [name] * 16
    edge.executor.failing = True     # any D1 statement would make this a 503
    r = edge.request("POST", CHAT, headers, body)
    assert r.status == 400 and error(r)["code"] == "invalid_model"
    assert "256" in error(r)["message"]
    edge.executor.failing = False
    nothing_happened(edge)


@pytest.mark.parametrize("models", [["fake:tiny"], ["fake:tiny", MODEL], [MODEL, "fake:tiny"],
                                    ["nokey:rp-small", MODEL]])
def test_a_skipped_candidate_leaves_no_reference_cycle(edge, headers, models):
    """An error kept for a candidate that cannot fit (413) or whose provider has no key
    (503), and raised if none serves, once held the frames that held it: the request
    body stayed in memory until a cycle collection, which in a Worker may not come
    before the next large request."""
    import gc
    providers = json.loads(edge.vars["PROVIDERS"])
    providers["nokey"] = {**providers["fake"], "api_key_secret": "ABSENT_API_KEY"}
    edge.vars["PROVIDERS"] = json.dumps(providers)
    edge.set_model("fake:tiny", 300, 100)
    edge.set_model("nokey:rp-small", WINDOW, 1000)
    body = {**rp.chat_body(30, model=models[0], tag="CYC"), "models": models[1:]}
    edge.request("POST", CHAT, headers, body)          # first use: imports, caches
    gc.collect()
    gc.disable()
    try:
        r = edge.request("POST", CHAT, headers, body)
        assert gc.collect() == 0
    finally:
        gc.enable()
    assert r.status == (413 if models == ["fake:tiny"] else 200)
