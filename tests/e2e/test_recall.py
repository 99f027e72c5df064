"""Recall through the runner (Pyodide, real local D1 and R2; docs/design.md §6.2): the
moment the player asks about reaches the provider quoted in a message right before the
latest turn, in all three
formats and in a stream, and the answer names it; the named exchange retrieves byte
for byte."""

import base64
import json

import pytest

from devkit import roleplay as rp
from devkit.fakes import FakeServer, Reply
from devkit.plans import is_recall
from devkit.runner import Edge
from tests.e2e.test_generation import provider_reply

MODEL = "fake:rp-recall"
WINDOW = 12000
NEEDLE = "We buried the silver compass beneath the third stone of the old mill."
ASK = "Where did we bury the silver compass, by the old mill?"
CAPS = ["multillm_context_retrieve", "multillm_context_recall"]
MAKERS = {"/v1/chat/completions": (rp.chat_body, "messages"),
          "/v1/responses": (rp.responses_body, "input"),
          "/v1/messages": (rp.messages_body, "messages")}


@pytest.fixture(scope="module")
def provider():
    with FakeServer(provider_reply) as server:
        yield server


@pytest.fixture(scope="module")
def edge(provider, tmp_path_factory):
    with Edge(tmp_path_factory.mktemp("recall"), vars=rp.edge_vars(provider.url)) as edge:
        rp.set_model(edge, MODEL, WINDOW, 1000)
        yield edge


def asking(path: str, tag: str) -> dict:
    make, key = MAKERS[path]
    body = make(30, model=MODEL, tag=tag, capabilities=CAPS)
    users = [i for i, m in enumerate(body[key]) if m.get("role") == "user"
             and isinstance(m.get("content"), str)]
    body[key][users[4]]["content"] = NEEDLE + " " + body[key][users[4]]["content"]
    body[key][-1] = {"role": "user", "content": ASK}
    return body


@pytest.mark.parametrize("path", list(MAKERS))
def test_the_moment_reaches_the_provider_and_is_retrievable(edge, provider, path):
    player = rp.new_player(edge)
    provider.clear()
    provider.reply = provider_reply
    r = edge.client.post(path, json=asking(path, "E" + path[-4:]), headers=player.headers())
    assert r.status_code == 200, r.text
    [moment] = r.json()["context_recall"]
    assert r.headers["x-multillm-context-recall-count"] == "1"
    sent = provider.received[-1]
    assert len(sent.body) <= WINDOW - 200 - 256
    items = json.loads(sent.body)[MAKERS[path][1]]
    assert is_recall(items[-2]) and items[-1]["content"] == ASK     # right before the latest turn
    text = items[-2]["content"]
    assert f"[page_id {moment['page_id']}, exchange {moment['exchange']}]" in text
    assert "user: " + NEEDLE in text
    got = edge.client.get(f"/v1/context/pages/{moment['page_id']}",
                          params={"roleplay_session_id": player.session, "exchange": moment["exchange"]},
                          headers={"Authorization": f"Bearer {player.key}"})
    assert got.status_code == 200
    assert NEEDLE in base64.b64decode(got.json()["body_base64"]).decode()


def test_a_stream_names_the_moment_in_its_comment_line(edge, provider):
    player = rp.new_player(edge)
    events = [b'data: {"choices":[{"delta":{"content":"Yes"}}]}\n\n', b"data: [DONE]\n\n"]
    provider.reply = Reply(headers=[("content-type", "text/event-stream")], chunks=events)
    body = asking("/v1/chat/completions", "ES") | {"stream": True}
    with edge.client.stream("POST", "/v1/chat/completions", json=body, headers=player.headers()) as r:
        got = b"".join(r.iter_raw())
    lines = got.split(b"\n\n")
    [line] = [ln for ln in lines if ln.startswith(b": multillm-context-recall ")]
    page_id, exchange = line.split(b" ")[2].decode().split(":")
    assert page_id in r.headers["x-multillm-context-pages"] and int(exchange) >= 1
    assert got.endswith(b"".join(events))
