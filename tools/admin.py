#!/usr/bin/env python3
"""Admin CLI for the roleplay edge (docs/design.md §10).

    npm run admin -- [--local|--remote] [--persist-to DIR] [--json] [--print-sql [--out FILE]] <command>

    key create     --principal P                        prints the new key ONCE
    key revoke     --key-sha256 HEX                     the digest, or a prefix (>= 12) only it has
    key list       [--principal P]                      digests' first 12 hex characters only
    key show       PREFIX
    policy set     --principal P --revision N --grants chat[,x] --retention standard|zero
    policy list | policy show P
    principal list | principal show P                   keys, sessions and policy of each
    session create --principal P                        prints the session id
    session end    --principal P --session-id S
    session list   [--principal P] [--open] | session show S
    model set      provider:model --input-tokens N --max-output-tokens M
    model list | model show provider:model
    limits set     --principal P [--requests-per-minute N] [--tokens-per-day N]
                   [--sessions-per-day N] [--active-bytes N] [--clear NAME]...
    limits show    P                                    each limit, what counts against it, what is left
    usage show     P [--days N]                         tokens per UTC day and model, as the
                                                        providers reported them (N = 7)

Every statement comes from src/multillm_edge/storage/store.py or devkit/admin_sql.py, rendered
with `admin_sql.inline`
and run by `npx wrangler d1 execute INTELLIGENCE_DB --local|--remote --json --command`
from the repository root. `--local` (the default) applies the migrations first, so a
fresh state works. `--remote` needs `npx wrangler login` (or CLOUDFLARE_API_TOKEN) and
wrangler.toml's database_id (`npm run cloudflare:setup`; without it the CLI says so and
runs nothing). `--print-sql` runs nothing: it prints the statements (or writes them to
`--out FILE`), for `npx wrangler d1 execute INTELLIGENCE_DB --remote --file FILE` (or
`--command`); a new key then goes to stderr, never into the SQL. Keys are generated
here and stored only as their SHA-256 hex. Tables show stored times as UTC dates;
`--json` keeps them as seconds since the epoch.
`--json` prints one JSON object on stdout (for scripts and tests); `--no-migrate`
skips the migration step when the local state is known to be current.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import secrets
import shlex
import subprocess
import sys
import time
import tomllib
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "src"))
sys.path.insert(0, str(REPO_ROOT))

from devkit import admin_sql  # noqa: E402
from multillm_edge.storage import store  # noqa: E402
from multillm_edge.core.config import MAX_USAGE_RETENTION_DAYS as MAX_USAGE_DAYS, split_model  # noqa: E402
from multillm_edge.core.limits import NAMES as LIMIT_NAMES, utc_day  # noqa: E402
from multillm_edge.base.errors import EdgeError  # noqa: E402
# The key format the edge reserves: never forwarded to the origin (docs/design.md §2).
from multillm_edge.service.reserved_keys import KEY_PREFIX  # noqa: E402

DB_BINDING = "INTELLIGENCE_DB"
SESSION_PREFIX = "rps_"


class AdminError(Exception):
    pass


def _wrangler_env() -> dict:
    env = dict(os.environ)
    env.setdefault("WRANGLER_SEND_METRICS", "false")
    env.setdefault("CI", "1")  # non-interactive: no prompts, no spinners
    return env


def _wrangler() -> list[str]:
    local = REPO_ROOT / "node_modules" / ".bin" / "wrangler"
    return [str(local)] if local.exists() else ["npx", "--no-install", "wrangler"]


#: Local D1 is one SQLite file: while a runner (workerd) holds it, a statement from
#: `wrangler d1 execute --local` can meet its lock and miniflare answers "internal error"
#: before running anything. Such a statement is tried again, a few times; remote never.
LOCAL_ATTEMPTS = 4


def _busy(proc) -> bool:
    return "internal error" in (proc.stdout + proc.stderr)


def _location_args(remote: bool, persist_to: str | None) -> list[str]:
    if remote:
        return ["--remote"]
    args = ["--local"]
    if persist_to:
        args += ["--persist-to", str(Path(persist_to).resolve())]
    return args


def _parse_json_output(out: str):
    # wrangler --json prints JSON; tolerate stray lines before it.
    start = min([i for i in (out.find("["), out.find("{")) if i >= 0], default=-1)
    if start < 0:
        raise AdminError("wrangler printed no JSON")
    return json.loads(out[start:])


class WranglerExecutor:
    """store.Executor over `wrangler d1 execute` (one process per statement)."""

    def __init__(self, remote: bool = False, persist_to: str | None = None):
        self.location = _location_args(remote, persist_to)

    def _execute(self, command: str) -> list:
        cmd = [*_wrangler(), "d1", "execute", DB_BINDING, *self.location,
               "--json", "--yes", "--command", command]
        for attempt in range(LOCAL_ATTEMPTS if "--local" in self.location else 1):
            proc = subprocess.run(cmd, cwd=REPO_ROOT, env=_wrangler_env(),
                                  capture_output=True, text=True)
            if proc.returncode == 0 or not _busy(proc):
                break
            time.sleep(0.5 * (attempt + 1))
        if proc.returncode != 0:
            detail = (proc.stdout.strip() or proc.stderr.strip()).splitlines()[-20:]
            raise AdminError("wrangler d1 execute failed:\n" + "\n".join(detail))
        doc = _parse_json_output(proc.stdout)
        if isinstance(doc, dict):
            doc = [doc]
        for part in doc:
            if not part.get("success", False):
                raise AdminError(f"D1 statement failed: {part.get('error') or part}")
        return doc

    async def first(self, sql: str, params: list):
        rows = await self.all(sql, params)
        return rows[0] if rows else None

    async def all(self, sql: str, params: list) -> list:
        return list(self._execute(admin_sql.inline(sql, params))[-1].get("results") or [])

    async def run(self, sql: str, params: list) -> int:
        # Local `d1 execute` reports no meta.changes: ask SQLite in the same batch.
        doc = self._execute(admin_sql.inline(sql, params).rstrip().rstrip(";")
                            + ";\nSELECT changes() AS changes")
        return int(doc[-1]["results"][0]["changes"])

    async def batch(self, statements: list) -> list:
        """The statements in one `d1 execute` (as D1's batch: one call, in order)."""
        doc = self._execute(";\n".join(admin_sql.inline(sql, params).strip().rstrip(";")
                                        for sql, params in statements))
        return [list(part.get("results") or []) for part in doc]


class PrintExecutor:
    """store.Executor that runs nothing: it collects each statement, rendered, for
    `wrangler d1 execute --file`. Reads answer no rows; writes report one change."""

    def __init__(self):
        self.statements: list[str] = []

    def _add(self, sql: str, params: list) -> None:
        self.statements.append(admin_sql.inline(sql, params).strip().rstrip(";") + ";")

    async def first(self, sql: str, params: list):
        self._add(sql, params)
        return None

    async def all(self, sql: str, params: list) -> list:
        self._add(sql, params)
        return []

    async def run(self, sql: str, params: list) -> int:
        self._add(sql, params)
        return 1

    async def batch(self, statements: list) -> list:
        for sql, params in statements:
            self._add(sql, params)
        return [[] for _ in statements]


def apply_local_migrations(persist_to: str | None) -> None:
    cmd = [*_wrangler(), "d1", "migrations", "apply", DB_BINDING,
           *_location_args(False, persist_to)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=_wrangler_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-20:]
        raise AdminError("wrangler d1 migrations apply failed:\n" + "\n".join(tail))


# ---------------------------------------------------------------------------
# Argument checks
# ---------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _name(value: str) -> str:
    if not value or value != value.strip() or _CONTROL.search(value) or len(value) > 256:
        raise argparse.ArgumentTypeError("must be a non-empty name without control characters "
                                         "or surrounding spaces (max 256 chars)")
    return value


def _positive(value: str) -> int:
    if not re.fullmatch(r"[0-9]{1,12}", value) or int(value) <= 0:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return int(value)


def _count(value: str) -> int:
    """A limit: an integer >= 0 (0 refuses everything it counts)."""
    if not re.fullmatch(r"[0-9]{1,15}", value):
        raise argparse.ArgumentTypeError("must be a non-negative integer")
    return int(value)


def _revision(value: str) -> int:
    if not re.fullmatch(r"[0-9]{1,12}", value):
        raise argparse.ArgumentTypeError("must be a non-negative integer")
    return int(value)


def _grants(value: str) -> list[str]:
    grants = [g.strip() for g in value.split(",") if g.strip()]
    if not grants or any(not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", g) for g in grants):
        raise argparse.ArgumentTypeError("must be a comma-separated list such as chat or chat,x")
    return list(dict.fromkeys(grants))


def _model(value: str) -> str:
    try:
        split_model(value)
    except EdgeError:
        raise argparse.ArgumentTypeError("must be provider:model") from None
    return value


def _sha256(value: str) -> str:
    """A key's digest, or a prefix of at least 12 hex characters (as `key list` shows)."""
    if not re.fullmatch(r"[0-9a-f]{12,64}", value):
        raise argparse.ArgumentTypeError("must be the key's SHA-256 (64 lowercase hex "
                                         "characters) or its first 12 or more")
    return value


def _prefix(value: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{4,64}", value):
        raise argparse.ArgumentTypeError("must be 4 to 64 lowercase hex characters")
    return value


# ---------------------------------------------------------------------------
# Commands (each returns the JSON-able result and the plain-text line)
# ---------------------------------------------------------------------------


async def cmd_key_create(db, a):
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    digest = hashlib.sha256(key.encode("ascii")).hexdigest()
    await admin_sql.insert_key(db, digest, a.principal, int(time.time()))
    res = {"key": key, "key_sha256": digest, "principal": a.principal}
    if not isinstance(db, PrintExecutor):
        [row] = await admin_sql.list_policies(db, a.principal, 1) or [None]
        res["chat_granted"] = bool(row) and "chat" in (row.get("grants") or [])
        if not res["chat_granted"]:
            res["grant_command"] = grant_command(a)
    return res, key


def grant_command(a, print_sql: bool = False) -> str:
    where = " --print-sql" if print_sql else " --remote" if a.remote else ""
    out = " --out policy.sql" if print_sql else ""      # npm's banner never in the file
    return (f"npm run admin --{where} policy set --principal {shlex.quote(a.principal)} "
            f"--revision 1 --grants chat --retention standard{out}")


async def cmd_key_revoke(db, a):
    revoked = await admin_sql.revoke_key(db, a.key_sha256, int(time.time()))
    if not revoked:
        raise AdminError("no such unrevoked key (or the prefix matches several keys)")
    return {"key_sha256": a.key_sha256, "revoked": True}, f"revoked {a.key_sha256}"


# Reads: the rows, and a table of them for the terminal.

def table(rows: list[dict], empty: str) -> str:
    if not rows:
        return empty
    cols = list(rows[0])
    cells = [[_cell(r.get(c), c) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def _cell(v, column: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, list):
        return ",".join(map(str, v))
    if column.endswith("_at") and isinstance(v, int) and not isinstance(v, bool):
        return utc(v)
    return str(v)


def utc(epoch: int) -> str:
    """A stored time (seconds since the epoch) as the table shows it; --json keeps the number."""
    try:
        return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return str(epoch)


def listing(rows: list[dict], empty: str):
    return {"rows": rows}, table(rows, empty)


def showing(rows: list[dict], what: str):
    if not rows:
        raise AdminError(f"no such {what}")
    return rows[0], table(rows, "")


async def cmd_key_list(db, a):
    return listing(await admin_sql.list_keys(db, a.principal, None, a.limit), "no keys")


async def cmd_key_show(db, a):
    rows = await admin_sql.list_keys(db, None, a.prefix, 2)
    if len(rows) > 1:
        raise AdminError("the prefix matches several keys: give more of the digest")
    return showing(rows, "key")


async def cmd_policy_list(db, a):
    return listing(await admin_sql.list_policies(db, None, a.limit), "no policies")


async def cmd_policy_show(db, a):
    return showing(await admin_sql.list_policies(db, a.principal, 1), "policy")


async def cmd_principal_list(db, a):
    return listing(await admin_sql.list_principals(db, None, a.limit), "no principals")


async def cmd_principal_show(db, a):
    res, text = showing(await admin_sql.list_principals(db, a.principal, 1), "principal")
    keys = await admin_sql.list_keys(db, a.principal, None, a.limit)
    return {**res, "keys": keys}, text + "\n\n" + table(keys, "no keys")


async def cmd_session_list(db, a):
    rows = await admin_sql.list_sessions(db, a.principal, None, a.limit, int(time.time()), a.open)
    return listing(rows, "no sessions")


async def cmd_session_show(db, a):
    return showing(await admin_sql.list_sessions(db, None, a.session_id, 1, int(time.time())), "session")


async def cmd_model_list(db, a):
    return listing(await admin_sql.list_models(db, None, a.limit), "no models")


async def cmd_model_show(db, a):
    return showing(await admin_sql.list_models(db, a.model, 1), "model")


async def cmd_usage_show(db, a):
    """The principal's usage rows of the last N UTC days (today included), newest first."""
    now = int(time.time())
    since = store.utc_day(now - now % 86400 - (a.days - 1) * 86400)
    rows = await admin_sql.usage_rows(db, a.principal, since, a.limit)
    res = {"principal": a.principal, "since": since, "rows": rows}
    totals = {k: sum(r[k] for r in rows) for k in ("requests", "input_tokens", "output_tokens")}
    text = table(rows, f"no usage for {a.principal} since {since}")
    if rows:
        text += (f"\n{totals['requests']} requests, {totals['input_tokens']} input and "
                 f"{totals['output_tokens']} output tokens since {since} (UTC)")
    return res, text


async def cmd_policy_set(db, a):
    await admin_sql.set_policy(db, a.principal, a.revision, a.grants, a.retention, int(time.time()))
    res = {"principal": a.principal, "revision": a.revision, "grants": a.grants,
           "retention": a.retention}
    return res, (f"policy of {a.principal}: revision {a.revision}, grants "
                 f"{','.join(a.grants)}, retention {a.retention}")


async def cmd_session_create(db, a):
    session_id = SESSION_PREFIX + secrets.token_urlsafe(18)
    now = int(time.time())
    if not await store.create_session(db, session_id, a.principal, now):
        raise AdminError(f"{a.principal} has reached its sessions_per_day limit today "
                         "(`limits show`; `limits set --clear sessions_per_day` lifts it)")
    return {"session_id": session_id, "principal": a.principal, "created_at": now}, session_id


async def cmd_limits_set(db, a):
    values = {n: getattr(a, n) for n in LIMIT_NAMES if getattr(a, n) is not None}
    cleared = list(dict.fromkeys(a.clear or []))
    await admin_sql.set_limits(db, a.principal, values, cleared, int(time.time()))
    said = [f"{n} {v}" for n, v in values.items()] + [f"{n} unlimited" for n in cleared]
    return ({"principal": a.principal, "set": values, "cleared": cleared},
            f"limits of {a.principal}: " + ", ".join(said))


async def cmd_limits_show(db, a):
    """Each limit (None: unlimited), what counts against it now and what is left (design §4.1)."""
    now = int(time.time())
    counts = await store.principal_limits_and_counts(db, a.principal, now)
    extra = await admin_sql.show_limits(db, a.principal, utc_day(now))
    tokens = int(extra.get("tokens_today") or 0)
    used = {"requests_per_minute": counts.requests_in_window, "tokens_per_day": tokens,
            "sessions_per_day": counts.sessions_today, "active_bytes": counts.active_bytes}
    lim = counts.limits.as_dict()
    remaining = counts.remaining(tokens)
    res = {"principal": a.principal, "limits": lim, "used": used, "remaining": remaining,
           "updated_at": extra.get("updated_at")}
    rows = [{"limit": n, "value": lim[n], "used": used[n], "remaining": remaining[n]}
            for n in LIMIT_NAMES]
    return res, table(rows, "") + ("" if lim != dict.fromkeys(LIMIT_NAMES) else
                                   f"\n{a.principal} has no limits (unlimited).")


async def cmd_session_end(db, a):
    if not await store.end_session(db, a.session_id, a.principal, int(time.time())):
        raise AdminError("no such open session for this principal")
    return {"session_id": a.session_id, "ended": True}, f"ended {a.session_id}"


async def cmd_model_set(db, a):
    await admin_sql.set_model(db, a.model, a.input_tokens, a.max_output_tokens)
    res = {"model": a.model, "input_tokens": a.input_tokens,
           "max_output_tokens": a.max_output_tokens}
    return res, f"model {a.model}: input {a.input_tokens}, max output {a.max_output_tokens}"


# ---------------------------------------------------------------------------
# Parser
# ---------------------------------------------------------------------------


def _common(defaults: bool) -> argparse.ArgumentParser:
    """Location/output options, accepted before or after the command."""
    p = argparse.ArgumentParser(add_help=False,
                                argument_default=None if defaults else argparse.SUPPRESS)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--local", dest="remote", action="store_false",
                       help="local D1 state (default); applies migrations first")
    where.add_argument("--remote", dest="remote", action="store_true",
                       help="the deployed D1 database")
    p.add_argument("--persist-to", metavar="DIR", help="local state directory (wrangler --persist-to)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--no-migrate", action="store_true",
                   help="--local: skip applying migrations (state known to be current)")
    p.add_argument("--print-sql", action="store_true",
                   help="run nothing; print the statements for `wrangler d1 execute --file`")
    p.add_argument("--out", metavar="FILE",
                   help="--print-sql: write the statements to FILE instead of stdout")
    if defaults:
        p.set_defaults(remote=False, persist_to=None, json=False, no_migrate=False, print_sql=False,
                       out=None)
    return p


def build_parser() -> argparse.ArgumentParser:
    common = _common(defaults=False)
    parser = argparse.ArgumentParser(prog="npm run admin --", parents=[_common(defaults=True)],
                                     description="Roleplay edge admin: keys, policies, sessions, models, limits.")
    groups = parser.add_subparsers(dest="group", required=True)

    key = groups.add_parser("key", help="roleplay API keys").add_subparsers(dest="action", required=True)
    p = key.add_parser("create", parents=[common], help="create a key (printed once)")
    p.add_argument("--principal", required=True, type=_name)
    p.set_defaults(func=cmd_key_create)
    p = key.add_parser("revoke", parents=[common], help="revoke a key by its SHA-256 (or a prefix)")
    p.add_argument("--key-sha256", required=True, type=_sha256)
    p.set_defaults(func=cmd_key_revoke)
    p = key.add_parser("list", parents=[common], help="keys, newest first (digest prefixes only)")
    p.add_argument("--principal", type=_name)
    _limit(p, cmd_key_list)
    p = key.add_parser("show", parents=[common], help="the key whose digest starts with PREFIX")
    p.add_argument("prefix", type=_prefix)
    p.set_defaults(func=cmd_key_show)

    policy = groups.add_parser("policy", help="principal policies").add_subparsers(dest="action", required=True)
    p = policy.add_parser("set", parents=[common], help="set the current policy of a principal")
    p.add_argument("--principal", required=True, type=_name)
    p.add_argument("--revision", required=True, type=_revision)
    p.add_argument("--grants", required=True, type=_grants, help="comma-separated, e.g. chat")
    p.add_argument("--retention", required=True, choices=store.RETENTIONS)
    p.set_defaults(func=cmd_policy_set)
    _limit(policy.add_parser("list", parents=[common], help="every principal's policy"), cmd_policy_list)
    p = policy.add_parser("show", parents=[common], help="a principal's policy")
    p.add_argument("principal", type=_name)
    p.set_defaults(func=cmd_policy_show)

    principal = groups.add_parser("principal", help="principals (whoever has a key, policy or session)"
                                  ).add_subparsers(dest="action", required=True)
    _limit(principal.add_parser("list", parents=[common], help="principals with their counts"),
           cmd_principal_list)
    p = principal.add_parser("show", parents=[common], help="a principal, its policy and keys")
    p.add_argument("principal", type=_name)
    _limit(p, cmd_principal_show)

    session = groups.add_parser("session", help="roleplay sessions").add_subparsers(dest="action", required=True)
    p = session.add_parser("create", parents=[common], help="create a session (prints its id)")
    p.add_argument("--principal", required=True, type=_name)
    p.set_defaults(func=cmd_session_create)
    p = session.add_parser("end", parents=[common], help="end a session")
    p.add_argument("--principal", required=True, type=_name)
    p.add_argument("--session-id", required=True, type=_name)
    p.set_defaults(func=cmd_session_end)
    p = session.add_parser("list", parents=[common], help="sessions, newest first, with active pages")
    p.add_argument("--principal", type=_name)
    p.add_argument("--open", action="store_true", help="only sessions not ended")
    _limit(p, cmd_session_list)
    p = session.add_parser("show", parents=[common], help="a session and its active pages")
    p.add_argument("session_id", type=_name)
    p.set_defaults(func=cmd_session_show)

    model = groups.add_parser("model", help="model windows").add_subparsers(dest="action", required=True)
    p = model.add_parser("set", parents=[common], help="set a model's window sizes")
    p.add_argument("model", type=_model, metavar="provider:model")
    p.add_argument("--input-tokens", required=True, type=_positive)
    p.add_argument("--max-output-tokens", required=True, type=_positive)
    p.set_defaults(func=cmd_model_set)
    _limit(model.add_parser("list", parents=[common], help="registered models"), cmd_model_list)
    p = model.add_parser("show", parents=[common], help="a model's window sizes")
    p.add_argument("model", type=_model, metavar="provider:model")
    p.set_defaults(func=cmd_model_show)

    lim = groups.add_parser("limits", help="a principal's limits (not a policy revision)"
                            ).add_subparsers(dest="action", required=True)
    p = lim.add_parser("set", parents=[common], help="set or clear limits; the others stay")
    p.add_argument("--principal", required=True, type=_name)
    for n in LIMIT_NAMES:
        p.add_argument("--" + n.replace("_", "-"), dest=n, type=_count, metavar="N")
    p.add_argument("--clear", action="append", choices=LIMIT_NAMES, metavar="NAME",
                   help="remove a limit (unlimited); repeatable: " + ", ".join(LIMIT_NAMES))
    p.set_defaults(func=cmd_limits_set)
    p = lim.add_parser("show", parents=[common], help="a principal's limits, use and what is left")
    p.add_argument("principal", type=_name)
    p.set_defaults(func=cmd_limits_show)
    usage = groups.add_parser("usage", help="token usage per principal, UTC day and model"
                              ).add_subparsers(dest="action", required=True)
    p = usage.add_parser("show", parents=[common], help="a principal's usage of the last N days")
    p.add_argument("principal", type=_name)
    p.add_argument("--days", type=_days, default=7, help="UTC days, today included (7)")
    _limit(p, cmd_usage_show)
    return parser


def _days(value: str) -> int:
    n = _positive(value)
    if n > MAX_USAGE_DAYS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_USAGE_DAYS}")
    return n


def _limit(p, func) -> None:
    p.add_argument("--limit", type=_positive, default=100, help="at most this many rows (100)")
    p.set_defaults(func=func)


def remote_database_missing(config: Path = REPO_ROOT / "wrangler.toml") -> str | None:
    """Why --remote cannot run, or None: wrangler.toml's INTELLIGENCE_DB needs its
    database_id (without one, wrangler answers with an unrelated token error)."""
    try:
        blocks = tomllib.loads(config.read_text()).get("d1_databases") or []
    except (OSError, tomllib.TOMLDecodeError) as e:
        return f"--remote reads {config.name}, which could not be read ({type(e).__name__})"
    if any(b.get("binding") == DB_BINDING and b.get("database_id") for b in blocks):
        return None
    return (f"--remote needs the database_id of {DB_BINDING} in {config.name}, which is not set: "
            "run `npm run cloudflare:setup` (after `npx wrangler login`) to create the database and "
            "write it; or use --print-sql --out FILE and apply FILE with "
            "`npx wrangler d1 execute INTELLIGENCE_DB --remote --file FILE`")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.remote and args.persist_to:
        print("admin: --persist-to applies to --local only", file=sys.stderr)
        return 2
    if args.out and not args.print_sql:
        print("admin: --out applies to --print-sql only", file=sys.stderr)
        return 2
    if args.print_sql:
        return print_sql(args)
    missing = remote_database_missing() if args.remote else None
    if missing:
        print(f"admin: {missing}", file=sys.stderr)
        return 2
    try:
        if not args.remote and not args.no_migrate:
            apply_local_migrations(args.persist_to)
        db = WranglerExecutor(remote=args.remote, persist_to=args.persist_to)
        result, text = asyncio.run(args.func(db, args))
    except (AdminError, ValueError) as e:
        print(f"admin: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print(text)
        if args.func is cmd_key_create:
            print(f"Stored only as SHA-256 {result['key_sha256']} for principal "
                  f"{result['principal']}; this key is not shown again.", file=sys.stderr)
    if args.func is cmd_key_create and not result["chat_granted"]:
        print(f"Principal {result['principal']} has no policy granting chat: this key gets "
              f"403 chat_not_granted until you run\n  {result['grant_command']}", file=sys.stderr)
    return 0


def print_sql(args) -> int:
    """The command's statements on stdout, one per line group, ending in ';'."""
    db = PrintExecutor()
    try:
        result, _ = asyncio.run(args.func(db, args))
    except (AdminError, ValueError) as e:
        print(f"admin: {e}", file=sys.stderr)
        return 1
    sql = ("-- for: npx wrangler d1 execute INTELLIGENCE_DB --remote --file FILE\n"
           + "\n".join(db.statements) + "\n")
    if args.out:
        # `npm run` starts this in the repository root; a relative FILE is the caller's:
        # where npm was run from (INIT_CWD), as the shell's `> FILE` would have been.
        out = Path(os.environ.get("INIT_CWD") or ".") / args.out
        out.write_text(sql, encoding="utf-8")
    else:
        sys.stdout.write(sql)
    if args.func is cmd_key_create:
        print(f"The key (shown once; the SQL holds only its SHA-256): {result['key']}\n"
              f"If {args.principal} has no policy granting chat, it gets 403 chat_not_granted; "
              f"grant one: {grant_command(args, print_sql=True)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
