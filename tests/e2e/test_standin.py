"""The stand-in provider `npm start` serves with no provider key (README: Quick start),
through the runner (`EDGE_STANDIN=1`): listed for the key, answering the three formats
streamed or not, its reply telling what reached it — checked against what the edge
stored — and answering a context tool call when the latest message names the tool."""

import json

import pytest

from devkit import roleplay as rp
from devkit import standin
from devkit.fakes import FakeServer
from devkit.runner import Edge
from tests.support.standin import standin_edge
from tools import long_chat

MODEL = standin.MODEL
BODIES = {"chat": rp.chat_body, "responses": rp.responses_body, "messages": rp.messages_body}
PATHS = {fmt: path for path, fmt in standin.FORMATS.items()}
ITEMS = {"chat": "messages", "responses": "input", "messages": "messages"}


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    """A runner with no provider at all in PROVIDERS: only the stand-in serves."""
    with standin_edge(tmp_path_factory.mktemp("standin")) as e:
        yield e


@pytest.fixture
def player(edge):
    return rp.new_player(edge)


def body_for(fmt: str, latest: str | None = None, **extra) -> dict:
    body = BODIES[fmt](40, model=MODEL, tag=fmt[:2].upper(), **extra)
    if latest is not None:
        body[ITEMS[fmt]][-1] = {"role": "user", "content": latest}
    return body


def sse(raw: bytes) -> tuple[list[str], list[dict]]:
    """A stream → (its comment lines, its data documents)."""
    comments, docs = [], []
    for block in raw.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith(":"):
                comments.append(line[1:].strip())
            elif line.startswith("data: ") and line != "data: [DONE]":
                docs.append(json.loads(line[6:]))
    return comments, docs


def streamed_text(fmt: str, docs: list[dict]) -> str:
    if fmt == "chat":
        return "".join(d["choices"][0]["delta"].get("content") or "" for d in docs if d["choices"])
    kind, field = ("response.output_text.delta", "delta") if fmt == "responses" else ("content_block_delta", "delta")
    return "".join(d[field] if fmt == "responses" else d[field].get("text", "") for d in docs if d["type"] == kind)


def reply_text(fmt: str, doc: dict) -> str:
    if fmt == "chat":
        return doc["choices"][0]["message"]["content"]
    if fmt == "responses":
        return "".join(p["text"] for it in doc["output"] if it["type"] == "message" for p in it["content"])
    return "".join(b["text"] for b in doc["content"] if b["type"] == "text")


def reached(edge, sent: dict, fmt: str, page_ids: list[str]) -> int:
    """How many items the provider got: those sent, less the stored ones, plus the marker."""
    stored = sum(len(json.loads(rp.stored_page(edge, p))) for p in page_ids)
    return len(sent[ITEMS[fmt]]) - stored + 1


def test_the_demo_key_lists_the_stand_in(edge, player):
    r = edge.client.get("/v1/models", headers={"Authorization": f"Bearer {player.key}"})
    assert r.status_code == 200 and [m["id"] for m in r.json()["data"]] == [MODEL]
    assert any(log.get("runner") == "standin" and log.get("served") is True for log in edge.logs())


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("fmt", ["chat", "responses", "messages"])
def test_the_stand_in_says_what_reached_it(edge, player, fmt, stream):
    body = body_for(fmt, stream=stream)
    r = edge.client.post(PATHS[fmt], headers=player.headers(), json=body)
    assert r.status_code == 200, r.text
    if stream:
        assert r.headers["content-type"].startswith("text/event-stream")
        comments, docs = sse(r.content)
        page_ids = comments[0].removeprefix("multillm-context-pages ").split(",")
        text = streamed_text(fmt, docs)
    else:
        doc = r.json()
        page_ids = [p["page_id"] for p in doc["context_pages"]]
        text = reply_text(fmt, doc)
    latest = body[ITEMS[fmt]][-1]["content"]
    assert page_ids and text == (
        f"[stand-in] {reached(edge, body, fmt, page_ids)} messages reached me; "
        f"a marker naming {len(page_ids)} page handles; 0 recalled moments; "
        f"latest user message: {json.dumps(latest, ensure_ascii=False)}.")


def test_a_short_chat_reaches_it_whole(edge, player):
    r = edge.client.post("/v1/chat/completions", headers=player.headers(), json={
        "model": MODEL, "messages": [{"role": "user", "content": "Hello, Aurore."}]})
    assert r.json()["choices"][0]["message"]["content"] == (
        '[stand-in] 1 message reached me; no marker; 0 recalled moments; latest user message: "Hello, Aurore.".')


def test_it_counts_the_moments_the_edge_recalled(edge, player):
    ask = "Aurore, tell me again about the spiral stones: who carved them?"
    body = {"model": MODEL, "max_tokens": 200,
            "capabilities": ["multillm_context_retrieve", "multillm_context_recall"],
            "messages": long_chat.history(40) + [{"role": "user", "content": ask}]}
    doc = edge.client.post("/v1/chat/completions", headers=player.headers(), json=body).json()
    recalled = doc["context_recall"]
    assert recalled and f"; {len(recalled)} recalled moment" in doc["choices"][0]["message"]["content"]


def tool_call(fmt: str, doc: dict) -> tuple[str, dict]:
    if fmt == "chat":
        [call] = doc["choices"][0]["message"]["tool_calls"]
        assert doc["choices"][0]["finish_reason"] == "tool_calls"
        return call["function"]["name"], json.loads(call["function"]["arguments"])
    if fmt == "responses":
        [call] = [it for it in doc["output"] if it["type"] == "function_call"]
        return call["name"], json.loads(call["arguments"])
    [use] = [b for b in doc["content"] if b["type"] == "tool_use"]
    assert doc["stop_reason"] == "tool_use"
    return use["name"], use["input"]


@pytest.mark.parametrize("fmt", ["chat", "responses", "messages"])
def test_named_context_tools_are_called(edge, player, fmt):
    """Search for the words after the tool's name; retrieve the marker's oldest page,
    or the exchange the message names."""
    search = body_for(fmt, "multillm_context_search: the lanterns", capabilities=[
        "multillm_context_retrieve", "multillm_context_search"])
    doc = edge.client.post(PATHS[fmt], headers=player.headers(), json=search).json()
    assert tool_call(fmt, doc) == ("multillm_context_search", {"query": "the lanterns", "limit": 3})
    retrieve = body_for(fmt, "Please multillm_context_retrieve exchange 2")
    doc = edge.client.post(PATHS[fmt], headers=player.headers(), json=retrieve).json()
    oldest = doc["context_pages"][0]["page_id"]
    assert tool_call(fmt, doc) == ("multillm_context_retrieve", {"page_id": oldest, "exchange": 2})


def test_a_streamed_tool_call_and_the_turn_that_answers_it(edge, player):
    body = body_for("chat", "multillm_context_retrieve", stream=True)
    comments, docs = sse(edge.client.post("/v1/chat/completions", headers=player.headers(), json=body).content)
    deltas = [tc for d in docs for tc in d["choices"][0]["delta"].get("tool_calls") or []]
    arguments = json.loads("".join(tc["function"].get("arguments", "") for tc in deltas))
    assert deltas[0]["function"]["name"] == "multillm_context_retrieve"
    assert arguments == {"page_id": comments[0].removeprefix("multillm-context-pages ").split(",")[0], "exchange": 1}
    assert docs[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # The tool result goes back: the stand-in answers in text (a client's loop ends).
    body = body_for("chat", "multillm_context_retrieve")
    body["messages"] += [{"role": "assistant", "content": None, "tool_calls": [
                             {"id": deltas[0]["id"], "type": "function", "function": {
                                 "name": "multillm_context_retrieve", "arguments": json.dumps(arguments)}}]},
                         {"role": "tool", "tool_call_id": deltas[0]["id"], "content": "[]"}]
    text = edge.client.post("/v1/chat/completions", headers=player.headers(), json=body).json()[
        "choices"][0]["message"]["content"]
    assert text.endswith('latest user message: "multillm_context_retrieve"; the last message is a tool result.')


def test_an_operators_standin_provider_is_left_as_configured(tmp_path):
    """PROVIDERS that already names `standin` keeps its own: the runner serves none."""
    with FakeServer() as own:
        providers = {"standin": {"base_url": own.url + "/v1", "formats": ["chat"], "api_key_secret": "OWN_KEY"}}
        vars = {"CONTEXT_PAGING_ENABLED": "true", "MEDIA_SIGNING_SECRET": rp.SIGNING_SECRET,
                "PROVIDERS": json.dumps(providers), "OWN_KEY": "sk-own"}
        with Edge(tmp_path, vars=vars, extra_env={"EDGE_STANDIN": "1"}) as e:
            rp.set_model(e, MODEL, standin.WINDOW_TOKENS, standin.MAX_OUTPUT_TOKENS)
            p = rp.new_player(e)
            r = e.client.post("/v1/chat/completions", headers=p.headers(),
                              json={"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]})
            assert r.status_code == 200 and r.json() == {"ok": True}       # the operator's server answered
            assert own.received[0].headers["authorization"] == "Bearer sk-own"
            assert [log["served"] for log in e.logs() if log.get("runner") == "standin"] == [False]
