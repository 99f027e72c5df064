"""The official `openai` SDK (Chat Completions and Responses) against the roleplay edge."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.clients.conftest import (CAPS, EXCHANGES, MANY_EXCHANGES, MANY_SIZE, MAX_TOKENS, MODEL,
                                    REPLY_TEXT, WIDE_MODEL, check_context_pages,
                                    check_upstream, header_page_ids, stream_page_ids, tee_http_client)
from devkit import roleplay as rp

pytestmark = pytest.mark.slow


@pytest.fixture
def client(edge, roleplayer):
    c = openai.OpenAI(api_key=roleplayer.key, base_url=edge.url + "/v1", max_retries=0, timeout=60,
                      default_headers={"X-Roleplay-Session-ID": roleplayer.session})
    yield c
    c.close()


def chat_markers(body):
    return [m["content"] for m in body["messages"] if m.get("role") == "user"]


def chat_tools(body):
    return body.get("tools") or []


def responses_markers(body):
    return [it["content"] for it in body["input"] if it.get("role") == "user"]


def responses_tools(body):
    return body.get("tools") or []


def upstream(provider):
    assert len(provider.received) == 1, [r.path for r in provider.received]
    return provider.received[0]


# --- Chat Completions ---------------------------------------------------------

def test_chat_completion_pages_a_long_roleplay(client, provider, roleplayer):
    messages = rp.chat_body(EXCHANGES, tag="OC")["messages"]
    completion = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=MAX_TOKENS,
                                                extra_body=CAPS)
    assert completion.choices[0].message.content == REPLY_TEXT
    assert completion.model == MODEL
    pages = completion.model_extra["context_pages"]
    assert completion.to_dict()["context_pages"] == pages
    ids = check_context_pages(pages, "chat")
    sent = check_upstream(upstream(provider), "chat", model=MODEL, max_tokens_field="max_tokens",
                          max_tokens=MAX_TOKENS, roleplay_key=roleplayer.key, marker_texts=chat_markers,
                          tools=chat_tools, page_ids=ids, stream=False)
    assert len(sent["messages"]) < len(messages)
    # The system prompt and the latest turn travel untouched.
    assert sent["messages"][0] == messages[0] and sent["messages"][-1] == messages[-1]


def test_chat_completion_raw_response_carries_the_pages_header(client, provider):
    messages = rp.chat_body(EXCHANGES, tag="OR")["messages"]
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages,
                                                           max_tokens=MAX_TOKENS, extra_body=CAPS)
    completion = raw.parse()
    ids = check_context_pages(completion.model_extra["context_pages"], "chat")
    assert header_page_ids(raw.headers) == ids


def test_chat_completion_stream_yields_the_full_text(client, provider, roleplayer):
    messages = rp.chat_body(EXCHANGES, tag="OS")["messages"]
    with client.chat.completions.with_streaming_response.create(
            model=MODEL, messages=messages, max_tokens=MAX_TOKENS, stream=True, extra_body=CAPS) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        ids = header_page_ids(resp.headers)
        chunks = list(resp.parse())
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == REPLY_TEXT
    assert chunks[-1].choices[0].finish_reason == "stop"
    check_upstream(upstream(provider), "chat", model=MODEL, max_tokens_field="max_tokens",
                   max_tokens=MAX_TOKENS, roleplay_key=roleplayer.key, marker_texts=chat_markers,
                   tools=chat_tools, page_ids=ids, stream=True)


def test_chat_completion_plain_stream_iterates(client, provider):
    """`create(stream=True)` without wrappers: what most roleplay frontends call."""
    messages = rp.chat_body(EXCHANGES, tag="OP")["messages"]
    stream = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=MAX_TOKENS,
                                            stream=True, extra_body=CAPS)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == REPLY_TEXT
    assert header_page_ids(stream.response.headers)


# --- Responses ----------------------------------------------------------------

def test_responses_pages_a_long_roleplay(client, provider, roleplayer):
    body = rp.responses_body(EXCHANGES, tag="ON")
    response = client.responses.create(model=MODEL, input=body["input"], instructions=body["instructions"],
                                       max_output_tokens=MAX_TOKENS, extra_body=CAPS)
    assert response.output_text == REPLY_TEXT
    assert response.model == MODEL
    pages = response.model_extra["context_pages"]
    assert response.to_dict()["context_pages"] == pages
    ids = check_context_pages(pages, "responses")
    sent = check_upstream(upstream(provider), "responses", model=MODEL,
                          max_tokens_field="max_output_tokens", max_tokens=MAX_TOKENS,
                          roleplay_key=roleplayer.key, marker_texts=responses_markers,
                          tools=responses_tools, page_ids=ids, stream=False)
    assert sent["instructions"] == body["instructions"]
    assert len(sent["input"]) < len(body["input"]) and sent["input"][-1] == body["input"][-1]


def test_responses_stream_yields_the_full_text(client, provider, roleplayer):
    body = rp.responses_body(EXCHANGES, tag="OT")
    with client.responses.with_streaming_response.create(
            model=MODEL, input=body["input"], instructions=body["instructions"],
            max_output_tokens=MAX_TOKENS, stream=True, extra_body=CAPS) as resp:
        ids = header_page_ids(resp.headers)
        events = list(resp.parse())
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == REPLY_TEXT
    assert events[-1].response.output_text == REPLY_TEXT
    check_upstream(upstream(provider), "responses", model=MODEL, max_tokens_field="max_output_tokens",
                   max_tokens=MAX_TOKENS, roleplay_key=roleplayer.key, marker_texts=responses_markers,
                   tools=responses_tools, page_ids=ids, stream=True)


def test_responses_stream_helper_final_response(client, provider):
    """The SDK's `responses.stream()` helper accumulates events into a final response."""
    body = rp.responses_body(EXCHANGES, tag="OH")
    with client.responses.stream(model=MODEL, input=body["input"], max_output_tokens=MAX_TOKENS,
                                 extra_body=CAPS) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == REPLY_TEXT and final.output_text == REPLY_TEXT


# --- Errors the SDK surfaces --------------------------------------------------

def test_window_exceeded_is_a_413_the_sdk_classifies(client, provider):
    messages = rp.chat_body(4, tag="OX", new_turn="Too long. " * 1500)["messages"]
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=MAX_TOKENS,
                                       extra_body=CAPS)
    e = caught.value
    assert e.status_code == 413 and e.code == "context_window_exceeded"
    assert e.type == "invalid_request_error"
    assert "context" in e.message.lower()
    assert provider.received == []


def test_wrong_roleplay_key_is_an_authentication_error(edge, roleplayer, provider):
    c = openai.OpenAI(api_key="rpk_not-a-key", base_url=edge.url + "/v1", max_retries=0,
                      default_headers={"X-Roleplay-Session-ID": roleplayer.session})
    with pytest.raises(openai.AuthenticationError) as caught:
        c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                  max_tokens=MAX_TOKENS, extra_body=CAPS)
    assert caught.value.status_code == 401
    assert isinstance(caught.value.body, dict) and caught.value.code
    assert provider.received == []


# --- Paged streams of 200+ pages: the page list rides in a leading SSE comment -------

@pytest.fixture
def tee_client(edge, roleplayer):
    http_client, raw = tee_http_client(httpx)
    c = openai.OpenAI(api_key=roleplayer.key, base_url=edge.url + "/v1", max_retries=0,
                      http_client=http_client,
                      default_headers={"X-Roleplay-Session-ID": roleplayer.session})
    yield c, raw
    c.close()


def test_chat_stream_with_over_200_pages_parses_and_lists_every_page(tee_client, provider, roleplayer):
    client, raw = tee_client
    messages = rp.one_page_each("chat", rp.chat_body(MANY_EXCHANGES, size=MANY_SIZE, tag="OM"))["messages"]
    stream = client.chat.completions.create(model=WIDE_MODEL, messages=messages, max_tokens=MAX_TOKENS,
                                            stream=True, extra_body=CAPS)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == REPLY_TEXT
    ids = stream_page_ids(bytes(raw), stream.response.headers)
    check_upstream(upstream(provider), "chat", model=WIDE_MODEL, max_tokens_field="max_tokens",
                   max_tokens=MAX_TOKENS, roleplay_key=roleplayer.key, marker_texts=chat_markers,
                   tools=chat_tools, page_ids=ids, stream=True)


def test_responses_stream_with_over_200_pages_parses_and_lists_every_page(tee_client, provider, roleplayer):
    client, raw = tee_client
    body = rp.one_page_each("responses", rp.responses_body(MANY_EXCHANGES, size=MANY_SIZE, tag="OW"))
    stream = client.responses.create(model=WIDE_MODEL, input=body["input"], instructions=body["instructions"],
                                     max_output_tokens=MAX_TOKENS, stream=True, extra_body=CAPS)
    events = list(stream)
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert events[-1].response.output_text == REPLY_TEXT
    ids = stream_page_ids(bytes(raw), stream.response.headers)
    check_upstream(upstream(provider), "responses", model=WIDE_MODEL, max_tokens_field="max_output_tokens",
                   max_tokens=MAX_TOKENS, roleplay_key=roleplayer.key, marker_texts=responses_markers,
                   tools=responses_tools, page_ids=ids, stream=True)
