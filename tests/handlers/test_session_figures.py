"""The session's page budget in every paged answer (docs/design.md §5.11), in the three
wire formats: `context_session` in a complete JSON answer, the figure headers on JSON and
streams, the `: multillm-context-session` comment after the page list, and the figures of
a 413 `context_session_limit_exceeded`. Each figure is checked against the stored rows."""

import json

import pytest

from devkit import roleplay as rp
from multillm_edge.core import config
from tests.handlers.conftest import SESSION
from tests.handlers.test_roundtrip import retrieve
from tests.support.inprocess import Answer

LIMIT = config.SESSION_ALLOWANCE_BYTES
FORMATS = [("/v1/chat/completions", rp.chat_body, False),
           ("/v1/responses", rp.responses_body, False),
           ("/v1/messages", rp.messages_body, True)]
EVENTS = b'data: {"x":1}\n\ndata: [DONE]\n\n'


def stored(edge, session=SESSION, named=()) -> dict:
    """The session's active rows as the allowance counts them: every row, but a single
    page whose bytes a block page the answer names holds again (§5.9)."""
    rows = edge.sql("SELECT page_id, byte_length, r2_key, r2_offset FROM context_pages "
                    "WHERE session_id = ?1 AND expires_at > ?2", session, edge.clock)

    def body(r):
        obj = edge.bucket.objects.get(r["r2_key"])
        return None if obj is None else obj[r["r2_offset"]:r["r2_offset"] + r["byte_length"]]
    blocks = [body(r) for r in rows if r["page_id"] in named]
    counted = [r for r in rows if r["page_id"] in named or body(r) is None
               or not any(len(b) > r["byte_length"] and body(r)[1:-1] in b for b in blocks)]
    return {"active_bytes": sum(r["byte_length"] for r in counted), "limit_bytes": LIMIT,
            "active_pages": len(counted)}


def header_figures(r) -> dict:
    return {"active_bytes": int(r.header("x-multillm-context-active-bytes")),
            "limit_bytes": int(r.header("x-multillm-context-limit-bytes")),
            "active_pages": int(r.header("x-multillm-context-active-pages"))}


def second_session(edge, session="rps_handler_second") -> dict:
    edge.sql("INSERT INTO roleplay_sessions (session_id, principal, created_at) VALUES (?1, 'p_handlers', 0)",
             session)
    return session


@pytest.mark.parametrize("path,body,_", FORMATS)
def test_a_paged_json_answer_reports_the_sessions_figures(edge, headers, path, body, _):
    r = edge.request("POST", path, headers, body(30, tag="FJ"))
    assert r.status == 200
    doc = r.json()
    first = stored(edge)
    assert first["active_pages"] == len(doc["context_pages"]) > 0
    assert doc["context_session"] == first == header_figures(r)
    assert list(doc)[-2:] == ["context_pages", "context_session"]
    # More exchanges: the figures grow by exactly the pages this turn wrote (with blocks,
    # one exchange more may page nothing new, docs/design.md §5.7).
    r = edge.request("POST", path, headers, body(40, tag="FJ"))
    doc = r.json()
    now = stored(edge, named={p["page_id"] for p in doc["context_pages"]})
    assert doc["context_session"] == now == header_figures(r)
    assert now["active_bytes"] > first["active_bytes"]


def test_single_pages_a_block_holds_again_are_counted_once(edge, headers):
    # A chat grown one exchange a turn: each newly paged exchange is a single page until
    # its block closes (§5.7); from then on the block holds its bytes, and the figures
    # (and the allowance, §5.9) count them once, though the single rows stay retrievable.
    seen_cover = False
    for n in range(30, 90):
        r = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(n, tag="CV"))
        assert r.status == 200
        doc = r.json()
        named = {p["page_id"] for p in doc["context_pages"]}
        counted, every = stored(edge, named=named), stored(edge)
        assert doc["context_session"] == counted == header_figures(r)
        seen_cover |= counted["active_bytes"] < every["active_bytes"]
        for row in edge.sql("SELECT page_id FROM context_pages WHERE session_id = ?1", SESSION)[:3]:
            assert retrieve(edge, row["page_id"]).status == 200
    assert seen_cover


@pytest.mark.parametrize("path,body,_", FORMATS)
def test_a_paged_stream_leads_with_the_page_list_then_the_figures(edge, headers, path, body, _):
    edge.upstream = lambda sent: Answer(headers=[("content-type", "text/event-stream")], body=EVENTS)
    r = edge.request("POST", path, headers, body(30, tag="FS", stream=True))
    assert r.status == 200
    ids = r.header("x-multillm-context-pages").split(",")     # under the header's cap here
    figures = stored(edge)
    assert figures["active_pages"] == len(ids) > 0
    assert r.body == (b": multillm-context-pages " + ",".join(ids).encode() + b"\n\n"
                      + b": multillm-context-session " + json.dumps(figures, separators=(",", ":")).encode()
                      + b"\n\n" + EVENTS)
    assert list(json.loads(r.body.split(b"\n\n")[1][len(b": multillm-context-session "):])) == \
        ["active_bytes", "limit_bytes", "active_pages"]
    assert header_figures(r) == figures


@pytest.mark.parametrize("path,body,anthropic", FORMATS)
def test_a_413_at_the_allowance_carries_active_limit_and_needed_bytes(edge, headers, path, body, anthropic):
    # What this history pages, measured in a session of its own: the bytes it would add.
    other = second_session(edge)
    ok = edge.request("POST", path, {**headers, "X-Roleplay-Session-ID": other}, body(30, tag="F4"))
    needed = ok.json()["context_session"]["active_bytes"]
    assert needed == stored(edge, other)["active_bytes"] > 0
    sent, objects = len(edge.sent), dict(edge.bucket.objects)
    # This session: a row (managed: never a roleplay page) leaving less than that.
    full = LIMIT - needed + 1
    edge.sql("INSERT INTO context_pages (page_id, authority, principal, session_id, policy_revision, sha256, "
             "byte_length, r2_key, created_at, expires_at, signature) VALUES "
             "('cp_filler', 'managed', 'p_handlers', ?1, 1, ?2, ?3, 'filler', 0, ?4, 'x')",
             SESSION, "0" * 64, full, edge.clock + 86400)
    r = edge.request("POST", path, headers, body(30, tag="F4"))
    assert r.status == 413
    doc = r.json()
    assert (doc.get("type") == "error") == anthropic
    err = doc["error"]
    assert err["code"] == "context_session_limit_exceeded"
    assert (err["active_bytes"], err["limit_bytes"], err["needed_bytes"], err["allowance_bytes"]) == \
        (full, LIMIT, needed, LIMIT)
    assert err["active_bytes"] + err["needed_bytes"] == LIMIT + 1
    # Nothing dispatched, nothing stored for this session.
    assert len(edge.sent) == sent and edge.bucket.objects == objects
    assert edge.sql("SELECT page_id FROM context_pages WHERE session_id = ?1", SESSION) == [{"page_id": "cp_filler"}]
    # One byte less and the same request is paged: the figures count the filler row too.
    edge.sql("UPDATE context_pages SET byte_length = byte_length - 1 WHERE page_id = 'cp_filler'")
    r = edge.request("POST", path, headers, body(30, tag="F4"))
    assert r.status == 200 and r.json()["context_session"]["active_bytes"] == LIMIT
    assert header_figures(r) == {"active_bytes": LIMIT, "limit_bytes": LIMIT,
                                 "active_pages": stored(edge)["active_pages"] - 1}


@pytest.mark.parametrize("path,body,_", FORMATS)
def test_an_answer_without_pages_has_no_figures(edge, headers, path, body, _):
    r = edge.request("POST", path, headers, body(1, tag="F0"))
    assert r.status == 200 and edge.page_rows() == 0
    assert "context_session" not in r.json()
    assert not any(k.startswith("x-multillm-context-") for k, _v in r.headers)
