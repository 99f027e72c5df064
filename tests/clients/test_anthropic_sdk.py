"""The official `anthropic` SDK (Messages) against the roleplay edge."""

from __future__ import annotations

import anthropic
import httpx2
import pytest

from tests.clients.conftest import (CAPS, EXCHANGES, MANY_EXCHANGES, MANY_SIZE, MAX_TOKENS, MODEL,
                                    REPLY_TEXT, WIDE_MODEL, check_context_pages,
                                    check_upstream, header_page_ids, stream_page_ids, tee_http_client)
from devkit import roleplay as rp

pytestmark = pytest.mark.slow


@pytest.fixture
def client(edge, roleplayer):
    c = anthropic.Anthropic(api_key=roleplayer.key, base_url=edge.url, max_retries=0, timeout=60,
                            default_headers={"X-Roleplay-Session-ID": roleplayer.session})
    yield c
    c.close()


def markers(body):
    return [m["content"] for m in body["messages"]
            if m.get("role") == "user" and isinstance(m.get("content"), str)]


def tools(body):
    return body.get("tools") or []


def upstream(provider):
    assert len(provider.received) == 1, [r.path for r in provider.received]
    return provider.received[0]


def check(provider, roleplayer, ids, stream):
    return check_upstream(upstream(provider), "messages", model=MODEL, max_tokens_field="max_tokens",
                          max_tokens=MAX_TOKENS, roleplay_key=roleplayer.key, marker_texts=markers,
                          tools=tools, page_ids=ids, stream=stream)


def test_message_pages_a_long_roleplay(client, provider, roleplayer):
    body = rp.messages_body(EXCHANGES, tag="AN")
    message = client.messages.create(model=MODEL, system=body["system"], messages=body["messages"],
                                     max_tokens=MAX_TOKENS, extra_body=CAPS)
    assert message.content[0].text == REPLY_TEXT
    assert message.model == MODEL and message.stop_reason == "end_turn"
    pages = message.model_extra["context_pages"]
    assert message.to_dict()["context_pages"] == pages
    ids = check_context_pages(pages, "messages")
    sent = check(provider, roleplayer, ids, stream=False)
    assert sent["system"] == body["system"]
    assert len(sent["messages"]) < len(body["messages"])
    assert sent["messages"][-1] == body["messages"][-1]


def test_message_raw_response_carries_the_pages_header(client, provider):
    body = rp.messages_body(EXCHANGES, tag="AR")
    raw = client.messages.with_raw_response.create(model=MODEL, system=body["system"],
                                                   messages=body["messages"], max_tokens=MAX_TOKENS,
                                                   extra_body=CAPS)
    ids = check_context_pages(raw.parse().model_extra["context_pages"], "messages")
    assert header_page_ids(raw.headers) == ids


def test_message_stream_helper_yields_the_full_text(client, provider, roleplayer):
    body = rp.messages_body(EXCHANGES, tag="AS")
    with client.messages.stream(model=MODEL, system=body["system"], messages=body["messages"],
                                max_tokens=MAX_TOKENS, extra_body=CAPS) as stream:
        ids = header_page_ids(stream.response.headers)
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == REPLY_TEXT
    assert final.content[0].text == REPLY_TEXT and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 20
    check(provider, roleplayer, ids, stream=True)


def test_message_raw_event_stream(client, provider, roleplayer):
    body = rp.messages_body(EXCHANGES, tag="AE")
    with client.messages.with_streaming_response.create(
            model=MODEL, system=body["system"], messages=body["messages"], max_tokens=MAX_TOKENS,
            stream=True, extra_body=CAPS) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        ids = header_page_ids(resp.headers)
        events = list(resp.parse())
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == REPLY_TEXT
    check(provider, roleplayer, ids, stream=True)


# --- Errors the SDK surfaces --------------------------------------------------

def test_window_exceeded_is_an_anthropic_shaped_413(client, provider):
    body = rp.messages_body(4, tag="AX")
    body["messages"][-1] = {"role": "user", "content": "Too long. " * 1500}
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model=MODEL, system=body["system"], messages=body["messages"],
                               max_tokens=MAX_TOKENS, extra_body=CAPS)
    e = caught.value
    assert e.status_code == 413
    assert e.body["type"] == "error"
    assert e.body["error"]["code"] == "context_window_exceeded"
    assert "context" in e.body["error"]["message"].lower()
    assert provider.received == []


def test_wrong_roleplay_key_is_an_authentication_error(edge, roleplayer, provider):
    c = anthropic.Anthropic(api_key="rpk_not-a-key", base_url=edge.url, max_retries=0,
                            default_headers={"X-Roleplay-Session-ID": roleplayer.session})
    with pytest.raises(anthropic.AuthenticationError) as caught:
        c.messages.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                          max_tokens=MAX_TOKENS, extra_body=CAPS)
    assert caught.value.status_code == 401
    assert caught.value.body["type"] == "error"
    assert caught.value.body["error"]["type"] == "authentication_error"
    assert provider.received == []


# --- A paged stream of 200+ pages: the page list rides in a leading SSE comment -------

def test_message_stream_with_over_200_pages_parses_and_lists_every_page(edge, provider, roleplayer):
    http_client, raw = tee_http_client(httpx2)
    client = anthropic.Anthropic(api_key=roleplayer.key, base_url=edge.url, max_retries=0,
                                 http_client=http_client,
                                 default_headers={"X-Roleplay-Session-ID": roleplayer.session})
    body = rp.one_page_each("messages", rp.messages_body(MANY_EXCHANGES, size=MANY_SIZE, tag="AM"))
    with client.messages.stream(model=WIDE_MODEL, system=body["system"], messages=body["messages"],
                                max_tokens=MAX_TOKENS, extra_body=CAPS) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
        headers = stream.response.headers
    client.close()
    assert text == REPLY_TEXT and final.stop_reason == "end_turn"
    ids = stream_page_ids(bytes(raw), headers)
    check_upstream(upstream(provider), "messages", model=WIDE_MODEL, max_tokens_field="max_tokens",
                   max_tokens=MAX_TOKENS, roleplay_key=roleplayer.key, marker_texts=markers,
                   tools=tools, page_ids=ids, stream=True)


def test_the_prompt_cache_anchors_within_four_and_keeps_the_clients_own(
        client, provider, roleplayer):
    """docs/design.md §5.7: with `multillm_context_prompt_cache`, the provider gets the
    client's top-level `cache_control` and system breakpoint unchanged, and the edge's
    two anchors in the two slots left: the window's last message and the last marker."""
    from devkit.plans import marker_content, marker_ids
    from multillm_edge.base.jsonbytes import compact
    from multillm_edge.formats import breakpoints as bp, messages as wire
    caps = {"capabilities": CAPS["capabilities"] + ["multillm_context_prompt_cache"],
            "cache_control": {"type": "ephemeral"}}
    body = rp.messages_body(100, tag="AC")       # ~65 KB: pages on the wide model's window
    system = [{"type": "text", "text": body["system"], "cache_control": {"type": "ephemeral"}}]
    turn = body["messages"][:180] + [{"role": "user", "content": "Turn 90: the lantern?"}]
    message = client.messages.create(model=WIDE_MODEL, system=system, messages=turn,
                                     max_tokens=MAX_TOKENS, extra_body=caps)
    assert message.content[0].text == REPLY_TEXT
    doc = upstream(provider).json()
    assert doc["cache_control"] == {"type": "ephemeral"} and doc["system"] == system
    [marker] = [m for m in doc["messages"] if marker_ids(marker_content(m))]
    assert marker == bp.marker(marker_content(marker))
    assert doc["messages"][-2] == bp.anchored(turn[-2], wire.ANCHOR_BLOCKS)
    assert bp.count(compact(doc)) == 4        # top-level, system, window, marker


def content_blocks(messages: list) -> int:
    return sum(len(m["content"]) if isinstance(m["content"], list) else 1 for m in messages)


def test_two_turns_with_recall_read_back_the_anchored_prefix(client, provider, roleplayer):
    """Issue 38: two consecutive turns between steps, with recall, the client setting no
    breakpoint. The second turn's prompt equals the first's through the first's window
    anchor, byte for byte but for the anchor itself (Anthropic's cache reads content, the
    `cache_control` marks it), and that anchor stands within 20 blocks of the second
    turn's: Anthropic's read finds the entry the first turn wrote."""
    from devkit.plans import is_recall, marker_content, marker_ids
    from multillm_edge.base.jsonbytes import compact
    from multillm_edge.formats import breakpoints as bp, messages as wire
    caps = {"capabilities": CAPS["capabilities"] + ["multillm_context_prompt_cache",
                                                    "multillm_context_recall"]}
    body = rp.messages_body(100, tag="AR")
    body["messages"][6]["content"] = "We buried the silver compass beneath the old mill."
    ask = "Where did we bury the silver compass, by the old mill?"
    sent = []
    for n in (85, 86):                             # two turns, one exchange apart, both recalling
        provider.clear()
        turn = body["messages"][:2 * n] + [{"role": "user", "content": f"Turn {n}. {ask}"}]
        message = client.messages.create(model=WIDE_MODEL, system=body["system"], messages=turn,
                                         max_tokens=MAX_TOKENS, extra_body=caps)
        assert message.content[0].text == REPLY_TEXT
        assert message.model_extra["context_recall"]          # recall quoted moments
        rec = upstream(provider)
        doc = rec.json()
        msgs = doc["messages"]
        assert is_recall(msgs[-2]) and msgs[-3] == bp.anchored(turn[-2], wire.ANCHOR_BLOCKS)
        [marker] = [m for m in msgs if marker_ids(marker_content(m))]
        assert marker == bp.marker(marker_content(marker))
        assert bp.count(rec.body) == 2                        # the window's and the marker's
        sent.append((rec.body, doc, [p["page_id"] for p in message.model_extra["context_pages"]]))
    (first, doc1, ids1), (second, doc2, ids2) = sent
    assert ids1 == ids2                                        # no step between the two turns
    at = len(doc1["messages"]) - 3                             # the first turn's window anchor
    anchored = compact(doc1["messages"][at])
    start = first.index(anchored)
    assert second[:start] == first[:start]                     # every byte before it
    assert doc1["messages"][at] == bp.anchored(doc2["messages"][at], wire.ANCHOR_BLOCKS)
    assert doc1["tools"] == doc2["tools"] and doc1["system"] == doc2["system"]
    # blocks from the first turn's anchor (its last block) to the second turn's
    distance = content_blocks(doc2["messages"][at + 1:len(doc2["messages"]) - 2])
    assert 0 < distance <= 20
