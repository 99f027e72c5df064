"""The pure parts of generation (CPython): budgets per candidate, and how pages and
compaction are reported to the client."""

import json

import pytest
from hypothesis import given, settings, strategies as st

from multillm_edge.core.config import Provider
from multillm_edge.base.errors import EdgeError
from multillm_edge.formats import chat
from multillm_edge.base.jsonbytes import compact
from multillm_edge.routes.generation import Turn, annotate, candidates, idle_event, info_headers, page_list_comment
from multillm_edge.core.paging import Page
from multillm_edge.core.rows import ActivePage
from multillm_edge.storage.store import GenerationContext, ModelWindow, SessionState

PROVIDERS = {"p": Provider("p", "http://127.0.0.1:1/v1", ("chat", "messages"), "K")}


def context(**windows):
    """Model windows by name; `q_a` stands for "q:a" (a provider PROVIDERS lacks)."""
    return GenerationContext("alice", False, None, SessionState(True, True, False),
                             {k.replace("_", ":") if k.startswith("q_") else f"p:{k}": ModelWindow(*v)
                              for k, v in windows.items()}, frozenset(), 0)


def test_budget_is_window_minus_the_requests_max_tokens_minus_safety():
    body = {"model": "p:a", "max_tokens": 300, "messages": []}
    (c,) = candidates("chat", body, ["p:a"], context(a=(8000, 1000)), PROVIDERS, 256)
    assert c.budget == 8000 - 300 - 256


def test_budget_falls_back_to_the_models_max_output():
    body = {"model": "p:a", "messages": []}
    a, b = candidates("chat", body, ["p:a", "p:b"], context(a=(8000, 1000), b=(4000, 500)), PROVIDERS, 100)
    assert (a.budget, b.budget) == (8000 - 1000 - 100, 4000 - 500 - 100)


def test_max_completion_tokens_wins_in_chat_and_max_tokens_in_messages():
    body = {"model": "p:a", "max_tokens": 300, "max_completion_tokens": 700, "messages": []}
    (c,) = candidates("chat", body, ["p:a"], context(a=(8000, 1000)), PROVIDERS, 0)
    assert c.budget == 8000 - 700
    (m,) = candidates("messages", {"model": "p:a", "max_tokens": 300}, ["p:a"],
                      context(a=(8000, 1000)), PROVIDERS, 0)
    assert m.budget == 8000 - 300


@pytest.mark.parametrize("model,fmt", [("p:unknown", "chat"), ("q:a", "chat"), ("p:a", "responses")])
def test_unknown_model_provider_or_format_is_400(model, fmt):
    with pytest.raises(EdgeError) as e:
        candidates(fmt, {"model": model}, [model], context(a=(8000, 1000), q_a=(8000, 1000)), PROVIDERS, 0)
    assert (e.value.status, e.value.code) == (400, "unknown_model")


def pages(n):
    return [Page(f"cp_{i:043d}", "ab" * 32, b"[]") for i in range(n)]


def test_headers_list_page_ids_while_small():
    turn = Turn(pages=pages(3))
    assert dict(info_headers(turn)) == {"x-multillm-context-page-count": "3",
                                        "x-multillm-context-pages": ",".join(p.page_id for p in turn.pages)}


def test_long_page_lists_are_left_to_the_body_and_the_count():
    turn = Turn(pages=pages(200))
    assert dict(info_headers(turn)) == {"x-multillm-context-page-count": "200"}


def test_compaction_is_announced():
    assert dict(info_headers(Turn(compacted=4))) == {"x-multillm-context-compaction": "4"}
    body = annotate(b'{"id": "x"}', Turn(compacted=4), "chat")
    assert json.loads(body) == {"id": "x", "context_compaction": {"dropped_exchanges": 4}}


def test_context_pages_carry_the_tool_schema_of_the_format():
    turn = Turn(pages=pages(1))
    turn.rows[turn.pages[0].page_id] = ActivePage(123, 0, "k", 0)
    doc = json.loads(annotate(b'{"id": "msg"}', turn, "messages"))
    assert doc["context_pages"] == [{"page_id": turn.pages[0].page_id, "sha256": "ab" * 32,
                                     "expires_at": 123, "tool_schema": doc["context_pages"][0]["tool_schema"]}]
    assert doc["context_pages"][0]["tool_schema"]["name"] == "multillm_context_retrieve"
    assert "input_schema" in doc["context_pages"][0]["tool_schema"]


def test_each_page_reports_its_own_rows_expiry():
    """Lazy refresh: a reused page keeps its row's expiry, a new one gets now + TTL."""
    turn = Turn(pages=pages(3))
    for i, p in enumerate(turn.pages):
        turn.rows[p.page_id] = ActivePage(1000 + i, 0, "k", 0)
    doc = json.loads(annotate(b'{"id": "c"}', turn, "chat"))
    assert [p["expires_at"] for p in doc["context_pages"]] == [1000, 1001, 1002]


def test_non_object_or_invalid_json_passes_unchanged():
    turn = Turn(pages=pages(1))
    assert annotate(b"[1,2]", turn, "chat") == b"[1,2]"
    assert annotate(b"not json", turn, "chat") == b"not json"


def test_a_candidate_no_provider_serves_is_skipped_when_another_can_be_tried():
    body = {"model": "q:a", "messages": []}
    skipped, served = candidates("chat", body, ["q:a", "p:a"], context(a=(8000, 1000), q_a=(8000, 1000)),
                                 PROVIDERS, 0)
    assert (skipped.skipped.status, skipped.skipped.code) == (400, "unknown_model")
    assert served.skipped is None and served.model == "p:a"


def test_a_paged_stream_leads_with_one_comment_line_listing_every_page():
    turn = Turn(pages=pages(200))
    line = page_list_comment(turn)
    assert line.startswith(b": multillm-context-pages ") and line.endswith(b"\n\n")
    assert line.count(b"\n") == 2           # one comment line, then the blank line ending it
    assert line[len(b": multillm-context-pages "):-2].decode().split(",") == [p.page_id for p in turn.pages]
    assert page_list_comment(Turn()) == b""


@pytest.mark.parametrize("fmt", ["chat", "responses", "messages"])
def test_idle_event_is_one_sse_event_in_the_providers_error_shape(fmt):
    event = idle_event(fmt, 60)
    assert event.endswith(b"\n\n") and event.count(b"\n\n") == 1
    lines = event[:-2].split(b"\n")
    if fmt == "messages":
        assert lines[0] == b"event: error"
        doc = json.loads(lines[1][len(b"data: "):])
        assert doc["type"] == "error" and doc["error"]["type"] == "timeout_error"
    else:
        assert len(lines) == 1
        doc = json.loads(lines[0][len(b"data: "):])
        assert doc["error"]["code"] == "upstream_idle_timeout"
    assert "60 seconds" in json.dumps(doc)


@settings(max_examples=200, deadline=None)
@given(doc=st.dictionaries(st.text(max_size=8), st.recursive(
           st.none() | st.booleans() | st.integers() | st.text(max_size=12),
           lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
           max_leaves=8), max_size=6),
       n_pages=st.integers(0, 4), compacted=st.integers(0, 3),
       expiries=st.lists(st.none() | st.integers(0, 2**40), min_size=4, max_size=4))
def test_the_response_annotation_is_the_docs_compact_encoding_with_the_keys_appended(
        doc, n_pages, compacted, expiries):
    """The text-built context_pages equal encoding the dicts (what it replaced)."""
    turn = Turn(pages=pages(n_pages), compacted=compacted)
    for p, exp in zip(turn.pages, expiries):
        if exp is not None:
            turn.rows[p.page_id] = ActivePage(exp, 0, "k", 0)
    expected = {k: v for k, v in doc.items() if k not in ("context_pages", "context_compaction")}
    if n_pages:
        expected["context_pages"] = [
            {"page_id": p.page_id, "sha256": p.sha256, "expires_at": turn.rows[p.page_id].expires_at
             if p.page_id in turn.rows else None, "tool_schema": chat.tool_schema()} for p in turn.pages]
    if compacted:
        expected["context_compaction"] = {"dropped_exchanges": compacted}
    payload = json.dumps(doc).encode()
    want = payload if not (n_pages or compacted) else compact(expected)
    assert annotate(payload, turn, "chat") == want


def test_a_provider_answer_with_a_lone_surrogate_escape_is_annotated_as_ascii_json():
    """`\\ud800` is valid JSON text but no UTF-8 string: the answer keeps its meaning."""
    turn = Turn(pages=pages(1))
    out = annotate(b'{"text": "a\\ud800b \xc3\xa9"}', turn, "chat")
    doc = json.loads(out)
    assert doc["text"] == "a\ud800b é" and doc["context_pages"][0]["page_id"] == turn.pages[0].page_id


@pytest.mark.parametrize("payload", [b"[" * 100_000 + b"]" * 100_000, b'{"a": NaN}', b'{"a": "\xff"}',
                                     b'{"a": ' + b"[" * 300 + b"]" * 300 + b"}"])
def test_a_provider_answer_the_edge_could_not_accept_passes_unchanged(payload):
    """Parsed as strictly as a request: a deep answer never reaches the recursive parser."""
    assert annotate(payload, Turn(pages=pages(1)), "chat") == payload


def test_a_providers_own_context_keys_are_replaced_and_the_edges_come_last():
    turn = Turn(pages=pages(1), compacted=2)
    out = annotate(b'{"context_pages":"theirs","id":"x","context_compaction":1}', turn, "chat")
    doc = json.loads(out)
    assert list(doc) == ["id", "context_pages", "context_compaction"]
    assert doc["context_pages"][0]["page_id"] == turn.pages[0].page_id
    assert doc["context_compaction"] == {"dropped_exchanges": 2}


FIGURES = {"active_bytes": 90_000, "limit_bytes": 1_048_576, "active_pages": 200}


def test_the_sessions_figures_follow_the_page_list_in_json_headers_and_stream():
    """docs/design.md §5.11: `context_session` after `context_pages` (a provider's own
    key of that name replaced), three headers, and a second compact comment line."""
    turn = Turn(pages=pages(2), compacted=1)
    doc = json.loads(annotate(b'{"id":"x","context_session":"theirs"}', turn, "chat", FIGURES))
    assert list(doc) == ["id", "context_pages", "context_session", "context_compaction"]
    assert doc["context_session"] == FIGURES
    assert dict(info_headers(turn, FIGURES)) == {
        "x-multillm-context-page-count": "2", "x-multillm-context-pages": ",".join(p.page_id for p in turn.pages),
        "x-multillm-context-compaction": "1", "x-multillm-context-active-bytes": "90000",
        "x-multillm-context-limit-bytes": "1048576", "x-multillm-context-active-pages": "200"}
    assert page_list_comment(turn, FIGURES) == (
        b": multillm-context-pages " + ",".join(p.page_id for p in turn.pages).encode() + b"\n\n"
        b': multillm-context-session {"active_bytes":90000,"limit_bytes":1048576,"active_pages":200}\n\n')
    assert page_list_comment(Turn(), FIGURES) == b""
