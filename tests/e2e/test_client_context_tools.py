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
from devkit.runner import ROOT, Edge
from tests.support.examples import reported, run_example

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


# --- the examples from the command line (README: Examples) ---------------------------------

EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.py") if not p.stem.startswith("_"))


def test_every_example_is_listed():
    assert EXAMPLES == ["context_tools", "context_tools_sdks", "retrieve_loop"]


@pytest.mark.parametrize("as_file", [False, True], ids=["module", "file"])
@pytest.mark.parametrize("module", EXAMPLES)
def test_every_example_answers_help(module, as_file):
    """`python -m examples.<name> --help`, and `python examples/<name>.py --help` from the
    root (once a ModuleNotFoundError): the usage names the command and the key's variable."""
    done = run_example(module, "--help", as_file=as_file, timeout=60)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith(f"usage: python -m examples.{module} ")
    assert "--model MODEL" in done.stdout and "$ROLEPLAY_KEY" in done.stdout


def test_an_example_without_a_key_says_which_variable():
    done = run_example("context_tools", "--model", MODEL, "Hello", timeout=60)
    assert done.returncode == 2 and "set ROLEPLAY_KEY to your roleplay key" in done.stderr


def test_context_tools_runs_a_turn_from_the_command_line(edge, provider, tmp_path):
    """The README's line: a new session, the history file read, search then retrieve run
    by the example, the answer printed, the history written back with the whole turn."""
    key, principal = rp.seed_principal(edge)
    provider.clear()
    provider.reply = model = ScriptedModel(query="CLI-u-0012")
    history = tmp_path / "chat.json"
    earlier = rp.chat_history(30, tag="CLI")
    history.write_text(json.dumps(earlier))
    done = run_example("context_tools", "--edge-url", edge.url, "--model", MODEL, "--max-tokens", "200",
                       "--history", str(history), "What happened at 0012?", key=key)
    assert done.returncode == 0, done.stderr
    text, notes = reported(done.stdout)
    assert text == FINAL and len(model.bodies) == 3
    [session] = notes["session"]
    assert edge.sql("SELECT principal FROM roleplay_sessions WHERE session_id = ?1", session) == [{"principal": principal}]
    assert int(notes["pages in this request"][-1]) > 0
    doc = json.loads(history.read_text())
    assert doc["session_id"] == session                  # kept with the history: the next run continues it
    saved = doc["messages"]
    third = model.bodies[-1]["messages"]
    assert saved[:len(earlier)] == earlier and saved[-1] == {"role": "assistant", "content": FINAL}
    # the turn as the model last saw it: the new message, both tool calls and their results
    assert saved[len(earlier):-1] == third[third.index({"role": "user", "content": "What happened at 0012?"}):]
    assert [m["role"] for m in saved[len(earlier):]] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    # the same session again: the history grows, nothing is opened
    provider.reply = ScriptedModel()
    again = run_example("context_tools", "--edge-url", edge.url, "--model", MODEL, "--session", session,
                        "--history", str(history), "And then?", key=key)
    assert again.returncode == 0, again.stderr
    assert reported(again.stdout)[1]["session"] == [session]
    assert len(json.loads(history.read_text())["messages"]) == len(saved) + 2
