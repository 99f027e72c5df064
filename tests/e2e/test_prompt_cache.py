"""The prompt cache through the runner (Pyodide, real local D1 and R2; docs/design.md
§5.7): a chat grown turn by turn with `multillm_context_prompt_cache` and recall, in
Chat and Messages and as a stream. Each upstream request starts with the previous one's
bytes up to its window's end; the turns its boundary steps write pages; between steps
0 R2 puts and 0 D1 rows; every page named retrieves byte for byte."""

import base64
import json

import pytest

from devkit import roleplay as rp
from devkit.fakes import FakeServer, Reply
from devkit.plans import stable_prefix
from devkit.runner import Edge
from tests.e2e.test_generation import provider_reply

MODEL = "fake:rp-cache"
WINDOW = 9000
CAPS = ["multillm_context_retrieve", "multillm_context_recall", "multillm_context_prompt_cache"]
SSE = [b'data: {"choices":[{"delta":{"content":"Yes"}}]}\n\n', b"data: [DONE]\n\n"]
CASES = {"chat": ("/v1/chat/completions", rp.chat_body, False),
         "messages": ("/v1/messages", rp.messages_body, False),
         "chat stream": ("/v1/chat/completions", rp.chat_body, True)}


@pytest.fixture(scope="module")
def provider():
    with FakeServer(provider_reply) as server:
        yield server


@pytest.fixture(scope="module")
def edge(provider, tmp_path_factory):
    with Edge(tmp_path_factory.mktemp("cache"), vars=rp.edge_vars(provider.url)) as edge:
        rp.set_model(edge, MODEL, WINDOW, 200)
        yield edge


def turns(make, tag: str, n: int):
    """The history up to each genuine user turn, that turn asking about the lantern."""
    full = make(n, model=MODEL, size=120, tag=tag, capabilities=CAPS)
    items = full["messages"]
    users = [i for i, m in enumerate(items) if m.get("role") == "user" and isinstance(m.get("content"), str)]
    for t in users[1:]:
        yield {**full, "messages": items[:t] + [{**items[t], "content": items[t]["content"] + " The lantern?"}]}


def send(edge, player, path, body, stream: bool) -> list:
    """The page ids the answer names (a stream: its leading comment line)."""
    if not stream:
        r = edge.client.post(path, json=body, headers=player.headers())
        assert r.status_code == 200, r.text
        return [p["page_id"] for p in r.json().get("context_pages", [])]
    with edge.client.stream("POST", path, json=body | {"stream": True}, headers=player.headers()) as r:
        got = b"".join(r.iter_raw())
    assert r.status_code == 200
    line = next((ln for ln in got.split(b"\n") if ln.startswith(b": multillm-context-pages ")), None)
    return line.split(b" ", 2)[2].decode().split(",") if line else []


@pytest.mark.parametrize("case", list(CASES))
def test_a_growing_chat_keeps_its_prefix_and_writes_only_at_steps(edge, provider, case):
    path, make, stream = CASES[case]
    player = rp.new_player(edge)
    provider.reply = Reply(headers=[("content-type", "text/event-stream")], chunks=SSE) \
        if stream else provider_reply
    before = prev = None
    named, steps, quiet = set(), 0, 0
    for body in turns(make, "PC" + case[:2], 48):
        s0 = edge.stats()
        ids = send(edge, player, path, body, stream)
        d = {k: v - s0[k] for k, v in edge.stats().items()}
        sent = provider.received[-1].body
        assert b"multillm_context_prompt_cache" not in sent
        if ids and prev is not None:
            if set(ids) == set(prev):                       # between steps
                quiet += 1
                assert (d["r2_puts"], d["d1_rows_written"]) == (0, 0)
                assert sent.startswith(stable_prefix(before, client=prev_body["messages"]))
            else:                                           # a step: its pages written
                steps += 1
                assert d["r2_puts"] == 1 and d["d1_rows_written"] >= 1
        named.update(ids)
        before, prev, prev_body = sent, ids or None, body
    assert steps >= 2 and quiet >= 2 * steps
    for page_id in named:
        got = edge.client.get(f"/v1/context/pages/{page_id}", params={"roleplay_session_id": player.session},
                              headers={"Authorization": f"Bearer {player.key}"})
        assert got.status_code == 200
        stored = rp.stored_page(edge, page_id)
        assert base64.b64decode(got.json()["body_base64"]) == stored
        assert json.loads(stored) == got.json()["messages"]
