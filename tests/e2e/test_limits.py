"""Limits per principal through the runner (real Pyodide, real local D1 and R2, design
§4.1): every limit's status, code and Retry-After; nothing stored or dispatched for a
request past one; a burst and 50 concurrent requests never pass `requests_per_minute`;
one D1 round trip per turn before dispatch, limits set or not."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from devkit import roleplay as rp
from devkit.fakes import FakeServer, answer as whole_answer
from devkit.runner import Edge

MODEL = "fake:rp-small"


def provider_reply(rec):
    return whole_answer(rec.path, 'ok')


@pytest.fixture(scope="module")
def provider():
    with FakeServer(provider_reply) as server:
        yield server


@pytest.fixture(scope="module")
def edge(provider, tmp_path_factory):
    with Edge(tmp_path_factory.mktemp("limits"), vars=rp.edge_vars(provider.url)) as edge:
        rp.set_model(edge, MODEL, 6000, 1000)
        yield edge


def limit(edge, principal, **values):
    cols = ", ".join(values)
    edge.sql(f"INSERT INTO principal_limits (principal, {cols}, updated_at) "
             f"VALUES (?1, {', '.join(f'?{i + 2}' for i in range(len(values)))}, 0) "
             f"ON CONFLICT(principal) DO UPDATE SET "
             + ", ".join(f"{c} = excluded.{c}" for c in values), principal, *values.values())


def reached(provider, player) -> int:
    """Requests of this player that reached the provider (each body carries its tag)."""
    return sum(1 for r in provider.received if player.principal.encode() in r.body)


def body(player, n=3, tag=""):
    return rp.chat_body(n, tag=(tag or player.principal))


def stored(edge, player):
    return edge.sql("SELECT page_id, expires_at FROM context_pages WHERE principal = ?1 ORDER BY page_id",
                    player.principal)


def test_requests_per_minute_10_a_burst_of_15_exactly_10_reach_the_provider(edge, provider):
    player = rp.new_player(edge)
    limit(edge, player.principal, requests_per_minute=10)
    with ThreadPoolExecutor(15) as pool:
        answers = list(pool.map(lambda _: edge.client.post("/v1/chat/completions", json=body(player),
                                                           headers=player.headers()), range(15)))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] * 10 + [429] * 5 and reached(provider, player) == 10
    for a in answers:
        if a.status_code == 429:
            err = a.json()["error"]
            assert (err["type"], err["code"], err["limit"], err["limit_value"]) == \
                ("rate_limit_error", "rate_limit_exceeded", "requests_per_minute", 10)
            assert 55 <= int(a.headers["retry-after"]) == err["retry_after_seconds"] <= 60
    assert len(edge.sql("SELECT at FROM principal_requests WHERE principal = ?1", player.principal)) == 10


def test_fifty_concurrent_requests_never_pass_requests_per_minute(edge, provider):
    player = rp.new_player(edge)
    limit(edge, player.principal, requests_per_minute=20)
    with ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(lambda i: edge.client.post("/v1/chat/completions", json=body(player),
                                                           headers=player.headers()), range(50)))
    assert sorted(a.status_code for a in answers) == [200] * 20 + [429] * 30
    assert reached(provider, player) == 20


@pytest.mark.parametrize("path,make,tagged", [("/v1/chat/completions", rp.chat_body, False),
                                               ("/v1/messages", rp.messages_body, True)])
def test_past_requests_per_minute_nothing_is_stored_or_sent_and_the_window_frees(edge, provider, path, make, tagged):
    player = rp.new_player(edge)
    limit(edge, player.principal, requests_per_minute=1)
    try:
        edge.set_clock(-50)                # the one admitted request: counted 50 s ago
        assert edge.client.post(path, json=make(30, tag=player.principal),
                                headers=player.headers()).status_code == 200
        edge.set_clock(0)
        rows, sent, objects = stored(edge, player), reached(provider, player), edge.r2_list()
        r = edge.client.post(path, json=make(32, tag=player.principal), headers=player.headers())
        assert r.status_code == 429
        assert 9 <= int(r.headers["retry-after"]) <= 11       # 60 - 50, give or take the second
        doc = r.json()
        err = doc["error"]
        assert (doc.get("type") == "error") is tagged and err["code"] == "rate_limit_exceeded"
        assert err["type"] == "rate_limit_error"
        assert (stored(edge, player), reached(provider, player), edge.r2_list()) == (rows, sent, objects)
        edge.set_clock(11)                 # the window frees
        assert edge.client.post(path, json=make(32, tag=player.principal),
                                headers=player.headers()).status_code == 200
    finally:
        edge.set_clock(0)


def test_past_tokens_per_day_a_429_until_midnight_and_nothing_sent(edge, provider):
    player = rp.new_player(edge)
    limit(edge, player.principal, tokens_per_day=500)
    day = time.strftime("%Y-%m-%d", time.gmtime())
    edge.sql("INSERT INTO principal_usage (principal, day, model, requests, input_tokens, output_tokens) "
             "VALUES (?1, ?2, ?3, 1, 400, 100)", player.principal, day, MODEL)
    r = edge.client.post("/v1/chat/completions", json=body(player, 30), headers=player.headers())
    wait = 86400 - int(time.time()) % 86400
    assert r.status_code == 429 and abs(int(r.headers["retry-after"]) - wait) <= 2
    assert r.json()["error"]["code"] == "token_budget_exceeded"
    assert reached(provider, player) == 0 and stored(edge, player) == []


def test_past_sessions_per_day_a_429_and_no_session(edge):
    key, principal = rp.seed_principal(edge)
    limit(edge, principal, sessions_per_day=2)
    auth = {"Authorization": f"Bearer {key}"}
    made = [edge.client.post("/v1/roleplay/sessions", headers=auth) for _ in range(3)]
    assert [m.status_code for m in made] == [201, 201, 429]
    err = made[2].json()["error"]
    assert (err["code"], err["limit"], err["limit_value"]) == ("session_limit_reached", "sessions_per_day", 2)
    assert abs(int(made[2].headers["retry-after"]) - (86400 - int(time.time()) % 86400)) <= 2
    assert len(edge.sql("SELECT session_id FROM roleplay_sessions WHERE principal = ?1", principal)) == 2


def test_past_active_bytes_across_sessions_a_413_and_nothing_stored_or_sent(edge, provider):
    player = rp.new_player(edge)
    assert edge.client.post("/v1/chat/completions", json=body(player, 30),
                            headers=player.headers()).status_code == 200
    held = sum(r["byte_length"] for r in edge.sql(
        "SELECT byte_length FROM context_pages WHERE principal = ?1", player.principal))
    limit(edge, player.principal, active_bytes=held + 50)
    second = rp.open_session(edge, player.key)
    rows, sent, objects = stored(edge, player), reached(provider, player), edge.r2_list()
    r = edge.client.post("/v1/chat/completions", json=body(player, 30, tag=player.principal + "b"),
                         headers={**player.headers(), "X-Roleplay-Session-ID": second})
    assert r.status_code == 413
    err = r.json()["error"]
    assert err["code"] == "context_principal_limit_exceeded"
    assert (err["active_bytes"], err["limit_bytes"]) == (held, held + 50) and err["needed_bytes"] > 50
    assert (stored(edge, player), reached(provider, player), edge.r2_list()) == (rows, sent, objects)


@pytest.mark.parametrize("limited", [False, True])
def test_a_turn_is_one_d1_round_trip_before_dispatch(edge, provider, limited):
    player = rp.new_player(edge)
    if limited:
        limit(edge, player.principal, requests_per_minute=100, tokens_per_day=10 ** 9,
              sessions_per_day=100, active_bytes=10 ** 8)
    b = body(player, 30)
    assert edge.client.post("/v1/chat/completions", json=b, headers=player.headers()).status_code == 200
    s0 = edge.stats()
    assert edge.client.post("/v1/chat/completions", json=b, headers=player.headers()).status_code == 200
    s1 = edge.stats()
    d = {k: s1[k] - s0[k] for k in ("d1_batches", "d1_statements", "d1_rows_changed")}
    # steady: one batch (admission + read), nothing else; limited, its one request row
    assert d == {"d1_batches": 1, "d1_statements": 0, "d1_rows_changed": 1 if limited else 0}


def test_a_failing_admission_is_a_503_and_nothing_is_sent_or_counted(edge, provider):
    """The batch is one transaction: its admission failing fails the read with it."""
    player = rp.new_player(edge)
    limit(edge, player.principal, requests_per_minute=5)
    edge.inject(d1_sql="INSERT INTO principal_requests")
    try:
        r = edge.client.post("/v1/messages", json=rp.messages_body(30, tag=player.principal),
                             headers=player.headers())
    finally:
        edge.inject(d1_sql="")
    assert r.status_code == 503 and r.json()["error"]["code"] == "storage_failed"
    assert r.json()["type"] == "error"
    assert reached(provider, player) == 0 and stored(edge, player) == []
    assert edge.sql("SELECT at FROM principal_requests WHERE principal = ?1", player.principal) == []
