"""Every store.py statement against sqlite3 with the real migrations applied."""

import asyncio
import hashlib
import sqlite3
from pathlib import Path

import pytest

from multillm_edge import store
from multillm_edge.pages import PageSigner, r2_key

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
    ex = store.SqliteExecutor(conn)
    run(store.insert_key(ex, KEY_A, "alice", NOW - 100))
    run(store.insert_key(ex, KEY_B, "bob", NOW - 100))
    run(store.set_policy(ex, "alice", 2, ["chat"], "standard", NOW - 100))
    run(store.create_session(ex, "rps_a", "alice", NOW - 50))
    run(store.create_session(ex, "rps_b", "bob", NOW - 50))
    run(store.set_model(ex, "openai:gpt-4o", 128000, 16384))
    run(store.set_model(ex, "anthropic:claude", 200000, 8192))
    yield ex
    conn.close()


def page(body: bytes, size=None, principal="alice", session="rps_a", rev=2, expires=NOW + 3600,
         authority="roleplay"):
    sha = hashlib.sha256(body).hexdigest()
    pid = SIGNER.page_id(authority, principal, session, rev, sha)
    row = {"page_id": pid, "authority": authority, "principal": principal, "session_id": session,
           "policy_revision": rev, "sha256": sha, "byte_length": len(body) if size is None else size,
           "r2_key": r2_key(pid), "created_at": NOW, "expires_at": expires}
    row["signature"] = SIGNER.row_signature(row)
    return row


def rows_of(ex):
    return run(ex.all("SELECT * FROM context_pages ORDER BY page_id", []))


def upsert(ex, rows, principal="alice", session="rps_a", now=NOW, allowance=ALLOW):
    return run(store.upsert_pages(ex, rows, principal, session, now, allowance))


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
    assert ctx.active_page_ids == {p1["page_id"]}
    assert ctx.active_bytes == 100


def test_generation_context_unknown_key(db):
    assert run(store.load_generation_context(db, "0" * 64, "rps_a", [], NOW)) is None


def test_generation_context_no_policy_no_session_no_models(db):
    ctx = run(store.load_generation_context(db, KEY_B, "rps_missing", [], NOW))
    assert ctx.principal == "bob" and ctx.policy is None
    assert ctx.session == store.SessionState(False, False, False) and not ctx.session.open
    assert ctx.models == {} and ctx.active_page_ids == frozenset() and ctx.active_bytes == 0


def test_generation_context_foreign_session(db):
    ctx = run(store.load_generation_context(db, KEY_A, "rps_b", [], NOW))
    assert ctx.session.exists and not ctx.session.owned and not ctx.session.open


def test_generation_context_ended_session_and_revoked_key(db):
    assert run(store.end_session(db, "rps_a", "alice", NOW))
    assert run(store.revoke_key(db, KEY_A, NOW))
    assert not run(store.revoke_key(db, KEY_A, NOW + 1))
    ctx = run(store.load_generation_context(db, KEY_A, "rps_a", [], NOW + 1))
    assert ctx.key_revoked and ctx.session.ended and not ctx.session.open


def test_generation_context_expired_pages_not_active(db):
    live, dead = page(b"live", 10), page(b"dead", 20, expires=NOW + 5)
    assert upsert(db, [live, dead])
    ctx = run(store.load_generation_context(db, KEY_A, "rps_a", [], NOW + 5))
    assert ctx.active_page_ids == {live["page_id"]} and ctx.active_bytes == 10


def test_generation_context_many_models_one_param(db):
    names = [f"p:m{i}" for i in range(300)] + ["openai:gpt-4o"]
    ctx = run(store.load_generation_context(db, KEY_A, "rps_a", names, NOW))
    assert set(ctx.models) == {"openai:gpt-4o"}


def test_grants_and_retention_fail_closed(db):
    run(db.run("UPDATE principal_policies SET grants = 'garbage' WHERE principal = 'alice'", []))
    ctx = run(store.load_generation_context(db, KEY_A, "rps_a", [], NOW))
    assert ctx.policy.grants == () and not ctx.policy.has_grant("chat")


def test_set_policy_update_and_zero(db):
    run(store.set_policy(db, "alice", 3, ["chat", "x"], "zero", NOW))
    info = run(store.load_principal(db, KEY_A))
    assert info == store.PrincipalInfo("alice", False, store.Policy(3, ("chat", "x"), "zero"))
    with pytest.raises(ValueError):
        run(store.set_policy(db, "alice", 3, ["chat"], "forever", NOW))
    with pytest.raises(ValueError):
        run(store.set_policy(db, "alice", "3", ["chat"], "zero", NOW))


def test_load_principal(db):
    assert run(store.load_principal(db, "f" * 64)) is None
    assert run(store.load_principal(db, KEY_B)) == store.PrincipalInfo("bob", False, None)


def test_set_model_upsert_and_validation(db):
    run(store.set_model(db, "openai:gpt-4o", 1000, 10))
    ctx = run(store.load_generation_context(db, KEY_A, "rps_a", ["openai:gpt-4o"], NOW))
    assert ctx.models["openai:gpt-4o"] == store.ModelWindow(1000, 10)
    for bad in [(0, 1), (1, -1), (True, 1), (1.5, 1)]:
        with pytest.raises(ValueError):
            run(store.set_model(db, "x:y", *bad))


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
    assert run(store.upsert_pages(db, rows, "alice", "rps_a", NOW, 500))
    assert len(rows_of(db)) == 500
    assert not run(store.upsert_pages(db, rows + [page(b"x", 1)], "alice", "rps_a", NOW, 500))


def test_unicode_and_quotes_round_trip(db):
    run(store.insert_key(db, "1" * 64, "ünï'cödé \"x\" 🎭", NOW))
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
    ex = store.SqliteExecutor(conn)
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
    assert store.inline("SELECT ?1, ?2, ?3", ["it's", 5, None]) == "SELECT 'it''s', 5, NULL"
    assert store.inline("SELECT ?, ?", [1, 2]) == "SELECT 1, 2"
    assert store.inline("SELECT '?1', \"?1\", ?1 -- ?2\n", [7]) == "SELECT '?1', \"?1\", 7 -- ?2\n"
    assert store.inline("SELECT ?2, ?1, ?2", [1, 2]) == "SELECT 2, 1, 2"
    for bad in [[1.5], [b"x"], [True], ["a\x00b"], [2 ** 63], ["\ud800"]]:
        with pytest.raises((TypeError, ValueError)):
            store.inline("SELECT ?1", bad)
    with pytest.raises(ValueError):
        store.inline("SELECT ?1, ?2", [1])
    with pytest.raises(ValueError):
        store.inline("SELECT ?1", [1, 2])
    with pytest.raises(ValueError):
        store.inline("SELECT :x", [])


@pytest.mark.parametrize("evil", EVIL)
def test_inline_injection_stored_verbatim(evil):
    conn = migrated_conn()
    ex = store.SqliteExecutor(conn)

    class Inliner:
        async def run(self, sql, params):
            conn.executescript(store.inline(sql, params))
            return conn.total_changes

    key = hashlib.sha256(evil.encode()).hexdigest()
    run(store.insert_key(Inliner(), key, evil, NOW))
    grants = [evil, "chat"] if evil else ["chat"]
    run(store.set_policy(Inliner(), evil, 1, grants, "standard", NOW))
    run(store.create_session(Inliner(), "rps_" + evil, evil, NOW))
    run(store.set_model(Inliner(), evil + ":m", 10, 5))
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
            out = store.inline(sql, list(range(1, max(idx) + 1)))
            assert "?" not in out.replace("'$.", "")
