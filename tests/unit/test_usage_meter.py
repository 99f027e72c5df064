"""The usage meter (formats/usage.py, docs/design.md §4.1): the provider's own figures from
each wire format's answer, whole or streamed, read as the bytes pass — events cut at every
byte, CRLF or LF, huge events kept bounded — and the bytes where a figure is missing or not
a figure."""

import json

import pytest

from multillm_edge.formats import chat, messages, responses
from multillm_edge.formats.usage import (MAX_TOKENS, TAIL_BYTES, WHOLE_BYTES, Meter, Usage,
                                         count, tail_usage)

SENT = 5000


def metered(fmt, body: bytes, sse: bool, cuts=None) -> Usage:
    got = []
    m = Meter(fmt, sse, SENT, got.append)
    if cuts is None:
        m.feed(body)
    else:
        at = 0
        for cut in cuts:
            m.feed(body[at:cut])
            at = cut
        m.feed(body[at:])
    m.end()
    m.end()                      # a second end is nothing
    assert len(got) == 1
    return got[0]


def sse(*docs, crlf=False, event=None) -> bytes:
    nl = b"\r\n" if crlf else b"\n"
    out = b""
    for d in docs:
        head = (b"event: " + event.encode() + nl) if event else b""
        data = d if isinstance(d, bytes) else json.dumps(d).encode()
        out += head + b"data: " + data + nl + nl
    return out


CHAT_JSON = {"id": "c", "choices": [{"message": {"content": "hi \"usage\":{\"prompt_tokens\":1}"}}],
             "usage": {"prompt_tokens": 1200, "completion_tokens": 34,
                       "prompt_tokens_details": {"cached_tokens": 1024}}}
RESP_JSON = {"id": "r", "output": [], "usage": {"input_tokens": 900, "output_tokens": 12,
                                                "input_tokens_details": {"cached_tokens": 512}}}
MSG_JSON = {"id": "m", "content": [], "usage": {"input_tokens": 10, "output_tokens": 77,
                                                "cache_read_input_tokens": 3000,
                                                "cache_creation_input_tokens": 200}}
CHAT_STREAM = sse({"choices": [{"delta": {"content": "a"}}], "usage": None},
                  {"choices": [{"delta": {"content": "b"}}], "usage": None},
                  {"choices": [], "usage": {"prompt_tokens": 1200, "completion_tokens": 34,
                                            "prompt_tokens_details": {"cached_tokens": 1024}}},
                  b"[DONE]")
RESP_STREAM = sse({"type": "response.created", "response": {"usage": None}},
                  {"type": "response.output_text.delta", "delta": "usage"},
                  {"type": "response.completed", "response": dict(RESP_JSON)})
MSG_STREAM = sse({"type": "message_start", "message": {"usage": {
                      "input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 3000,
                      "cache_creation_input_tokens": 200}}},
                 {"type": "content_block_delta", "delta": {"text": "x"}},
                 {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 77}},
                 {"type": "message_stop"}, event="ignored")

EXPECTED = {
    "chat": Usage(1200, 1024, 0, 34, False),
    "responses": Usage(900, 512, 0, 12, False),
    "messages": Usage(3210, 3000, 200, 77, False),
}
CASES = [(chat, CHAT_JSON, CHAT_STREAM), (responses, RESP_JSON, RESP_STREAM),
         (messages, MSG_JSON, MSG_STREAM)]


@pytest.mark.parametrize("fmt,doc,stream", CASES, ids=lambda x: getattr(x, "NAME", ""))
def test_the_providers_figures_whole_and_streamed(fmt, doc, stream):
    expected = EXPECTED[fmt.NAME]
    assert metered(fmt, json.dumps(doc).encode(), sse=False) == expected
    assert metered(fmt, stream, sse=True) == expected
    assert metered(fmt, stream.replace(b"\n", b"\r\n"), sse=True) == expected


@pytest.mark.parametrize("fmt,doc,stream", CASES, ids=lambda x: getattr(x, "NAME", ""))
def test_a_stream_cut_at_every_byte_reads_the_same(fmt, doc, stream):
    expected = EXPECTED[fmt.NAME]
    for cut in range(1, len(stream)):
        assert metered(fmt, stream, True, [cut]) == expected, cut
    assert metered(fmt, stream, True, list(range(1, len(stream)))) == expected   # a byte per read
    crlf = stream.replace(b"\n", b"\r\n")
    for cut in range(1, len(crlf), 7):
        assert metered(fmt, crlf, True, [cut]) == expected, cut


def test_messages_later_figures_replace_earlier():
    # Newer API versions repeat the input figures in message_delta: they replace message_start's.
    stream = MSG_STREAM.replace(b'{"output_tokens": 77}',
                                b'{"output_tokens": 80, "input_tokens": 12, "cache_read_input_tokens": 3000}')
    assert metered(messages, stream, True) == Usage(3212, 3000, 200, 80, False)


def test_nothing_reported_is_the_bytes_and_estimated():
    body = json.dumps({"id": "x", "choices": []}).encode()
    assert metered(chat, body, False) == Usage(SENT, 0, 0, len(body), True)
    stream = sse({"choices": [{"delta": {"content": "hello"}}]}, b"[DONE]")
    assert metered(chat, stream, True) == Usage(SENT, 0, 0, len(stream), True)
    assert metered(chat, b"", False) == Usage(SENT, 0, 0, 0, True)
    assert metered(chat, b"<html>not json", False) == Usage(SENT, 0, 0, 14, True)


HOSTILE = [
    {"prompt_tokens": -5, "completion_tokens": 3},
    {"prompt_tokens": MAX_TOKENS + 1, "completion_tokens": 3},
    {"prompt_tokens": 10 ** 40, "completion_tokens": 3},
    {"prompt_tokens": "12", "completion_tokens": 3},
    {"prompt_tokens": 12.0, "completion_tokens": 3},
    {"prompt_tokens": True, "completion_tokens": 3},
    {"prompt_tokens": None, "completion_tokens": 3},
    {"prompt_tokens": [1], "completion_tokens": 3},
    {"completion_tokens": 3},
]


@pytest.mark.parametrize("usage", HOSTILE)
def test_a_figure_that_is_not_one_is_estimated(usage):
    body = json.dumps({"usage": usage}).encode()
    assert metered(chat, body, False) == Usage(SENT, 0, 0, 3, True)
    stream = sse({"choices": [], "usage": usage})
    assert metered(chat, stream, True) == Usage(SENT, 0, 0, 3, True)


def test_nan_infinity_and_wrong_nesting_are_no_figures():
    body = b'{"usage": {"prompt_tokens": NaN, "completion_tokens": Infinity}}'
    assert metered(chat, body, False) == Usage(SENT, 0, 0, len(body), True)
    for usage in ([1, 2], "usage", 7, {"prompt_tokens": {"n": 1}, "completion_tokens": 2,
                                      "prompt_tokens_details": [5]}):
        got = metered(chat, json.dumps({"usage": usage}).encode(), False)
        assert got.estimated and got.input_tokens == SENT and got.cached_input_tokens == 0
    # a cached part larger than the input is dropped, never stored
    got = metered(chat, json.dumps({"usage": {"prompt_tokens": 5, "completion_tokens": 1,
                                              "prompt_tokens_details": {"cached_tokens": 9}}}).encode(), False)
    assert got == Usage(5, 0, 0, 1, False)
    # deeply nested junk: no recursion error escapes
    deep = b'{"usage": ' + b"[" * 100000 + b"]" * 100000 + b"}"
    assert metered(chat, deep, False).estimated
    assert count(3) == 3 and count(-1) is None and count(float("nan")) is None


def test_a_huge_answer_keeps_its_tail_only():
    filler = "x" * (WHOLE_BYTES * 3)
    doc = {"choices": [{"message": {"content": filler + '\\"usage\\": {\\"prompt_tokens\\": 1}'}}],
           "usage": {"prompt_tokens": 40, "completion_tokens": 2}}
    body = json.dumps(doc).encode()
    m = Meter(chat, False, SENT, lambda u: None)
    for at in range(0, len(body), 4096):
        m.feed(body[at:at + 4096])
        assert m.held() <= WHOLE_BYTES + 2 * TAIL_BYTES
    got = []
    m._done = got.append
    m.end()
    assert got == [Usage(40, 0, 0, 2, False)]
    # a Responses stream whose response.completed is huge: its usage is at its end
    big = dict(RESP_JSON, output=[{"type": "message", "content": [{"text": filler}]}])
    stream = sse({"type": "response.completed", "response": big})
    assert metered(responses, stream, True, list(range(4096, len(stream), 4096))) == EXPECTED["responses"]


def test_a_huge_line_without_an_end_stays_bounded():
    m = Meter(chat, True, SENT, lambda u: None)
    for _ in range(200):
        m.feed(b"data: " + b"y" * 65536)
        assert m.held() <= WHOLE_BYTES + 2 * TAIL_BYTES


def test_tail_usage_skips_escaped_keys():
    assert tail_usage(b'"a":"\\"usage\\":{\\"x\\":1}"}') is None
    assert tail_usage(b'"a":"\\\\","usage":{"x":1}}') == {"x": 1}
    assert tail_usage(b'"usage":{"x":1},"b":"\\"usage\\": {}"') == {"x": 1}
    assert tail_usage(b'"usage":  {"x": 1') is None


def test_a_long_stream_keeps_its_first_event_and_its_tail_only():
    # message_start leaves the tail long before message_delta comes: the first event is kept apart
    deltas = sse(*({"type": "content_block_delta", "delta": {"text": "x" * 300, "usage": None}}
                   for _ in range(1200)))
    start, end = MSG_STREAM.split(b'data: {"type": "content_block_delta"', 1)
    end = b'data: {"type": "content_block_delta"' + end
    stream = start + deltas + end
    for read in (1, 7, 1000, 65536):
        cuts = list(range(read, len(stream), read)) if read > 1 else list(range(1, 600)) + \
            list(range(600, len(stream), 4096))
        m = Meter(messages, True, SENT, lambda u: None)
        at = 0
        for cut in cuts:
            m.feed(stream[at:cut])
            at = cut
            assert m.held() <= WHOLE_BYTES + 2 * TAIL_BYTES + 65536
        m.feed(stream[at:])
        got = []
        m._done = got.append
        m.end()
        assert got == [EXPECTED["messages"]], read
    # a chat stream whose every chunk says "usage" : null (spaced), then the figures
    chunks = sse(*({"choices": [{"delta": {"content": "y" * 200}}], "usage": None} for _ in range(2000)))
    chunks = chunks.replace(b'"usage": null', b'"usage" :  null')
    stream = chunks + CHAT_STREAM
    assert metered(chat, stream, True, list(range(5000, len(stream), 5000))) == EXPECTED["chat"]
    # nothing but nulls: estimated
    assert metered(chat, chunks, True, list(range(5000, len(chunks), 5000))).estimated
