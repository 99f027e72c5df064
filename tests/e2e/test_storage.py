"""Storage cost and hygiene through the runner (issue 9): a steady turn writes only its
new pages, one R2 object per request, no orphans under concurrency, bodies rewritten
before the lifecycle rule can take them, current-revision allowance, scheduled cleanup."""

from __future__ import annotations

import base64
import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from multillm_edge.core import config
from multillm_edge.core.pages import r2_key
from devkit import roleplay as rp
from devkit.fakes import FakeServer, Reply
from devkit.runner import Edge

REPLY = Reply(chunks=[b'{"id":"c1","object":"chat.completion","choices":[{"index":0,'
                      b'"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}'])
MODEL = "fake:rp-small"
PREFIX = "context-pages/"


@pytest.fixture(scope="module")
def provider_server():
    with FakeServer(REPLY) as server:
        yield server


@pytest.fixture(scope="module")
def edge(provider_server, tmp_path_factory):
    with Edge(tmp_path_factory.mktemp("storage"), vars=rp.edge_vars(provider_server.url)) as edge:
        rp.set_model(edge, MODEL, 6000, 1000)
        rp.set_model(edge, "fake:rp-32k", 32000, 1000)
        yield edge


@pytest.fixture
def provider(provider_server):
    provider_server.clear()
    provider_server.reply = REPLY
    return provider_server


@pytest.fixture
def player(edge):
    return rp.new_player(edge)


def post(edge, player, body):
    return edge.client.post("/v1/chat/completions", json=body, headers=player.headers())


def rows(edge, player) -> dict:
    return {r["page_id"]: r for r in edge.sql(
        "SELECT * FROM context_pages WHERE session_id = ?1", player.session)}


def fetch(edge, player, page_id):
    return edge.client.get(f"/v1/context/pages/{page_id}", params={"roleplay_session_id": player.session},
                           headers={"Authorization": f"Bearer {player.key}"})


def grow(msgs: list, i: int, size: int = 450) -> list:
    return msgs + [{"role": "assistant", "content": rp.line("G-a", 9000 + i, size)},
                   {"role": "user", "content": rp.line("G-u", 9000 + i, size)}]


def stored_at(edge, row) -> bytes:
    """The bytes at a row's location (an object its rows moved out of stays until the
    bucket's lifecycle rule takes it)."""
    return edge.r2_get(row["r2_key"])[row["r2_offset"]:row["r2_offset"] + row["byte_length"]]


def turn(edge, player, body):
    s0 = edge.stats()
    r = post(edge, player, body)
    assert r.status_code == 200, r.text
    s1 = edge.stats()
    return r.json()["context_pages"], {k: s1[k] - s0[k] for k in s0}


# --- lazy refresh: a steady turn writes only its new pages --------------------------

def test_steady_turns_write_only_their_new_pages_then_one_turn_refreshes_all(edge, provider, player):
    # every exchange its own page (no blocks, docs/design.md §5.7): 150+ rows to refresh
    body = rp.one_page_each("chat", rp.chat_body(200, model="fake:rp-32k", size=450, tag="SD"))
    msgs = body["messages"]
    pages, d = turn(edge, player, body)
    assert len(pages) > 150 and d["r2_puts"] == 1 and (d["d1_batches"], d["d1_statements"]) == (1, 1)
    assert d["d1_rows_changed"] == len(pages)
    moves = 0
    for i in range(4):
        before = rows(edge, player)
        msgs = rp.one_page_each("chat", {"messages": grow(msgs, i)})["messages"]
        pages, d = turn(edge, player, {**body, "messages": msgs})
        after = rows(edge, player)
        new = set(after) - set(before)
        changed = {pid for pid, row in after.items() if row != before.get(pid)}
        assert len(new) <= 1 and d["r2_puts"] == len(new)       # one put, for the new page
        assert d["d1_rows_changed"] == len(changed) and (d["d1_batches"], d["d1_statements"]) == (1, len(new))
        # Besides it, only rows merged into its object (§5.9): same page, same bytes.
        moved = changed - new
        assert not moved or new
        [key] = {after[pid]["r2_key"] for pid in new} or [None]
        for pid in moved:
            assert after[pid]["r2_key"] == key != before[pid]["r2_key"]
            assert all(after[pid][c] == before[pid][c] for c in ("sha256", "byte_length", "created_at"))
            assert rp.stored_page(edge, pid) == stored_at(edge, before[pid])
        moves += len(moved)
        assert {p["page_id"]: p["expires_at"] for p in pages} == \
            {pid: after[pid]["expires_at"] for pid in (p["page_id"] for p in pages)}
    assert moves                 # the steady turns' small objects were merged at least once
    # Nothing new: the context read (one batch with the admission, §4.1) is the only round
    # trip; nothing written at all.
    pages, d = turn(edge, player, {**body, "messages": msgs})
    assert (d["d1_batches"], d["d1_statements"], d["d1_rows_changed"], d["d1_rows_written"], d["r2_puts"]) == \
        (1, 0, 0, 0, 0)
    # Under half the TTL left: one turn refreshes every page once, in place...
    before = rows(edge, player)
    edge.set_clock(1900)
    try:
        pages, d = turn(edge, player, {**body, "messages": msgs})
        after = rows(edge, player)
        assert {p["page_id"] for p in pages} == set(after) == set(before)
        assert d["d1_rows_changed"] == len(after) and d["r2_puts"] == 0
        assert (d["d1_batches"], d["d1_statements"]) == (1, 1)
        for pid, row in after.items():
            assert row["expires_at"] >= before[pid]["expires_at"] + 1899
            assert row["signature"] != before[pid]["signature"]
            for col in ("r2_key", "r2_offset", "byte_length", "body_written_at", "created_at"):
                assert row[col] == before[pid][col], col
        assert {p["page_id"]: p["expires_at"] for p in pages} == {pid: r["expires_at"] for pid, r in after.items()}
        # ...and the next turn is steady again.
        pages, d = turn(edge, player, {**body, "messages": msgs})
        assert (d["d1_batches"], d["d1_statements"], d["d1_rows_changed"], d["r2_puts"]) == (1, 0, 0, 0)
        assert fetch(edge, player, pages[0]["page_id"]).status_code == 200
    finally:
        edge.set_clock(0)


# --- no orphans ----------------------------------------------------------------------

def test_35_concurrent_writers_hold_the_allowance_and_leave_no_orphans(edge, provider, player):
    before = set(edge.r2_list(PREFIX))
    bodies = [rp.chat_body(10, size=2500, tag=f"CW{i}") for i in range(35)]   # ~50 KB of pages each

    def send(body):
        with httpx.Client(base_url=edge.url, timeout=300) as client:
            r = client.post("/v1/chat/completions", json=body, headers=player.headers())
            return r.status_code, r.json().get("error", {}).get("code")

    with ThreadPoolExecutor(35) as pool:
        results = list(pool.map(send, bodies))
    assert {code for status, code in results if status != 200} == {"context_session_limit_exceeded"}
    accepted = sum(1 for status, _ in results if status == 200)
    assert 0 < accepted < 35
    assert len(provider.received) == accepted
    stored = rows(edge, player)
    assert 0 < sum(r["byte_length"] for r in stored.values()) <= config.SESSION_ALLOWANCE_BYTES
    objects = edge.r2_list(PREFIX)
    referenced = {r["r2_key"] for r in edge.sql("SELECT DISTINCT r2_key FROM context_pages")}
    assert set(objects) - before - referenced == set()             # no object without a row
    assert {r["r2_key"] for r in stored.values()} <= set(objects)   # no row without an object
    assert len({r["r2_key"] for r in stored.values()}) == accepted  # one object per request


# --- policy revisions ----------------------------------------------------------------

def test_old_revision_pages_no_longer_count(edge, provider, player):
    first = rp.chat_body(18, size=25000, tag="RV1")                 # ~0.9 MB of pages
    assert post(edge, player, first).status_code == 200
    second = rp.chat_body(6, size=25000, tag="RV2")                 # ~0.3 MB more
    r = post(edge, player, second)
    assert r.status_code == 413 and r.json()["error"]["code"] == "context_session_limit_exceeded"
    old = rows(edge, player)
    rp.set_policy(edge, player.principal, revision=2)
    r = post(edge, player, second)
    assert r.status_code == 200, r.text
    new = rows(edge, player)
    assert set(old) < set(new)                                      # old rows kept, not counted
    assert sum(row["byte_length"] for row in new.values()) > config.SESSION_ALLOWANCE_BYTES
    assert fetch(edge, player, next(iter(old))).status_code == 404  # and not retrievable
    assert fetch(edge, player, r.json()["context_pages"][0]["page_id"]).status_code == 200


# --- pages stored before shared objects ------------------------------------------------

def test_reused_page_stored_the_old_way_moves_into_a_new_object(edge, provider, player):
    from multillm_edge.core.pages import PageSigner
    body = rp.chat_body(30, tag="LG")
    pages, _ = turn(edge, player, body)
    pid = pages[3]["page_id"]
    data = rp.stored_page(edge, pid)
    # As the edge wrote it before migration 0002: its own object, offset 0, v1 signature,
    # body time unknown (the migration's default).
    [row] = edge.sql("SELECT * FROM context_pages WHERE page_id = ?1", pid)
    legacy = dict(row, r2_key=r2_key(pid), r2_offset=0, body_written_at=0)
    legacy["signature"] = PageSigner(rp.SIGNING_SECRET).row_signature(legacy)
    edge.r2_put(legacy["r2_key"], data)
    edge.sql("UPDATE context_pages SET r2_key = ?1, r2_offset = 0, body_written_at = 0, signature = ?2 "
             "WHERE page_id = ?3", legacy["r2_key"], legacy["signature"], pid)
    assert base64.b64decode(fetch(edge, player, pid).json()["body_base64"]) == data
    pages, d = turn(edge, player, body)
    assert d["r2_puts"] == 1 and d["d1_rows_changed"] == 1          # that page only
    key, offset, length = rp.page_location(edge, pid)
    assert key.startswith(PREFIX + "obj_") and rp.stored_page(edge, pid) == data
    edge.r2_delete(legacy["r2_key"])                                 # the lifecycle rule's turn
    assert base64.b64decode(fetch(edge, player, pid).json()["body_base64"]) == data


# --- scheduled cleanup -----------------------------------------------------------------

def _seed_expired(edge, n, age, authority="roleplay", tag="x"):
    edge.sql("""
        WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?1)
        INSERT INTO context_pages (page_id, authority, principal, session_id, policy_revision,
                                   sha256, byte_length, r2_key, created_at, expires_at, signature)
        SELECT 'cp_seed_' || ?2 || '_' || i, ?3, 'p_seed', 's_seed', 1, 'x', 1, 'k', 0,
               CAST(strftime('%s', 'now') AS INTEGER) - ?4, 's' FROM seq""", n, tag, authority, age)


def _seeded(edge) -> dict:
    counts: dict = {}
    for r in edge.sql("SELECT page_id FROM context_pages WHERE principal = 'p_seed'"):
        tag = r["page_id"].split("_")[2]
        counts[tag] = counts.get(tag, 0) + 1
    return counts


def _fire_scheduled(edge) -> dict:
    """GET /cdn-cgi/handler/scheduled → the cleanup's log line (without its timing)."""
    mark = len(edge.lines)
    r = edge.scheduled()
    assert r.status_code == 200 and r.text == "Ran scheduled event"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        found = [json.loads(x) for x in edge.lines[mark:] if '"route":"scheduled"' in x]
        if found:
            [log] = found
            return {k: v for k, v in log.items() if k != "ms"}
        time.sleep(0.02)
    raise AssertionError("no scheduled log line")


def test_scheduled_cleanup_deletes_old_expired_roleplay_rows_in_bounded_batches(edge, provider, player):
    bound = config.CLEANUP_BATCH_ROWS * config.CLEANUP_MAX_BATCHES
    week = config.DEFAULT_EXPIRED_ROW_RETENTION_SECONDS
    _seed_expired(edge, bound + 500, week + 3600, tag="old")
    _seed_expired(edge, 5, week + 3600, authority="managed", tag="managed")
    _seed_expired(edge, 7, week - 3600, tag="recent")
    pages, _ = turn(edge, player, rp.chat_body(30, tag="SC"))
    live = rows(edge, player)

    no_usage = {"usage_deleted": 0, "usage_batches": 1, "usage_more": False}   # §4.1's rows: none old
    assert _fire_scheduled(edge) == {"route": "scheduled", "deleted": bound, "batches": config.CLEANUP_MAX_BATCHES,
                     "more": True, "requests_deleted": 0, "requests_more": False,
                     **no_usage}
    assert _seeded(edge) == {"old": 500, "managed": 5, "recent": 7}
    assert _fire_scheduled(edge) == {"route": "scheduled", "deleted": 500, "batches": 1, "more": False,
                                     "requests_deleted": 0, "requests_more": False, **no_usage}
    assert _seeded(edge) == {"managed": 5, "recent": 7}
    assert rows(edge, player) == live
    assert fetch(edge, player, pages[0]["page_id"]).status_code == 200


# --- lifecycle-safe bodies --------------------------------------------------------------

def test_reused_page_past_the_horizon_is_rewritten_before_its_object_ages_out(start_edge, provider):
    edge = start_edge(rp.edge_vars(provider.url, PAGE_REWRITE_AFTER_SECONDS="2000"), name="horizon")
    rp.set_model(edge, MODEL, 6000, 1000)
    player = rp.new_player(edge)
    body = rp.chat_body(30, tag="HZ")
    try:
        pages, d = turn(edge, player, body)
        first = rows(edge, player)
        [k1] = {r["r2_key"] for r in first.values()}
        originals = {pid: rp.stored_page(edge, pid) for pid in first}
        edge.set_clock(1900)            # due for refresh, body younger than the horizon
        pages, d = turn(edge, player, body)
        assert d["r2_puts"] == 0 and d["d1_rows_changed"] == len(first)
        assert {r["r2_key"] for r in rows(edge, player).values()} == {k1}
        edge.set_clock(3900)            # due again, body now older than the horizon
        # Rewriting the same pages writes the same object (same content, same key): if D1
        # then fails, that object is not deleted, since rows still point into it.
        edge.inject(d1_sql="INSERT INTO context_pages")
        try:
            r = post(edge, player, body)
        finally:
            edge.inject(d1_sql="")
        assert r.status_code == 503 and r.json()["error"]["code"] == "storage_failed"
        assert edge.r2_list(PREFIX) == {k1: sum(len(b) for b in originals.values())}
        assert all(fetch(edge, player, pid).status_code == 200 for pid in first)
        # One new page too: the object holds it and every stale body, under a new key.
        msgs = grow(body["messages"], 1, 300)
        pages, d = turn(edge, player, {**body, "messages": msgs})
        now = rows(edge, player)
        assert len(now) == len(first) + 1
        assert d["r2_puts"] == 1 and d["d1_rows_changed"] == len(now)
        [k2] = {r["r2_key"] for r in now.values()}
        assert k2 != k1 and all(r["body_written_at"] > first[pid]["body_written_at"] + 3800
                                for pid, r in now.items() if pid in first)
        edge.r2_delete(k1)              # what the bucket's lifecycle rule does to the old object
        for pid, data in originals.items():
            r = fetch(edge, player, pid)
            assert r.status_code == 200 and base64.b64decode(r.json()["body_base64"]) == data
    finally:
        edge.set_clock(0)
