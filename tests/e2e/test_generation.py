"""Roleplay generation through the runner: what reached upstream, what was stored, what was not."""

import base64
import copy
import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from multillm_edge.core import config
from multillm_edge.core.pages import PageSigner
from devkit import roleplay as rp
from devkit.fakes import FakeServer, Reply, answer as whole_answer
from devkit.runner import Edge

MODEL = "fake:rp-small"
WINDOW = 6000          # tokens; compared against UTF-8 bytes (docs/design.md §5.5)


def provider_reply(rec):
    return whole_answer(rec.path, 'The fox runs.')


@pytest.fixture(scope="module")
def provider_server():
    with FakeServer(provider_reply) as server:
        yield server


@pytest.fixture(scope="module")
def edge(provider_server, tmp_path_factory):
    with Edge(tmp_path_factory.mktemp("generation"), vars=rp.edge_vars(provider_server.url)) as edge:
        rp.set_model(edge, MODEL, WINDOW, 1000)
        rp.set_model(edge, "fake:tiny", 300, 100)
        yield edge


@pytest.fixture
def provider(provider_server):
    provider_server.clear()
    provider_server.reply = provider_reply
    return provider_server


@pytest.fixture
def player(edge):
    """A fresh principal with a key and an open session."""
    return rp.new_player(edge)


def post(edge, player, body, path="/v1/chat/completions", **extra):
    return edge.client.post(path, json=body, headers=player.headers(**extra))


def rows(edge, player):
    return edge.sql("SELECT * FROM context_pages WHERE principal = ?1 ORDER BY page_id", player.principal)


def restore(messages, pages_by_id):
    """Put each marker's pages back in its place (the inverse a client can perform)."""
    out = []
    for m in messages:
        content = m.get("content")
        ids = [i for i in pages_by_id if isinstance(content, str) and i in content]
        if m.get("role") == "user" and ids and content.startswith("[multillm context]"):
            for i in sorted(ids, key=content.index):
                out.extend(json.loads(pages_by_id[i]))
        else:
            out.append(m)
    return out


# --- paging happy path -------------------------------------------------------------

def test_upstream_receives_markers_tool_schema_same_model_and_provider_key(edge, provider, player):
    body = rp.chat_body(30, tag="UP")
    r = post(edge, player, body)
    assert r.status_code == 200, r.text
    assert len(provider.received) == 1
    up = provider.received[0]
    assert up.path == "/v1/chat/completions"
    sent = up.json()
    assert sent["model"] == MODEL and sent["max_tokens"] == 200
    assert "capabilities" not in sent and "context_protected_indices" not in sent
    assert [t["function"]["name"] for t in sent["tools"]] == ["multillm_context_retrieve"]
    markers = [m for m in sent["messages"] if isinstance(m.get("content"), str)
               and m["content"].startswith("[multillm context]")]
    assert markers and all(m["role"] == "user" for m in markers)
    assert len(up.body) <= WINDOW - 200 - 256
    # The system message and the latest user turn are never paged.
    assert sent["messages"][0] == body["messages"][0]
    assert sent["messages"][-1] == body["messages"][-1]
    assert up.headers["authorization"] == f"Bearer {rp.PROVIDER_KEY}"
    assert player.key not in json.dumps(up.raw_headers) and player.key not in up.body.decode()
    pages = r.json()["context_pages"]
    assert pages and all(p["tool_schema"]["function"]["name"] == "multillm_context_retrieve" for p in pages)
    assert r.headers["x-multillm-context-pages"] == ",".join(p["page_id"] for p in pages)
    assert r.headers["x-multillm-context-page-count"] == str(len(pages))


def test_what_was_stored_equals_what_was_removed(edge, provider, player):
    body = rp.chat_body(30, tag="ST")
    before = time.time()
    stats0 = edge.stats()
    r = post(edge, player, body)
    assert r.status_code == 200
    assert edge.stats()["r2_puts"] - stats0["r2_puts"] == 1       # one object for the request
    listed = r.json()["context_pages"]
    stored = {row["page_id"]: row for row in rows(edge, player)}
    assert set(stored) == {p["page_id"] for p in listed}
    [key] = {row["r2_key"] for row in stored.values()}
    assert key.startswith("context-pages/obj_")
    obj = edge.r2_get(key)
    assert len(obj) == sum(row["byte_length"] for row in stored.values())
    bodies = {}
    signer = PageSigner(rp.SIGNING_SECRET)
    for p in listed:
        row = stored[p["page_id"]]
        data = obj[row["r2_offset"]:row["r2_offset"] + row["byte_length"]]
        assert before - 2 <= row["body_written_at"] <= time.time() + 2
        assert hashlib.sha256(data).hexdigest() == row["sha256"] == p["sha256"]
        assert row["byte_length"] == len(data)
        assert (row["authority"], row["principal"], row["session_id"], row["policy_revision"]) == \
            ("roleplay", player.principal, player.session, 1)
        assert before + 3600 - 2 <= row["expires_at"] <= time.time() + 3600 + 2
        assert row["expires_at"] == p["expires_at"]
        assert signer.verify_row(row)
        bodies[p["page_id"]] = data
    # Markers replaced by the stored bytes give back the original history exactly.
    sent = provider.received[0].json()
    assert restore(sent["messages"], bodies) == body["messages"]


def test_next_turn_reuses_stored_pages(edge, provider, player):
    """Lazy refresh (issue 9): with more than half their life left, reused pages' rows are
    not rewritten; the turn writes only its new page, or nothing at all."""
    body = rp.chat_body(30, tag="RE")
    first = post(edge, player, body).json()["context_pages"]
    before_rows = {r["page_id"]: r for r in rows(edge, player)}
    edge.set_clock(120)
    try:
        nxt = copy.deepcopy(body)
        nxt["messages"][-1:] = [body["messages"][-1], {"role": "assistant", "content": "RE-reply"},
                                {"role": "user", "content": "RE-next turn"}]
        stats0 = edge.stats()
        r = post(edge, player, nxt)
        stats1 = edge.stats()
    finally:
        edge.set_clock(0)
    assert r.status_code == 200
    second = r.json()["context_pages"]
    reused = {p["page_id"] for p in first} & {p["page_id"] for p in second}
    assert reused == {p["page_id"] for p in first}
    new = len(second) - len(first)
    assert new <= 1
    # one round trip before dispatch (the admission and the read: one batch, §4.1), one upsert if new
    assert stats1["d1_batches"] - stats0["d1_batches"] == 1
    assert stats1["d1_statements"] - stats0["d1_statements"] == new
    assert stats1["r2_puts"] - stats0["r2_puts"] == new
    assert stats1["d1_rows_changed"] - stats0["d1_rows_changed"] == new
    after_rows = {r["page_id"]: r for r in rows(edge, player)}
    for pid in reused:
        assert after_rows[pid] == before_rows[pid]            # untouched: no refresh due
    # The response reports each row's real expiry, reused or new.
    assert {p["page_id"]: p["expires_at"] for p in second} == \
        {pid: row["expires_at"] for pid, row in after_rows.items()}
    assert len(after_rows) == len(second)


@pytest.mark.parametrize("fmt,path,make", [
    ("responses", "/v1/responses", rp.responses_body),
    ("messages", "/v1/messages", rp.messages_body),
])
def test_other_wire_formats_page_with_their_own_tool_schema(edge, provider, player, fmt, path, make):
    body = make(30)
    r = post(edge, player, body, path=path)
    assert r.status_code == 200, r.text
    up = provider.received[0]
    assert up.path == path
    sent = up.json()
    assert "capabilities" not in sent and sent["model"] == MODEL
    if fmt == "messages":
        assert sent["tools"] == [r.json()["context_pages"][0]["tool_schema"]]
        assert "input_schema" in sent["tools"][0] and sent["system"] == body["system"]
        assert up.headers["x-api-key"] == rp.PROVIDER_KEY and "authorization" not in up.headers
        assert sent["max_tokens"] == 200
    else:
        assert sent["tools"][0]["name"] == "multillm_context_retrieve" and "parameters" in sent["tools"][0]
        assert sent["instructions"] == body["instructions"] and sent["max_output_tokens"] == 200
    assert len(up.body) < len(json.dumps(body).encode())
    assert r.json()["context_pages"]


def test_healthz_reports_readiness_as_booleans(edge):
    r = edge.client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"ok": True, "d1_tables": True, "r2_binding": True,
                        "signing_configured": True, "paging_enabled": True,
                        "config_errors": [], "missing_providers": []}


def test_stream_passes_through_with_the_page_list_header(edge, provider, player):
    events = [b'data: {"choices":[{"delta":{"content":"The"}}]}\n\n',
              b'data: {"choices":[{"delta":{"content":" fox"}}]}\n\n', b"data: [DONE]\n\n"]
    provider.reply = Reply(headers=[("content-type", "text/event-stream")], chunks=events, delay=0.3)
    body = rp.chat_body(30, tag="SS", stream=True)
    arrivals, got = [], b""
    t0 = time.monotonic()
    with edge.client.stream("POST", "/v1/chat/completions", json=body, headers=player.headers()) as r:
        assert r.status_code == 200
        ids = r.headers["x-multillm-context-pages"].split(",")
        for chunk in r.iter_raw():
            arrivals.append(time.monotonic() - t0)
            got += chunk
    # The provider's events unchanged, after one SSE comment line with the page list and
    # one with the session's figures (the same as the headers).
    figures = {k: int(r.headers[f"x-multillm-context-{k.replace('_', '-')}"])
               for k in ("active_bytes", "limit_bytes", "active_pages")}
    assert figures["active_pages"] == len(ids) and figures["limit_bytes"] == 1048576
    assert got == (b": multillm-context-pages " + ",".join(ids).encode() + b"\n\n"
                   + b": multillm-context-session " + json.dumps(figures, separators=(",", ":")).encode()
                   + b"\n\n" + b"".join(events))
    assert arrivals[-1] - arrivals[0] > 0.4          # chunks arrived over time, not at once
    assert {row["page_id"] for row in rows(edge, player)} == set(ids)


def test_json_answer_too_large_to_annotate_is_relayed_byte_for_byte(edge, provider, player):
    """Past MAX_ANNOTATED_BYTES the edge stops reading to parse: what it read goes first,
    then the rest of the provider's stream, unchanged (the page list in the headers)."""
    pad = config.MAX_ANNOTATED_BYTES + 100_000
    answer = b'{"id":"chatcmpl-big","choices":[],"pad":"' + b"x" * pad + b'"}'
    provider.reply = Reply(chunks=[answer[i:i + 65536] for i in range(0, len(answer), 65536)])
    r = post(edge, player, rp.chat_body(30, tag="BIG"))
    assert r.status_code == 200 and r.content == answer
    ids = r.headers["x-multillm-context-pages"].split(",")
    assert {row["page_id"] for row in rows(edge, player)} == set(ids)


# --- existing behaviour: nothing stored ---------------------------------------------

def test_no_capability_fits_dispatched_byte_for_byte_and_nothing_stored(edge, provider, player):
    body = rp.chat_body(3, tag="NC")
    del body["capabilities"]
    raw = json.dumps(body, indent=1).encode()       # odd formatting must survive as sent
    stats0 = edge.stats()
    r = edge.client.post("/v1/chat/completions", content=raw,
                         headers={**player.headers(), "content-type": "application/json"})
    assert r.status_code == 200 and "context_pages" not in r.json()
    assert provider.received[0].body == raw
    assert rows(edge, player) == [] and edge.stats()["r2_puts"] == stats0["r2_puts"]


def test_no_capability_overflow_is_compacted_loudly(edge, provider, player):
    body = rp.chat_body(30, tag="CP")
    del body["capabilities"]
    r = post(edge, player, body)
    assert r.status_code == 200
    dropped = r.json()["context_compaction"]["dropped_exchanges"]
    assert dropped > 0 and r.headers["x-multillm-context-compaction"] == str(dropped)
    sent = provider.received[0].json()
    assert len(sent["messages"]) < len(body["messages"]) and "tools" not in sent
    assert sent["messages"][-1] == body["messages"][-1]
    assert rows(edge, player) == []


@pytest.mark.parametrize("turns", [3, 30])
def test_zero_retention_never_stores(edge, provider, turns):
    """Not paged (compacted if it overflows), yet the flag is on, so the edge's own
    fields are removed: a provider would reject them as unknown parameters."""
    player = rp.new_player(edge, retention="zero")
    body = rp.chat_body(turns, tag="ZR", context_protected_indices=[1])
    stats0 = edge.stats()
    r = post(edge, player, body)
    assert r.status_code == 200
    sent = provider.received[0].json()
    assert "capabilities" not in sent and "context_protected_indices" not in sent
    assert "tools" not in sent and "context_pages" not in r.json()
    if turns == 3:
        expected = {k: v for k, v in body.items() if k not in ("capabilities", "context_protected_indices")}
        assert sent == expected
    else:
        assert r.json()["context_compaction"]["dropped_exchanges"] > 0
        assert body["messages"][1] in sent["messages"]          # protected index kept
    assert rows(edge, player) == [] and edge.stats()["r2_puts"] == stats0["r2_puts"]


# --- 413s: documented JSON, nothing dispatched --------------------------------------

def test_protected_content_too_big_is_413_context_window_exceeded(edge, provider, player):
    body = rp.chat_body(5, tag="BIG", new_turn="BIG " + "x" * 8000)
    r = post(edge, player, body)
    assert r.status_code == 413
    err = r.json()["error"]
    assert err["code"] == "context_window_exceeded" and "context window" in err["message"]
    assert err["budget"] == WINDOW - 200 - 256 and err["protected_bytes"] > err["budget"]
    assert provider.received == [] and rows(edge, player) == []


def test_fit_needing_a_page_over_64_kib_is_413_context_page_too_large(edge, provider, player):
    body = rp.chat_body(5, tag="HUGE")
    body["messages"][2]["content"] = "HUGE " + "y" * 70000
    r = post(edge, player, body)
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "context_page_too_large"
    assert provider.received == [] and rows(edge, player) == []


def test_session_allowance_is_413_and_stores_nothing(edge, provider, player):
    body = rp.chat_body(24, tag="AL", size=25000)    # ~1.2 MB of pageable history
    stats0 = edge.stats()
    r = post(edge, player, body)
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "context_session_limit_exceeded"
    assert provider.received == [] and rows(edge, player) == []
    assert edge.stats()["r2_puts"] == stats0["r2_puts"]


def test_600_exchanges_paged_in_one_request_one_object(edge, provider, player):
    """No per-request page cap (issue 9): the allowance is the only bound. One R2 put for
    every page (over 500 exchanges, in blocks), each retrievable byte for byte."""
    rp.set_model(edge, "fake:rp-wide", 40000, 1000)
    body = rp.chat_body(600, model="fake:rp-wide", size=500, tag="MANY")
    stats0 = edge.stats()
    r = post(edge, player, body)
    assert r.status_code == 200, r.text
    stats1 = edge.stats()
    assert stats1["r2_puts"] - stats0["r2_puts"] == 1
    assert (stats1["d1_batches"] - stats0["d1_batches"], stats1["d1_statements"] - stats0["d1_statements"]) == (1, 1)
    listed = r.json()["context_pages"]
    assert len(listed) > 20 and len(provider.received) == 1
    stored = rows(edge, player)
    assert len(stored) == len(listed) and sum(row["byte_length"] for row in stored) <= 1 << 20
    [key] = {row["r2_key"] for row in stored}
    obj = edge.r2_get(key)
    auth = {"Authorization": f"Bearer {player.key}"}

    def fetch(p):
        got = edge.client.get(f"/v1/context/pages/{p['page_id']}",
                              params={"roleplay_session_id": player.session}, headers=auth)
        return p, got.status_code, got.json()

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(fetch, listed))
    by_id = {row["page_id"]: row for row in stored}
    for p, status, doc in results:
        assert status == 200
        data = base64.b64decode(doc["body_base64"])
        row = by_id[p["page_id"]]
        assert data == obj[row["r2_offset"]:row["r2_offset"] + row["byte_length"]]
        assert hashlib.sha256(data).hexdigest() == p["sha256"]
    # more than 500 exchanges stored, in blocks of several (docs/design.md §5.7)
    assert sum(1 for _, _, d in results for m in d["messages"] if m["role"] == "user") > 500
    sent = provider.received[0].json()
    assert restore(sent["messages"], {p["page_id"]: base64.b64decode(d["body_base64"])
                                      for p, _, d in results}) == body["messages"]


def test_anthropic_route_errors_use_the_anthropic_envelope(edge, provider, player):
    body = rp.messages_body(3, new_turn=None)
    body["messages"][-1]["content"] = "z" * 9000
    r = post(edge, player, body, path="/v1/messages")
    assert r.status_code == 413
    doc = r.json()
    assert doc["type"] == "error" and doc["error"]["type"] == "request_too_large"
    assert doc["error"]["code"] == "context_window_exceeded"


# --- bad input: clear JSON error, nothing stored or dispatched ----------------------

@pytest.mark.parametrize("raw,status,code", [
    (b'{"model": "fake:rp-small", "messages": [', 400, "invalid_json"),
    (b'\xff\xfe{}', 400, "invalid_json"),
    (b'[1, 2]', 400, "invalid_request"),
    (b'{"model": 7, "messages": []}', 400, "invalid_model"),
    (b'{"model": "fake:nope", "messages": []}', 400, "unknown_model"),
    (b'{"model": "fake:rp-small", "messages": [], "capabilities": "multillm_context_retrieve"}', 400, "invalid_request"),
    (b'{"model": "fake:rp-small", "messages": [{"role": "user", "content": "\\ud800"}], '
     b'"capabilities": ["multillm_context_retrieve"]}', 400, "invalid_request"),
    (b'{"model": "fake:rp-small", "messages": [{"role": "user", "content": "\\ud800"}]}', 400, "invalid_request"),
])
def test_bad_bodies_are_rejected_before_anything_happens(edge, provider, player, raw, status, code):
    stats0 = edge.stats()
    r = edge.client.post("/v1/chat/completions", content=raw,
                         headers={**player.headers(), "content-type": "application/json"})
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    assert provider.received == [] and rows(edge, player) == []
    assert edge.stats()["r2_puts"] == stats0["r2_puts"]


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_body_over_the_request_cap_is_413(edge, provider, player, framing):
    """Refused by its declared length, or while reading a chunked body: either way the
    client finishes sending, reads the 413, and the connection serves the next request."""
    raw = b'{"model": "fake:rp-small", "messages": [{"role": "user", "content": "' + b"a" * (9 << 20) + b'"}]}'
    content = raw if framing == "content-length" else (raw[i:i + 65536] for i in range(0, len(raw), 65536))
    client = httpx.Client(base_url=edge.url, timeout=httpx.Timeout(20))
    with client:
        r = client.post("/v1/chat/completions", content=content, headers=player.headers())
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
        assert client.get("/healthz").status_code == 200
    assert provider.received == []


@pytest.mark.parametrize("who,status,code", [
    ("nokey", 401, "invalid_api_key"), ("badkey", 401, "invalid_api_key"),
    ("nochat", 403, "chat_not_granted"), ("foreign", 404, "session_not_found"),
    ("ended", 404, "session_not_found"), ("unknown", 404, "session_not_found"),
    ("revoked", 401, "invalid_api_key"),
])
def test_auth_and_session_errors(edge, provider, player, who, status, code):
    h = player.headers()
    if who == "nokey":
        del h["Authorization"]
    elif who == "badkey":
        h["Authorization"] = "Bearer rpk_not-a-real-key"
    elif who == "nochat":
        rp.set_policy(edge, player.principal, grants=["images"])
    elif who == "foreign":
        other_key, _ = rp.seed_principal(edge)
        h["Authorization"] = f"Bearer {other_key}"
    elif who == "ended":
        assert edge.client.delete(f"/v1/roleplay/sessions/{player.session}",
                                  headers={"Authorization": h["Authorization"]}).status_code == 200
    elif who == "unknown":
        h["X-Roleplay-Session-ID"] = "rps_unknown"
    elif who == "revoked":
        edge.sql("UPDATE roleplay_keys SET revoked_at = 1 WHERE principal = ?1", player.principal)
    r = edge.client.post("/v1/chat/completions", json=rp.chat_body(3), headers=h)
    assert r.status_code == status and r.json()["error"]["code"] == code
    assert provider.received == []


def test_x_api_key_header_is_accepted(edge, provider, player):
    h = {"x-api-key": player.key, "X-Roleplay-Session-ID": player.session}
    r = edge.client.post("/v1/messages", json=rp.messages_body(3), headers=h)
    assert r.status_code == 200
    assert provider.received[0].headers["x-api-key"] == rp.PROVIDER_KEY


# --- fallbacks ----------------------------------------------------------------------

def test_candidate_whose_window_cannot_hold_protected_content_is_skipped(edge, provider, player):
    body = rp.chat_body(10, model="fake:tiny", tag="FB", models=[MODEL])
    since = len(edge.logs())
    r = post(edge, player, body)
    assert r.status_code == 200, r.text
    assert len(provider.received) == 1
    assert provider.received[0].json()["model"] == MODEL
    logs = edge.wait_for_log(lambda rec: rec.get("route") == "generate" and "skipped" in rec, since=since)
    assert logs and logs[-1]["skipped"] == ["context_window_exceeded"] and logs[-1]["model_index"] == 1


@pytest.mark.parametrize("status", [408, 429, 500, 503])
def test_retryable_upstream_status_tries_the_next_candidate(edge, provider, player, status):
    rp.set_model(edge, "fake:rp-large", 50000, 1000)
    calls = []

    def reply(rec):
        calls.append(rec)
        return Reply(status=status, chunks=[b'{"error":"busy"}']) if len(calls) == 1 else provider_reply(rec)

    provider.reply = reply
    body = rp.chat_body(30, tag="RT", models=["fake:rp-large"])
    r = post(edge, player, body)
    assert r.status_code == 200
    first, second = (rec.json() for rec in provider.received)
    assert first["model"] == MODEL and second["model"] == "fake:rp-large"
    # The edge runs the fallbacks itself: `models` is never passed on.
    assert "models" not in first and "models" not in second
    # Each candidate has its own plan: the larger window needed no paging at all.
    assert "tools" in first and "tools" not in second
    assert "context_pages" not in r.json()


@pytest.mark.parametrize("paged", [True, False])
def test_bare_model_providers_receive_their_own_model_id(edge, provider, player, paged):
    rp.set_model(edge, "bare:rp-small", WINDOW, 1000)
    body = rp.chat_body(30 if paged else 3, model="bare:rp-small", tag="BARE")
    r = post(edge, player, body)
    assert r.status_code == 200
    sent = provider.received[0].json()
    assert sent["model"] == "rp-small"
    assert ("tools" in sent) is paged
    assert sent["messages"][-1] == body["messages"][-1]


def test_network_error_tries_the_next_candidate(edge, provider, player):
    rp.set_model(edge, "dead:rp-small", WINDOW, 1000)
    r = post(edge, player, rp.chat_body(3, model="dead:rp-small", models=[MODEL]))
    assert r.status_code == 200
    assert [rec.json()["model"] for rec in provider.received] == [MODEL]


def test_retryable_answer_is_relayed_when_the_next_candidate_is_unreachable(edge, provider, player):
    """A provider's own 503 is a better answer than a made-up 502, and the response's
    pages are those of the plan that provider received."""
    rp.set_model(edge, "dead:rp-small", WINDOW, 1000)
    provider.reply = Reply(status=503, chunks=[b'{"error":{"message":"overloaded"}}'])
    r = post(edge, player, rp.chat_body(30, tag="RU", models=["dead:rp-small"]))
    assert r.status_code == 503 and r.json() == {"error": {"message": "overloaded"}}
    assert len(provider.received) == 1
    sent_ids = set(r.headers["x-multillm-context-pages"].split(","))
    assert sent_ids and all(i in provider.received[0].body.decode() for i in sent_ids)


def test_non_retryable_status_is_returned_as_is(edge, provider, player):
    provider.reply = Reply(status=400, chunks=[b'{"error":{"message":"bad"}}'])
    r = post(edge, player, rp.chat_body(3, models=["fake:rp-large"]))
    assert r.status_code == 400 and r.json() == {"error": {"message": "bad"}}
    assert len(provider.received) == 1


# --- sessions (docs/design.md §2) -------------------------------------------------------------

def test_session_create_and_end(edge, provider):
    key, principal = rp.seed_principal(edge)
    t0 = int(time.time())
    r = edge.client.post("/v1/roleplay/sessions", headers={"x-api-key": key})
    assert r.status_code == 201
    doc = r.json()
    assert set(doc) == {"session_id", "created_at"} and doc["session_id"].startswith("rps_")
    assert t0 - 5 <= doc["created_at"] <= t0 + 5
    sid = doc["session_id"]
    sessions = "SELECT principal, ended_at FROM roleplay_sessions WHERE session_id = ?1"
    assert edge.sql(sessions, sid) == [{"principal": principal, "ended_at": None}]

    other_key, _ = rp.seed_principal(edge)       # another principal cannot end it
    r = edge.client.delete(f"/v1/roleplay/sessions/{sid}", headers={"x-api-key": other_key})
    assert r.status_code == 404 and r.json()["error"]["code"] == "session_not_found"
    assert edge.sql(sessions, sid)[0]["ended_at"] is None

    r = edge.client.delete(f"/v1/roleplay/sessions/{sid}", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200 and r.json() == {"session_id": sid, "ended": True}
    assert edge.sql(sessions, sid)[0]["ended_at"] is not None
    r = edge.client.delete(f"/v1/roleplay/sessions/{sid}", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "session_not_found"
    assert provider.received == []


def test_session_create_needs_a_valid_key(edge):
    before = edge.sql("SELECT COUNT(*) AS n FROM roleplay_sessions")
    for headers in ({}, {"Authorization": "Bearer rpk_not-a-real-key"}):
        r = edge.client.post("/v1/roleplay/sessions", headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert edge.sql("SELECT COUNT(*) AS n FROM roleplay_sessions") == before


# --- storage and configuration faults: 503 and the provider never called ------------

# Configuration faults and a failed cleanup delete: tests/handlers/test_faults.py. Here the
# real local R2 and D1, through the runner's fault injection: one runner for both.
@pytest.fixture(scope="module")
def fault_edge(provider_server, tmp_path_factory):
    with Edge(tmp_path_factory.mktemp("faults"), vars=rp.edge_vars(provider_server.url)) as edge:
        rp.set_model(edge, MODEL, WINDOW, 1000)
        yield edge


@pytest.mark.parametrize("fault", ["r2_put", "d1_upsert"])
def test_faults_are_503_before_dispatch(fault_edge, provider, fault):
    edge = fault_edge
    player = rp.new_player(edge)
    if fault == "r2_put":
        edge.inject(r2_put=True)
    else:                                        # D1 fails after the object was put
        edge.inject(d1_sql="INSERT INTO context_pages")
    puts0 = edge.stats()["r2_puts"]
    try:
        r = post(edge, player, rp.chat_body(30))
    finally:
        edge.inject(r2_put=False, d1_sql=None)
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "storage_failed"
    assert provider.received == []
    assert rows(edge, player) == []
    assert edge.stats()["r2_puts"] == puts0 + 1 and edge.r2_list("context-pages/") == {}


# --- logs ---------------------------------------------------------------------------

def test_logs_hold_no_content_keys_or_secrets(edge, provider, player):
    body = rp.chat_body(30, tag="LOGLEAK")
    r = post(edge, player, body)
    assert r.status_code == 200
    page = r.json()["context_pages"][0]
    edge.client.get(f"/v1/context/pages/{page['page_id']}",
                    params={"roleplay_session_id": player.session},
                    headers={"Authorization": f"Bearer {player.key}"})
    out = edge.output()
    assert "LOGLEAK" not in out
    for secret in (player.key, rp.PROVIDER_KEY, rp.SIGNING_SECRET):
        assert secret not in out
    assert "Bearer" not in out
    gen = [rec for rec in edge.logs() if rec.get("route") == "generate"]
    assert gen and gen[-1]["pages"] == len(r.json()["context_pages"])
