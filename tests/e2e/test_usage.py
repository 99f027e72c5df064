"""Usage through the runner (docs/design.md §4.1): real Pyodide relaying real streams, real
local D1, `ctx.waitUntil` as the runner keeps it. The provider is the stand-in
(devkit/standin.py), which reports usage in proportion to the body it received: a
quarter of its bytes as input, half of that read from a cache (an eighth written, on
Anthropic), 40 output tokens. What the edge records per principal, day and model must
be the sum of those figures, in the three formats, streamed and not; the bytes, marked
estimated, when the provider reports nothing; one statement per turn, after the answer."""

import json
import time

import pytest

from devkit import roleplay as rp
from devkit import standin
from devkit.fakes import FakeServer
from devkit.runner import Edge

MODEL = "fake:rp-small"
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
BODIES = {"chat": rp.chat_body, "responses": rp.responses_body, "messages": rp.messages_body}


@pytest.fixture(scope="module")
def provider():
    with FakeServer(lambda rec: standin.respond(rec.path, rec.body, 1)) as server:
        yield server


@pytest.fixture(scope="module")
def edge(provider, tmp_path_factory):
    with Edge(tmp_path_factory.mktemp("usage"), vars=rp.edge_vars(provider.url)) as edge:
        rp.set_model(edge, MODEL, 6000, 1000)
        yield edge


def post(edge, player, fmt, body, **kw):
    return edge.client.post(PATHS[fmt], json=body, **kw,
                            headers={"Authorization": f"Bearer {player.key}",
                                     "X-Roleplay-Session-ID": player.session})


def expected(fmt: str, sent: list[bytes]) -> dict:
    """The stand-in's figures for what it received, summed."""
    out = {"requests": 0, "input_tokens": 0, "cached_input_tokens": 0, "cache_write_tokens": 0,
           "output_tokens": 0, "estimated": 0}
    for body in sent:
        prompt, completion = standin._usage(len(body))
        read, written = standin.cache_figures(prompt)
        out["requests"] += 1
        out["input_tokens"] += prompt
        out["cached_input_tokens"] += read
        out["cache_write_tokens"] += written if fmt == "messages" else 0
        out["output_tokens"] += completion
    return out


def recorded(edge, player, requests: int, timeout: float = 10.0) -> dict | None:
    """The principal's usage row once it counts `requests` turns (the write follows the answer)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = edge.sql("SELECT model, requests, input_tokens, cached_input_tokens, cache_write_tokens, "
                        "output_tokens, estimated FROM principal_usage WHERE principal = ?1", player.principal)
        if rows and rows[0]["requests"] >= requests or time.monotonic() > deadline:
            if not rows:
                return None
            [row] = rows
            assert row.pop("model") == MODEL
            return row
        time.sleep(0.05)


@pytest.mark.parametrize("fmt", list(PATHS))
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_usage_is_the_sum_of_the_providers_figures(edge, provider, fmt, stream):
    player = rp.new_player(edge)
    provider.clear()
    extra = {"stream": True} if stream else {}
    if stream and fmt == "chat":
        extra["stream_options"] = {"include_usage": True}
    for n in (30, 1, 31):                       # paged, plain, paged again
        r = post(edge, player, fmt, BODIES[fmt](n, tag=f"U{fmt[:2]}", **extra))
        assert r.status_code == 200, r.text
    sent = [rec.body for rec in provider.received]
    assert len(sent) == 3
    assert recorded(edge, player, 3) == expected(fmt, sent)
    # the player's own view: today, summed over models
    doc = edge.client.get("/v1/roleplay/usage", headers={"x-api-key": player.key}).json()
    want = expected(fmt, sent)
    assert doc["days"][0] == {"date": time.strftime("%Y-%m-%d", time.gmtime()),
                              **{k: want[k] for k in ("input_tokens", "cached_input_tokens",
                                                      "cache_write_tokens", "output_tokens", "requests")},
                              "estimated": False}
    assert doc["limits"] == {"requests_per_minute": None, "tokens_per_day": None,
                             "sessions_per_day": None, "active_bytes": None}


def test_a_stream_without_figures_counts_its_bytes_as_estimated(edge, provider):
    player = rp.new_player(edge)
    provider.clear()
    r = post(edge, player, "chat", rp.chat_body(1, tag="EST", stream=True))   # no include_usage
    assert r.status_code == 200 and b"[DONE]" in r.content
    [sent] = [rec.body for rec in provider.received]
    assert recorded(edge, player, 1) == {"requests": 1, "input_tokens": len(sent), "cached_input_tokens": 0,
                                         "cache_write_tokens": 0, "output_tokens": len(r.content),
                                         "estimated": 1}


def test_one_statement_per_turn_after_the_answer(edge, provider):
    player = rp.new_player(edge)
    body = rp.chat_body(1, tag="ONE")
    post(edge, player, "chat", body)            # warm: the isolate's memory of the session
    recorded(edge, player, 1)
    before = edge.stats()
    r = post(edge, player, "chat", body)
    assert r.status_code == 200
    after = edge.stats()                 # the runner's figures wait for waitUntil work
    assert recorded(edge, player, 2, timeout=0)["requests"] == 2
    # the turn's one round trip (a batch: the limits' admission and the read, design §4.1;
    # nothing to page), then, after the answer, the one usage upsert
    assert after["d1_batches"] - before["d1_batches"] == 1
    assert after["d1_statements"] - before["d1_statements"] == 0
    assert after["usage_statements"] - before["usage_statements"] == 1
    assert after["usage_rows_written"] > before["usage_rows_written"]
    # a provider's error: no upsert
    provider.reply = lambda rec: standin._error(500, "boom", "no")
    try:
        before = edge.stats()
        assert post(edge, player, "chat", body).status_code == 500
        assert edge.stats()["usage_statements"] == before["usage_statements"]
    finally:
        provider.reply = lambda rec: standin.respond(rec.path, rec.body, 1)


def test_a_slow_or_failing_write_leaves_the_answer_unchanged_and_on_time(edge, provider):
    player = rp.new_player(edge)
    body = rp.chat_body(1, tag="SLOW")
    ok = post(edge, player, "chat", body)
    recorded(edge, player, 1)
    edge.inject(d1_slow_sql="principal_usage", d1_slow_ms=4000)
    try:
        started = time.monotonic()
        slow = post(edge, player, "chat", body)
        took = time.monotonic() - started
        assert slow.status_code == 200 and took < 2.5, took      # not held for the write
        assert recorded(edge, player, 2, timeout=0)["requests"] == 1
        assert recorded(edge, player, 2)["requests"] == 2        # written once the delay passed
        assert time.monotonic() - started > 3.5
    finally:
        edge.inject(d1_slow_sql="", d1_slow_ms=0)
    since = len(edge.logs())
    edge.inject(d1_sql="INSERT INTO principal_usage")   # the upsert alone: the turn's read names the table too
    try:
        failed = post(edge, player, "chat", body)
        # the fault stays until the write has met it (it follows the answer)
        assert edge.wait_for_log(lambda rec: rec.get("error") == "usage_not_recorded", since=since)
    finally:
        edge.inject(d1_sql="")
    assert failed.status_code == ok.status_code == 200
    same = lambda r: {k: v for k, v in r.json().items() if k != "created"}   # noqa: E731
    assert same(failed) == same(ok) == same(slow)
    assert recorded(edge, player, 3, timeout=0.5)["requests"] == 2
    assert all(player.key not in line for line in edge.lines)
