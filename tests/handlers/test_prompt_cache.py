"""The prompt cache through the handler (docs/design.md §5.7): a chat grown turn by turn
with `multillm_context_prompt_cache` (and recall) writes pages only when its boundary
steps — between steps 0 R2 puts and 0 D1 rows — sends each turn as the last turn's
bytes up to its window's end, never sends the capability upstream, and every page it
names retrieves byte for byte."""

import base64
import json

import pytest

from devkit import roleplay as rp
from devkit.plans import stable_prefix
from multillm_edge import formats
from tests.handlers.conftest import KEY, SESSION

WIDE = "fake:rp-20k"
CAPS = [formats.TOOL_NAME, formats.RECALL_CAPABILITY, formats.PROMPT_CACHE_CAPABILITY]
PATHS = {"/v1/chat/completions": (rp.chat_body, "messages"),
         "/v1/messages": (rp.messages_body, "messages")}


def turns(make, key, n):
    full = make(n, model=WIDE, capabilities=CAPS)
    items = full[key]
    users = [i for i, m in enumerate(items) if m.get("role") == "user" and isinstance(m.get("content"), str)]
    for t in users[1:]:
        body = {**full, key: items[:t + 1]}
        body[key][-1] = {**items[t], "content": items[t]["content"] + " Aurore, the lantern?"}
        yield body


@pytest.mark.parametrize("path", list(PATHS))
def test_a_growing_chat_writes_only_at_steps_and_keeps_its_prefix(edge, headers, path):
    make, key = PATHS[path]
    edge.set_model(WIDE, 20000 + 200 + 256, 200)
    before = prev_ids = None
    named, steps, quiet, recalled = {}, 0, 0, 0
    for body in turns(make, key, 80):
        puts, rows = edge.bucket.ops["put"], edge.page_rows()
        r = edge.request("POST", path, headers, body)
        assert r.status == 200, r.body
        sent = edge.sent[-1].body
        assert b"multillm_context_prompt_cache" not in sent and b'"capabilities"' not in sent
        ids = [p["page_id"] for p in r.json().get("context_pages", [])]
        if not ids:
            continue
        named.update(dict.fromkeys(ids))
        recalled += bool(r.json()["context_recall"])
        if prev_ids is not None and set(ids) == set(prev_ids):      # between steps
            quiet += 1
            assert edge.bucket.ops["put"] == puts and edge.page_rows() == rows
            assert "rows_written" not in edge.logs[-1]
            assert sent.startswith(stable_prefix(before, key, client=prev_body[key]))
        elif prev_ids is not None:
            steps += 1
            assert edge.bucket.ops["put"] == puts + 1 and edge.page_rows() > rows
        before, prev_ids, prev_body = sent, ids, body
        edge.clock += 5
    assert steps >= 2 and quiet >= 3 * steps and recalled >= quiet // 2
    for page_id in named:
        got = edge.request("GET", f"/v1/context/pages/{page_id}?roleplay_session_id={SESSION}",
                           {"Authorization": f"Bearer {KEY}"})
        assert got.status == 200
        body = base64.b64decode(got.json()["body_base64"])
        assert json.loads(body) == got.json()["messages"]


def test_chat_to_a_provider_declaring_cache_breakpoints_gets_the_anchors_as_content_parts(headers):
    """docs/design.md §5.7: `"cache_breakpoints": true` in a PROVIDERS entry (a router to
    Claude) — the chat plan carries the marker's and the window's anchors as content parts;
    the same request to a provider without the setting gets none."""
    from devkit.plans import is_recall, marker_content, marker_ids
    from multillm_edge.formats import breakpoints as bp, chat
    from tests.support.inprocess import LocalEdge
    providers = json.loads(rp.edge_vars("http://provider.test")["PROVIDERS"])
    providers["router"] = {**providers["fake"], "cache_breakpoints": True}
    with LocalEdge(rp.edge_vars("http://provider.test", PROVIDERS=json.dumps(providers))) as edge:
        edge.seed_player("p_router", KEY, SESSION)
        sent = {}
        for model in ("router:rp-20k", WIDE):
            edge.set_model(model, 20000 + 200 + 256, 200)
            body = rp.chat_body(80, model=model, capabilities=CAPS)
            r = edge.request("POST", "/v1/chat/completions", headers, body)
            assert r.status == 200 and r.json()["context_pages"], r.body
            sent[model] = json.loads(edge.sent[-1].body)
        msgs = sent["router:rp-20k"]["messages"]
        [marker] = [m for m in msgs if marker_ids(marker_content(m))]
        assert marker == bp.marker(marker_content(marker))
        window = [m for m in msgs if not is_recall(m)][-2]     # before recall's message
        assert window == bp.anchored(body["messages"][-2], chat.ANCHOR_BLOCKS) != body["messages"][-2]
        assert bp.count(edge.sent[0].body) == 2
        assert b"cache_control" not in edge.sent[-1].body
