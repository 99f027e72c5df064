"""The edge as a gateway to providers (docs/design.md §5.10-11), through the runner: header and
idle timeouts, the client going away, the page list on every stream, fallbacks past a
misconfigured candidate, and the per-attempt log line."""

import json
import socket
import time
from urllib.parse import urlsplit

import pytest

from devkit import roleplay as rp
from devkit.fakes import FakeServer, Reply
from devkit.runner import Edge

MODEL = "fake:rp-small"
WINDOW = 6000
TIMEOUT_S, IDLE_S = 2, 1
PAGE_LIST = b": multillm-context-pages "


def chat_events(n: int) -> list[bytes]:
    return [b'data: {"choices":[{"index":0,"delta":{"content":"w%d "}}]}\n\n' % i for i in range(n)]


def messages_events(n: int) -> list[bytes]:
    return [b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"text_delta","text":"w%d "}}\n\n' % i for i in range(n)]


def ok_reply(rec):
    return Reply(chunks=[b'{"id":"chatcmpl-ok","choices":[]}'])


@pytest.fixture(scope="module")
def hung():
    """A provider that never sends its response headers (until the client leaves)."""
    with FakeServer(Reply(head_delay=300)) as server:
        yield server


@pytest.fixture(scope="module")
def good():
    with FakeServer(ok_reply) as server:
        yield server


@pytest.fixture(scope="module")
def edge(hung, good, tmp_path_factory):
    vars = rp.edge_vars(good.url, UPSTREAM_TIMEOUT_SECONDS=str(TIMEOUT_S),
                       UPSTREAM_IDLE_SECONDS=str(IDLE_S))
    providers = json.loads(vars["PROVIDERS"])
    providers["hung"] = {"base_url": hung.url + "/v1", "formats": ["chat", "messages"],
                         "api_key_secret": "FAKE_API_KEY"}
    providers["nokey"] = {"base_url": good.url + "/v1", "formats": ["chat"],
                          "api_key_secret": "ABSENT_API_KEY"}
    vars["PROVIDERS"] = json.dumps(providers)
    with Edge(tmp_path_factory.mktemp("upstream"), vars=vars) as edge:
        for model in (MODEL, "fake:rp-large", "hung:rp-small", "nokey:rp-small", "ghost:rp-small"):
            rp.set_model(edge, model, 50000 if model == "fake:rp-large" else WINDOW, 1000)
        # One paged turn first, so timings below measure the edge, not a cold isolate.
        warm = rp.new_player(edge)
        edge.client.post("/v1/chat/completions", json=rp.chat_body(12, tag="WARM"), headers=warm.headers())
        yield edge


@pytest.fixture
def servers(hung, good):
    for server in (hung, good):
        server.clear()
    hung.reply, good.reply = Reply(head_delay=300), ok_reply
    return hung, good


@pytest.fixture
def player(edge):
    return rp.new_player(edge)


def generate_log(edge, since: int) -> dict:
    """The last generate line logged after the first ``since`` (waited for: it may
    follow the answer)."""
    gen = edge.wait_for_log(lambda r: r.get("route") == "generate", timeout=5, since=since)
    assert gen, edge.output()[-2000:]
    return gen[-1]


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


# --- header timeout -----------------------------------------------------------------

def test_hung_provider_with_a_fallback_answers_within_the_timeout(edge, servers, player):
    hung, good = servers
    since = len(edge.logs())
    body = rp.chat_body(12, model="hung:rp-small", tag="HUNG", models=["fake:rp-large"])
    started = time.monotonic()
    r = edge.client.post("/v1/chat/completions", json=body, headers=player.headers())
    elapsed = time.monotonic() - started
    assert r.status_code == 200, r.text
    log = generate_log(edge, since)
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + 5, (elapsed, log)
    assert len(hung.received) == 1 and len(good.received) == 1
    # The fallback went with its own plan: its larger window needed no paging.
    assert "tools" in hung.received[0].json() and "tools" not in good.received[0].json()
    # The hung request was aborted, not left open on the provider.
    assert wait_until(lambda: hung.sent and hung.sent[0].closed_at, 3)
    first, second = log["attempts"]
    assert (first["model_index"], first["status"]) == (0, "timeout")
    assert TIMEOUT_S * 1000 <= first["ms"] < (TIMEOUT_S + 2) * 1000
    assert (second["model_index"], second["status"]) == (1, 200)
    assert log["status"] == 200 and log["ms"] >= first["ms"] + second["ms"]


@pytest.mark.parametrize("path,anthropic", [("/v1/chat/completions", False), ("/v1/messages", True)])
def test_hung_provider_alone_is_504_in_the_routes_envelope(edge, servers, player, path, anthropic):
    make = rp.messages_body if anthropic else rp.chat_body
    started = time.monotonic()
    r = edge.client.post(path, json=make(3, model="hung:rp-small"), headers=player.headers())
    assert time.monotonic() - started < TIMEOUT_S + 5
    assert r.status_code == 504
    doc = r.json()
    if anthropic:
        assert doc["type"] == "error" and doc["error"]["code"] == "upstream_timeout"
    else:
        assert set(doc) == {"error"} and doc["error"]["code"] == "upstream_timeout"


# --- idle stream ----------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["chat", "messages"])
def test_idle_stream_ends_with_an_error_event_in_the_providers_shape(edge, servers, player, fmt):
    _, good = servers
    events = (messages_events if fmt == "messages" else chat_events)(50)
    good.reply = Reply(headers=[("content-type", "text/event-stream")], chunks=events,
                       stall_after=2, stall=300)
    path = "/v1/messages" if fmt == "messages" else "/v1/chat/completions"
    make = rp.messages_body if fmt == "messages" else rp.chat_body
    started = time.monotonic()
    r = edge.client.post(path, json=make(3, stream=True), headers=player.headers())
    elapsed = time.monotonic() - started
    assert r.status_code == 200 and IDLE_S <= elapsed < IDLE_S + 4, elapsed
    assert r.content.startswith(b"".join(events[:2]))
    tail = r.content[len(b"".join(events[:2])):]
    if fmt == "messages":
        assert tail.startswith(b"event: error\ndata: ") and tail.endswith(b"\n\n")
        doc = json.loads(tail.split(b"data: ", 1)[1])
        assert doc["type"] == "error" and doc["error"]["type"] == "timeout_error"
    else:
        assert tail.startswith(b"data: ") and tail.endswith(b"\n\n")
        assert json.loads(tail[6:])["error"]["code"] == "upstream_idle_timeout"
    # The silent provider's stream was abandoned, not held open.
    assert wait_until(lambda: good.sent and good.sent[0].closed_at, 3)


# --- the client going away --------------------------------------------------------------

def raw_post(edge, path: str, body: dict, headers: dict) -> socket.socket:
    """A request on a bare socket, so the test decides when the connection closes."""
    host = urlsplit(edge.url)
    sock = socket.create_connection((host.hostname, host.port), timeout=10)
    data = json.dumps(body).encode()
    head = [f"POST {path} HTTP/1.1", f"Host: {host.netloc}", "Content-Type: application/json",
            f"Content-Length: {len(data)}"] + [f"{k}: {v}" for k, v in headers.items()]
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + data)
    return sock


def test_client_leaving_mid_stream_cancels_the_provider_stream(edge, servers, player):
    _, good = servers
    good.reply = Reply(headers=[("content-type", "text/event-stream")], chunks=chat_events(600),
                       delay=0.02)
    sock = raw_post(edge, "/v1/chat/completions", rp.chat_body(3, stream=True), player.headers())
    got = b""
    while got.count(b"data: ") < 5:
        got += sock.recv(65536)
    sock.close()
    closed = time.monotonic()
    assert wait_until(lambda: good.sent and good.sent[0].closed_at, 3), good.sent
    assert good.sent[0].closed_at - closed < 1.0
    assert good.sent[0].chunks < 200 and not good.sent[0].done


def test_client_leaving_before_headers_aborts_and_tries_no_fallback(edge, servers, player):
    hung, good = servers
    since = len(edge.logs())
    body = rp.chat_body(3, model="hung:rp-small", models=[MODEL])
    sock = raw_post(edge, "/v1/chat/completions", body, player.headers())
    assert wait_until(lambda: hung.received, 5)
    time.sleep(0.3)
    sock.close()
    closed = time.monotonic()
    assert wait_until(lambda: hung.sent and hung.sent[0].closed_at, 3)
    assert hung.sent[0].closed_at - closed < 1.0
    log = generate_log(edge, since)
    assert log["status"] == 499 and log["attempts"][0]["status"] == "client_closed"
    time.sleep(TIMEOUT_S + 0.5)          # past the header timeout: still no fallback call
    assert good.received == []


# --- the page list on every stream ---------------------------------------------------

def test_paged_stream_leads_with_the_whole_page_list(edge, servers, player):
    _, good = servers
    events = chat_events(3) + [b"data: [DONE]\n\n"]
    good.reply = Reply(headers=[("content-type", "text/event-stream")], chunks=events)
    # every exchange its own page (no blocks, docs/design.md §5.7): 200+ handles
    body = rp.one_page_each("chat", rp.chat_body(260, size=400, model="fake:rp-large", tag="LIST", stream=True))
    # Storing 200+ new pages takes seconds on a busy machine (one R2 put per page today).
    r = edge.client.post("/v1/chat/completions", json=body, headers=player.headers(), timeout=600)
    assert r.status_code == 200
    first, second, rest = r.content.split(b"\n\n", 2)
    assert first.startswith(PAGE_LIST) and rest == b"".join(events)
    ids = first[len(PAGE_LIST):].decode().split(",")
    # then the session's figures, one compact JSON comment line
    assert second == b": multillm-context-session " + json.dumps(
        {"active_bytes": int(r.headers["x-multillm-context-active-bytes"]), "limit_bytes": 1048576,
         "active_pages": len(ids)}, separators=(",", ":")).encode()
    assert len(ids) >= 200 and int(r.headers["x-multillm-context-page-count"]) == len(ids)
    assert "x-multillm-context-pages" not in r.headers          # over the 4 KiB header cap
    stored = edge.sql("SELECT page_id FROM context_pages WHERE principal = ?1", player.principal)
    assert {row["page_id"] for row in stored} == set(ids)
    sent = good.received[0].body.decode()
    assert all(i in sent for i in ids)


def test_unpaged_stream_is_relayed_unchanged(edge, servers, player):
    _, good = servers
    events = chat_events(3)
    good.reply = Reply(headers=[("content-type", "text/event-stream")], chunks=events)
    r = edge.client.post("/v1/chat/completions", json=rp.chat_body(2, stream=True),
                         headers=player.headers())
    assert r.status_code == 200 and r.content == b"".join(events)
    assert "x-multillm-context-page-count" not in r.headers


# --- misconfigured candidates are skipped ----------------------------------------------

@pytest.mark.parametrize("model,code", [("nokey:rp-small", "provider_key_missing"),
                                        ("ghost:rp-small", "unknown_model")])
def test_misconfigured_first_candidate_falls_back(edge, servers, player, model, code):
    _, good = servers
    since = len(edge.logs())
    r = edge.client.post("/v1/chat/completions", json=rp.chat_body(3, model=model, models=[MODEL]),
                         headers=player.headers())
    assert r.status_code == 200, r.text
    assert [rec.json()["model"] for rec in good.received] == [MODEL]
    log = generate_log(edge, since)
    assert log["skipped"] == [code] and log["model_index"] == 1
    assert [a["model_index"] for a in log["attempts"]] == [1]


def test_only_misconfigured_candidates_fail_with_the_first_reason(edge, servers, player):
    _, good = servers
    body = rp.chat_body(3, model="nokey:rp-small", models=["ghost:rp-small"])
    r = edge.client.post("/v1/chat/completions", json=body, headers=player.headers())
    assert r.status_code == 503 and r.json()["error"]["code"] == "provider_key_missing"
    assert good.received == []


def test_json_answer_that_stalls_is_504_and_released(edge, servers, player):
    """A paged JSON answer is read whole to add `context_pages`: a provider that stops
    sending mid-body gets the idle limit too, and its connection is released."""
    _, good = servers
    answer = b'{"id":"chatcmpl-1","object":"chat.completion","choices":[]}'
    good.reply = Reply(chunks=[answer[:20], answer[20:]], stall_after=1, stall=300)
    started = time.monotonic()
    r = edge.client.post("/v1/chat/completions", json=rp.chat_body(30, tag="STALL"),
                         headers=player.headers())
    assert IDLE_S <= time.monotonic() - started < IDLE_S + 4
    assert r.status_code == 504 and r.json()["error"]["code"] == "upstream_timeout"
    assert wait_until(lambda: good.sent and good.sent[0].closed_at, 3)
