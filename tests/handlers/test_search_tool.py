"""The search tool on paged requests (docs/design.md §6.1): declared next to retrieval it
adds a second schema in the request's own format and the marker says what both tools
do; without it the upstream bytes are exactly what they were before search existed."""

import hashlib
import json

import pytest

from devkit import roleplay as rp
from devkit.plans import marker_content, marker_ids
from multillm_edge import formats

BODIES = {"/v1/chat/completions": rp.chat_body, "/v1/responses": rp.responses_body,
          "/v1/messages": rp.messages_body}
RETRIEVE, SEARCH = formats.TOOL_NAME, formats.SEARCH_TOOL_NAME
# sha256 of the upstream bytes of each paged request below: taken before the search tool
# existed (commit 261250f), then again when the retrieve tool gained its `exchange`
# argument (docs/design.md §6) and when a run's head stopped being cut into blocks
# (§5.7), and when the test signing secret grew to 32 bytes (the minimum, §3: page ids
# change with it); the search tool changes nothing of a request that does not declare it.
PINNED = {
    "/v1/chat/completions": "cd24f8aae4de2b68260dd501e5664f6d73f774aa2f51f5eea258de5a987be3d8",
    "/v1/responses": "9a554523d3a020d13e2e6a8f493de1de66814ab5e9bbcf1f084e4ae509a1cefa",
    "/v1/messages": "c18a7bd267cf09b29d054ed5c2eee4d1170d3818178599351422a783ac8da199",
}


def tool_names(body: dict) -> list:
    return [t.get("name") or t["function"]["name"] for t in body.get("tools", [])]


def markers(body: dict) -> list:
    key = "input" if "input" in body else "messages"
    return [marker_content(m) for m in body[key] if marker_ids(marker_content(m))]


@pytest.mark.parametrize("path", list(BODIES))
def test_without_the_search_capability_the_upstream_bytes_are_unchanged(edge, headers, path):
    r = edge.request("POST", path, headers, BODIES[path](30, tag="PIN"))
    assert r.status == 200 and r.json()["context_pages"]
    sent = edge.sent[-1].body
    assert hashlib.sha256(sent).hexdigest() == PINNED[path]
    up = json.loads(sent)
    assert tool_names(up) == [RETRIEVE] and SEARCH not in sent.decode()


@pytest.mark.parametrize("path", list(BODIES))
def test_with_it_the_model_gets_both_tools_and_a_marker_that_names_them(edge, headers, path):
    body = BODIES[path](30, tag="PIN", capabilities=[RETRIEVE, SEARCH])
    r = edge.request("POST", path, headers, body)
    assert r.status == 200
    pages = r.json()["context_pages"]
    up = json.loads(edge.sent[-1].body)
    mod = formats.get({"/v1/chat/completions": "chat", "/v1/responses": "responses",
                       "/v1/messages": "messages"}[path])
    assert up["tools"][-2:] == [mod.tool_schema(), mod.search_tool_schema()]
    assert "capabilities" not in up
    [text] = markers(up)
    assert text.startswith(formats.MARKER_PREFIX_SEARCH)
    assert RETRIEVE in text and SEARCH in text
    assert marker_ids(text) == [p["page_id"] for p in pages]


def test_search_alone_pages_nothing(edge, headers):
    body = rp.chat_body(30, capabilities=[SEARCH])
    r = edge.request("POST", "/v1/chat/completions", headers, body)
    assert "context_pages" not in r.json()
    assert edge.bucket.objects == {} and SEARCH not in edge.sent[-1].body.decode()
