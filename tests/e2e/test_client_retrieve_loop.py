"""The README's client loop (examples/retrieve_loop.py) against the runner: the official
`openai` SDK sends a long roleplay, the (fake) model calls multillm_context_retrieve
with a real page id (a block page, several exchanges, larger than the window can take
back whole) and an exchange, the client fetches that exchange from the edge and the
second upstream request carries its messages exactly."""

from __future__ import annotations

import json
import secrets
import threading

import httpx
import openai
import pytest

from examples.retrieve_loop import TOOL_NAME, run_turn
from devkit.plans import marker_ids
from devkit import roleplay as rp
from devkit.fakes import FakeServer, Reply
from devkit.runner import Edge
from tests.support.examples import reported, run_example

MODEL = "fake:rp-small"
FINAL = "Aurore remembers the lantern by the river."


def completion(message: dict, finish: str) -> Reply:
    doc = {"id": "chatcmpl-" + secrets.token_hex(4), "object": "chat.completion", "created": 0,
           "model": "rp-small", "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    return Reply(chunks=[json.dumps(doc).encode()])


class ScriptedModel:
    """First request: a tool call naming `pick(page_ids)`; later: a final text."""

    def __init__(self):
        self.pick = lambda ids: ids[0]
        self.exchange = None               # the `exchange` argument, None: not given
        self.asked: list[str] = []
        self.call_id = "call_" + secrets.token_hex(4)
        self._lock = threading.Lock()

    def __call__(self, rec) -> Reply:
        with self._lock:
            body = rec.json()
            ids = [pid for m in body["messages"] if m.get("role") == "user"
                   for pid in (marker_ids(m.get("content")) or [])]
            if not any(m.get("role") == "tool" and m.get("tool_call_id") == self.call_id
                       for m in body["messages"]):
                page_id = self.pick(ids)
                self.asked.append(page_id)
                return completion({"role": "assistant", "content": None, "tool_calls": [
                    {"id": self.call_id, "type": "function",
                     "function": {"name": TOOL_NAME, "arguments": self.arguments(page_id)}}]},
                    "tool_calls")
            return completion({"role": "assistant", "content": FINAL}, "stop")

    def arguments(self, page_id: str) -> str:
        args = {"page_id": page_id}
        if self.exchange is not None:
            args["exchange"] = self.exchange
        return json.dumps(args)


@pytest.fixture(scope="module")
def provider():
    with FakeServer() as server:
        yield server


@pytest.fixture(scope="module")
def edge(provider, tmp_path_factory):
    with Edge(tmp_path_factory.mktemp("retrieve_loop"), vars=rp.edge_vars(provider.url)) as edge:
        rp.set_model(edge, MODEL, 6000, 1000)
        yield edge


@pytest.fixture
def model(provider):
    provider.clear()
    provider.reply = ScriptedModel()
    return provider.reply


@pytest.fixture
def player(edge):
    p = rp.new_player(edge)
    client = openai.OpenAI(api_key=p.key, base_url=edge.url + "/v1", max_retries=0, timeout=60)
    yield p.key, p.session, client
    client.close()


def contiguous(haystack: list, needle: list) -> bool:
    return any(haystack[i:i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))


@pytest.mark.parametrize("exchange", [None, 3])
def test_tool_call_is_executed_and_the_exchange_fed_back_exactly(edge, provider, model, player, exchange):
    key, sid, client = player
    model.exchange = exchange
    # the largest page the marker names: a block (a run's head is single pages, §5.7)
    model.pick = lambda ids: max(ids, key=lambda i: len(rp.stored_page(edge, i)))
    messages = rp.chat_body(30, tag="LOOP")["messages"]
    original = json.loads(json.dumps(messages))
    reply = run_turn(client, edge.url, key, sid, messages, model=MODEL, max_tokens=200)

    assert reply.choices[0].message.content == FINAL
    assert len(provider.received) == 2
    first, second = (r.json() for r in provider.received)
    [page_id] = model.asked
    assert page_id in {m_id for m in first["messages"] if m.get("role") == "user"
                       for m_id in (marker_ids(m.get("content")) or [])}

    stored = rp.stored_page(edge, page_id)
    assert contiguous(original, json.loads(stored))  # exchanges the client really sent
    # A block: the whole page would not fit back into the 6,000-token window.
    assert len(rp.page_exchanges(stored)) >= 3 and len(stored) > 5000
    wanted = rp.page_exchanges(stored)[(exchange or 1) - 1]
    restored = json.loads(wanted)
    assert restored[0]["role"] == "user"
    # The second upstream request: the assistant tool call, then the tool result whose
    # content is exactly that exchange (the original items, byte-exact).
    calls = [m for m in second["messages"] if m.get("role") == "assistant" and m.get("tool_calls")
             and m["tool_calls"][0]["id"] == model.call_id]
    assert calls and calls[0]["tool_calls"][0]["function"] == {
        "name": TOOL_NAME, "arguments": model.arguments(page_id)}
    [tool_msg] = [m for m in second["messages"] if m.get("role") == "tool"
                  and m.get("tool_call_id") == model.call_id]
    assert tool_msg["content"].encode("utf-8") == wanted
    assert json.loads(tool_msg["content"]) == restored
    idx = second["messages"].index(tool_msg)
    assert second["messages"][idx - 1] == calls[0]
    # The client's history grew by exactly those two messages.
    assert messages[:len(original)] == original
    assert messages[len(original):] == [calls[0], tool_msg]
    # The roleplay key never went upstream.
    for rec in provider.received:
        assert key not in json.dumps(rec.headers) and key.encode() not in rec.body


def test_unknown_page_comes_back_as_a_tool_error_and_the_turn_finishes(edge, provider, model, player):
    key, sid, client = player
    model.pick = lambda ids: "cp_" + "A" * 43
    messages = rp.chat_body(30, tag="LOOP2")["messages"]
    reply = run_turn(client, edge.url, key, sid, messages, model=MODEL, max_tokens=200)
    assert reply.choices[0].message.content == FINAL
    tool_msg = provider.received[1].json()["messages"][-1]
    assert tool_msg["role"] == "tool"
    assert json.loads(tool_msg["content"]) == {"error": "context_page_not_found", "status": 404}


def test_an_exchange_past_the_page_comes_back_as_a_tool_error(edge, provider, model, player):
    key, sid, client = player
    model.exchange = 999
    reply = run_turn(client, edge.url, key, sid, rp.chat_body(30, tag="LOOP4")["messages"],
                     model=MODEL, max_tokens=200)
    assert reply.choices[0].message.content == FINAL
    tool_msg = provider.received[1].json()["messages"][-1]
    assert tool_msg["role"] == "tool"
    assert json.loads(tool_msg["content"]) == {"error": "invalid_request", "status": 400}


def test_a_path_like_page_id_never_reaches_a_url(edge, provider, model, player):
    key, sid, client = player
    model.pick = lambda ids: "../../v1/roleplay/sessions"
    seen = []
    with httpx.Client(event_hooks={"request": [seen.append]}) as http:
        reply = run_turn(client, edge.url, key, sid, rp.chat_body(30, tag="LOOP3")["messages"],
                         model=MODEL, max_tokens=200, http=http)
    assert reply.choices[0].message.content == FINAL
    assert seen == []
    assert json.loads(provider.received[1].json()["messages"][-1]["content"]) == {"error": "invalid page_id"}


def test_the_example_runs_a_turn_from_the_command_line(edge, provider, model, tmp_path):
    """`python -m examples.retrieve_loop` (README: Examples): a session opened, the
    model's retrieve call run, the answer and the page count printed, the history
    file written back with the tool call, its result and the answer."""
    key, _ = rp.seed_principal(edge)
    history = tmp_path / "chat.json"
    earlier = rp.chat_body(30, tag="CLIR")["messages"][:-1]
    history.write_text(json.dumps(earlier))
    done = run_example("retrieve_loop", "--edge-url", edge.url, "--model", MODEL, "--max-tokens", "200",
                       "--history", str(history), "Which lantern?", key=key)
    assert done.returncode == 0, done.stderr
    text, notes = reported(done.stdout)
    assert text == FINAL and notes["session"][0].startswith("rps_")
    assert int(notes["pages in this request"][0]) > 0 and len(provider.received) == 2
    doc = json.loads(history.read_text())
    assert doc["session_id"] == notes["session"][0]       # kept with the history: the next run continues it
    saved = doc["messages"]
    [page_id] = model.asked
    assert saved[:len(earlier)] == earlier
    assert saved[len(earlier)] == {"role": "user", "content": "Which lantern?"}
    assert saved[-2]["content"].encode() == rp.page_exchanges(rp.stored_page(edge, page_id))[0]
    assert saved[-1] == {"role": "assistant", "content": FINAL}
