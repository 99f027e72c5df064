"""Usage recorded per answered turn (docs/design.md §4.1), in-process: the provider's own
figures in the three formats, whole and streamed, paged and not; the bytes, marked
estimated, where it reports none; ONE upsert per answered turn, run after the answer (a
slow or failing write changes nothing of the answer); nothing for a provider's error or
a turn no provider answered; no content and no key in the row."""

import json

import pytest

from devkit import roleplay as rp
from tests.handlers.conftest import KEY, MODEL, SESSION
from tests.support.inprocess import Answer

PRINCIPAL = "p_handlers"
DAY = "2027-01-15"      # LocalEdge's clock, 1_800_000_000, as a UTC date
SSE = [("content-type", "text/event-stream")]

CHAT_USAGE = {"prompt_tokens": 1500, "completion_tokens": 40, "prompt_tokens_details": {"cached_tokens": 1024}}
RESP_USAGE = {"input_tokens": 900, "output_tokens": 12, "input_tokens_details": {"cached_tokens": 512}}
MSG_START = {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 3000,
             "cache_creation_input_tokens": 200}


def events(*docs) -> bytes:
    return b"".join(b"data: " + json.dumps(d).encode() + b"\n\n" for d in docs)


ANSWERS = {
    "/v1/chat/completions": (
        json.dumps({"id": "c", "choices": [{"message": {"role": "assistant", "content": "Hi"}}],
                    "usage": CHAT_USAGE}).encode(),
        events({"choices": [{"delta": {"content": "Hi"}}], "usage": None},
               {"choices": [], "usage": CHAT_USAGE}) + b"data: [DONE]\n\n",
        (1500, 1024, 0, 40)),
    "/v1/responses": (
        json.dumps({"id": "r", "output": [], "usage": RESP_USAGE}).encode(),
        events({"type": "response.output_text.delta", "delta": "Hi"},
               {"type": "response.completed", "response": {"id": "r", "usage": RESP_USAGE}}),
        (900, 512, 0, 12)),
    "/v1/messages": (
        json.dumps({"id": "m", "content": [], "usage": dict(MSG_START, output_tokens=77)}).encode(),
        events({"type": "message_start", "message": {"id": "m", "usage": MSG_START}},
               {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Hi"}},
               {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 77}},
               {"type": "message_stop"}),
        (3210, 3000, 200, 77)),
}
BODIES = {"/v1/chat/completions": rp.chat_body, "/v1/responses": rp.responses_body,
          "/v1/messages": rp.messages_body}


def usage_rows(edge) -> list[dict]:
    return edge.sql("SELECT principal, day, model, requests, input_tokens, cached_input_tokens, "
                    "cache_write_tokens, output_tokens, estimated FROM principal_usage "
                    "ORDER BY principal, day, model")


def row(figures, requests=1, estimated=0, model=MODEL) -> dict:
    i, c, w, o = figures
    return {"principal": PRINCIPAL, "day": DAY, "model": model, "requests": requests,
            "input_tokens": i, "cached_input_tokens": c, "cache_write_tokens": w,
            "output_tokens": o, "estimated": estimated}


class Counting:
    """Counts the statements that reach the executor (the turn's D1 calls)."""

    def __init__(self, edge):
        self.sql = []
        inner = edge.executor._cursor
        edge.executor._cursor = lambda sql, params: (self.sql.append(sql), inner(sql, params))[1]

    def usage(self) -> int:
        """The usage upserts (the turn's read names the table too: the limits' tokens)."""
        return sum("INSERT INTO principal_usage" in s for s in self.sql)


@pytest.mark.parametrize("path", list(ANSWERS))
@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("paged", [False, True], ids=["plain", "paged"])
def test_the_providers_figures_summed_per_day_and_model(edge, headers, path, streamed, paged):
    whole, stream, figures = ANSWERS[path]
    answer = (lambda s: Answer(headers=SSE, body=stream, chunk=7)) if streamed else (lambda s: Answer(body=whole))
    edge.upstream = answer
    count = Counting(edge)
    body = BODIES[path](30 if paged else 1, tag="U")
    r1 = edge.request("POST", path, headers, body)
    assert r1.status == 200 and count.usage() == 1
    assert bool(r1.header("x-multillm-context-page-count")) == paged
    r2 = edge.request("POST", path, headers, body)
    assert r2.status == 200 and count.usage() == 2      # one upsert per answered turn
    assert usage_rows(edge) == [row(tuple(2 * f for f in figures), requests=2)]
    # the answer relayed as the provider sent it (the meter only watched)
    if streamed:
        assert r2.body.endswith(stream)
    elif not paged:
        assert r2.body == whole


def test_no_figures_are_the_bytes_and_estimated(edge, headers):
    plain = json.dumps({"id": "x", "choices": [{"message": {"content": "Hello"}}]}).encode()
    edge.upstream = lambda s: Answer(body=plain)
    edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(1, tag="E"))
    sent = len(edge.sent[-1].body)
    assert usage_rows(edge) == [row((sent, 0, 0, len(plain)), estimated=1)]
    stream = events({"choices": [{"delta": {"content": "Hi"}}]}) + b"data: [DONE]\n\n"
    edge.upstream = lambda s: Answer(headers=SSE, body=stream)
    edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(1, tag="E"))
    [got] = usage_rows(edge)
    assert (got["requests"], got["estimated"], got["output_tokens"]) == (2, 2, len(plain) + len(stream))


def test_the_model_is_the_requested_name_of_the_candidate_that_answered(edge, headers):
    edge.set_model("fake:rp-large", 6000, 1000)
    whole = ANSWERS["/v1/chat/completions"][0]
    edge.upstream = lambda s: (Answer(status=503, body=b"{}") if s.json()["model"] == MODEL
                               else Answer(body=whole))
    body = rp.chat_body(1, tag="F", models=["fake:rp-small", "fake:rp-large"])
    r = edge.request("POST", "/v1/chat/completions", headers, body)
    assert r.status == 200 and len(edge.sent) == 2
    assert usage_rows(edge) == [row((1500, 1024, 0, 40), model="fake:rp-large")]


@pytest.mark.parametrize("status", [400, 429, 500, 503])
def test_a_providers_error_records_nothing(edge, headers, status):
    edge.upstream = lambda s: Answer(status=status, body=json.dumps({"error": {"message": "no"},
                                                                      "usage": CHAT_USAGE}).encode())
    r = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(1, tag="S"))
    assert r.status == status and usage_rows(edge) == [] and edge.waits == []


def test_no_answer_records_nothing(edge, headers):
    edge.upstream = lambda s: OSError("unreachable")
    r = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(1, tag="N"))
    assert r.status == 502 and usage_rows(edge) == []
    r = edge.request("POST", "/v1/chat/completions", {"Authorization": "Bearer rpk_nobody",
                                                      "X-Roleplay-Session-ID": SESSION}, rp.chat_body(1))
    assert r.status == 401 and usage_rows(edge) == []


def test_the_write_comes_after_the_answer(edge, headers):
    edge.upstream = lambda s: Answer(body=ANSWERS["/v1/chat/completions"][0])
    edge.hold_waits = True
    r = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(1, tag="A"))
    assert r.status == 200 and len(edge.waits) == 1
    assert usage_rows(edge) == []               # answered; the upsert not yet run
    assert edge.drain() == [None]
    assert usage_rows(edge) == [row((1500, 1024, 0, 40))]


def test_a_failing_write_changes_nothing_of_the_answer(edge, headers):
    whole = ANSWERS["/v1/chat/completions"][0]
    edge.upstream = lambda s: Answer(body=whole)
    edge.hold_waits = True
    ok = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(1, tag="W"))
    edge.drain()
    edge.executor.fail_sql = "INSERT INTO principal_usage"   # the upsert alone: the turn's read names the table too
    r = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(1, tag="W"))
    assert (r.status, r.body, r.headers) == (ok.status, ok.body, ok.headers)
    assert edge.drain() == [None]                        # logged, not raised
    assert edge.logs[-1] == {"route": "usage", "level": "warning", "error": "usage_not_recorded"}
    edge.executor.fail_sql = None
    assert usage_rows(edge) == [row((1500, 1024, 0, 40))]


def test_the_row_holds_no_content_and_no_key(edge, headers):
    stream = ANSWERS["/v1/messages"][1]
    edge.upstream = lambda s: Answer(headers=SSE, body=stream)
    edge.request("POST", "/v1/messages", headers, rp.messages_body(2, tag="SECRETWORD"))
    dump = json.dumps(edge.sql("SELECT * FROM principal_usage"))
    assert "SECRETWORD" not in dump and KEY not in dump and "Hi" not in dump
