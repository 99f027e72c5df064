"""How generation reports pages and compaction to the client (pure parts, CPython)."""

import json

from multillm_edge.generation import Turn, annotate, info_headers
from multillm_edge.paging import Page


def pages(n):
    return [Page(f"cp_{i:043d}", "ab" * 32, b"[]", []) for i in range(n)]


def test_headers_list_page_ids_while_small():
    turn = Turn("chat", pages=pages(3))
    assert dict(info_headers(turn)) == {"x-multillm-context-page-count": "3",
                                        "x-multillm-context-pages": ",".join(p.page_id for p in turn.pages)}


def test_long_page_lists_are_left_to_the_body_and_the_count():
    turn = Turn("chat", pages=pages(200))
    assert dict(info_headers(turn)) == {"x-multillm-context-page-count": "200"}


def test_compaction_is_announced():
    assert dict(info_headers(Turn("chat", compacted=4))) == {"x-multillm-context-compaction": "4"}
    body = annotate(b'{"id": "x"}', Turn("chat", compacted=4), "chat")
    assert json.loads(body) == {"id": "x", "context_compaction": {"dropped_exchanges": 4}}


def test_context_pages_carry_the_tool_schema_of_the_format():
    turn = Turn("messages", pages=pages(1), expires_at=123)
    doc = json.loads(annotate(b'{"id": "msg"}', turn, "messages"))
    assert doc["context_pages"] == [{"page_id": turn.pages[0].page_id, "sha256": "ab" * 32,
                                     "expires_at": 123, "tool_schema": doc["context_pages"][0]["tool_schema"]}]
    assert doc["context_pages"][0]["tool_schema"]["name"] == "multillm_context_retrieve"
    assert "input_schema" in doc["context_pages"][0]["tool_schema"]


def test_non_object_or_invalid_json_passes_unchanged():
    turn = Turn("chat", pages=pages(1))
    assert annotate(b"[1,2]", turn, "chat") == b"[1,2]"
    assert annotate(b"not json", turn, "chat") == b"not json"
