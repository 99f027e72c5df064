"""The admin CLI's statements (keys, policies, models, limits) and the SQL literal renderer it
uses with `wrangler d1 execute --command`. The Worker never writes these tables.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from multillm_edge.base.jsonbytes import compact_text
from multillm_edge.core.limits import NAMES as LIMIT_NAMES
from multillm_edge.storage.store import RETENTIONS, Executor

_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1

# ---------------------------------------------------------------------------
# Admin writes
# ---------------------------------------------------------------------------

SQL_INSERT_KEY = """
INSERT INTO roleplay_keys (key_sha256, principal, created_at, revoked_at)
VALUES (?1, ?2, ?3, NULL)
"""

# ?1 the digest or a prefix of it: revokes only when exactly one key has that prefix.
SQL_REVOKE_KEY = """
UPDATE roleplay_keys SET revoked_at = ?2
 WHERE substr(key_sha256, 1, length(?1)) = ?1 AND revoked_at IS NULL
   AND (SELECT COUNT(*) FROM roleplay_keys WHERE substr(key_sha256, 1, length(?1)) = ?1) = 1
"""

SQL_SET_POLICY = """
INSERT INTO principal_policies (principal, revision, grants, retention, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT(principal) DO UPDATE SET
  revision = excluded.revision, grants = excluded.grants,
  retention = excluded.retention, updated_at = excluded.updated_at
"""

SQL_SET_MODEL = """
INSERT INTO models (model, input_tokens, max_output_tokens) VALUES (?1, ?2, ?3)
ON CONFLICT(model) DO UPDATE SET
  input_tokens = excluded.input_tokens, max_output_tokens = excluded.max_output_tokens
"""

# The limits of a principal (docs/design.md §4.1): ?2..?5 the values in LIMIT_NAMES order,
# ?6 now, ?7..?10 1 where the value replaces the stored one (set or cleared), 0 where the
# stored one stays. Not a policy revision: pages stay retrievable.
SQL_SET_LIMITS = """
INSERT INTO principal_limits (principal, requests_per_minute, tokens_per_day, sessions_per_day,
                              active_bytes, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT(principal) DO UPDATE SET
  requests_per_minute = CASE WHEN ?7 THEN excluded.requests_per_minute ELSE requests_per_minute END,
  tokens_per_day      = CASE WHEN ?8 THEN excluded.tokens_per_day ELSE tokens_per_day END,
  sessions_per_day    = CASE WHEN ?9 THEN excluded.sessions_per_day ELSE sessions_per_day END,
  active_bytes        = CASE WHEN ?10 THEN excluded.active_bytes ELSE active_bytes END,
  updated_at          = excluded.updated_at
"""

SQL_SHOW_LIMITS = """
SELECT updated_at,
       (SELECT COALESCE(SUM(u.input_tokens + u.output_tokens), 0) FROM principal_usage u
         WHERE u.principal = ?1 AND u.day = ?2) AS tokens_today
  FROM (SELECT 1) LEFT JOIN principal_limits l ON l.principal = ?1
"""


# ---------------------------------------------------------------------------
# Admin reads (list / show). Keys appear by their digest's first KEY_PREFIX_HEX
# characters only; ?N = NULL means "any".
# ---------------------------------------------------------------------------

KEY_PREFIX_HEX = 12

SQL_LIST_PRINCIPALS = """
WITH p AS (SELECT principal FROM roleplay_keys UNION SELECT principal FROM principal_policies
           UNION SELECT principal FROM roleplay_sessions)
SELECT p.principal,
       (SELECT COUNT(*) FROM roleplay_keys k WHERE k.principal = p.principal
           AND k.revoked_at IS NULL) AS active_keys,
       (SELECT COUNT(*) FROM roleplay_keys k WHERE k.principal = p.principal
           AND k.revoked_at IS NOT NULL) AS revoked_keys,
       (SELECT COUNT(*) FROM roleplay_sessions s WHERE s.principal = p.principal
           AND s.ended_at IS NULL) AS open_sessions,
       pp.revision AS policy_revision, pp.grants AS grants, pp.retention AS retention
  FROM p LEFT JOIN principal_policies pp ON pp.principal = p.principal
 WHERE ?1 IS NULL OR p.principal = ?1
 ORDER BY p.principal LIMIT ?2
"""

SQL_LIST_KEYS = """
SELECT substr(key_sha256, 1, 12) AS key_prefix, principal, created_at, revoked_at
  FROM roleplay_keys
 WHERE (?1 IS NULL OR principal = ?1) AND (?2 IS NULL OR substr(key_sha256, 1, length(?2)) = ?2)
 ORDER BY created_at DESC, key_sha256 LIMIT ?3
"""

SQL_LIST_POLICIES = """
SELECT principal, revision, grants, retention, updated_at FROM principal_policies
 WHERE ?1 IS NULL OR principal = ?1 ORDER BY principal LIMIT ?2
"""

SQL_LIST_SESSIONS = """
SELECT s.session_id, s.principal, s.created_at, s.ended_at,
       (SELECT COUNT(*) FROM context_pages c WHERE c.session_id = s.session_id
           AND c.principal = s.principal AND c.expires_at > ?4) AS active_pages,
       (SELECT COALESCE(SUM(c.byte_length), 0) FROM context_pages c
         WHERE c.session_id = s.session_id AND c.principal = s.principal
           AND c.expires_at > ?4) AS active_bytes
  FROM roleplay_sessions s
 WHERE (?1 IS NULL OR s.principal = ?1) AND (?2 IS NULL OR s.session_id = ?2)
   AND (?5 = 0 OR s.ended_at IS NULL)
 ORDER BY s.created_at DESC, s.session_id LIMIT ?3
"""

SQL_LIST_MODELS = """
SELECT model, input_tokens, max_output_tokens FROM models
 WHERE ?1 IS NULL OR model = ?1 ORDER BY model LIMIT ?2
"""


# A principal's usage per UTC day and model since ?2 (docs/design.md §4.1), newest first.
SQL_USAGE_ROWS = """
SELECT day, model, requests, input_tokens, cached_input_tokens, cache_write_tokens,
       output_tokens, estimated
  FROM principal_usage
 WHERE principal = ?1 AND day >= ?2
 ORDER BY day DESC, model LIMIT ?3
"""


async def usage_rows(db: Executor, principal: str, since_day: str, limit: int) -> list[dict]:
    return await db.all(SQL_USAGE_ROWS, [principal, since_day, int(limit)])


async def list_principals(db: Executor, principal: str | None, limit: int) -> list[dict]:
    return [_grants(r) for r in await db.all(SQL_LIST_PRINCIPALS, [principal, limit])]


async def list_keys(db: Executor, principal: str | None, prefix: str | None, limit: int) -> list[dict]:
    return await db.all(SQL_LIST_KEYS, [principal, prefix, limit])


async def list_policies(db: Executor, principal: str | None, limit: int) -> list[dict]:
    return [_grants(r) for r in await db.all(SQL_LIST_POLICIES, [principal, limit])]


async def list_sessions(db: Executor, principal: str | None, session_id: str | None,
                        limit: int, now: int, open_only: bool = False) -> list[dict]:
    return await db.all(SQL_LIST_SESSIONS, [principal, session_id, limit, int(now), int(open_only)])


async def list_models(db: Executor, model: str | None, limit: int) -> list[dict]:
    return await db.all(SQL_LIST_MODELS, [model, limit])


def _grants(row: dict) -> dict:
    """The stored JSON array of grants as a list (None without a policy)."""
    grants = row.get("grants")
    if isinstance(grants, str):
        try:
            row = {**row, "grants": json.loads(grants)}
        except ValueError:
            pass
    return row


async def insert_key(db: Executor, key_sha256: str, principal: str, now: int) -> None:
    await db.run(SQL_INSERT_KEY, [key_sha256, principal, int(now)])


async def revoke_key(db: Executor, key_sha256: str, now: int) -> bool:
    """True iff an unrevoked key was revoked: its digest, or a prefix only it has."""
    return await db.run(SQL_REVOKE_KEY, [key_sha256, int(now)]) > 0


async def set_policy(db: Executor, principal: str, revision: int, grants: Sequence[str],
                     retention: str, now: int) -> None:
    if retention not in RETENTIONS:
        raise ValueError("retention must be 'standard' or 'zero'")
    if isinstance(revision, bool) or not isinstance(revision, int):
        raise ValueError("revision must be an integer")
    grants = list(grants)
    if not all(isinstance(g, str) and g for g in grants):
        raise ValueError("grants must be non-empty strings")
    await db.run(SQL_SET_POLICY, [principal, revision, compact_text(grants, ascii=True), retention, int(now)])


async def set_limits(db: Executor, principal: str, values: dict, cleared: Sequence[str],
                     now: int) -> None:
    """Set the limits in ``values`` (name -> integer >= 0) and clear those in ``cleared``
    (unlimited); the others stay as they are."""
    unknown = (set(values) | set(cleared)) - set(LIMIT_NAMES)
    if unknown:
        raise ValueError(f"unknown limit {sorted(unknown)[0]}: one of {', '.join(LIMIT_NAMES)}")
    if set(values) & set(cleared):
        raise ValueError(f"{sorted(set(values) & set(cleared))[0]} is both set and cleared")
    if not values and not cleared:
        raise ValueError("nothing to change: give a limit to set or --clear NAME")
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _INT64_MAX:
            raise ValueError(f"{name} must be an integer >= 0")
    touched = [1 if n in values or n in cleared else 0 for n in LIMIT_NAMES]
    await db.run(SQL_SET_LIMITS, [principal, *(values.get(n) for n in LIMIT_NAMES), int(now), *touched])


async def show_limits(db: Executor, principal: str, day: str) -> dict:
    """When the principal's limits last changed (None: never set) and its tokens of ``day``."""
    return await db.first(SQL_SHOW_LIMITS, [principal, day]) or {}


async def set_model(db: Executor, model: str, input_tokens: int, max_output_tokens: int) -> None:
    for v in (input_tokens, max_output_tokens):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError("token counts must be positive integers")
    await db.run(SQL_SET_MODEL, [model, input_tokens, max_output_tokens])


# ---------------------------------------------------------------------------
# Inline rendering (admin CLI -> `wrangler d1 execute --command`)
# ---------------------------------------------------------------------------


def _literal(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        raise TypeError("bool parameters are not supported; pass 0/1")
    if isinstance(v, int):
        if not _INT64_MIN <= v <= _INT64_MAX:
            raise ValueError("integer out of SQLite range")
        return str(v)
    if isinstance(v, str):
        if "\x00" in v:
            raise ValueError("NUL character in string parameter")
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("string parameter is not valid Unicode") from None
        return "'" + v.replace("'", "''") + "'"
    raise TypeError(f"unsupported parameter type {type(v).__name__}")


def inline(sql: str, params: Sequence[Any]) -> str:
    """Render `sql` with its `?N` / `?` parameters replaced by quoted SQL literals
    (str with '' doubling, int, None -> NULL). Placeholders inside string literals,
    quoted identifiers and comments are left alone. Every parameter must be used
    and every placeholder must have a parameter."""
    params = list(params)
    lits = [_literal(p) for p in params]
    used = set()
    out = []
    i, n, seq = 0, len(sql), 0
    while i < n:
        c = sql[i]
        if c in "'\"`[":
            close = "]" if c == "[" else c
            j = i + 1
            while j < n:
                if sql[j] == close:
                    if close != "]" and j + 1 < n and sql[j + 1] == close:
                        j += 2
                        continue
                    break
                j += 1
            if j >= n:
                raise ValueError("unterminated quoted text in SQL")
            out.append(sql[i:j + 1])
            i = j + 1
        elif c == "-" and sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            out.append(sql[i:j])
            i = j
        elif c == "/" and sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            if j < 0:
                raise ValueError("unterminated comment in SQL")
            out.append(sql[i:j + 2])
            i = j + 2
        elif c == "?":
            j = i + 1
            while j < n and sql[j].isdigit():
                j += 1
            if j > i + 1:
                idx = int(sql[i + 1:j])
            else:
                seq += 1
                idx = seq
            if not 1 <= idx <= len(lits):
                raise ValueError(f"no parameter for placeholder ?{idx}")
            used.add(idx)
            out.append(lits[idx - 1])
            i = j
        elif c in ":@$":
            raise ValueError("named parameters are not supported")
        else:
            out.append(c)
            i += 1
    if used != set(range(1, len(lits) + 1)):
        raise ValueError("unused parameters")
    return "".join(out)
