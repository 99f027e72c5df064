"""Clients tier: the official `openai` and `anthropic` SDKs against the local runner.

One runner for the whole tier (starting one costs seconds), one fake provider that
answers in each wire format — complete JSON, or real SSE in the provider's own event
format sent in several chunks with small delays — and a fresh principal, key and
session per test so pages and allowances never leak between tests.
"""

from __future__ import annotations

import json
import re

import pytest

from devkit.plans import marker_ids
from multillm_edge import formats
from devkit import roleplay as rp
from devkit.fakes import FakeServer, Received, Reply
from devkit.runner import Edge

MODEL = "fake:rp-small"
WINDOW_TOKENS, MAX_OUTPUT = 6000, 1000
#: How many prior exchanges the clients send: far more than the small window holds.
EXCHANGES = 30
PAGE_ID = re.compile(r"cp_[A-Za-z0-9_-]{43}\Z")
CHUNK_DELAY = 0.02
#: A wider window, and a history long enough that it pages over 200 exchanges, each its
#: own page (``rp.one_page_each``: no blocks, docs/design.md §5.7): the page list
#: outgrows its 4 KiB header and travels only in the stream's comment line.
WIDE_MODEL = "fake:rp-wide"
MANY_EXCHANGES, MANY_SIZE = 260, 400
PAGE_LIST = b": multillm-context-pages "

#: The provider's reply, split into deltas; traceable and with non-ASCII text.
DELTAS = ["Aurore lifts ", "the lantern — ", "夜の森 is quiet; ", "she steps ", "forward. 🌙"]
REPLY_TEXT = "".join(DELTAS)


# ---------------------------------------------------------------------------
# The fake provider: one server, three wire formats, streaming or not
# ---------------------------------------------------------------------------

def _sse(event: str | None, data) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return (head + f"data: {text}\n\n").encode("utf-8")


def _usage_chat():
    return {"prompt_tokens": 1200, "completion_tokens": 20, "total_tokens": 1220}


def chat_reply(model: str, stream: bool) -> Reply:
    base = {"id": "chatcmpl-fake1", "created": 1764460800, "model": model}
    if not stream:
        doc = {**base, "object": "chat.completion",
               "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                            "message": {"role": "assistant", "content": REPLY_TEXT, "refusal": None}}],
               "usage": _usage_chat()}
        body = json.dumps(doc, ensure_ascii=False).encode()
        return Reply(chunks=[body[:40], body[40:]], delay=CHUNK_DELAY)
    chunk = {**base, "object": "chat.completion.chunk"}
    events = [_sse(None, {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                 "finish_reason": None}]})]
    events += [_sse(None, {**chunk, "choices": [{"index": 0, "delta": {"content": d}, "finish_reason": None}]})
               for d in DELTAS]
    events.append(_sse(None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    events.append(_sse(None, "[DONE]"))
    return Reply(headers=[("content-type", "text/event-stream")], chunks=events, delay=CHUNK_DELAY)


def _response_doc(model: str, status: str, output: list) -> dict:
    return {"id": "resp_fake1", "object": "response", "created_at": 1764460800, "status": status,
            "model": model, "output": output, "parallel_tool_calls": True, "tool_choice": "auto",
            "tools": [], "error": None, "incomplete_details": None, "instructions": None,
            "metadata": {}, "temperature": 1.0, "top_p": 1.0,
            "usage": {"input_tokens": 1200, "output_tokens": 20, "total_tokens": 1220,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}} if status == "completed" else None}


def _message_item(text: str, status: str = "completed") -> dict:
    content = [{"type": "output_text", "text": text, "annotations": []}] if text is not None else []
    return {"type": "message", "id": "msg_fake1", "status": status, "role": "assistant",
            "content": content}


def responses_reply(model: str, stream: bool) -> Reply:
    if not stream:
        body = json.dumps(_response_doc(model, "completed", [_message_item(REPLY_TEXT)]),
                          ensure_ascii=False).encode()
        return Reply(chunks=[body[:50], body[50:]], delay=CHUNK_DELAY)
    seq = iter(range(1000))
    ev = lambda kind, **f: _sse(kind, {"type": kind, "sequence_number": next(seq), **f})  # noqa: E731
    part = {"type": "output_text", "text": "", "annotations": []}
    events = [ev("response.created", response=_response_doc(model, "in_progress", [])),
              ev("response.in_progress", response=_response_doc(model, "in_progress", [])),
              ev("response.output_item.added", output_index=0,
                 item=_message_item(None, "in_progress")),
              ev("response.content_part.added", item_id="msg_fake1", output_index=0,
                 content_index=0, part=part)]
    events += [ev("response.output_text.delta", item_id="msg_fake1", output_index=0,
                  content_index=0, delta=d, logprobs=[]) for d in DELTAS]
    events += [ev("response.output_text.done", item_id="msg_fake1", output_index=0,
                  content_index=0, text=REPLY_TEXT, logprobs=[]),
               ev("response.content_part.done", item_id="msg_fake1", output_index=0,
                  content_index=0, part={**part, "text": REPLY_TEXT}),
               ev("response.output_item.done", output_index=0, item=_message_item(REPLY_TEXT)),
               ev("response.completed",
                  response=_response_doc(model, "completed", [_message_item(REPLY_TEXT)]))]
    return Reply(headers=[("content-type", "text/event-stream")], chunks=events, delay=CHUNK_DELAY)


def messages_reply(model: str, stream: bool) -> Reply:
    usage = {"input_tokens": 1200, "output_tokens": 20}
    if not stream:
        doc = {"id": "msg_fake1", "type": "message", "role": "assistant", "model": model,
               "content": [{"type": "text", "text": REPLY_TEXT}], "stop_reason": "end_turn",
               "stop_sequence": None, "usage": usage}
        body = json.dumps(doc, ensure_ascii=False).encode()
        return Reply(chunks=[body[:30], body[30:]], delay=CHUNK_DELAY)
    start = {"id": "msg_fake1", "type": "message", "role": "assistant", "model": model, "content": [],
             "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 1200, "output_tokens": 1}}
    events = [_sse("message_start", {"type": "message_start", "message": start}),
              _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text", "text": ""}}),
              _sse("ping", {"type": "ping"})]
    events += [_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "text_delta", "text": d}}) for d in DELTAS]
    events += [_sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
               _sse("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                      "usage": {"output_tokens": 20}}),
               _sse("message_stop", {"type": "message_stop"})]
    return Reply(headers=[("content-type", "text/event-stream")], chunks=events, delay=CHUNK_DELAY)


REPLIES = {"/v1/chat/completions": chat_reply, "/v1/responses": responses_reply,
           "/v1/messages": messages_reply}


def wire_reply(rec: Received) -> Reply:
    make = REPLIES.get(rec.path)
    if make is None or rec.method != "POST":
        return Reply(404, chunks=[b'{"error":{"message":"no such route"}}'])
    body = rec.json()
    return make(body.get("model", ""), bool(body.get("stream")))


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------

@pytest.fixture(scope="session")
def wire_provider():
    with FakeServer(wire_reply) as server:
        yield server


@pytest.fixture(scope="session")
def edge(wire_provider, tmp_path_factory):
    with Edge(tmp_path_factory.mktemp("clients"), vars=rp.edge_vars(wire_provider.url)) as edge:
        rp.set_model(edge, MODEL, WINDOW_TOKENS, MAX_OUTPUT)
        rp.set_model(edge, WIDE_MODEL, 50000, MAX_OUTPUT)
        yield edge


@pytest.fixture
def provider(wire_provider):
    wire_provider.clear()
    return wire_provider


CAPS = {"capabilities": ["multillm_context_retrieve"]}
MAX_TOKENS = 200


@pytest.fixture
def roleplayer(edge) -> rp.Player:
    return rp.new_player(edge)


# ---------------------------------------------------------------------------
# Shared checks
# ---------------------------------------------------------------------------

def marker_page_ids(texts) -> list[str]:
    """Page ids named by every marker text among ``texts`` (in order)."""
    ids = []
    for text in texts:
        found = marker_ids(text)
        if found:
            ids += found
    return ids


def check_context_pages(pages, fmt: str) -> list[str]:
    """`context_pages` of a complete response: well-formed, with the format's schema."""
    assert isinstance(pages, list) and pages, pages
    ids = []
    for p in pages:
        assert set(p) >= {"page_id", "sha256", "expires_at", "tool_schema"}, p
        assert PAGE_ID.match(p["page_id"]), p["page_id"]
        assert re.fullmatch(r"[0-9a-f]{64}", p["sha256"]), p["sha256"]
        assert isinstance(p["expires_at"], int) and p["expires_at"] > 1_700_000_000
        assert p["tool_schema"] == formats.get(fmt).tool_schema()
        ids.append(p["page_id"])
    assert len(set(ids)) == len(ids)
    return ids


def header_page_ids(headers) -> list[str]:
    value = headers.get("x-multillm-context-pages")
    assert value, f"no x-multillm-context-pages header in {dict(headers)}"
    ids = value.split(",")
    assert all(PAGE_ID.match(i) for i in ids), value
    return ids


def check_upstream(rec: Received, fmt: str, *, model: str, max_tokens_field: str, max_tokens: int,
                   roleplay_key: str, marker_texts, tools, page_ids: list[str], stream: bool):
    """What the provider received: markers naming the pages, the retrieval tool in the
    format's schema, model and max tokens unchanged, the provider's key only."""
    body = rec.json()
    assert body["model"] == model
    assert body[max_tokens_field] == max_tokens
    assert bool(body.get("stream")) is stream
    assert "capabilities" not in body and "context_protected_indices" not in body
    named = marker_page_ids(marker_texts(body))
    assert named == page_ids, (named, page_ids)
    assert formats.get(fmt).tool_schema() in tools(body)
    if fmt == "messages":
        assert rec.headers.get("x-api-key") == rp.PROVIDER_KEY
        assert "authorization" not in rec.headers
        assert rec.headers.get("anthropic-version")
    else:
        assert rec.headers.get("authorization") == f"Bearer {rp.PROVIDER_KEY}"
        assert "x-api-key" not in rec.headers
    everything = repr(rec.raw_headers).encode() + rec.body
    assert roleplay_key.encode() not in everything
    assert b"X-Roleplay-Session-ID".lower() not in repr(rec.raw_headers).lower().encode()
    assert rec.path == {"chat": "/v1/chat/completions", "responses": "/v1/responses",
                        "messages": "/v1/messages"}[fmt]
    return body


def tee_http_client(mod):
    """A `mod.Client` (httpx for openai, httpx2 for anthropic) that keeps a copy of every
    response byte the SDK reads → (client, the bytes so far)."""
    raw = bytearray()
    inner = mod.HTTPTransport()

    class Copy(mod.SyncByteStream):
        def __init__(self, stream):
            self.stream = stream

        def __iter__(self):
            for chunk in self.stream:
                raw.extend(chunk)
                yield chunk

        def close(self):
            self.stream.close()

    class Tee(mod.BaseTransport):
        def handle_request(self, request):
            resp = inner.handle_request(request)
            return mod.Response(resp.status_code, headers=resp.headers, stream=Copy(resp.stream),
                                extensions=resp.extensions, request=request)

        def close(self):
            inner.close()

    # Storing 200+ new pages takes seconds, more on a busy machine (one R2 put per page today).
    return mod.Client(transport=Tee(), timeout=600), raw


def stream_page_ids(raw: bytes, headers) -> list[str]:
    """The page list of a paged stream: its leading SSE comment line, whole; the header
    only counts them (the list is over the header cap)."""
    assert raw.startswith(PAGE_LIST), raw[:120]
    ids = raw[len(PAGE_LIST):raw.index(b"\n")].decode().split(",")
    assert all(PAGE_ID.match(i) for i in ids)
    assert len(ids) >= 200 and len(set(ids)) == len(ids)
    assert headers["x-multillm-context-page-count"] == str(len(ids))
    assert "x-multillm-context-pages" not in headers
    return ids
