"""examples/context_tools.py against the runner with the official `openai` SDK: the
(fake) model calls multillm_context_search, then multillm_context_retrieve on the best
hit's page and exchange; the client runs both. A session at its allowance is replaced once and the turn sent
again with the oldest exchanges left out; with the window off the 413 is the SDK's."""

from __future__ import annotations

import json
import secrets
import threading
import time

import httpx
import openai
import pytest

from examples.context_tools import RETRIEVE, SEARCH, Session, _size, run_turn
from devkit import roleplay as rp
from devkit.fakes import FakeServer, Reply
from devkit.plans import marker_ids
from devkit.runner import Edge

MODEL = "fake:rp-small"
FINAL = "Aurore remembers the ford."


def completion(message: dict, finish: str) -> Reply:
    doc = {"id": "chatcmpl-" + secrets.token_hex(4), "object": "chat.completion", "created": 0,
           "model": "rp-small", "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    return Reply(chunks=[json.dumps(doc).encode()])


def tool_call(name: str, args: dict) -> Reply:
    return completion({"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_" + secrets.token_hex(4), "type": "function",
         "function": {"name": name, "arguments": json.dumps(args)}}]}, "tool_calls")


class ScriptedModel:
    """Search for `query`, retrieve the best hit (its page id and exchange), then answer."""

    def __init__(self, query: str | None = None):
        self.query = query
        self.bodies: list[dict] = []
        self._lock = threading.Lock()

    def __call__(self, rec) -> Reply:
        with self._lock:
            body = rec.json()
            self.bodies.append(body)
            last_user = max(i for i, m in enumerate(body["messages"]) if m.get("role") == "user")
            tools = [m for m in body["messages"][last_user:] if m.get("role") == "tool"]   # this turn's
            if self.query and not tools:
                return tool_call(SEARCH, {"query": self.query, "limit": 3})
            if self.query and len(tools) == 1:
                page_id, exchange = tools[0]["content"].split("\n")[1].split(" ")[:2]
                return tool_call(RETRIEVE, {"page_id": page_id, "exchange": int(exchange.removeprefix("exchange="))})
            return completion({"role": "assistant", "content": FINAL}, "stop")


@pytest.fixture(scope="module")
def provider():
    with FakeServer() as server:
        yield server


@pytest.fixture(scope="module")
def edge(provider, tmp_path_factory):
    with Edge(tmp_path_factory.mktemp("context_tools"), vars=rp.edge_vars(provider.url)) as edge:
        # room for the protected turn, both tools' schemas and every handle of 30 exchanges
        rp.set_model(edge, MODEL, 6500, 1000)
        yield edge


@pytest.fixture
def player(edge):
    p = rp.new_player(edge)
    client = openai.OpenAI(api_key=p.key, base_url=edge.url + "/v1", max_retries=0, timeout=60)
    with httpx.Client(timeout=60) as http:
        yield p, client, http
    client.close()


def fill_allowance(edge, principal: str, session_id: str):
    """A row counting 1 MiB toward the session's active bytes (managed: never a roleplay page)."""
    edge.sql("INSERT INTO context_pages (page_id, authority, principal, session_id, policy_revision, sha256, "
             "byte_length, r2_key, created_at, expires_at, signature) VALUES "
             "(?1, 'managed', ?2, ?3, 1, ?4, 1048576, 'filler', 0, ?5, 'x')",
             "cp_filler" + secrets.token_hex(4), principal, session_id, "0" * 64, int(time.time()) + 86400)


def test_search_then_retrieve_is_executed_and_the_figures_are_kept(edge, provider, player):
    p, client, http = player
    provider.clear()
    provider.reply = model = ScriptedModel(query="X-u-0012")
    messages = rp.chat_history(30, tag="X") + [{"role": "user", "content": "What happened at 0012?"}]
    session = Session(p.session)
    reply = run_turn(client, http, edge.url, p.key, session, messages, model=MODEL, max_tokens=200)
    assert reply.choices[0].message.content == FINAL
    first, second, third = model.bodies
    assert sorted(t["function"]["name"] for t in first["tools"]) == [RETRIEVE, SEARCH]
    hits = second["messages"][-1]["content"].split("\n")
    page_id, exchange = hits[1].split(" ")[:2]
    assert page_id in marker_ids(next(m["content"] for m in first["messages"] if marker_ids(m.get("content"))))
    assert "0012" in hits[1]
    # the tool result is exactly that exchange of the page, the one saying X-u-0012
    wanted = rp.page_exchanges(rp.stored_page(edge, page_id))[int(exchange.removeprefix("exchange=")) - 1]
    assert third["messages"][-1]["content"].encode() == wanted
    assert json.loads(wanted)[0]["content"].startswith("X-u-0012 ")
    assert set(session.figures) == {"active_bytes", "limit_bytes", "active_pages"}
    assert session.figures["limit_bytes"] == 1048576 and session.left_out == 0


def test_a_session_at_its_allowance_is_replaced_once_with_the_window_applied(edge, provider, player):
    p, client, http = player
    provider.clear()
    provider.reply = ScriptedModel()
    fill_allowance(edge, p.principal, p.session)
    messages = rp.chat_history(30, tag="W") + [{"role": "user", "content": "Onward?"}]
    session = Session(p.session)
    reply = run_turn(client, http, edge.url, p.key, session, messages, model=MODEL, share=0.01, max_tokens=200)
    assert reply.choices[0].message.content == FINAL
    assert session.id != p.session and session.window_limit == 1048576 and session.left_out > 0
    [req] = provider.received                 # the refused request never reached the model
    # What the model saw is the newest part only; the history itself kept everything.
    assert "W-greet-0000" not in req.body.decode() and len(messages) == 30 * 2 + 6 * 2 + 3
    kept = messages[1 + session.left_out:]    # after the system message, what was sent
    assert kept[0]["role"] == "user" and sum(_size(m) for m in kept) <= 0.01 * 1048576
    assert "W-a-0029" in req.body.decode()
    rows = edge.sql("SELECT page_id FROM context_pages WHERE session_id = ?1", session.id)
    assert not any(r["page_id"].startswith("cp_filler") for r in rows)


def test_window_off_the_413_is_the_sdks(edge, provider, player):
    p, client, http = player
    provider.clear()
    provider.reply = ScriptedModel()
    fill_allowance(edge, p.principal, p.session)
    session = Session(p.session)
    with pytest.raises(openai.APIStatusError) as e:
        run_turn(client, http, edge.url, p.key, session, rp.chat_history(30, tag="V") + [
            {"role": "user", "content": "Onward?"}], model=MODEL, window=False, max_tokens=200)
    assert e.value.status_code == 413 and e.value.body["code"] == "context_session_limit_exceeded"
    assert session.id == p.session and provider.received == []
