"""Both context tools executed by the official SDKs against the runner, in the three
formats (issue 18): a scripted model calls multillm_context_search, then
multillm_context_retrieve with the best hit's page and exchange, then answers; the
client loops of examples/context_tools.py and examples/context_tools_sdks.py run the
tools. Asserted: what reached the provider (both schemas, the marker naming both tools,
each tool result exactly the search answer's text and the retrieved exchange's bytes)
and the final answer the SDK returns."""

from __future__ import annotations

import json
import threading

import anthropic
import httpx
import openai
import pytest

from examples.context_tools import RETRIEVE, SEARCH, Session, run_turn
from examples.context_tools_sdks import messages_turn, responses_turn
from multillm_edge import formats
from tests.clients.conftest import (EXCHANGES, MAX_TOKENS, REPLIES, REPLY_TEXT, _response_doc,
                                    marker_page_ids)
from devkit import roleplay as rp
from devkit.plans import marker_content
from devkit.fakes import Reply
from tests.support.examples import reported, run_example

pytestmark = pytest.mark.slow

NEEDLE = 7        # the exchange the model looks for: its texts say "<tag>-u-0007", "<tag>-a-0007"
#: A window that still pages most of the history but leaves room in the newest turn for
#: the two tool calls and their results (the search answer, a retrieved exchange).
TOOLS_MODEL, TOOLS_WINDOW = "fake:rp-tools", 8000


# --- the scripted model: one tool call per request, in the request's own format ----------

def _after_last_user(items: list) -> list:
    """This turn's items: from the newest genuine user turn on."""
    return items[max(i for i, m in enumerate(items) if rp._genuine_user(m)):]


def tool_results(fmt: str, body: dict) -> list[tuple[str, str]]:
    """The tool results this turn's request carries, in order: (call id, text)."""
    turn = _after_last_user(body["input" if fmt == "responses" else "messages"])
    if fmt == "chat":
        return [(m["tool_call_id"], m["content"]) for m in turn if m.get("role") == "tool"]
    if fmt == "responses":
        return [(it["call_id"], it["output"]) for it in turn if it.get("type") == "function_call_output"]
    return [(p["tool_use_id"], p["content"]) for m in turn if m["role"] == "user" and isinstance(m["content"], list)
            for p in m["content"] if p.get("type") == "tool_result"]


def tool_calls(fmt: str, body: dict) -> list[tuple[str, str, dict]]:
    """The model's tool calls this turn's request sends back: (call id, tool, arguments)."""
    turn = _after_last_user(body["input" if fmt == "responses" else "messages"])
    if fmt == "chat":
        return [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                for m in turn if m.get("tool_calls") for c in m["tool_calls"]]
    if fmt == "responses":
        return [(it["call_id"], it["name"], json.loads(it["arguments"]))
                for it in turn if it.get("type") == "function_call"]
    return [(b["id"], b["name"], b["input"]) for m in turn if m["role"] == "assistant"
            for b in m["content"] if b.get("type") == "tool_use"]


def tool_call(fmt: str, model: str, call_id: str, name: str, args: dict) -> Reply:
    arguments = json.dumps(args)
    if fmt == "chat":
        doc = {"id": "chatcmpl-tool", "object": "chat.completion", "created": 0, "model": model,
               "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": None, "message": {
                   "role": "assistant", "content": None, "refusal": None, "tool_calls": [
                       {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}}]}
    elif fmt == "responses":
        doc = _response_doc(model, "completed", [{"type": "function_call", "id": "fc_" + call_id,
                                                  "call_id": call_id, "name": name,
                                                  "arguments": arguments, "status": "completed"}])
    else:
        doc = {"id": "msg_tool", "type": "message", "role": "assistant", "model": model,
               "content": [{"type": "tool_use", "id": call_id, "name": name, "input": args}],
               "stop_reason": "tool_use", "stop_sequence": None,
               "usage": {"input_tokens": 1200, "output_tokens": 20}}
    return Reply(chunks=[json.dumps(doc).encode()])


def first_hit(search_text: str) -> tuple[str, int]:
    """(page_id, exchange) of the best hit in the client's search text."""
    page_id, exchange = search_text.split("\n")[1].split(" ")[:2]
    return page_id, int(exchange.removeprefix("exchange="))


class ScriptedModel:
    """Search for ``query``, retrieve the best hit's exchange, then answer."""

    def __init__(self, fmt: str, query: str):
        self.fmt, self.query = fmt, query
        self.bodies: list[dict] = []
        self.calls: list[tuple[str, str, dict]] = []      # (call id, tool, arguments)
        self._lock = threading.Lock()

    def __call__(self, rec) -> Reply:
        with self._lock:
            body = rec.json()
            self.bodies.append(body)
            results = [text for _, text in tool_results(self.fmt, body)]
            if len(results) >= 2:
                return REPLIES[rec.path](body["model"], False)
            if results:
                page_id, exchange = first_hit(results[0])
                name, args = RETRIEVE, {"page_id": page_id, "exchange": exchange}
            else:
                name, args = SEARCH, {"query": self.query, "limit": 3}
            call_id = f"call_{self.fmt}_{len(self.calls)}"
            self.calls.append((call_id, name, args))
            return tool_call(self.fmt, body["model"], call_id, name, args)


# --- fixtures ------------------------------------------------------------------------------

@pytest.fixture
def scripted(provider):
    def install(fmt: str, query: str) -> ScriptedModel:
        provider.reply = ScriptedModel(fmt, query)
        return provider.reply
    saved = provider.reply
    yield install
    provider.reply = saved


@pytest.fixture(scope="module", autouse=True)
def tools_model(edge):
    rp.set_model(edge, TOOLS_MODEL, TOOLS_WINDOW, 1000)


@pytest.fixture
def http():
    """The client's HTTP client for the tools → (it, the search answers it received)."""
    answers: list[dict] = []

    def keep(r: httpx.Response):
        if r.request.url.path == "/v1/context/search":
            r.read()
            answers.append(r.json())
    with httpx.Client(timeout=60, event_hooks={"response": [keep]}) as client:
        yield client, answers


def turn(fmt: str, edge, player: rp.Player, http: httpx.Client, tag: str):
    """One turn of a long roleplay through the format's SDK and client loop → (the
    final answer's text, the history the client sent, grown by its tool messages)."""
    if fmt == "chat":
        messages = rp.chat_body(EXCHANGES, tag=tag)["messages"]
        with openai.OpenAI(api_key=player.key, base_url=edge.url + "/v1", max_retries=0, timeout=60) as c:
            reply = run_turn(c, http, edge.url, player.key, Session(player.session), messages,
                             model=TOOLS_MODEL, max_tokens=MAX_TOKENS)
        return reply.choices[0].message.content, messages
    if fmt == "responses":
        body = rp.responses_body(EXCHANGES, tag=tag)
        with openai.OpenAI(api_key=player.key, base_url=edge.url + "/v1", max_retries=0, timeout=60) as c:
            reply = responses_turn(c, http, edge.url, player.key, player.session, body["input"], model=TOOLS_MODEL,
                                   instructions=body["instructions"], max_output_tokens=MAX_TOKENS)
        return reply.output_text, body["input"]
    body = rp.messages_body(EXCHANGES, tag=tag)
    with anthropic.Anthropic(api_key=player.key, base_url=edge.url, max_retries=0, timeout=60) as c:
        reply = messages_turn(c, http, edge.url, player.key, player.session, body["messages"], model=TOOLS_MODEL,
                              max_tokens=MAX_TOKENS, system=body["system"])
    return reply.content[0].text, body["messages"]


def search_text(doc: dict) -> str:
    """A search answer as the client's text: a count line, then one line per hit (page
    id, exchange, role, excerpt)."""
    pages, exchanges = doc["pages_searched"], doc.get("exchanges_searched")
    searched = f"{pages} pages" if exchanges is None else f"{exchanges} exchanges in {pages} pages"
    return "\n".join([f"{len(doc['data'])} stored exchanges match ({searched} searched):"] + [
        f"{h['page_id']} exchange={h['exchange']} {h['excerpt']['role']}: {h['excerpt']['text']}"
        for h in doc["data"]])


def markers(fmt: str, body: dict) -> list[str]:
    """The user texts: a marker is a string, or on Messages with the prompt cache one
    text block carrying the cache breakpoint (docs/design.md §5.7)."""
    items = body["input" if fmt == "responses" else "messages"]
    texts = [m.get("content") if isinstance(m.get("content"), str) else marker_content(m)
             for m in items if m.get("role") == "user"]
    return [t for t in texts if isinstance(t, str)]


# --- the test ------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["chat", "responses", "messages"])
def test_the_sdk_runs_search_then_retrieve_and_the_answer_arrives(fmt, edge, provider, roleplayer,
                                                                  scripted, http):
    tag = {"chat": "SC", "responses": "SR", "messages": "SM"}[fmt]
    query = f"{tag}-u-{NEEDLE:04d}"
    model = scripted(fmt, query)
    client, answers = http
    text, history = turn(fmt, edge, roleplayer, client, tag)
    assert text == REPLY_TEXT                                     # the final answer arrives
    assert len(provider.received) == 3 and len(model.calls) == 2
    first, second, third = model.bodies
    mod = formats.get(fmt)
    # 1. Paged, with both tools: their schemas in the format's shape, the marker naming both.
    for body in model.bodies:
        assert mod.tool_schema() in body["tools"] and mod.search_tool_schema() in body["tools"]
        assert "capabilities" not in body
    texts = [t for t in markers(fmt, first) if marker_page_ids([t])]
    assert texts and all(t.startswith(formats.MARKER_PREFIX_SEARCH) and SEARCH in t and RETRIEVE in t
                         for t in texts)
    ids = marker_page_ids(texts)
    # 2. The search's tool result is exactly the route's answer, as compact text.
    (search_id, name, args), (retrieve_id, name2, args2) = model.calls
    assert (name, args, name2) == (SEARCH, {"query": query, "limit": 3}, RETRIEVE)
    [(call_id, found)] = tool_results(fmt, second)
    assert call_id == search_id and tool_calls(fmt, second) == model.calls[:1]
    [answer] = answers
    assert found == search_text(answer)
    page_id, exchange = first_hit(found)
    best = answer["data"][0]
    assert (best["page_id"], best["exchange"]) == (page_id, exchange) and page_id in ids
    wanted = rp.page_exchanges(rp.stored_page(edge, page_id))[exchange - 1]
    needle = json.loads(wanted)[0]["content"]
    assert needle.startswith(query + " ")                          # the needle's exchange
    assert best["excerpt"]["role"] == "user" and query in best["excerpt"]["text"]
    assert best["excerpt"]["text"].strip("…") in needle           # verbatim
    # 3. The retrieval's tool result is exactly that exchange's stored bytes.
    assert args2 == {"page_id": page_id, "exchange": exchange}
    assert tool_results(fmt, third) == [(search_id, found), (retrieve_id, wanted.decode("utf-8"))]
    assert tool_calls(fmt, third) == model.calls
    # The client's history is what it sent last: grown by this turn's calls and results.
    assert _after_last_user(history) == _after_last_user(third["input" if fmt == "responses" else "messages"])
    for rec in provider.received:
        assert roleplayer.key.encode() not in rec.body and roleplayer.key not in json.dumps(rec.headers)


@pytest.mark.parametrize("fmt", ["responses", "messages"])
def test_the_sdks_example_runs_a_turn_from_the_command_line(fmt, edge, provider, roleplayer, scripted, tmp_path):
    """`python -m examples.context_tools_sdks --api <fmt>` (README: Examples): the SDK's
    turn with both tools run by the example, the answer printed, the history written back."""
    tag = {"responses": "CR", "messages": "CM"}[fmt]
    query = f"{tag}-u-{NEEDLE:04d}"
    model = scripted(fmt, query)
    body = rp.responses_body(EXCHANGES, tag=tag) if fmt == "responses" else rp.messages_body(EXCHANGES, tag=tag)
    items = body["input" if fmt == "responses" else "messages"]
    *earlier, last = items
    history = tmp_path / "chat.json"
    history.write_text(json.dumps(earlier))
    done = run_example("context_tools_sdks", "--api", fmt, "--edge-url", edge.url, "--model", TOOLS_MODEL,
                       "--session", roleplayer.session, "--max-tokens", str(MAX_TOKENS), "--history", str(history),
                       last["content"], key=roleplayer.key)
    assert done.returncode == 0, done.stderr
    text, notes = reported(done.stdout)
    assert text == REPLY_TEXT and notes["session"] == [roleplayer.session]
    assert [name for _, name, _ in model.calls] == [SEARCH, RETRIEVE] and len(provider.received) == 3
    doc = json.loads(history.read_text())
    assert doc["session_id"] == roleplayer.session
    saved = doc["messages"]
    assert saved[:len(earlier)] == earlier and saved[len(earlier)] == {"role": "user", "content": last["content"]}
    assert saved[-1] == {"role": "assistant", "content": REPLY_TEXT}
    assert tool_results(fmt, {"input": saved[:-1], "messages": saved[:-1]}) == tool_results(fmt, model.bodies[-1])
