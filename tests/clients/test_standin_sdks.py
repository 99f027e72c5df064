"""The stand-in provider `npm start` serves (README: Quick start) as the official SDKs
read it, streamed and not, through the runner: a client pointed at `standin:roleplay`
gets the stand-in's report as its text and its tool calls as the SDK's own objects."""

import json

import anthropic
import openai
import pytest

from devkit import roleplay as rp
from devkit import standin
from tests.support.standin import standin_edge
from tools import long_chat

MODEL = standin.MODEL
ASK = "What now?"
CAPABILITIES = ["multillm_context_retrieve", "multillm_context_search"]


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    with standin_edge(tmp_path_factory.mktemp("standin-sdks")) as e:
        yield e


@pytest.fixture
def player(edge):
    return rp.new_player(edge)


def edge_fields(player) -> dict:
    return {"extra_body": {"capabilities": CAPABILITIES},
            "extra_headers": {"X-Roleplay-Session-ID": player.session}}


def chat(latest: str) -> list[dict]:
    return long_chat.history(40) + [{"role": "user", "content": latest}]


def as_input(messages: list[dict]) -> list[dict]:
    """The chat as Responses input (the system prompt goes to `instructions`)."""
    return [m for m in messages if m["role"] != "system"]


def paged_report(text: str) -> bool:
    return (text.startswith("[stand-in] ") and "; a marker naming " in text
            and text.endswith(f'latest user message: "{ASK}".'))


def test_openai_chat_streams_the_report(edge, player):
    client = openai.OpenAI(api_key=player.key, base_url=edge.url + "/v1", max_retries=0)
    stream = client.chat.completions.create(model=MODEL, messages=chat(ASK), stream=True, **edge_fields(player))
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert paged_report(text)


def test_openai_responses_streams_the_report_and_calls_a_tool(edge, player):
    client = openai.OpenAI(api_key=player.key, base_url=edge.url + "/v1", max_retries=0)
    events = list(client.responses.create(model=MODEL, input=as_input(chat(ASK)), instructions=long_chat.SYSTEM,
                                          stream=True, **edge_fields(player)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert paged_report(deltas) and events[-1].type == "response.completed"
    assert events[-1].response.output_text == deltas
    reply = client.responses.create(model=MODEL, input=as_input(chat("multillm_context_search: spiral stones")),
                                    **edge_fields(player))
    [call] = [it for it in reply.output if it.type == "function_call"]
    assert call.name == "multillm_context_search" and json.loads(call.arguments) == {"query": "spiral stones", "limit": 3}


def test_anthropic_messages_streams_the_report_and_calls_a_tool(edge, player):
    client = anthropic.Anthropic(api_key=player.key, base_url=edge.url, max_retries=0)
    with client.messages.stream(model=MODEL, max_tokens=200, system=long_chat.SYSTEM,
                                messages=as_input(chat(ASK)), **edge_fields(player)) as stream:
        assert paged_report(stream.get_final_text())
    with client.messages.stream(model=MODEL, max_tokens=200, messages=as_input(chat("multillm_context_retrieve")),
                                **edge_fields(player)) as stream:
        message = stream.get_final_message()
    [use] = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use" and use.name == "multillm_context_retrieve"
    assert use.input["page_id"].startswith("cp_") and use.input["exchange"] == 1
