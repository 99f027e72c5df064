"""The isolate admits work by memory (docs/design.md §7.2, issue 43): a request that
does not fit waits a bounded time, then answers 503 ``edge_busy`` with Retry-After in
its route's envelope, with nothing stored or dispatched; every request gives its
reservation back however it ends; a MemoryError is a 503 too, never a 500, and the
caches go first; a turn answered after the caches gave way is byte for byte the turn
answered with them."""

from __future__ import annotations

import json

import pytest

from devkit import roleplay as rp
from multillm_edge import formats
from multillm_edge.base.errors import EdgeError
from multillm_edge.core.last_turns import LAST_TURNS
from multillm_edge.search import STATE
from multillm_edge.service import budget
from tests.handlers.conftest import KEY, MODEL, SESSION
from tests.support.inprocess import Answer, LocalEdge

BUDGET = budget.BUDGET
HEADERS = {"Authorization": f"Bearer {KEY}", "X-Roleplay-Session-ID": SESSION}


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    """A short wait, and an isolate whose budget is free before and after each test."""
    monkeypatch.setattr(budget, "WAIT_SECONDS", 0.05)
    assert BUDGET.cur == 0 and BUDGET.waiting() == 0
    yield
    assert BUDGET.cur == 0 and BUDGET.waiting() == 0, "a reservation was not given back"
    BUDGET.fit()


def body(n=40, **extra) -> bytes:
    return json.dumps(rp.chat_body(n, model=MODEL, **extra)).encode()


def held_elsewhere(n: int):
    """Another request's reservation of ``n`` bytes (given back by the caller)."""
    assert BUDGET.try_acquire(n)
    return n


@pytest.mark.parametrize("path, envelope", [("/v1/chat/completions", "edge"), ("/v1/messages", "anthropic")])
def test_a_request_that_does_not_fit_is_turned_away_with_nothing_stored_or_dispatched(edge, path, envelope):
    make = rp.chat_body if path == "/v1/chat/completions" else rp.messages_body
    raw = json.dumps(make(40, model=MODEL)).encode()
    taken = held_elsewhere(BUDGET.size - 1000)
    try:
        r = edge.request("POST", path, {**HEADERS, "Content-Length": str(len(raw))}, raw)
    finally:
        BUDGET.release(taken)
    assert r.status == 503 and r.header("retry-after") == str(budget.RETRY_AFTER_SECONDS)
    err = r.json()["error"]
    assert err["code"] == "edge_busy" and err["type"] == (
        "service_unavailable" if envelope == "edge" else "overloaded_error")
    if envelope == "anthropic":
        assert r.json()["type"] == "error"
    assert edge.sent == [] and edge.page_rows() == 0 and edge.bucket.objects == {}
    assert edge.logs[-1]["error"] == "edge_busy"
    # once the room is free, the same request answers
    assert edge.request("POST", path, HEADERS, raw).status == 200


def test_a_chunked_body_reserves_as_it_is_read(edge):
    """No Content-Length: admitted for its headers, then turned away while its body is
    read, before anything is parsed, stored or dispatched."""
    raw = body(200)
    room = 2 * budget.REQUEST_BYTES + 16 * 1024 * budget.BODY_FACTOR
    taken = held_elsewhere(BUDGET.size - room)
    try:
        r = edge.request("POST", "/v1/chat/completions", HEADERS, raw)
    finally:
        BUDGET.release(taken)
    assert len(raw) * budget.BODY_FACTOR > room
    assert r.status == 503 and r.json()["error"]["code"] == "edge_busy"
    assert edge.sent == [] and edge.page_rows() == 0


def test_a_waiting_request_is_admitted_when_room_is_released(edge):
    """A request that waits is served once another gives its bytes back in time."""
    raw = body()
    taken = held_elsewhere(BUDGET.size)
    edge.loop.call_later(0.01, BUDGET.release, taken)
    r = edge.request("POST", "/v1/chat/completions", {**HEADERS, "Content-Length": str(len(raw))}, raw)
    assert r.status == 200 and len(edge.sent) == 1


@pytest.mark.parametrize("paged", [True, False])
def test_the_reservation_is_lowered_to_the_upstream_body_before_the_fetch(edge, paged):
    """A turn whose answer is read whole to be annotated (it paged) keeps room for an
    answer of its upstream body's order; one whose answer is relayed as it comes holds
    its upstream body alone (the relay's chunks are within REQUEST_BYTES)."""
    raw = body(60) if paged else body(3)
    seen = []

    def upstream(sent):
        seen.append(BUDGET.cur)
        return Answer(body=b'{"id":"x","choices":[]}')

    edge.upstream = upstream
    r = edge.request("POST", "/v1/chat/completions", {**HEADERS, "Content-Length": str(len(raw))}, raw)
    assert r.status == 200
    assert (r.header("x-multillm-context-pages") not in (None, "0")) is paged
    factor = budget.UPSTREAM_FACTOR if paged else 1
    assert seen == [budget.REQUEST_BYTES + factor * len(edge.sent[0].body)]
    assert seen[0] < budget.REQUEST_BYTES + budget.BODY_FACTOR * len(raw)


@pytest.mark.parametrize("case", ["ok", "stream", "invalid json", "unauthorized", "storage fault",
                                  "upstream down", "client gone", "crash", "forwarded"])
def test_the_reservation_is_given_back_on_every_path(edge, case):
    raw, headers, path = body(60, capabilities=[formats.TOOL_NAME]), dict(HEADERS), "/v1/chat/completions"
    if case == "stream":
        edge.upstream = lambda sent: Answer(headers=[("content-type", "text/event-stream")],
                                            body=b"data: {}\n\n")
    elif case == "invalid json":
        raw = b"{not json"
    elif case == "unauthorized":
        headers["Authorization"] = "Bearer rpk_nobody"
    elif case == "storage fault":
        edge.executor.failing = True
    elif case == "upstream down":
        edge.upstream = lambda sent: OSError("down")
    elif case == "client gone":
        edge.upstream = lambda sent: EdgeError(499, "client_closed_request", "gone")
    elif case == "crash":
        edge.upstream = lambda sent: RuntimeError("boom")
    elif case == "forwarded":
        path, headers = "/v1/embeddings", {"Authorization": "Bearer sk-origin"}
    r = edge.request("POST", path, {**headers, "Content-Length": str(len(raw))}, raw)
    expected = {"ok": 200, "stream": 200, "invalid json": 400, "unauthorized": 401,
                "storage fault": 503, "upstream down": 502, "client gone": 499, "crash": 500,
                "forwarded": 200}[case]
    assert r.status == expected, r.body
    assert BUDGET.cur == 0          # (the fixture checks it too)


def test_a_stream_holds_its_share_until_the_relay_ends(edge):
    """A relayed stream keeps STREAM_BYTES until it is read to its end."""
    from multillm_edge import app
    from multillm_edge.base.http import Incoming
    from tests.support.inprocess import InProcessPlatform
    edge.upstream = lambda sent: Answer(headers=[("content-type", "text/event-stream")], body=b"data: {}\n\n")
    raw = body(20)
    pairs = [(k.lower(), v) for k, v in HEADERS.items()]
    req = Incoming("POST", "https://edge.test/v1/chat/completions", pairs, stream=raw)
    out = edge.loop.run_until_complete(app.handle(req, InProcessPlatform(edge, raw, pairs)))
    assert out.status == 200 and BUDGET.cur == budget.STREAM_BYTES
    assert b"".join(out.stream).endswith(b"data: {}\n\n")
    assert BUDGET.cur == 0


def test_a_memory_error_answers_503_and_the_caches_go_first(edge):
    # a last turn kept: a compact body (one no group of which stands in the edge's
    # encoding can never be resumed, so it is not kept)
    edge.request("POST", "/v1/chat/completions", HEADERS,
                 json.dumps(rp.chat_body(30, model=MODEL), separators=(",", ":")).encode())
    assert len(LAST_TURNS)

    def upstream(sent):
        raise MemoryError

    edge.upstream = upstream
    r = edge.request("POST", "/v1/chat/completions", HEADERS, body(31))
    assert r.status == 503 and r.json()["error"]["code"] == "edge_busy" and r.header("retry-after")
    assert len(LAST_TURNS) == 0 and all(c.held_bytes() < 4096 for c in STATE.caches().values())
    assert getattr(edge, "exhausted", 0) == 1       # the platform told (it may lift a heap cap)
    line = edge.logs[-1]                            # the operator sees why, and nothing else
    assert line["status"] == 503 and line["error"] == "edge_busy" and line["memory_error"] is True


def test_a_memory_error_with_room_held_elsewhere_is_not_the_heap_stuck(edge):
    """Others hold room they will give back: the platform is not told (a cap is kept)."""
    def upstream(sent):
        raise MemoryError

    edge.upstream = upstream
    taken = held_elsewhere(budget.STUCK_BYTES)
    try:
        r = edge.request("POST", "/v1/chat/completions", HEADERS, body(31))
    finally:
        BUDGET.release(taken)
    assert r.status == 503 and r.json()["error"]["code"] == "edge_busy"
    assert getattr(edge, "exhausted", 0) == 0


def recalling_turns():
    chat = rp.chat_body(60, model="fake:rp-8k", capabilities=[
        formats.TOOL_NAME, formats.RECALL_CAPABILITY, formats.PROMPT_CACHE_CAPABILITY])
    for k in range(4):
        chat["messages"].append({"role": "assistant", "content": f"*Aurore nods* The lantern, {k}."})
        chat["messages"].append({"role": "user", "content": f"Where did we see the lantern, {k}?"})
        yield json.dumps(chat, ensure_ascii=False, separators=(",", ":")).encode()


def test_a_turn_after_the_caches_gave_way_is_byte_identical():
    """Two edges run the same recalling session; on one, every cache gives way (a
    request took all the room) before each turn: the provider gets the same bytes,
    the client the same answer, storage the same rows."""
    def new_edge():
        e = LocalEdge(rp.edge_vars("http://provider.test", "http://origin.test"))
        e.seed_player("p_handlers", KEY, SESSION)
        e.set_model("fake:rp-8k", 8000 + 200 + 256, 200)
        return e

    with new_edge() as kept, new_edge() as shrunk:
        LAST_TURNS.clear()
        STATE.reset()
        for raw in recalling_turns():
            a = kept.request("POST", "/v1/chat/completions", HEADERS, raw)
            BUDGET.fit(BUDGET.size)         # every cache gives way, as to a request
            assert BUDGET.held() == 0
            BUDGET.fit()
            b = shrunk.request("POST", "/v1/chat/completions", HEADERS, raw)
            assert a.status == b.status == 200
            assert (a.body, a.headers) == (b.body, b.headers)
            assert kept.sent[-1].body == shrunk.sent[-1].body
            assert kept.sql("SELECT page_id, sha256 FROM context_pages ORDER BY page_id") == \
                shrunk.sql("SELECT page_id, sha256 FROM context_pages ORDER BY page_id")
        assert any(n.get("recalled") for n in (json.loads(json.dumps(l)) for l in kept.logs))


def test_a_dense_body_reserves_for_its_structure_once_parsed(edge):
    """Admitted by its length, a body of tiny messages grows its reservation by the
    bracket bytes its parse counted; without the room, 503 before storing or sending."""
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": "x"} for i in range(4000)]
    raw = json.dumps({"model": MODEL, "messages": msgs}, separators=(",", ":")).encode()
    by_length = budget.REQUEST_BYTES + budget.BODY_FACTOR * len(raw)
    taken = held_elsewhere(BUDGET.size - by_length)
    try:
        r = edge.request("POST", "/v1/chat/completions", {**HEADERS, "Content-Length": str(len(raw))}, raw)
    finally:
        BUDGET.release(taken)
    assert r.status == 503 and r.json()["error"]["code"] == "edge_busy"
    assert edge.sent == [] and edge.page_rows() == 0
    assert edge.request("POST", "/v1/chat/completions", HEADERS, raw).status == 200


def test_a_chunked_batch_upload_reserves_as_it_is_buffered(edge):
    """A batch body with no Content-Length is reserved as it is buffered: without the
    room, 503 before anything reaches the origin."""
    from devkit import batches as bt
    lines = b"\n".join(json.dumps(bt.item(n, None)).encode() for n in range(1, 1000))
    boundary = "xyz"
    raw = (f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
           f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="b.jsonl"\r\n'
           f"Content-Type: application/jsonl\r\n\r\n").encode() + lines + f"\r\n--{boundary}--\r\n".encode()
    headers = {"Authorization": "Bearer sk-origin", "Content-Type": f"multipart/form-data; boundary={boundary}"}
    taken = held_elsewhere(BUDGET.size - 2 * budget.REQUEST_BYTES)
    try:
        r = edge.request("POST", "/v1/files", headers, raw)
    finally:
        BUDGET.release(taken)
    assert len(raw) * budget.BATCH_FACTOR > budget.REQUEST_BYTES
    assert r.status == 503 and r.json()["error"]["code"] == "edge_busy" and edge.sent == []
    assert edge.request("POST", "/v1/files", headers, raw).status == 200 and len(edge.sent) == 1


@pytest.mark.parametrize("case", ["ok", "invalid json", "upstream down"])
def test_a_large_body_lets_the_reserve_go_when_its_blocks_are_made_and_it_is_held_again(edge, case):
    """A body of LARGE_BODY_BYTES or more (its Content-Length) is admitted counting on the
    reserve, and its block is let go only after the last chunk, before they are joined
    (docs/design.md §7.2); once the request is done, the block is held again and counted
    out of what requests and caches may use. A small body never touches it."""
    small = body(3)
    r = edge.request("POST", "/v1/chat/completions", {**HEADERS, "Content-Length": str(len(small))}, small)
    assert r.status == 200 and getattr(edge, "rooms", 0) == 0
    assert BUDGET._block is not None and BUDGET.size == BUDGET.full - BUDGET.reserve
    edge.set_model("fake:rp-wide", 4_000_000, 1000)
    raw = (json.dumps(rp.chat_body(900, model="fake:rp-wide", size=700)).encode() if case != "invalid json"
           else b"[" * 10 + b" " * budget.LARGE_BODY_BYTES)
    assert len(raw) >= budget.LARGE_BODY_BYTES
    seen = []

    def upstream(sent):
        seen.append((BUDGET._block is None, BUDGET.size))
        return OSError("down") if case == "upstream down" else Answer(body=b'{"id":"x","choices":[]}')

    edge.upstream = upstream
    r = edge.request("POST", "/v1/chat/completions", {**HEADERS, "Content-Length": str(len(raw))}, raw)
    assert r.status == {"ok": 200, "invalid json": 400, "upstream down": 502}[case], r.body
    assert edge.rooms == 1
    if case != "invalid json":
        assert seen == [(True, BUDGET.full)]        # while its bytes were its own: no block
    assert len(BUDGET._block) == BUDGET.reserve and BUDGET.size == BUDGET.full - BUDGET.reserve
    assert BUDGET._using is None and not BUDGET._borrowers
