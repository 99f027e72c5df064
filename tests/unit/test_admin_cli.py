"""Admin CLI against real local D1 (wrangler --persist-to a temp dir), plus the store's
generation/retrieval/upsert statements run on D1's SQLite through the same executor."""

import asyncio
import hashlib
import json
import shutil
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import admin  # noqa: E402
from devkit import admin_sql  # noqa: E402
from multillm_edge.storage import store  # noqa: E402
from multillm_edge.core import limits  # noqa: E402
from multillm_edge.core.pages import PageSigner, r2_key  # noqa: E402

pytestmark = pytest.mark.slow

if not (ROOT / "node_modules" / "wrangler").exists():  # pragma: no cover
    pytest.fail("node_modules/wrangler missing: run `npm install` in the repo root",
                pytrace=False)

EVIL = "o'neil\"; DROP TABLE roleplay_keys; -- ünï 🎭"


def cli(*args, persist):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "admin.py"), "--persist-to",
                           str(persist), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    return proc


def cli_json(*args, persist):
    proc = cli(*args, "--json", persist=persist)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def d1(sql, persist):
    return d1_many([sql], persist)[0]


def d1_many(sqls, persist):
    """Each statement's rows, from one `wrangler d1 execute` (a spawn costs seconds)."""
    proc = subprocess.run([*admin._wrangler(), "d1", "execute", "INTELLIGENCE_DB",
                           "--local", "--persist-to", str(persist), "--json", "--command",
                           "; ".join(sqls)], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    results = [r["results"] for r in json.loads(proc.stdout)]
    assert len(results) == len(sqls)
    return results


@pytest.fixture(scope="module")
def persist(tmp_path_factory):
    d = tmp_path_factory.mktemp("d1state")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_admin_commands_write_expected_rows(persist):
    before = int(time.time())
    k = cli_json("key", "create", "--principal", EVIL, persist=persist)
    assert k["key"].startswith("rpk_") and len(k["key"]) >= 40
    assert k["key_sha256"] == hashlib.sha256(k["key"].encode()).hexdigest()

    p = cli_json("policy", "set", "--principal", EVIL, "--revision", "3", "--grants", "chat,extra",
                 "--retention", "zero", persist=persist)
    assert p == {"principal": EVIL, "revision": 3, "grants": ["chat", "extra"], "retention": "zero"}
    cli_json("policy", "set", "--principal", EVIL, "--revision", "4", "--grants", "chat",
             "--retention", "standard", "--no-migrate", persist=persist)  # update in place
    s = cli_json("session", "create", "--principal", EVIL, "--no-migrate", persist=persist)
    assert s["session_id"].startswith("rps_")
    m = cli_json("model", "set", "openai:gpt-4o", "--input-tokens", "128000",
                 "--max-output-tokens", "16384", "--no-migrate", persist=persist)
    assert m["model"] == "openai:gpt-4o"
    # plain-text mode: the key alone on stdout, once
    proc = cli("key", "create", "--principal", "bob", "--no-migrate", persist=persist)
    assert proc.returncode == 0
    bob_key = proc.stdout.strip()
    assert bob_key.startswith("rpk_") and "\n" not in bob_key
    assert bob_key not in proc.stderr

    keys, pol, sess, models, tables = d1_many([
        "SELECT * FROM roleplay_keys ORDER BY principal", "SELECT * FROM principal_policies",
        "SELECT * FROM roleplay_sessions", "SELECT * FROM models",
        "SELECT name FROM sqlite_master WHERE type='table' AND name='roleplay_keys'"], persist)
    assert [r["principal"] for r in keys] == ["bob", EVIL]
    dump = json.dumps(keys)
    assert k["key"] not in dump and bob_key not in dump
    assert keys[1]["key_sha256"] == k["key_sha256"]
    assert keys[0]["key_sha256"] == hashlib.sha256(bob_key.encode()).hexdigest()
    assert all(r["revoked_at"] is None and r["created_at"] >= before for r in keys)

    assert len(pol) == 1
    assert pol[0]["principal"] == EVIL and pol[0]["revision"] == 4
    assert json.loads(pol[0]["grants"]) == ["chat"] and pol[0]["retention"] == "standard"

    assert sess == [{"session_id": s["session_id"], "principal": EVIL,
                     "created_at": s["created_at"], "ended_at": None}]
    assert models == [
        {"model": "openai:gpt-4o", "input_tokens": 128000, "max_output_tokens": 16384}]
    # the injection-looking principal did not drop anything
    assert len(tables) == 1

    # revoke, and session end, through the CLI
    r = cli_json("key", "revoke", "--key-sha256", k["key_sha256"], "--no-migrate", persist=persist)
    assert r["revoked"]
    assert cli("key", "revoke", "--key-sha256", k["key_sha256"], "--no-migrate",
               persist=persist).returncode == 1
    e = cli_json("session", "end", "--principal", EVIL, "--session-id", s["session_id"],
                 "--no-migrate", persist=persist)
    assert e["ended"]
    assert d1("SELECT ended_at FROM roleplay_sessions", persist)[0]["ended_at"] is not None


def test_admin_rejects_bad_arguments(persist):
    for args in (["model", "set", "nocolon", "--input-tokens", "1", "--max-output-tokens", "1"],
                 ["model", "set", "a:b", "--input-tokens", "0", "--max-output-tokens", "1"],
                 ["policy", "set", "--principal", "p", "--revision", "1", "--grants", "chat",
                  "--retention", "forever"],
                 ["key", "create", "--principal", ""],
                 ["key", "create", "--principal", "a\nb"]):
        proc = cli(*args, persist=persist)
        assert proc.returncode == 2, args
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "admin.py"), "--remote",
                           "--persist-to", str(persist), "key", "create", "--principal", "p"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2


def test_store_statements_on_local_d1(persist):
    """The one-statement generation/retrieval reads and the allowance upsert on D1."""
    db = admin.WranglerExecutor(persist_to=str(persist))
    run = asyncio.run
    assert run(store.missing_tables(db)) == []
    now = 2_000_000_000
    key = hashlib.sha256(b"rpk_d1").hexdigest()
    signer = PageSigner(b"s")
    run(admin_sql.insert_key(db, key, "carol", now))
    run(admin_sql.set_policy(db, "carol", 1, ["chat"], "standard", now))
    run(store.create_session(db, "rps_d1", "carol", now))

    def page(body, size):
        sha = hashlib.sha256(body).hexdigest()
        pid = signer.page_id("roleplay", "carol", "rps_d1", 1, sha)
        row = {"page_id": pid, "authority": "roleplay", "principal": "carol", "session_id": "rps_d1",
               "policy_revision": 1, "sha256": sha, "byte_length": size, "r2_key": r2_key(pid),
               "r2_offset": 0, "body_written_at": now, "created_at": now, "expires_at": now + 3600}
        row["signature"] = signer.row_signature(row)
        return row

    a, b = page(b"a", 600), page(b"b", 400)
    carol = store.PageSession("carol", "rps_d1")
    assert run(store.upsert_pages(db, [a, b], carol, now, 1000))  # exactly at limit
    assert not run(store.upsert_pages(db, [page(b"c", 1)], carol, now, 1000))
    assert run(store.upsert_pages(db, [a], carol, now + 1, 1000))  # refresh, no double count
    ctx = run(store.load_generation_context(db, key, "rps_d1", ["openai:gpt-4o", "x:y"], now))
    assert ctx.principal == "carol" and ctx.session.open and ctx.policy.has_grant("chat")
    assert set(ctx.models) == {"openai:gpt-4o"} and ctx.active_bytes == 1000
    assert set(ctx.active_pages) == {a["page_id"], b["page_id"]}
    f = run(store.load_page_for_retrieval(db, key, "rps_d1", a["page_id"], now))
    assert f.page == a and f.page_active and signer.verify_row(f.page)


def test_print_sql_runs_nothing_and_its_sql_runs_as_printed(tmp_path):
    """--print-sql spawns no wrangler and writes nothing; the statements it prints are
    what `wrangler d1 execute --file` runs (here on a fresh local D1)."""
    state = tmp_path / "printed"
    printed = [cli("--print-sql", *args, persist=state) for args in (
        ["key", "create", "--principal", EVIL],
        ["policy", "set", "--principal", EVIL, "--revision", "2", "--grants", "chat",
         "--retention", "standard"],
        ["model", "set", "openai:gpt-4o-mini", "--input-tokens", "128000", "--max-output-tokens", "16384"])]
    assert all(p.returncode == 0 for p in printed) and not state.exists()
    key = printed[0].stderr.split("SHA-256): ", 1)[1].split()[0]
    assert key.startswith("rpk_") and key not in printed[0].stdout        # the key: stderr only
    assert "--print-sql policy set --principal" in printed[0].stderr      # how to grant one
    assert hashlib.sha256(key.encode()).hexdigest() in printed[0].stdout
    sql = tmp_path / "admin.sql"
    sql.write_text("".join(p.stdout for p in printed))
    assert cli("key", "list", persist=state).returncode == 0             # migrations applied
    proc = subprocess.run([*admin._wrangler(), "d1", "execute", "INTELLIGENCE_DB", "--local",
                           "--persist-to", str(state), "--file", str(sql), "--yes"],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shown = cli_json("principal", "show", EVIL, "--no-migrate", persist=state)
    assert shown["policy_revision"] == 2 and shown["grants"] == ["chat"] and shown["active_keys"] == 1
    assert cli_json("model", "show", "openai:gpt-4o-mini", "--no-migrate", persist=state)["input_tokens"] == 128000


def readme_block(marker: str) -> list[str]:
    """The lines of README.md's fenced block that holds ``marker``."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```$", (ROOT / "README.md").read_text(), re.M | re.S)
    [block] = [b for b in blocks if marker in b]
    return block.splitlines()


def test_the_readmes_print_sql_recipe_runs_as_printed(tmp_path):
    """README (Configuration, admin CLI): each `$` line run exactly as printed, from a
    folder of the clone (npm runs the script in the repository root); the file it writes
    is what the README shows and `wrangler d1 execute --local --file` applies it."""
    block = readme_block("--print-sql --out")
    commands = [line[2:] for line in block if line.startswith("$ ")]
    assert commands[0].startswith("npm run admin -- --print-sql --out key.sql ") and commands[1] == "cat key.sql"
    where = Path(tempfile.mkdtemp(dir=ROOT, prefix=".readme-recipe-"))
    try:
        runs = [subprocess.run(c, shell=True, cwd=where, capture_output=True, text=True, timeout=180)
                for c in commands]
        assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
        printed = runs[1].stdout.splitlines()
        shown = block[block.index("$ cat key.sql") + 1:]
        assert printed[:2] == shown[:2] and len(printed) == len(shown) == 3
        assert re.fullmatch(r"VALUES \('[0-9a-f]{64}', 'alice', [0-9]+, NULL\);", printed[2])
        key = runs[0].stderr.split("SHA-256): ", 1)[1].split()[0]
        assert key.startswith("rpk_") and not (ROOT / "key.sql").exists()
        said = runs[0].stderr.splitlines()
        assert said[0].replace(key, "rpk_…") == re.sub(r"rpk_\S+", "rpk_…", block[1]) and said[1] == block[2]
        state = tmp_path / "state"
        assert cli("key", "list", persist=state).returncode == 0             # migrations applied
        proc = subprocess.run([*admin._wrangler(), "d1", "execute", "INTELLIGENCE_DB", "--local",
                               "--persist-to", str(state), "--file", str(where / "key.sql"), "--yes"],
                              cwd=ROOT, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert d1("SELECT key_sha256, principal FROM roleplay_keys", state) == [
            {"key_sha256": hashlib.sha256(key.encode()).hexdigest(), "principal": "alice"}]
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_out_applies_to_print_sql_only(tmp_path):
    proc = cli("--out", str(tmp_path / "x.sql"), "model", "list", persist=tmp_path / "s")
    assert proc.returncode == 2 and "--out applies to --print-sql only" in proc.stderr
    assert not (tmp_path / "x.sql").exists() and not (tmp_path / "s").exists()


def test_remote_without_a_database_id_says_to_run_cloudflare_setup(tmp_path):
    """Instead of wrangler's unrelated token error (README: admin CLI)."""
    toml = tmp_path / "wrangler.toml"
    toml.write_text('[[d1_databases]]\nbinding = "INTELLIGENCE_DB"\ndatabase_name = "x"\n')
    why = admin.remote_database_missing(toml)
    assert "npm run cloudflare:setup" in why and "database_id" in why
    toml.write_text('[[d1_databases]]\nbinding = "INTELLIGENCE_DB"\ndatabase_id = "1f0c2d3e"\n')
    assert admin.remote_database_missing(toml) is None
    if admin.remote_database_missing() is not None:          # the repository's wrangler.toml has none
        proc = subprocess.run([sys.executable, str(ROOT / "tools" / "admin.py"), "--remote", "key", "list"],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "npm run cloudflare:setup" in proc.stderr and not proc.stdout


def test_tables_show_times_as_utc_dates():
    text = admin.table([{"key_prefix": "3770d5356da5", "principal": "alice", "created_at": 1796178361,
                         "revoked_at": None, "active_pages": 3}], "none")
    assert re.split(r"\s{2,}", text.splitlines()[1]) == ["3770d5356da5", "alice", "2026-12-02 02:26:01Z", "-", "3"]
    assert admin.utc(0) == "1970-01-01 00:00:00Z" and admin.utc(10 ** 20) == str(10 ** 20)


def test_lists_show_digest_prefixes_only_and_a_key_without_policy_says_how_to_grant(tmp_path):
    state = tmp_path / "lists"
    made = cli("key", "create", "--principal", "dana", "--json", persist=state)
    first = json.loads(made.stdout)
    assert first["chat_granted"] is False
    assert first["grant_command"] == ("npm run admin -- policy set --principal dana --revision 1 "
                                      "--grants chat --retention standard")
    assert "403 chat_not_granted" in made.stderr and first["grant_command"] in made.stderr
    cli_json(*first["grant_command"].split()[4:], "--no-migrate", persist=state)   # as printed
    second = cli("key", "create", "--principal", "dana", "--json", "--no-migrate", persist=state)
    assert json.loads(second.stdout)["chat_granted"] is True and "chat_not_granted" not in second.stderr
    cli_json("session", "create", "--principal", "dana", "--no-migrate", persist=state)

    listed = cli("key", "list", "--principal", "dana", "--no-migrate", persist=state).stdout
    rows = cli_json("key", "list", "--no-migrate", persist=state)["rows"]
    assert {r["key_prefix"] for r in rows} == {first["key_sha256"][:12], json.loads(second.stdout)["key_sha256"][:12]}
    assert first["key_sha256"] not in listed + json.dumps(rows) and first["key_sha256"][:12] in listed
    shown = cli_json("key", "show", first["key_sha256"][:8], "--no-migrate", persist=state)
    assert shown == {"key_prefix": first["key_sha256"][:12], "principal": "dana",
                     "created_at": shown["created_at"], "revoked_at": None}
    [sess] = cli_json("session", "list", "--open", "--no-migrate", persist=state)["rows"]
    assert sess["principal"] == "dana" and sess["active_pages"] == 0
    assert cli_json("policy", "list", "--no-migrate", persist=state)["rows"][0]["grants"] == ["chat"]
    assert cli("session", "show", "rps_none", "--no-migrate", persist=state).returncode == 1
    # revoking by the prefix `key list` shows
    cli_json("key", "revoke", "--key-sha256", first["key_sha256"][:12], "--no-migrate", persist=state)
    assert cli_json("key", "show", first["key_sha256"][:12], "--no-migrate", persist=state)["revoked_at"]


def test_a_local_statement_meeting_the_runners_lock_is_tried_again_a_remote_one_never(monkeypatch):
    """Local D1 shared with a running runner: miniflare's "internal error" is transient
    there (tools/admin.py LOCAL_ATTEMPTS); remotely an error is an error."""
    calls = []
    busy = subprocess.CompletedProcess([], 1, "✘ [ERROR] Failed to parse body as JSON, got: "
                                              "Error: internal error; reference = x", "")
    done = subprocess.CompletedProcess([], 0, '[{"results": [{"n": 1}], "success": true}]', "")

    def run(cmd, **kw):
        calls.append(cmd)
        return busy if len(calls) < 3 else done
    monkeypatch.setattr(admin.subprocess, "run", run)
    monkeypatch.setattr(admin.time, "sleep", lambda s: None)
    assert admin.WranglerExecutor()._execute("SELECT 1 AS n") == [{"results": [{"n": 1}], "success": True}]
    assert len(calls) == 3 and "--local" in calls[0]
    calls.clear()
    with pytest.raises(admin.AdminError):
        admin.WranglerExecutor(remote=True)._execute("SELECT 1 AS n")
    assert len(calls) == 1
    calls.clear()
    monkeypatch.setattr(admin.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or busy)
    with pytest.raises(admin.AdminError, match="internal error"):
        admin.WranglerExecutor()._execute("SELECT 1 AS n")
    assert len(calls) == admin.LOCAL_ATTEMPTS


def test_limits_set_clear_and_show_on_local_d1(tmp_path):
    """`limits set` sets only what it names, `--clear` makes one unlimited, the others
    stay; `limits show` (table and --json) says each limit, its use and what is left;
    the policy is untouched (not a revision, design §4.1); --print-sql runs nothing."""
    state = tmp_path / "limits"
    cli_json("policy", "set", "--principal", EVIL, "--revision", "7", "--grants", "chat",
             "--retention", "standard", persist=state)
    assert cli_json("limits", "show", EVIL, "--no-migrate", persist=state) == {
        "principal": EVIL, "limits": dict.fromkeys(admin.LIMIT_NAMES), "updated_at": None,
        "used": {"requests_per_minute": 0, "tokens_per_day": 0, "sessions_per_day": 0, "active_bytes": 0},
        "remaining": dict.fromkeys(admin.LIMIT_NAMES)}
    done = cli_json("limits", "set", "--principal", EVIL, "--requests-per-minute", "10",
                    "--tokens-per-day", "1000000", "--sessions-per-day", "0", "--no-migrate", persist=state)
    assert done == {"principal": EVIL, "set": {"requests_per_minute": 10, "tokens_per_day": 1000000,
                                               "sessions_per_day": 0}, "cleared": []}
    cli_json("limits", "set", "--principal", EVIL, "--active-bytes", "5000", "--clear", "tokens_per_day",
             "--clear", "sessions_per_day", "--no-migrate", persist=state)
    shown = cli_json("limits", "show", EVIL, "--no-migrate", persist=state)
    assert shown["limits"] == {"requests_per_minute": 10, "tokens_per_day": None,
                               "sessions_per_day": None, "active_bytes": 5000}
    assert shown["remaining"] == {"requests_per_minute": 10, "tokens_per_day": None,
                                  "sessions_per_day": None, "active_bytes": 5000}
    assert shown["updated_at"] >= int(time.time()) - 120
    text = cli("limits", "show", EVIL, "--no-migrate", persist=state).stdout.splitlines()
    assert re.split(r"\s{2,}", text[0]) == ["limit", "value", "used", "remaining"]
    assert re.split(r"\s{2,}", text[1]) == ["requests_per_minute", "10", "0", "10"]
    assert re.split(r"\s{2,}", text[2]) == ["tokens_per_day", "-", "0", "-"]
    rows, pol = d1_many(["SELECT * FROM principal_limits", "SELECT revision FROM principal_policies"], state)
    assert [{k: v for k, v in r.items() if k != "updated_at"} for r in rows] == [
        {"principal": EVIL, "requests_per_minute": 10, "tokens_per_day": None,
         "sessions_per_day": None, "active_bytes": 5000}]
    assert pol == [{"revision": 7}]
    # sessions_per_day 1: the admin's own `session create` meets it too
    cli_json("limits", "set", "--principal", EVIL, "--sessions-per-day", "1", "--no-migrate", persist=state)
    cli_json("session", "create", "--principal", EVIL, "--no-migrate", persist=state)
    refused = cli("session", "create", "--principal", EVIL, "--no-migrate", persist=state)
    assert refused.returncode == 1 and "sessions_per_day" in refused.stderr
    printed = cli("--print-sql", "limits", "set", "--principal", "p", "--clear", "active_bytes",
                  persist=tmp_path / "none")
    assert printed.returncode == 0 and not (tmp_path / "none").exists()
    assert "INSERT INTO principal_limits" in printed.stdout and "'p', NULL, NULL, NULL, NULL" in printed.stdout
    for bad in (["limits", "set", "--principal", "p"],                                  # nothing to do
                ["limits", "set", "--principal", "p", "--tokens-per-day", "5", "--clear", "tokens_per_day"]):
        proc = cli(*bad, "--no-migrate", persist=state)
        assert proc.returncode == 1 and proc.stderr.startswith("admin: "), bad
    for bad in (["limits", "set", "--principal", "p", "--requests-per-minute", "-1"],
                ["limits", "set", "--principal", "p", "--requests-per-minute", "ten"],
                ["limits", "set", "--principal", "p", "--clear", "nonsense"],
                ["limits", "show"]):
        assert cli(*bad, persist=state).returncode == 2, bad


def test_usage_statements_and_usage_show_on_local_d1(persist):
    """The usage upsert and the usage route's one read run on D1's SQLite (docs/design.md
    §4.1); `usage show P --days N` lists the principal's rows of the last N UTC days."""
    from multillm_edge.formats.usage import Usage
    admin.apply_local_migrations(str(persist))
    db = admin.WranglerExecutor(persist_to=str(persist))
    run = asyncio.run
    now = int(time.time())
    today, before = store.utc_day(now), store.utc_day(now - 5 * 86400)
    key = hashlib.sha256(b"rpk_usage_cli").hexdigest()
    run(admin_sql.insert_key(db, key, EVIL, now))
    run(admin_sql.set_policy(db, EVIL, 1, ["chat"], "standard", now))
    run(store.record_usage(db, EVIL, today, "fake:a", Usage(1000, 600, 0, 40, False)))
    run(store.record_usage(db, EVIL, today, "fake:a", Usage(500, 0, 100, 10, True)))
    run(store.record_usage(db, EVIL, before, "fake:b", Usage(7, 0, 0, 3, False)))
    found = run(store.load_usage(db, key, store.utc_day(now - 6 * 86400), now, now - now % 86400))
    assert found.principal == EVIL and found.counts.limits == limits.NO_LIMITS
    assert found.days[today] == store.DayUsage(today, 1500, 600, 100, 50, 2, 1)
    assert found.tokens_on(today) == 1550
    shown = cli_json("usage", "show", EVIL, "--no-migrate", persist=persist)
    assert [(r["day"], r["model"], r["requests"], r["input_tokens"], r["output_tokens"], r["estimated"])
            for r in shown["rows"]] == [(today, "fake:a", 2, 1500, 50, 1), (before, "fake:b", 1, 7, 3, 0)]
    assert [r["day"] for r in cli_json("usage", "show", EVIL, "--days", "3", "--no-migrate",
                                       persist=persist)["rows"]] == [today]
    text = cli("usage", "show", EVIL, "--no-migrate", persist=persist).stdout
    assert "fake:a" in text and "3 requests, 1507 input and 53 output tokens" in text
    assert cli("usage", "show", EVIL, "--days", "0", persist=persist).returncode == 2
