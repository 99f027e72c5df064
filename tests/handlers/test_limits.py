"""Limits per principal (docs/design.md §4.1) on the in-process platform, in each route's
envelope: the request past a limit gets its status, code and `Retry-After`, and nothing
is stored or dispatched for it; a turn is still one D1 round trip before dispatch."""

import json

import pytest

from devkit import admin_sql
from devkit import roleplay as rp
from multillm_edge.core import limits
from tests.handlers.conftest import KEY, SESSION
from tests.support.inprocess import Answer

FORMATS = [("/v1/chat/completions", rp.chat_body, False),
           ("/v1/responses", rp.responses_body, False),
           ("/v1/messages", rp.messages_body, True)]
PRINCIPAL = "p_handlers"


def set_limits(edge, principal=PRINCIPAL, cleared=(), **values):
    edge.loop.run_until_complete(admin_sql.set_limits(edge.executor, principal, values, list(cleared), 0))


def state(edge) -> tuple:
    """What a refused request must not change: rows, objects, what reached upstream, the window."""
    return (edge.sql("SELECT page_id, expires_at, r2_key FROM context_pages ORDER BY page_id"),
            dict(edge.bucket.objects), len(edge.sent),
            edge.sql("SELECT principal, at FROM principal_requests ORDER BY rowid"))


def error_of(r, tagged: bool) -> dict:
    doc = r.json()
    if tagged:
        assert doc["type"] == "error"
    return doc["error"]


class Counting:
    """Counts the D1 round trips (a statement or a batch) the executor is asked for."""

    def __init__(self, edge):
        self.calls = []
        ex = edge.executor
        for name in ("first", "all", "run", "batch"):
            setattr(ex, name, self._wrap(name, getattr(ex, name)))

    def _wrap(self, name, fn):
        async def counted(*args):
            self.calls.append(name)
            return await fn(*args)
        return counted


@pytest.mark.parametrize("path,body,tagged", FORMATS)
def test_past_requests_per_minute_a_429_with_retry_after_and_nothing_sent(edge, headers, path, body, tagged):
    set_limits(edge, requests_per_minute=2)
    for i in range(2):
        edge.clock += 10
        assert edge.request("POST", path, headers, body(30 + i, tag="RL")).status == 200
    before = state(edge)
    edge.clock += 5
    r = edge.request("POST", path, headers, body(40, tag="RL"))
    assert r.status == 429 and r.header("retry-after") == "45"       # the first leaves at +60
    assert r.header("x-should-retry") == "true"                          # seconds: worth waiting
    assert error_of(r, tagged) == {
        "type": "rate_limit_error", "code": "rate_limit_exceeded",
        "message": "Rate limit reached: this key allows 2 requests per minute. Retry after 45 s.",
        "limit": "requests_per_minute", "limit_value": 2, "retry_after_seconds": 45}
    assert state(edge) == before                                       # nothing stored, sent or counted
    assert r.header("cache-control") == "no-store"
    edge.clock += 45
    assert edge.request("POST", path, headers, body(40, tag="RL")).status == 200


@pytest.mark.parametrize("path,body,tagged", FORMATS)
def test_past_tokens_per_day_a_429_until_utc_midnight(edge, headers, path, body, tagged):
    set_limits(edge, tokens_per_day=1000)
    day = limits.utc_day(edge.clock)
    edge.sql("INSERT INTO principal_usage (principal, day, model, requests, input_tokens, output_tokens) "
             "VALUES (?1, ?2, 'fake:rp-small', 3, 900, 99)", PRINCIPAL, day)
    assert edge.request("POST", path, headers, body(30, tag="TB")).status == 200     # 999 < 1000
    edge.sql("UPDATE principal_usage SET output_tokens = 100")
    before = state(edge)
    r = edge.request("POST", path, headers, body(31, tag="TB"))
    wait = limits.until_tomorrow(edge.clock)
    assert r.status == 429 and r.header("retry-after") == str(wait)
    assert r.header("x-should-retry") == "false"                         # hours: an SDK must not sleep
    err = error_of(r, tagged)
    assert (err["code"], err["limit"], err["limit_value"], err["retry_after_seconds"]) == \
        ("token_budget_exceeded", "tokens_per_day", 1000, wait)
    assert state(edge) == before
    edge.clock += wait                                                  # a new UTC day
    assert edge.request("POST", path, headers, body(31, tag="TB")).status == 200


def test_past_sessions_per_day_a_429_and_no_session(edge, headers):
    set_limits(edge, sessions_per_day=2)
    auth = {"Authorization": f"Bearer {KEY}"}
    made = [edge.request("POST", "/v1/roleplay/sessions", auth) for _ in range(2)]
    assert [m.status for m in made] == [201, 201]
    before = edge.sql("SELECT session_id FROM roleplay_sessions ORDER BY session_id")
    r = edge.request("POST", "/v1/roleplay/sessions", auth)
    wait = limits.until_tomorrow(edge.clock)
    assert r.status == 429 and r.header("retry-after") == str(wait) and r.header("x-should-retry") == "false"
    assert r.json() == {"error": {
        "type": "rate_limit_error", "code": "session_limit_reached",
        "message": f"Session limit reached: this key may create 2 sessions per UTC day. Retry after {wait} s.",
        "limit": "sessions_per_day", "limit_value": 2, "retry_after_seconds": wait}}
    assert edge.sql("SELECT session_id FROM roleplay_sessions ORDER BY session_id") == before
    set_limits(edge, cleared=["sessions_per_day"])
    assert edge.request("POST", "/v1/roleplay/sessions", auth).status == 201


def second_session(edge, session="rps_handler_second"):
    edge.sql("INSERT INTO roleplay_sessions (session_id, principal, created_at) VALUES (?1, ?2, 0)",
             session, PRINCIPAL)
    return session


@pytest.mark.parametrize("path,body,tagged", FORMATS)
def test_past_active_bytes_across_sessions_a_413_and_nothing_stored_or_sent(edge, headers, path, body, tagged):
    assert edge.request("POST", path, headers, body(30, tag="AB")).status == 200
    held = edge.sql("SELECT SUM(byte_length) AS n FROM context_pages")[0]["n"]
    set_limits(edge, active_bytes=held + 100, requests_per_minute=50)
    other = {**headers, "X-Roleplay-Session-ID": second_session(edge)}
    before = state(edge)
    r = edge.request("POST", path, other, body(30, tag="AC"))
    assert r.status == 413
    err = error_of(r, tagged)
    assert err["code"] == "context_principal_limit_exceeded" and "context window" in err["message"]
    assert err["active_bytes"] == held and err["limit_bytes"] == held + 100
    assert err["needed_bytes"] > 100
    rows, objects, sent, window = state(edge)
    # nothing stored or sent; the request was admitted before it met the allowance: it
    # keeps its slot in the window (design §4.1)
    assert (rows, objects, sent) == before[:3] and len(window) == len(before[3]) + 1
    set_limits(edge, cleared=["active_bytes"])
    assert edge.request("POST", path, other, body(30, tag="AC")).status == 200


def test_a_concurrent_writer_filling_active_bytes_is_caught_by_the_upsert(edge, headers):
    """The figures read with the context fit, the upsert's do not (another session of the
    principal stored in between): the 413 names the principal's figures, read again."""
    edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(30, tag="RA"))
    held = edge.sql("SELECT SUM(byte_length) AS n FROM context_pages")[0]["n"]
    set_limits(edge, active_bytes=2 * held)
    other = {**headers, "X-Roleplay-Session-ID": second_session(edge)}
    real = edge.executor.batch

    async def racing(statements):           # the read, then another writer's rows
        out = await real(statements)
        edge.conn.execute("INSERT INTO context_pages (page_id, authority, principal, session_id, "
                          "policy_revision, sha256, byte_length, r2_key, created_at, expires_at, signature) "
                          "VALUES ('cp_race', 'roleplay', ?1, 'rps_x', 1, 'x', ?2, 'k', 0, ?3, 's')",
                          (PRINCIPAL, held, edge.clock + 3600))
        edge.conn.commit()
        return out
    edge.executor.batch = racing
    objects = dict(edge.bucket.objects)
    sent = len(edge.sent)
    r = edge.request("POST", "/v1/chat/completions", other, rp.chat_body(30, tag="RB"))
    assert r.status == 413 and r.json()["error"]["code"] == "context_principal_limit_exceeded"
    assert r.json()["error"]["active_bytes"] == 2 * held and r.json()["error"]["limit_bytes"] == 2 * held
    assert edge.bucket.objects == objects and len(edge.sent) == sent     # the object went, nothing sent


def test_a_refusal_comes_after_the_key_grant_and_session_checks(edge, headers):
    set_limits(edge, requests_per_minute=0)
    r = edge.request("POST", "/v1/chat/completions", {**headers, "X-Roleplay-Session-ID": "rps_nope"},
                     rp.chat_body(3))
    assert r.status == 404
    r = edge.request("POST", "/v1/chat/completions", {**headers, "Authorization": "Bearer rpk_unknown"},
                     rp.chat_body(3))
    assert r.status == 401
    r = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(3))
    assert r.status == 429 and r.header("retry-after") == "60"
    assert edge.sent == [] and edge.sql("SELECT * FROM principal_requests") == []
    assert any(log.get("limit") == "requests_per_minute" and log.get("status") == 429 for log in edge.logs)


@pytest.mark.parametrize("limited", [False, True])
def test_a_turn_is_one_d1_round_trip_before_dispatch(edge, headers, limited):
    """Steady (nothing new to store): one batch, nothing else; with every limit set, the same."""
    if limited:
        set_limits(edge, requests_per_minute=100, tokens_per_day=10 ** 9, sessions_per_day=5,
                   active_bytes=10 ** 8)
    body = rp.chat_body(30, tag="RT")
    assert edge.request("POST", "/v1/chat/completions", headers, body).status == 200
    counting = Counting(edge)
    sent = len(edge.sent)
    assert edge.request("POST", "/v1/chat/completions", headers, body).status == 200
    # the batch before dispatch; after the answer, the usage upsert (design §4.1)
    assert counting.calls == ["batch", "run"] and len(edge.sent) == sent + 1
    # a storing turn: the batch, then the pages' upsert; after the answer, the usage's
    counting.calls.clear()
    assert edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(34, tag="RT")).status == 200
    assert counting.calls == ["batch", "all", "run"]
    window = edge.sql("SELECT COUNT(*) AS n FROM principal_requests")[0]["n"]
    assert window == (3 if limited else 0)


def test_concurrent_turns_never_pass_requests_per_minute(edge, headers):
    """Many turns at once on one loop: the admission is one statement, so exactly the limit passes."""
    import asyncio
    from multillm_edge import app
    from multillm_edge.base.http import Incoming
    from tests.support.inprocess import InProcessPlatform
    set_limits(edge, requests_per_minute=7)
    raw = json.dumps(rp.chat_body(3)).encode()
    pairs = [(k.lower(), v) for k, v in headers.items()]

    async def one():
        req = Incoming("POST", "https://edge.test/v1/chat/completions", pairs, stream=raw)
        return (await app.handle(req, InProcessPlatform(edge, raw, pairs))).status

    async def burst():
        return await asyncio.gather(*(one() for _ in range(20)))
    statuses = edge.loop.run_until_complete(burst())
    assert sorted(statuses) == [200] * 7 + [429] * 13 and len(edge.sent) == 7


def test_a_failing_batch_is_a_503_and_takes_no_slot(edge, headers):
    set_limits(edge, requests_per_minute=5)
    edge.executor.fail_sql = "json_group_object(m.model"   # the read, after the admission ran
    try:
        r = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(30))
    finally:
        edge.executor.fail_sql = None
    assert r.status == 503 and r.json()["error"]["code"] == "storage_failed"
    assert edge.sent == [] and edge.sql("SELECT * FROM principal_requests") == []   # rolled back
