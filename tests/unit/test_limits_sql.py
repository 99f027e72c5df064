"""The limits per principal (design §4.1): the admission, the day limits, the principal's
active bytes and `principal_limits_and_counts`, on sqlite3 with the real migrations;
the pure helpers of core/limits.py."""

import asyncio
import calendar
import hashlib
import json
import time

import pytest

from devkit import admin_sql
from devkit.sqlite import SqliteExecutor, migrated_connection
from multillm_edge.core import limits
from multillm_edge.storage import store
from multillm_edge.routes import usage as usage_route
from multillm_edge.core.pages import PageSigner, r2_key

NOW = 1_800_000_000 + 3600            # 09:00:00Z (its UTC day began at 1_799_971_200)
KEY = hashlib.sha256(b"rpk_lim").hexdigest()
OTHER = hashlib.sha256(b"rpk_other").hexdigest()
SIGNER = PageSigner(b"limits-secret")


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def db():
    conn = migrated_connection()
    ex = SqliteExecutor(conn)
    run(admin_sql.insert_key(ex, KEY, "lim", 0))
    run(admin_sql.insert_key(ex, OTHER, "other", 0))
    for p in ("lim", "other"):
        run(admin_sql.set_policy(ex, p, 1, ["chat"], "standard", 0))
    run(store.create_session(ex, "rps_l", "lim", 0))
    run(store.create_session(ex, "rps_l2", "lim", 0))
    run(store.create_session(ex, "rps_o", "other", 0))
    yield ex
    conn.close()


def set_limits(ex, principal="lim", **values):
    run(admin_sql.set_limits(ex, principal, values, [], 0))


def turn(ex, key=KEY, session="rps_l", now=NOW):
    return run(store.load_generation_context(ex, key, session, [], now))


def requests(ex):
    return run(ex.all("SELECT principal, at FROM principal_requests ORDER BY at", []))


def usage(ex, principal, day, model, input_tokens, output_tokens):
    run(ex.run("INSERT INTO principal_usage (principal, day, model, requests, input_tokens, output_tokens) "
               "VALUES (?1, ?2, ?3, 1, ?4, ?5)", [principal, day, model, input_tokens, output_tokens]))


# -- pure helpers --------------------------------------------------------------------

def test_utc_day_and_day_bounds_agree_with_the_calendar():
    for t in (0, 86399, 86400, 951782400, 951868799, 4102444800 - 1, 1_800_000_000, NOW, 2 ** 33):
        assert limits.utc_day(t) == time.strftime("%Y-%m-%d", time.gmtime(t)), t
        start = limits.day_start(t)
        assert time.gmtime(start)[3:6] == (0, 0, 0) and 0 <= t - start < 86400
        assert limits.until_tomorrow(t) == start + 86400 - t and limits.until_tomorrow(t) >= 1
    assert calendar.timegm(time.strptime(limits.utc_day(NOW), "%Y-%m-%d")) == limits.day_start(NOW)


def test_window_frees_when_the_oldest_counted_request_is_60s_old():
    assert limits.window_frees_in(NOW - 59, NOW) == 1
    assert limits.window_frees_in(NOW, NOW) == 60
    assert limits.window_frees_in(None, NOW) == 60          # a limit of 0 counts nothing


def test_a_429_carries_retry_after_and_names_its_limit():
    err = limits.rate_limited(10, 7)
    assert err.status == 429 and err.headers == (("retry-after", "7"), ("x-should-retry", "true"))
    body = json.loads(err.body())
    assert body == {"error": {"type": "rate_limit_error", "code": "rate_limit_exceeded",
                              "message": "Rate limit reached: this key allows 10 requests per minute. "
                                         "Retry after 7 s.",
                              "limit": "requests_per_minute", "limit_value": 10, "retry_after_seconds": 7}}
    assert limits.token_budget_exceeded(5, 3).code == "token_budget_exceeded"
    assert limits.session_limit_reached(5, 3).details["limit"] == "sessions_per_day"
    assert limits.rate_limited(1, 1) is not limits.rate_limited(1, 1)     # fresh per raise


# -- the admission ---------------------------------------------------------------------

def test_without_limits_a_turn_counts_nothing_and_reads_no_limit(db):
    ctx = turn(db)
    assert ctx.limits == limits.NO_LIMITS and ctx.refusal is None and ctx.principal_active_bytes is None
    assert requests(db) == []


def test_requests_per_minute_counts_admitted_turns_and_refuses_past_the_limit(db):
    set_limits(db, requests_per_minute=3)
    for i in range(3):
        ctx = turn(db, now=NOW + i)
        assert ctx.refusal is None and ctx.limits.requests_per_minute == 3
    ctx = turn(db, now=NOW + 10)
    assert ctx.refusal.code == "rate_limit_exceeded"
    assert ctx.refusal.headers[0] == ("retry-after", "50")       # NOW leaves at NOW + 60
    assert requests(db) == [{"principal": "lim", "at": NOW + i} for i in range(3)]   # the 429 took none
    assert turn(db, now=NOW + 60).refusal is None                 # NOW left the window
    assert len(requests(db)) == 4


def test_a_request_refused_for_another_reason_takes_no_slot(db):
    set_limits(db, requests_per_minute=5)
    run(db.run("UPDATE roleplay_sessions SET ended_at = 1 WHERE session_id = 'rps_l2'", []))
    assert turn(db, session="rps_l2").session.ended                         # 404
    assert turn(db, session="rps_o").session.owned is False                  # 404
    assert turn(db, session="rps_none").session.exists is False              # 404
    run(admin_sql.set_policy(db, "lim", 1, ["other"], "standard", 0))
    assert not turn(db).policy.has_grant("chat")                            # 403
    run(db.run("UPDATE principal_policies SET grants = '[\"chat\", 1]' WHERE principal = 'lim'", []))
    assert not turn(db).policy.has_grant("chat")                            # 403: fail closed
    run(db.run("UPDATE principal_policies SET grants = 'not json' WHERE principal = 'lim'", []))
    assert not turn(db).policy.has_grant("chat")
    run(admin_sql.set_policy(db, "lim", 1, ["chat"], "standard", 0))
    run(db.run("UPDATE roleplay_keys SET revoked_at = 1 WHERE key_sha256 = ?1", [KEY]))
    assert turn(db).key_revoked                                             # 401
    assert turn(db, key="0" * 64) is None                                   # 401
    assert requests(db) == []


def test_a_limit_of_zero_refuses_every_request_for_a_whole_window(db):
    set_limits(db, requests_per_minute=0)
    ctx = turn(db)
    assert ctx.refusal.code == "rate_limit_exceeded" and ctx.refusal.headers[0] == ("retry-after", "60")
    assert requests(db) == []


def test_limits_are_per_principal(db):
    set_limits(db, requests_per_minute=1)
    assert turn(db).refusal is None and turn(db).refusal is not None
    assert turn(db, key=OTHER, session="rps_o").refusal is None
    assert requests(db) == [{"principal": "lim", "at": NOW}]


def test_tokens_per_day_admits_while_under_and_frees_at_utc_midnight(db):
    day = limits.utc_day(NOW)
    set_limits(db, tokens_per_day=1000, requests_per_minute=100)
    usage(db, "lim", day, "openai:a", 600, 300)
    usage(db, "lim", "2027-01-14", "openai:a", 10_000, 0)      # yesterday's does not count
    usage(db, "other", day, "openai:a", 10_000, 0)             # nor another principal's
    ctx = turn(db)
    assert ctx.refusal is None
    usage(db, "lim", day, "anthropic:b", 50, 50)               # 1000: at the limit
    ctx = turn(db, now=NOW + 1)
    assert ctx.refusal.code == "token_budget_exceeded"
    assert ctx.refusal.headers == (("retry-after", str(86400 - 9 * 3600 - 1)), ("x-should-retry", "false"))
    assert len(requests(db)) == 1                                # the 429 took no slot
    assert turn(db, now=limits.day_start(NOW) + 86400).refusal is None   # a new UTC day


def test_tokens_per_day_alone_counts_no_request_rows(db):
    set_limits(db, tokens_per_day=10)
    assert turn(db).refusal is None and requests(db) == []


# -- sessions_per_day -------------------------------------------------------------------

def test_sessions_per_day_checks_and_inserts_in_one_statement(db):
    set_limits(db, sessions_per_day=2)
    start = limits.day_start(NOW)
    run(db.run("UPDATE roleplay_sessions SET created_at = ?1 WHERE session_id = 'rps_l'", [start - 1]))
    assert run(store.create_session(db, "rps_1", "lim", NOW))
    assert run(store.create_session(db, "rps_2", "lim", NOW))   # rps_l2 was created at 0: another day
    assert not run(store.create_session(db, "rps_3", "lim", NOW))
    assert run(db.first("SELECT COUNT(*) AS n FROM roleplay_sessions WHERE session_id = 'rps_3'", []))["n"] == 0
    assert run(store.create_session(db, "rps_4", "other", NOW))
    assert run(store.create_session(db, "rps_5", "lim", start + 86400))       # the next day


# -- active_bytes across sessions -------------------------------------------------------

def page(body, size, session):
    sha = hashlib.sha256(body).hexdigest()
    pid = SIGNER.page_id("roleplay", "lim", session, 1, sha)
    row = {"page_id": pid, "authority": "roleplay", "principal": "lim", "session_id": session,
           "policy_revision": 1, "sha256": sha, "byte_length": size, "r2_key": r2_key(pid),
           "r2_offset": 0, "body_written_at": NOW, "created_at": NOW, "expires_at": NOW + 3600}
    row["signature"] = SIGNER.row_signature(row)
    return row


def upsert(ex, rows, session, now=NOW):
    return run(store.upsert_pages(ex, rows, store.PageSession("lim", session), now, 1 << 20))


def test_active_bytes_is_checked_across_sessions_in_the_upsert(db):
    set_limits(db, active_bytes=1000)
    a = page(b"a", 600, "rps_l")
    assert upsert(db, [a], "rps_l")
    assert not upsert(db, [page(b"b", 401, "rps_l2")], "rps_l2")            # 1001 > 1000
    assert upsert(db, [page(b"c", 400, "rps_l2")], "rps_l2")                # exactly 1000
    assert upsert(db, [a], "rps_l", now=NOW + 5)                            # a refresh: not counted twice
    assert not upsert(db, [page(b"d", 1, "rps_l")], "rps_l")
    counts = run(store.principal_limits_and_counts(db, "lim", NOW))
    assert counts.active_bytes == 1000 and counts.remaining(0)["active_bytes"] == 0
    assert turn(db).principal_active_bytes == 1000 and turn(db).active_bytes == 600
    run(admin_sql.set_limits(db, "lim", {}, ["active_bytes"], 0))          # cleared: the session's 1 MiB only
    assert upsert(db, [page(b"d", 1, "rps_l")], "rps_l")


def test_expired_and_other_revision_pages_do_not_count_against_active_bytes(db):
    set_limits(db, active_bytes=500)
    assert upsert(db, [page(b"a", 500, "rps_l")], "rps_l")
    assert upsert(db, [page(b"b", 500, "rps_l2")], "rps_l2", now=NOW + 3600)   # a expired
    run(admin_sql.set_policy(db, "lim", 2, ["chat"], "standard", 0))
    assert run(store.principal_limits_and_counts(db, "lim", NOW + 3600)).active_bytes == 0


# -- principal_limits_and_counts ---------------------------------------------------------

def test_limits_and_counts_for_the_usage_route(db):
    empty = run(store.principal_limits_and_counts(db, "nobody", NOW))
    assert empty.limits == limits.NO_LIMITS and empty.remaining(0) == dict.fromkeys(limits.NAMES)
    set_limits(db, requests_per_minute=10, tokens_per_day=5000, sessions_per_day=3, active_bytes=2000)
    for i in range(4):
        assert turn(db, now=NOW - 90 + i * 30).refusal is None      # 2 of them still in the window
    run(store.create_session(db, "rps_today", "lim", NOW - 10))
    upsert(db, [page(b"x", 700, "rps_l")], "rps_l")
    c = run(store.principal_limits_and_counts(db, "lim", NOW))
    assert (c.requests_in_window, c.requests_oldest, c.sessions_today, c.active_bytes) == (2, NOW - 30, 1, 700)
    assert c.limits.as_dict() == {"requests_per_minute": 10, "tokens_per_day": 5000,
                                  "sessions_per_day": 3, "active_bytes": 2000}
    assert c.remaining(4200) == {"requests_per_minute": 8, "tokens_per_day": 800,
                                 "sessions_per_day": 2, "active_bytes": 1300}
    assert c.remaining(9999)["tokens_per_day"] == 0


def test_purge_old_requests_keeps_the_window(db):
    set_limits(db, requests_per_minute=100)
    for t in (NOW - 61, NOW - 60, NOW - 59, NOW):
        turn(db, now=t)
    done = run(store.purge_old_requests(db, NOW, 10, 2))
    assert done == store.Purged(2, 1, False)
    assert [r["at"] for r in requests(db)] == [NOW - 59, NOW]


def test_healthz_checks_the_limits_tables():
    assert {"principal_limits", "principal_requests"} <= set(store.TABLES)


@pytest.mark.parametrize("name,params", [
    ("SQL_ADMIT_GENERATION", ["k", "s", NOW, "d"]),
    ("SQL_LOAD_GENERATION_CONTEXT", ["k", "s", "[]", NOW, "roleplay", "d"]),
    ("SQL_CREATE_SESSION", ["s", "p", NOW, NOW - 10]),
    ("SQL_PRINCIPAL_LIMITS_AND_COUNTS", ["p", NOW, NOW - 10, "roleplay"])])
def test_the_limits_statements_search_by_index_never_scan_a_table(name, params):
    """Each count is an index range of its principal (the admission: the key's row, then
    the absent limits row, for a principal without limits)."""
    conn = migrated_connection()
    plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + getattr(store, name), params)]
    scans = [p for p in plan if p.startswith("SCAN") and "VIRTUAL TABLE" not in p and "(subquery-" not in p
             and "CONSTANT ROW" not in p]
    assert not scans, plan
    if name == "SQL_ADMIT_GENERATION":
        assert plan[:2] == ["SEARCH k USING INDEX sqlite_autoindex_roleplay_keys_1 (key_sha256=?)",
                            "SEARCH l USING INDEX sqlite_autoindex_principal_limits_1 (principal=?)"]


def test_a_context_reports_every_limit_set_even_one_generation_does_not_count(db):
    set_limits(db, sessions_per_day=4)
    ctx = turn(db)
    assert ctx.limits.sessions_per_day == 4 and ctx.refusal is None and requests(db) == []
    assert limits.WINDOW_SECONDS == 60 and "r.at > ?3 - 60" in store.SQL_ADMIT_GENERATION


# -- the usage route and the enforcement count alike ---------------------------------------

def test_the_usage_route_and_the_limits_read_the_same_counts(db):
    """`GET /v1/roleplay/usage` (store.load_usage) and the limits (principal_limits_and_counts)
    are two statements over the same rows: their counts, and each limit's `remaining` as
    the route reports it, must agree, at every
    window edge (design §4.1) — requests in and just out of the 60 s window, sessions of
    today and yesterday, pages active, expired and of another revision, tokens of today
    and of yesterday, another principal's rows."""
    set_limits(db, requests_per_minute=10, tokens_per_day=5000, sessions_per_day=7, active_bytes=4000)
    start = limits.day_start(NOW)
    for at in (NOW - 61, NOW - 60, NOW - 59, NOW - 1, NOW):
        run(db.run("INSERT INTO principal_requests (principal, at) VALUES ('lim', ?1)", [at]))
    run(db.run("INSERT INTO principal_requests (principal, at) VALUES ('other', ?1)", [NOW]))
    for sid, created in (("rps_t1", start), ("rps_t2", NOW), ("rps_y", start - 1)):
        run(store.create_session(db, sid, "lim", created))
    run(store.create_session(db, "rps_ot", "other", NOW))
    assert upsert(db, [page(b"x", 700, "rps_l")], "rps_l")
    assert upsert(db, [page(b"y", 300, "rps_l2")], "rps_l2")
    old = page(b"z", 500, "rps_l")
    old["expires_at"] = NOW - 1
    run(db.run("INSERT INTO context_pages (page_id, authority, principal, session_id, policy_revision, "
               "sha256, byte_length, r2_key, r2_offset, body_written_at, created_at, expires_at, signature) "
               "VALUES (?1, 'roleplay', 'lim', 'rps_l', 1, ?2, 500, ?3, 0, 0, 0, ?4, ?5)",
               [old["page_id"], old["sha256"], old["r2_key"], NOW - 1, old["signature"]]))
    today, yesterday = limits.utc_day(NOW), limits.utc_day(start - 1)
    usage(db, "lim", today, "fake:a", 1200, 300)
    usage(db, "lim", today, "fake:b", 100, 50)
    usage(db, "lim", yesterday, "fake:a", 9000, 9000)
    usage(db, "other", today, "fake:a", 7777, 7777)
    for now in (NOW, NOW + 1, NOW + 59):
        counts = run(store.principal_limits_and_counts(db, "lim", now))
        found = run(store.load_usage(db, KEY, yesterday, now, limits.day_start(now)))
        tokens = found.tokens_on(today)
        assert tokens == 1650 and found.counts == counts, now
        assert usage_route.report(found, limits.day_start(now), 2)["remaining"] == counts.remaining(tokens), now
    # at NOW: NOW - 59, NOW - 1 and NOW in the window; rps_t1 and rps_t2 created today
    assert run(store.principal_limits_and_counts(db, "lim", NOW)).remaining(1650) == {
        "requests_per_minute": 10 - 3, "tokens_per_day": 5000 - 1650,
        "sessions_per_day": 7 - 2, "active_bytes": 4000 - 1000}
