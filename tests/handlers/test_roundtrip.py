"""A paged turn and its retrieval, in-process: the page comes back byte for byte, and
every miss is the same 404."""

import base64
import json

from tests.handlers.conftest import KEY, SESSION
from devkit import roleplay as rp
from multillm_edge.core import config

EXPECTED_404 = (b'{"error":{"type":"not_found_error","code":"context_page_not_found",'
                b'"message":"Context page not found."}}')


def retrieve(edge, page_id, session=SESSION, key=KEY):
    return edge.request("GET", f"/v1/context/pages/{page_id}?roleplay_session_id={session}",
                        {"Authorization": f"Bearer {key}"})


def test_paged_turn_then_each_page_retrieved_exactly(edge, headers):
    r = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(30, tag="RT"))
    assert r.status == 200
    pages = r.json()["context_pages"]
    assert pages and len(edge.bucket.objects) == 1          # one object for the request
    [obj] = edge.bucket.objects.values()
    for p in pages:
        got = retrieve(edge, p["page_id"])
        assert got.status == 200 and got.header("cache-control") == "private, no-store"
        doc = got.json()
        body = base64.b64decode(doc["body_base64"])
        assert body in obj and json.loads(body) == doc["messages"] and doc["sha256"] == p["sha256"]
        assert doc["expires_at"] == p["expires_at"]


def test_misses_are_one_404(edge, headers):
    pid = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(30)).json()["context_pages"][0]["page_id"]
    for page_id, session in ((pid, "rps_other"), ("cp_" + "A" * 43, SESSION), (pid[:-1] + "B", SESSION), ("../x", SESSION)):
        r = retrieve(edge, page_id, session)
        assert (r.status, r.body) == (404, EXPECTED_404)
    assert retrieve(edge, pid, key="rpk_wrong").status == 401


def test_a_provider_answer_too_deep_to_parse_is_relayed_as_is(edge, headers):
    """A paged turn's JSON answer is parsed to add context_pages: one nested past the
    edge's limit (in Pyodide a recursive parse would overflow the stack) goes back
    unchanged, with the page list in the headers, never a 500."""
    from tests.support.inprocess import Answer
    deep = b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}"
    edge.upstream = lambda sent: Answer(body=deep)
    r = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(30, tag="DEEP"))
    assert (r.status, r.body) == (200, deep)
    assert int(r.header("x-multillm-context-page-count")) > 0


def _answer_of(size: int) -> bytes:
    """A chat completion of exactly `size` bytes."""
    head, tail = b'{"id":"chatcmpl-big","choices":[],"pad":"', b'"}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def test_a_provider_answer_too_large_to_annotate_is_relayed_as_is(edge, headers):
    """Parsing and re-encoding a JSON answer holds several copies of it in the isolate:
    past MAX_ANNOTATED_BYTES it goes back unchanged (the page list in the headers)."""
    from tests.support.inprocess import Answer
    for size, annotated in ((config.MAX_ANNOTATED_BYTES, True), (config.MAX_ANNOTATED_BYTES + 1, False)):
        answer = _answer_of(size)
        edge.upstream = lambda sent: Answer(body=answer)
        r = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(30, tag="BIG"))
        assert r.status == 200 and int(r.header("x-multillm-context-page-count")) > 0
        if annotated:
            doc = json.loads(r.body)
            assert doc["pad"] == json.loads(answer)["pad"] and doc["context_pages"]
        else:
            assert r.body == answer


def test_a_block_page_is_read_one_exchange_at_a_time(edge, headers):
    # A page may hold a block of exchanges (docs/design.md §5.7): `exchange=N` answers
    # one of them, byte-exact, so a small window can read back what it was handed.
    r = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(160, tag="BLK"))
    pages = r.json()["context_pages"]
    whole = {p["page_id"]: retrieve(edge, p["page_id"]).json() for p in pages}
    block_id = next(pid for pid, d in whole.items() if d["exchanges"] > 1)
    doc = whole[block_id]
    parts = []
    for n in range(1, doc["exchanges"] + 1):
        got = retrieve_exchange(edge, block_id, n)
        assert got.status == 200 and got.header("cache-control") == "private, no-store"
        one = got.json()
        assert (one["exchange"], one["exchanges"], one["sha256"]) == (n, doc["exchanges"], doc["sha256"])
        assert base64.b64decode(one["body_base64"]) == json.dumps(
            one["messages"], ensure_ascii=False, separators=(",", ":")).encode()
        assert n == 1 or one["messages"][0]["role"] == "user"   # a later one starts at a turn
        parts += one["messages"]
    assert parts == doc["messages"]                           # together: the whole page
    over = retrieve_exchange(edge, block_id, doc["exchanges"] + 1)
    assert over.status == 400 and over.json()["error"]["param"] == "exchange"
    assert over.json()["error"]["exchanges"] == doc["exchanges"]
    single = next(pid for pid, d in whole.items() if d["exchanges"] == 1)
    assert retrieve_exchange(edge, single, 1).json()["body_base64"] == whole[single]["body_base64"]


def test_a_malformed_exchange_is_400_before_any_storage(edge, headers):
    pid = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(30)).json()["context_pages"][0]["page_id"]
    gets = edge.bucket.ops["get"]
    for bad in ("0", "-1", "1.5", "x", "", "１", "9999999"):
        r = retrieve_exchange(edge, pid, bad)
        assert r.status == 400 and r.json()["error"]["param"] == "exchange", bad
    assert edge.bucket.ops["get"] == gets


def retrieve_exchange(edge, page_id, n, session=SESSION):
    return edge.request("GET", f"/v1/context/pages/{page_id}?roleplay_session_id={session}&exchange={n}",
                        {"Authorization": f"Bearer {KEY}"})


def test_with_paging_off_a_malformed_exchange_is_the_same_404(edge, headers):
    pid = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(30)).json()["context_pages"][0]["page_id"]
    edge.vars["CONTEXT_PAGING_ENABLED"] = "false"
    r = retrieve_exchange(edge, pid, "x")
    assert (r.status, r.body) == (404, EXPECTED_404)
