"""Every store.py statement against sqlite3 with the real migrations applied."""

import asyncio
import hashlib
import sqlite3
from pathlib import Path

import pytest

from devkit import admin_sql
from devkit.sqlite import SqliteExecutor
from multillm_edge.storage import store
from multillm_edge.core.pages import Lifetime, Owner, PageSigner, r2_key

ROOT = Path(__file__).resolve().parents[2]
ALLOW = 1000
NOW = 1_000_000
KEY_A = hashlib.sha256(b"rpk_alice").hexdigest()
KEY_B = hashlib.sha256(b"rpk_bob").hexdigest()
SIGNER = PageSigner(b"test-secret")


def run(coro):
    return asyncio.run(coro)


def migrated_conn():
    conn = sqlite3.connect(":memory:")
    for f in sorted((ROOT / "migrations").glob("*.sql")):
        conn.executescript(f.read_text())
    return conn


@pytest.fixture
def db():
    conn = migrated_conn()
    ex = SqliteExecutor(conn)
    run(admin_sql.insert_key(ex, KEY_A, "alice", NOW - 100))
    run(admin_sql.insert_key(ex, KEY_B, "bob", NOW - 100))
    run(admin_sql.set_policy(ex, "alice", 2, ["chat"], "standard", NOW - 100))
    run(store.create_session(ex, "rps_a", "alice", NOW - 50))
    run(store.create_session(ex, "rps_b", "bob", NOW - 50))
    run(admin_sql.set_model(ex, "openai:gpt-4o", 128000, 16384))
    run(admin_sql.set_model(ex, "anthropic:claude", 200000, 8192))
    yield ex
    conn.close()


def page(body: bytes, size=None, principal="alice", session="rps_a", rev=2, expires=NOW + 3600,
         authority="roleplay", key=None, offset=0, written=NOW):
    sha = hashlib.sha256(body).hexdigest()
    pid = SIGNER.page_id(authority, principal, session, rev, sha)
    row = {"page_id": pid, "authority": authority, "principal": principal, "session_id": session,
           "policy_revision": rev, "sha256": sha, "byte_length": len(body) if size is None else size,
           "r2_key": key or r2_key(pid), "r2_offset": offset, "body_written_at": written,
           "created_at": NOW, "expires_at": expires}
    row["signature"] = SIGNER.row_signature(row)
    return row


def rows_of(ex):
    return run(ex.all("SELECT * FROM context_pages ORDER BY page_id", []))


ALICE_A = store.PageSession("alice", "rps_a")


def upsert(ex, rows, principal="alice", session="rps_a", now=NOW, allowance=ALLOW):
    return run(store.upsert_pages(ex, rows, store.PageSession(principal, session), now, allowance))


# -- generation context ---------------------------------------------------------

def test_generation_context_happy(db):
    p1 = page(b"one", 100)
    assert upsert(db, [p1])
    ctx = run(store.load_generation_context(db, KEY_A, "rps_a",
                                            ["openai:gpt-4o", "nope:x", "anthropic:claude"], NOW))
    assert ctx.principal == "alice" and not ctx.key_revoked
    assert ctx.policy == store.Policy(revision=2, grants=("chat",), retention="standard")
    assert ctx.policy.has_grant("chat")
    assert ctx.session == store.SessionState(exists=True, owned=True, ended=False) and ctx.session.open
    assert ctx.models == {"openai:gpt-4o": store.ModelWindow(128000, 16384),
                          "anthropic:claude": store.ModelWindow(200000, 8192)}
    assert set(ctx.active_pages) == {p1["page_id"]}
    assert ctx.active_bytes == 100


def test_generation_context_unknown_key(db):
    assert run(store.load_generation_context(db, "0" * 64, "rps_a", [], NOW)) is None


def test_generation_context_no_policy_no_session_no_models(db):
    ctx = run(store.load_generation_context(db, KEY_B, "rps_missing", [], NOW))
    assert ctx.principal == "bob" and ctx.policy is None
    assert ctx.session == store.SessionState(False, False, False) and not ctx.session.open
    assert ctx.models == {} and set(ctx.active_pages) == set() and ctx.active_bytes == 0


def test_generation_context_foreign_session(db):
    ctx = run(store.load_generation_context(db, KEY_A, "rps_b", [], NOW))
    assert ctx.session.exists and not ctx.session.owned and not ctx.session.open


def test_generation_context_ended_session_and_revoked_key(db):
    assert run(store.end_session(db, "rps_a", "alice", NOW))
    assert run(admin_sql.revoke_key(db, KEY_A, NOW))
    assert not run(admin_sql.revoke_key(db, KEY_A, NOW + 1))
    ctx = run(store.load_generation_context(db, KEY_A, "rps_a", [], NOW + 1))
    assert ctx.key_revoked and ctx.session.ended and not ctx.session.open


def test_generation_context_expired_pages_not_active(db):
    live, dead = page(b"live", 10), page(b"dead", 20, expires=NOW + 5)
    assert upsert(db, [live, dead])
    ctx = run(store.load_generation_context(db, KEY_A, "rps_a", [], NOW + 5))
    assert set(ctx.active_pages) == {live["page_id"]} and ctx.active_bytes == 10


def test_generation_context_many_models_one_param(db):
    names = [f"p:m{i}" for i in range(300)] + ["openai:gpt-4o"]
    ctx = run(store.load_generation_context(db, KEY_A, "rps_a", names, NOW))
    assert set(ctx.models) == {"openai:gpt-4o"}


def test_grants_and_retention_fail_closed(db):
    run(db.run("UPDATE principal_policies SET grants = 'garbage' WHERE principal = 'alice'", []))
    ctx = run(store.load_generation_context(db, KEY_A, "rps_a", [], NOW))
    assert ctx.policy.grants == () and not ctx.policy.has_grant("chat")


def test_set_policy_update_and_zero(db):
    run(admin_sql.set_policy(db, "alice", 3, ["chat", "x"], "zero", NOW))
    info = run(store.load_principal(db, KEY_A))
    assert info == store.PrincipalInfo("alice", False, store.Policy(3, ("chat", "x"), "zero"))
    with pytest.raises(ValueError):
        run(admin_sql.set_policy(db, "alice", 3, ["chat"], "forever", NOW))
    with pytest.raises(ValueError):
        run(admin_sql.set_policy(db, "alice", "3", ["chat"], "zero", NOW))


def test_load_principal(db):
    assert run(store.load_principal(db, "f" * 64)) is None
    assert run(store.load_principal(db, KEY_B)) == store.PrincipalInfo("bob", False, None)


def test_set_model_upsert_and_validation(db):
    run(admin_sql.set_model(db, "openai:gpt-4o", 1000, 10))
    ctx = run(store.load_generation_context(db, KEY_A, "rps_a", ["openai:gpt-4o"], NOW))
    assert ctx.models["openai:gpt-4o"] == store.ModelWindow(1000, 10)
    for bad in [(0, 1), (1, -1), (True, 1), (1.5, 1)]:
        with pytest.raises(ValueError):
            run(admin_sql.set_model(db, "x:y", *bad))


# -- upsert / allowance ---------------------------------------------------------

def test_allowance_exactly_at_limit_and_one_over(db):
    assert upsert(db, [page(b"a", 400)])
    assert not upsert(db, [page(b"b", 601)])  # 400 + 601 = 1001 > 1000
    assert len(rows_of(db)) == 1
    assert upsert(db, [page(b"b", 600)])  # exactly 1000
    assert len(rows_of(db)) == 2
    assert not upsert(db, [page(b"c", 1)])


def test_rejection_is_all_or_nothing(db):
    before = rows_of(db)
    assert not upsert(db, [page(b"a", 500), page(b"b", 400), page(b"c", 101)])
    assert rows_of(db) == before
    assert upsert(db, [page(b"a", 500), page(b"b", 400), page(b"c", 100)])
    assert len(rows_of(db)) == 3


def test_expired_rows_not_counted(db):
    assert upsert(db, [page(b"old", 900, expires=NOW + 10)])
    assert not upsert(db, [page(b"new", 200)], now=NOW + 9)
    assert upsert(db, [page(b"new", 200)], now=NOW + 10)  # expires_at == now: expired


def test_refresh_does_not_double_count_and_rewrites_expiry(db):
    p = page(b"a", 800)
    assert upsert(db, [p])
    later = NOW + 1000
    p2 = dict(p, expires_at=later + 3600, created_at=later)
    p2["signature"] = SIGNER.row_signature(p2)
    assert upsert(db, [p2], now=later)  # 800 counted once, not 1600
    (row,) = rows_of(db)
    assert row["expires_at"] == later + 3600 and row["signature"] == p2["signature"]
    assert row["created_at"] == NOW  # still active at refresh: original creation kept
    assert SIGNER.verify_row(row)
    # refresh plus a new page: 800 + 200 fits, 800 + 201 does not
    assert not upsert(db, [p2, page(b"z", 201)], now=later)
    assert upsert(db, [p2, page(b"z", 200)], now=later)


def test_revived_expired_row_gets_new_created_at(db):
    p = page(b"a", 10, expires=NOW + 1)
    assert upsert(db, [p])
    later = NOW + 5000
    p2 = dict(p, expires_at=later + 3600, created_at=later)
    assert upsert(db, [p2], now=later)
    assert rows_of(db)[0]["created_at"] == later


def test_duplicate_rows_in_one_call_counted_once(db):
    p = page(b"a", 600)
    assert upsert(db, [p, dict(p)])
    assert len(rows_of(db)) == 1
    with pytest.raises(ValueError):
        upsert(db, [p, dict(p, byte_length=1)])


def test_allowance_is_per_principal_and_session(db):
    run(store.create_session(db, "rps_a2", "alice", NOW))
    assert upsert(db, [page(b"a", 1000)])
    assert upsert(db, [page(b"a", 1000, session="rps_a2")], session="rps_a2")
    assert upsert(db, [page(b"a", 1000, principal="bob", session="rps_b")], principal="bob",
                  session="rps_b")


def test_foreign_page_id_never_overwritten(db):
    p = page(b"a", 10)
    assert upsert(db, [p])
    hijack = dict(p, principal="bob", session_id="rps_b")
    assert not upsert(db, [hijack, page(b"q", 1, principal="bob", session="rps_b")],
                      principal="bob", session="rps_b")
    rows = rows_of(db)
    assert len(rows) == 1 and rows[0]["principal"] == "alice"
    managed = dict(p, authority="managed")
    assert not upsert(db, [managed])
    assert rows_of(db)[0]["authority"] == "roleplay"


def test_row_must_match_principal_session(db):
    with pytest.raises(ValueError):
        upsert(db, [page(b"a", 1, principal="bob")])
    with pytest.raises(ValueError):
        upsert(db, [dict(page(b"a", 1), byte_length="1")])


def test_upsert_empty_is_noop(db):
    assert upsert(db, [])
    assert rows_of(db) == []


def test_upsert_many_rows_one_param(db):
    rows = [page(str(i).encode(), 1) for i in range(500)]
    assert run(store.upsert_pages(db, rows, ALICE_A, NOW, 500))
    assert len(rows_of(db)) == 500
    assert not run(store.upsert_pages(db, rows + [page(b"x", 1)], ALICE_A, NOW, 500))


def test_unicode_and_quotes_round_trip(db):
    run(admin_sql.insert_key(db, "1" * 64, "ünï'cödé \"x\" 🎭", NOW))
    run(store.create_session(db, "rps_'q", "ünï'cödé \"x\" 🎭", NOW))
    p = page(b"u", 3, principal="ünï'cödé \"x\" 🎭", session="rps_'q")
    assert upsert(db, [p], principal="ünï'cödé \"x\" 🎭", session="rps_'q")
    facts = run(store.load_page_for_retrieval(db, "1" * 64, "rps_'q", p["page_id"], NOW))
    assert facts.page == p and SIGNER.verify_row(facts.page)
    assert facts.session.owned


# -- retrieval ------------------------------------------------------------------

def test_retrieval_facts(db):
    p = page(b"a", 10)
    assert upsert(db, [p])
    f = run(store.load_page_for_retrieval(db, KEY_A, "rps_a", p["page_id"], NOW))
    assert f.principal == "alice" and not f.key_revoked
    assert f.policy.revision == 2 and f.session.open
    assert f.page == p and f.page_active
    assert list(f.page) == list(store.PAGE_COLUMNS)
    f = run(store.load_page_for_retrieval(db, KEY_A, "rps_a", p["page_id"], p["expires_at"]))
    assert f.page == p and not f.page_active


def test_retrieval_absent_page_foreign_session_unknown_key(db):
    f = run(store.load_page_for_retrieval(db, KEY_A, "rps_b", "cp_nope", NOW))
    assert f.page is None and not f.page_active
    assert f.session.exists and not f.session.owned
    f = run(store.load_page_for_retrieval(db, KEY_B, "rps_a", page(b"x")["page_id"], NOW))
    assert f.policy is None and not f.session.owned
    assert run(store.load_page_for_retrieval(db, "e" * 64, "rps_a", "cp_x", NOW)) is None


def test_retrieval_foreign_principal_page_is_reported_raw(db):
    p = page(b"b", 5, principal="bob", session="rps_b")
    assert upsert(db, [p], principal="bob", session="rps_b")
    f = run(store.load_page_for_retrieval(db, KEY_A, "rps_a", p["page_id"], NOW))
    assert f.page["principal"] == "bob"  # caller must reject (404)


def test_retrieval_ended_session(db):
    assert run(store.end_session(db, "rps_a", "alice", NOW))
    f = run(store.load_page_for_retrieval(db, KEY_A, "rps_a", "cp_x", NOW))
    assert f.session.exists and f.session.owned and f.session.ended and not f.session.open


# -- search -----------------------------------------------------------------------

def test_session_pages_are_the_active_rows_of_the_current_revision(db):
    live = page(b"live", 4, key="context-pages/obj_" + "A" * 43, offset=7)
    other_rev = page(b"old", 3, rev=1)
    expired = page(b"dead", 4, expires=NOW)
    other_session = page(b"s", 1, session="rps_x")
    managed = page(b"m", 1, authority="managed")
    assert upsert(db, [live, expired]) and upsert(db, [other_session], session="rps_x")
    run(db.run("INSERT INTO context_pages (page_id, authority, principal, session_id, policy_revision,"
               " sha256, byte_length, r2_key, created_at, expires_at, signature) SELECT ?1, 'managed',"
               " 'alice', 'rps_a', 2, 'x', 1, 'k', 0, ?2, 's'", [managed["page_id"], NOW + 10]))
    run(db.run("INSERT INTO context_pages (page_id, authority, principal, session_id, policy_revision,"
               " sha256, byte_length, r2_key, created_at, expires_at, signature) SELECT ?1, 'roleplay',"
               " 'alice', 'rps_a', 1, 'x', 1, 'k', 0, ?2, 's'", [other_rev["page_id"], NOW + 10]))
    f = run(store.load_session_pages(db, KEY_A, "rps_a", NOW))
    assert f.principal == "alice" and f.policy.revision == 2 and f.session.open
    assert f.pages == [live] and list(f.pages[0]) == list(store.PAGE_COLUMNS)
    assert SIGNER.verify_row(f.pages[0])


def test_session_pages_foreign_ended_unknown(db):
    assert upsert(db, [page(b"b", 1, principal="bob", session="rps_b")], principal="bob", session="rps_b")
    f = run(store.load_session_pages(db, KEY_A, "rps_b", NOW))
    assert f.session.exists and not f.session.owned and f.pages == []
    assert run(store.load_session_pages(db, "e" * 64, "rps_a", NOW)) is None
    f = run(store.load_session_pages(db, KEY_B, "rps_b", NOW))
    assert f.policy is None and f.pages == []       # no policy: no current revision
    assert run(store.end_session(db, "rps_a", "alice", NOW))
    assert run(store.load_session_pages(db, KEY_A, "rps_a", NOW)).session.ended


def test_session_pages_many_rows_one_statement(db):
    rows = [page(str(i).encode(), 1) for i in range(300)]
    assert upsert(db, rows)
    f = run(store.load_session_pages(db, KEY_A, "rps_a", NOW))
    assert sorted(p["page_id"] for p in f.pages) == sorted(r["page_id"] for r in rows)


# -- sessions -------------------------------------------------------------------

def test_end_session_rules(db):
    assert not run(store.end_session(db, "rps_b", "alice", NOW))  # foreign
    assert not run(store.end_session(db, "rps_zzz", "alice", NOW))  # unknown
    assert run(store.end_session(db, "rps_a", "alice", NOW))
    assert not run(store.end_session(db, "rps_a", "alice", NOW + 1))  # already ended
    row = run(db.first("SELECT * FROM roleplay_sessions WHERE session_id = 'rps_a'", []))
    assert row["ended_at"] == NOW


def test_create_session_duplicate_raises(db):
    with pytest.raises(sqlite3.IntegrityError):
        run(store.create_session(db, "rps_a", "bob", NOW))


def test_nulls_round_trip(db):
    row = run(db.first("SELECT * FROM roleplay_keys WHERE key_sha256 = ?1", [KEY_A]))
    assert row["revoked_at"] is None
    row = run(db.first("SELECT * FROM roleplay_sessions WHERE session_id = ?1", ["rps_a"]))
    assert row["ended_at"] is None


# -- health ---------------------------------------------------------------------

def test_missing_tables():
    conn = sqlite3.connect(":memory:")
    ex = SqliteExecutor(conn)
    assert run(store.missing_tables(ex)) == list(store.TABLES)
    for f in sorted((ROOT / "migrations").glob("*.sql")):
        conn.executescript(f.read_text())
    assert run(store.missing_tables(ex)) == []
    conn.execute("DROP TABLE models")
    assert run(store.missing_tables(ex)) == ["models"]


# -- inline ---------------------------------------------------------------------

EVIL = ["'; DROP TABLE roleplay_keys; --", "a''b", "?1 ?2", "\\' OR 1=1 --", "line\nbreak",
        "ünï🎭", "/* x */", "$1 :name @v", '"quoted"', ""]


def test_inline_literals():
    assert admin_sql.inline("SELECT ?1, ?2, ?3", ["it's", 5, None]) == "SELECT 'it''s', 5, NULL"
    assert admin_sql.inline("SELECT ?, ?", [1, 2]) == "SELECT 1, 2"
    assert admin_sql.inline("SELECT '?1', \"?1\", ?1 -- ?2\n", [7]) == "SELECT '?1', \"?1\", 7 -- ?2\n"
    assert admin_sql.inline("SELECT ?2, ?1, ?2", [1, 2]) == "SELECT 2, 1, 2"
    for bad in [[1.5], [b"x"], [True], ["a\x00b"], [2 ** 63], ["\ud800"]]:
        with pytest.raises((TypeError, ValueError)):
            admin_sql.inline("SELECT ?1", bad)
    with pytest.raises(ValueError):
        admin_sql.inline("SELECT ?1, ?2", [1])
    with pytest.raises(ValueError):
        admin_sql.inline("SELECT ?1", [1, 2])
    with pytest.raises(ValueError):
        admin_sql.inline("SELECT :x", [])


@pytest.mark.parametrize("evil", EVIL)
def test_inline_injection_stored_verbatim(evil):
    conn = migrated_conn()
    ex = SqliteExecutor(conn)

    class Inliner:
        async def run(self, sql, params):
            conn.executescript(admin_sql.inline(sql, params))
            return conn.total_changes

    key = hashlib.sha256(evil.encode()).hexdigest()
    run(admin_sql.insert_key(Inliner(), key, evil, NOW))
    grants = [evil, "chat"] if evil else ["chat"]
    run(admin_sql.set_policy(Inliner(), evil, 1, grants, "standard", NOW))
    run(store.create_session(Inliner(), "rps_" + evil, evil, NOW))
    run(admin_sql.set_model(Inliner(), evil + ":m", 10, 5))
    info = run(store.load_principal(ex, key))
    assert info.principal == evil
    assert info.policy.grants == tuple(grants)
    assert run(store.missing_tables(ex)) == []
    row = run(ex.first("SELECT principal FROM roleplay_sessions WHERE session_id = ?1", ["rps_" + evil]))
    assert row["principal"] == evil
    ctx = run(store.load_generation_context(ex, key, "rps_" + evil, [evil + ":m"], NOW))
    assert ctx.session.open and evil + ":m" in ctx.models


def test_every_statement_inlines():
    # every SQL constant in store.py renders (placeholders found, none left over)
    for name in dir(store):
        if name.startswith("SQL_"):
            sql = getattr(store, name)
            import re
            idx = {int(m) for m in re.findall(r"\?(\d+)", sql)}
            out = admin_sql.inline(sql, list(range(1, max(idx, default=0) + 1)))
            assert "?" not in out.replace("'$.", "")


# -- issue 9: shared objects, lazy refresh, revisions, cleanup, migration ----------

OBJ_A = "context-pages/obj_" + "A" * 42 + "E"
OBJ_B = "context-pages/obj_" + "B" * 42 + "E"
HORIZON = 86400


def test_upsert_returns_each_row_as_it_now_stands(db):
    a, b = page(b"a", 10, key=OBJ_A, offset=0), page(b"b", 20, key=OBJ_A, offset=10)
    done = upsert(db, [a, b])
    assert done.accepted and set(done.rows) == {a["page_id"], b["page_id"]}
    assert done.rows[b["page_id"]] == store.ActivePage(NOW + 3600, NOW, OBJ_A, 10, 20)
    stored = {r["page_id"]: r for r in rows_of(db)}
    assert stored[b["page_id"]]["r2_offset"] == 10 and SIGNER.verify_row(stored[b["page_id"]])
    refused = upsert(db, [page(b"c", ALLOW)])
    assert not refused and refused.rows == {}


def test_context_lists_active_pages_with_their_location(db):
    a = page(b"a", 10, key=OBJ_A, offset=5, written=NOW - 7)
    dead = page(b"d", 10, expires=NOW + 1)
    assert upsert(db, [a, dead])
    ctx = run(store.load_generation_context(db, KEY_A, "rps_a", [], NOW + 1))
    assert ctx.active_pages == {a["page_id"]: store.ActivePage(NOW + 3600, NOW - 7, OBJ_A, 5, 10)}
    assert set(ctx.active_pages) == {a["page_id"]} and ctx.active_bytes == 10


def test_allowance_counts_the_current_revision_only(db):
    old = page(b"old", 900, rev=1)
    assert run(store.upsert_pages(db, [old], ALICE_A, NOW, ALLOW))
    # alice's policy is at revision 2: the revision-1 page is neither listed nor counted.
    ctx = run(store.load_generation_context(db, KEY_A, "rps_a", [], NOW))
    assert ctx.active_pages == {} and ctx.active_bytes == 0
    assert upsert(db, [page(b"new", 1000)])          # 900 + 1000 would not fit one revision
    assert len(rows_of(db)) == 2                      # the old page is not deleted
    assert not upsert(db, [page(b"one more", 1)])
    with pytest.raises(ValueError):
        upsert(db, [page(b"x", 1), page(b"y", 1, rev=1)])


def test_refresh_in_place_keeps_location_and_body_time(db):
    p = page(b"a", 10, key=OBJ_A, offset=3, written=NOW - 100)
    assert upsert(db, [p])
    later = NOW + 2000
    p2 = page(b"a", 10, key=OBJ_A, offset=3, written=NOW - 100, expires=later + 3600)
    done = upsert(db, [p2], now=later)
    assert done.rows[p["page_id"]] == store.ActivePage(later + 3600, NOW - 100, OBJ_A, 3, 10)
    (row,) = rows_of(db)
    assert row["created_at"] == NOW and SIGNER.verify_row(row)


def test_row_written_meanwhile_elsewhere_is_kept(db):
    """Two requests page the same exchange at once: the second one's row would repoint
    the page to its own object and strand the first one's; the first row stays."""
    first = page(b"a", 10, key=OBJ_A, offset=0)
    assert upsert(db, [first])
    second = page(b"a", 10, key=OBJ_B, offset=50)
    done = run(store.upsert_pages(db, [second, page(b"z", 5, key=OBJ_B, offset=0)], ALICE_A,
                                  NOW + 1, ALLOW, young_after=NOW + 1 - HORIZON))
    assert done and done.rows[first["page_id"]].r2_key == OBJ_A
    assert {r["page_id"]: r["r2_key"] for r in rows_of(db)}[first["page_id"]] == OBJ_A
    assert all(SIGNER.verify_row(r) for r in rows_of(db))


def test_stale_body_is_repointed(db):
    first = page(b"a", 10, key=OBJ_A, offset=0, written=NOW - HORIZON)
    assert upsert(db, [first])
    moved = page(b"a", 10, key=OBJ_B, offset=50, written=NOW)
    done = run(store.upsert_pages(db, [moved], ALICE_A, NOW, ALLOW, young_after=NOW - HORIZON))
    assert done.rows[first["page_id"]] == store.ActivePage(NOW + 3600, NOW, OBJ_B, 50, 10)


def test_upsert_payload_is_compact(db):
    """Rows travel as arrays with their object key once (D1 caps a value at 2 MB)."""
    rows = [page(str(i).encode(), 1, key=OBJ_A, offset=i) for i in range(6000)]
    payload, keys = store._upsert_payload([store._upsert_item(r, "alice", "rps_a", NOW) for r in rows])
    assert keys == f'["{OBJ_A}"]' and len(payload) < 6000 * 220
    assert run(store.upsert_pages(db, rows, ALICE_A, NOW, 10_000))
    ctx = run(store.load_generation_context(db, KEY_A, "rps_a", [], NOW))
    assert len(ctx.active_pages) == 6000


def _expired_rows(db, n, expires, authority="roleplay", session="rps_a"):
    run(db.run("""
        WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?1)
        INSERT INTO context_pages (page_id, authority, principal, session_id, policy_revision,
                                   sha256, byte_length, r2_key, created_at, expires_at, signature)
        SELECT ?2 || i, ?3, 'alice', ?4, 2, 'x', 1, 'k', 0, ?5, 's' FROM seq""",
               [n, f"cp_{authority}_{expires}_", authority, session, expires]))


def test_purge_deletes_old_expired_roleplay_rows_in_bounded_batches(db):
    cutoff = NOW - 7 * 86400
    _expired_rows(db, 25, cutoff - 1)                       # expired beyond retention
    _expired_rows(db, 4, cutoff - 1, authority="managed")   # Flask's: never touched
    _expired_rows(db, 3, cutoff)                            # not yet beyond retention
    live = page(b"live", 1)
    assert upsert(db, [live])
    purged = run(store.purge_expired_pages(db, cutoff, batch_rows=10, max_batches=2))
    assert purged == store.Purged(deleted=20, batches=2, more=True)
    purged = run(store.purge_expired_pages(db, cutoff, batch_rows=10, max_batches=2))
    assert purged == store.Purged(deleted=5, batches=1, more=False)
    left = run(db.all("SELECT authority, expires_at, COUNT(*) AS n FROM context_pages "
                      "GROUP BY authority, expires_at ORDER BY authority, expires_at", []))
    assert left == [{"authority": "managed", "expires_at": cutoff - 1, "n": 4},
                    {"authority": "roleplay", "expires_at": cutoff, "n": 3},
                    {"authority": "roleplay", "expires_at": NOW + 3600, "n": 1}]
    assert run(store.purge_expired_pages(db, cutoff, 10, 2)) == store.Purged(0, 1, False)


def test_migration_keeps_rows_written_before_it():
    """0001 alone, a row as the edge wrote it then, then 0002: the row gains offset 0 and
    body_written_at 0 (unknown: rewritten at next reuse), and still verifies (v1)."""
    conn = sqlite3.connect(":memory:")
    first, *rest = sorted((ROOT / "migrations").glob("*.sql"))
    conn.executescript(first.read_text())
    old = SIGNER.make_row(Owner("roleplay", "alice", "rps_a", 2), hashlib.sha256(b"o").hexdigest(), 1,
                         Lifetime(NOW, 3600))
    cols = [c for c in old if c not in ("r2_offset", "body_written_at")]
    conn.execute(f"INSERT INTO context_pages ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                 [old[c] for c in cols])
    for f in rest:
        conn.executescript(f.read_text())
    ex = SqliteExecutor(conn)
    (row,) = rows_of(ex)
    assert (row["r2_offset"], row["body_written_at"]) == (0, 0)
    assert SIGNER.verify_row(row) and row["signature"] == old["signature"]


def test_active_pages_decode_integers_and_integral_reals_alike():
    """SQLite's json_array writes INTEGER columns as JSON integers; a REAL column value
    (integral) decodes to the same ActivePage, a tuple either way."""
    text = '[["cp_a",100,90,"k",0,7],["cp_b",100.0,90.0,"k",5.0,8.0]]'
    pages = store._active_pages(text)
    assert pages == {"cp_a": store.ActivePage(100, 90, "k", 0, 7), "cp_b": store.ActivePage(100, 90, "k", 5, 8)}
    assert all(type(p) is store.ActivePage and type(p.r2_offset) is int and type(p.byte_length) is int
               for p in pages.values())
    assert store._active_pages(None) == {}


# -- issue 18: merging moves rows (docs/design.md §5.9) ---------------------------------

OBJ_C = "context-pages/obj_" + "C" * 42 + "E"


def test_context_lists_each_active_rows_byte_length(db):
    a, b = page(b"a", 10, key=OBJ_A, offset=0), page(b"b", 32, key=OBJ_A, offset=10)
    assert upsert(db, [a, b])
    ctx = run(store.load_generation_context(db, KEY_A, "rps_a", [], NOW))
    assert {pid: p.byte_length for pid, p in ctx.active_pages.items()} == {a["page_id"]: 10, b["page_id"]: 32}
    assert all(type(p) is store.ActivePage for p in ctx.active_pages.values())


def test_a_merge_moves_a_young_row_from_where_it_was_read(db):
    """A young row elsewhere is kept (a concurrent writer's), unless the incoming row is
    a merge moving it from that very location: then it is repointed, still verifying."""
    first = page(b"a", 10, key=OBJ_A, offset=4, written=NOW - 5)
    assert upsert(db, [first])
    moved = {**page(b"a", 10, key=OBJ_B, offset=50, written=NOW + 1, expires=NOW + 3600),
             "moved_from": (OBJ_A, 4)}
    done = run(store.upsert_pages(db, [moved], ALICE_A, NOW + 1, ALLOW, young_after=NOW + 1 - HORIZON))
    assert done.rows[first["page_id"]] == store.ActivePage(NOW + 3600, NOW + 1, OBJ_B, 50, 10)
    (row,) = rows_of(db)
    assert (row["r2_key"], row["r2_offset"], row["created_at"]) == (OBJ_B, 50, NOW)
    assert SIGNER.verify_row(row)


def test_a_merge_never_moves_a_row_someone_moved_meanwhile(db):
    first = page(b"a", 10, key=OBJ_C, offset=0, written=NOW)     # a concurrent merge won
    assert upsert(db, [first])
    late = {**page(b"a", 10, key=OBJ_B, offset=50, written=NOW + 1), "moved_from": (OBJ_A, 4)}
    done = run(store.upsert_pages(db, [late], ALICE_A, NOW + 1, ALLOW, young_after=NOW + 1 - HORIZON))
    assert done and done.rows[first["page_id"]].r2_key == OBJ_C
    (row,) = rows_of(db)
    assert (row["r2_key"], row["signature"]) == (OBJ_C, first["signature"])


def test_moved_rows_count_once_in_the_allowance(db):
    a, b = page(b"a", 600, key=OBJ_A, offset=0), page(b"b", 300, key=OBJ_C, offset=0)
    assert upsert(db, [a, b])
    moved = {**page(b"a", 600, key=OBJ_B, offset=100), "moved_from": (OBJ_A, 0)}
    assert upsert(db, [moved, page(b"n", 100, key=OBJ_B, offset=0)])     # 600 + 300 + 100 = ALLOW
    assert not upsert(db, [{**page(b"b", 300, key=OBJ_B, offset=700), "moved_from": (OBJ_C, 0)},
                           page(b"m", 1, key=OBJ_B, offset=1000)])
    with pytest.raises(ValueError):
        upsert(db, [{**page(b"x", 1), "moved_from": ("k", "0")}])


def test_uncounted_rows_are_left_out_of_both_sums(db):
    # Single pages a block covers (docs/design.md §5.9): active and kept, not counted.
    single = page(b"s", 600)
    assert upsert(db, [single])
    block = page(b"block", 700)
    assert not upsert(db, [block])                       # 600 + 700 > 1000
    assert run(store.upsert_pages(db, [block], ALICE_A, NOW, 1000, uncounted=[single["page_id"]]))
    assert {r["page_id"] for r in rows_of(db)} == {single["page_id"], block["page_id"]}
    # an uncounted row rewritten in the same statement is not counted either
    assert run(store.upsert_pages(db, [single, page(b"t", 300)], ALICE_A, NOW, 1000,
                                  uncounted=[single["page_id"]]))
    assert not run(store.upsert_pages(db, [page(b"u", 301)], ALICE_A, NOW, 1000,
                                      uncounted=[single["page_id"]]))   # 700 + 300 + 301


# -- GET /v1/models (docs/design.md §2) ------------------------------------------

def test_principal_models_one_statement(db):
    got = run(store.load_principal_models(db, KEY_A))
    assert got == store.PrincipalModels("alice", False, store.Policy(2, ("chat",), "standard"),
                                        ("anthropic:claude", "openai:gpt-4o"))
    assert run(store.load_principal_models(db, KEY_B)).policy is None
    assert run(store.load_principal_models(db, "f" * 64)) is None


def test_principal_models_revoked_key_and_empty_table(db):
    assert run(admin_sql.revoke_key(db, KEY_A, NOW))
    run(db.run("DELETE FROM models", []))
    got = run(store.load_principal_models(db, KEY_A))
    assert got.key_revoked is True and got.models == ()


def test_model_providers_are_the_distinct_prefixes_of_registered_models(db):
    for model in ("openai:gpt-4o-mini", "ghost:a:b"):
        run(admin_sql.set_model(db, model, 10, 5))
    # one row per provider, split at the first ':' (a model id may hold ':')
    assert run(store.model_providers(db)) == ["anthropic", "ghost", "openai"]
