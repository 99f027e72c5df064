"""Every SQL statement of the edge, run through a tiny async executor (docs/design.md §4, §5.9).

The executor is D1 in production (platform layer) and sqlite3 in tests and tools
(`devkit.sqlite.SqliteExecutor`; the admin statements are in `devkit.admin_sql`). Statements use numbered `?N` parameters and run unchanged on both.
Lists travel as ONE JSON parameter read with `json_each` (D1 binds at most 100
parameters per statement).

A generation turn costs one round trip (`read_generation_rows`: a batch of the request
admission and the context read, docs/design.md §4.1) when it has nothing new to store
and no row due for refresh, else two (plus `upsert_pages`). The scheduled cleanup runs
`purge_expired_pages` and `purge_old_requests` in bounded batches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

from ..base.jsonbytes import compact_text
from ..base.platform import Database as Executor
from ..core import limits
from ..core.pages import ROLEPLAY
from ..core.rows import COLUMNS as PAGE_COLUMNS, INT_COLUMNS, STR_COLUMNS, ActivePage, PageRow, active, decoded, read_integer as _int

TABLES = ("roleplay_keys", "roleplay_sessions", "principal_policies", "models", "context_pages",
          "principal_limits", "principal_requests")
RETENTIONS = ("standard", "zero")


# ---------------------------------------------------------------------------
# Result shapes
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    revision: int
    grants: tuple[str, ...]
    retention: str  # "standard" | "zero"

    def has_grant(self, name: str) -> bool:
        return name in self.grants


@dataclass(frozen=True)
class SessionState:
    exists: bool
    owned: bool     # exists and belongs to the key's principal
    ended: bool

    @property
    def open(self) -> bool:
        return self.exists and self.owned and not self.ended


@dataclass(frozen=True)
class ModelWindow:
    input_tokens: int
    max_output_tokens: int


@dataclass(frozen=True)
class PrincipalInfo:
    principal: str
    key_revoked: bool
    policy: Optional[Policy]


@dataclass(frozen=True)
class GenerationContext:
    principal: str
    key_revoked: bool
    policy: Optional[Policy]
    session: SessionState
    models: dict  # "provider:model" -> ModelWindow, only models present in the table
    # page_id -> ActivePage: roleplay rows of (principal, session, current revision), unexpired
    active_pages: Mapping[str, ActivePage]
    active_bytes: int  # SUM(byte_length) of the active pages (current revision, unexpired)
    # docs/design.md §4.1: the principal's limits; the 429 a limit answers this turn
    # (None: admitted), raised after the key, grant and session checks; the principal's
    # active page bytes across its sessions (None unless `active_bytes` is set).
    limits: limits.Limits = limits.NO_LIMITS
    refusal: Optional[limits.LimitReached] = None
    principal_active_bytes: Optional[int] = None


@dataclass(frozen=True)
class Upserted:
    """The verdict of `upsert_pages`, and each written row as it now stands."""
    accepted: bool
    rows: dict  # page_id -> ActivePage

    def __bool__(self) -> bool:
        return self.accepted


@dataclass(frozen=True)
class RetrievalFacts:
    principal: str
    key_revoked: bool
    policy: Optional[Policy]
    session: SessionState
    page: Optional[PageRow]  # the context_pages row, or None
    page_active: bool     # page exists and expires_at > now


def _policy(row: dict) -> Optional[Policy]:
    if row.get("policy_revision") is None:
        return None
    grants: tuple[str, ...] = ()
    try:
        g = json.loads(row.get("grants") or "[]")
        if isinstance(g, list) and all(isinstance(x, str) for x in g):
            grants = tuple(g)
    except (TypeError, ValueError):
        grants = ()  # unreadable grants: fail closed
    retention = row.get("retention")
    if retention not in RETENTIONS:
        retention = "zero"  # unknown retention: fail closed (never store)
    return Policy(revision=_int(row["policy_revision"]), grants=grants, retention=retention)


def _key_facts(row: dict) -> dict:
    """The key's principal, revocation and current policy: the head of every read below."""
    return {"principal": row["principal"], "key_revoked": bool(row["key_revoked"]),
            "policy": _policy(row)}


def _session(row: dict) -> SessionState:
    owner = row.get("session_principal")
    exists = owner is not None
    return SessionState(exists=exists, owned=exists and owner == row["principal"],
                        ended=exists and row.get("session_ended_at") is not None)


def _json_list(items: Iterable) -> str:
    return compact_text(list(items), ascii=True)


# ---------------------------------------------------------------------------
# Reads
# ---------------------------------------------------------------------------

# The head of every roleplay read: the key, its principal's current policy and, but for
# the session routes, the session named by ?2; the key digest is always ?1.
_KEY_COLUMNS = """k.principal AS principal,
       (k.revoked_at IS NOT NULL) AS key_revoked,
       p.revision AS policy_revision, p.grants AS grants, p.retention AS retention"""


def _roleplay_read(columns: str = "", joins: str = "", session: bool = True) -> str:
    """SELECT the key's facts (+ the session's) + ``columns``, FROM the key's tables + ``joins``."""
    head = _KEY_COLUMNS
    tables = ["  FROM roleplay_keys k", "  LEFT JOIN principal_policies p ON p.principal = k.principal"]
    if session:
        head += ",\n       s.principal AS session_principal, s.ended_at AS session_ended_at"
        tables.append("  LEFT JOIN roleplay_sessions s ON s.session_id = ?2")
    if columns:
        head += ",\n       " + columns
    return "\nSELECT " + head + "\n" + "\n".join(tables + ([joins] if joins else [])) + \
        "\n WHERE k.key_sha256 = ?1\n"


def _page_columns(alias: str = "c", prefix: str = "") -> str:
    """Every page column, in ``PAGE_COLUMNS`` order (``AS <prefix><column>`` when prefixed)."""
    return ", ".join(f"{alias}.{c}" + (f" AS {prefix}{c}" if prefix else "") for c in PAGE_COLUMNS)


# The principal's limits (docs/design.md §4.1), joined by every read that enforces them;
# no row = unlimited. Each count below is evaluated only when its limit is set (CASE is
# lazy): a principal without limits costs the one lookup. The request window is the 60 s
# of core.limits.WINDOW_SECONDS (`at > now - 60`).
_LIMIT_COLUMNS = """l.requests_per_minute AS limit_requests_per_minute,
       l.tokens_per_day AS limit_tokens_per_day, l.sessions_per_day AS limit_sessions_per_day,
       l.active_bytes AS limit_active_bytes"""
_LIMITS_JOIN = "  LEFT JOIN principal_limits l ON l.principal = k.principal"

# ?1 key digest, ?2 session, ?3 models (JSON), ?4 now, ?5 authority, ?6 the UTC day.
# With `requests_per_minute` set: the requests in the window and when the oldest was
# counted (`requests_frees_from`: its leaving frees a slot; the admission never counts
# past the limit, so only a lowered limit needs more to leave, and its Retry-After is
# then early: the retry gets a 429 with the next one). With
# `tokens_per_day`: the day's tokens so far. With `active_bytes`: the principal's active
# page bytes across its sessions.
SQL_LOAD_GENERATION_CONTEXT = _roleplay_read("""(SELECT json_group_object(m.model, json_object('input_tokens', m.input_tokens,
                                                       'max_output_tokens', m.max_output_tokens))
          FROM models m
         WHERE m.model IN (SELECT value FROM json_each(?3))) AS models,
       (SELECT json_group_array(json_array(c.page_id, c.expires_at, c.body_written_at,
                                           c.r2_key, c.r2_offset, c.byte_length))
          FROM context_pages c
         WHERE c.principal = k.principal AND c.session_id = ?2 AND c.authority = ?5
           AND c.policy_revision = p.revision AND c.expires_at > ?4) AS active_pages,
       (SELECT COALESCE(SUM(c.byte_length), 0)
          FROM context_pages c
         WHERE c.principal = k.principal AND c.session_id = ?2
           AND c.policy_revision = p.revision AND c.expires_at > ?4) AS active_bytes,
       """ + _LIMIT_COLUMNS + """,
       CASE WHEN l.requests_per_minute IS NOT NULL THEN
         (SELECT COUNT(*) FROM principal_requests r
           WHERE r.principal = k.principal AND r.at > ?4 - 60) END AS requests_in_window,
       CASE WHEN l.requests_per_minute IS NOT NULL THEN
         (SELECT MIN(r.at) FROM principal_requests r
           WHERE r.principal = k.principal AND r.at > ?4 - 60) END AS requests_frees_from,
       CASE WHEN l.tokens_per_day IS NOT NULL THEN
         (SELECT COALESCE(SUM(u.input_tokens + u.output_tokens), 0) FROM principal_usage u
           WHERE u.principal = k.principal AND u.day = ?6) END AS tokens_today,
       CASE WHEN l.active_bytes IS NOT NULL THEN
         (SELECT COALESCE(SUM(c.byte_length), 0)
            FROM context_pages c
           WHERE c.principal = k.principal AND c.authority = ?5
             AND c.policy_revision = p.revision AND c.expires_at > ?4) END AS principal_active_bytes""",
    _LIMITS_JOIN)

# A generation's slot in its principal's request window (docs/design.md §4.1), counted
# by the statement that checks it: one row per admitted generation of a principal with
# `requests_per_minute` set, only if the window has room, the day's tokens are under
# `tokens_per_day` and the request would pass the read's checks (live key, chat granted,
# the caller's open session): a request refused for any of them takes no slot.
# ?1 key digest, ?2 session, ?3 now, ?4 the UTC day. RETURNING: a row iff counted.
SQL_ADMIT_GENERATION = """
INSERT INTO principal_requests (principal, at)
SELECT k.principal, ?3
  FROM roleplay_keys k
  JOIN principal_limits l ON l.principal = k.principal AND l.requests_per_minute IS NOT NULL
  JOIN principal_policies p ON p.principal = k.principal
  JOIN roleplay_sessions s ON s.session_id = ?2 AND s.principal = k.principal AND s.ended_at IS NULL
 WHERE k.key_sha256 = ?1 AND k.revoked_at IS NULL
   -- the grants as _policy reads them: a JSON array of strings, else none (CASE is lazy:
   -- json_type and json_each raise on malformed JSON)
   AND CASE WHEN json_valid(p.grants) THEN
         CASE WHEN json_type(p.grants) = 'array'
              THEN EXISTS (SELECT 1 FROM json_each(p.grants) g WHERE g.value = 'chat')
                   AND NOT EXISTS (SELECT 1 FROM json_each(p.grants) g WHERE g.type <> 'text') END END
   AND (SELECT COUNT(*) FROM principal_requests r
         WHERE r.principal = k.principal AND r.at > ?3 - 60) < l.requests_per_minute
   AND (l.tokens_per_day IS NULL
        OR (SELECT COALESCE(SUM(u.input_tokens + u.output_tokens), 0) FROM principal_usage u
             WHERE u.principal = k.principal AND u.day = ?4) < l.tokens_per_day)
RETURNING at
"""


async def load_generation_context(db: Executor, key_sha256: str, session_id: str,
                                  models: Sequence[str], now: int) -> Optional[GenerationContext]:
    """Everything a generation turn needs, in one round trip. None = unknown key."""
    return generation_context(*await read_generation_rows(db, key_sha256, session_id, models, now), now)


async def read_generation_rows(db: Executor, key_sha256: str, session_id: str,
                               models: Sequence[str], now: int) -> tuple[Optional[dict], bool]:
    """The one round trip of a turn: ONE D1 batch of the admission (counts the request
    in its principal's window when it has room) and the context read → (the context's
    row undecoded, whether the admission counted the request)."""
    now = int(now)
    day = limits.utc_day(now)
    counted, rows = await db.batch([
        (SQL_ADMIT_GENERATION, [key_sha256, session_id, now, day]),
        (SQL_LOAD_GENERATION_CONTEXT, [key_sha256, session_id, _json_list(models), now, ROLEPLAY, day]),
    ])
    return (rows[0] if rows else None), bool(counted)


_tuple_new = tuple.__new__


def _active_pages(text: Optional[str]) -> dict:
    """page_id -> ActivePage from the JSON array the statement aggregates. SQLite's
    json_array writes INTEGER columns as JSON integers: only a REAL needs `_int`."""
    out = {}
    for pid, exp, written, key, offset, length in json.loads(text or "[]"):
        if type(exp) is int and type(written) is int and type(offset) is int and type(length) is int:
            out[pid] = _tuple_new(ActivePage, (exp, written, key, offset, length))   # no Python frame
        else:
            out[pid] = active(exp, written, key, offset, length)
    return out


def generation_context(row: Optional[dict], counted: bool = False,
                       now: int = 0) -> Optional[GenerationContext]:
    """Decode the rows of `read_generation_rows` (pure CPU: timed apart from the read):
    ``counted`` whether the admission took a slot, ``now`` the clock it read at."""
    if row is None:
        return None
    windows = {}
    for name, w in json.loads(row.get("models") or "{}").items():
        windows[name] = ModelWindow(input_tokens=_int(w["input_tokens"]),
                                    max_output_tokens=_int(w["max_output_tokens"]))
    return GenerationContext(
        **_key_facts(row),
        session=_session(row),
        models=windows,
        active_pages=_active_pages(row.get("active_pages")),
        active_bytes=_int(row.get("active_bytes") or 0),
        **_admission(row, counted, now),
    )


def _admission(row: dict, counted: bool, now: int) -> dict:
    """The limits and what they say of this turn; nothing to decode without a limit."""
    if row.get("limit_requests_per_minute") is None and row.get("limit_tokens_per_day") is None \
            and row.get("limit_active_bytes") is None and row.get("limit_sessions_per_day") is None:
        return {}
    lim = limits.limits_of(row, "limit_")
    refusal = None
    tokens = row.get("tokens_today")
    if lim.tokens_per_day is not None and _int(tokens or 0) >= lim.tokens_per_day:
        refusal = limits.token_budget_exceeded(lim.tokens_per_day, limits.until_tomorrow(now))
    elif lim.requests_per_minute is not None and not counted:
        frees = row.get("requests_frees_from")
        refusal = limits.rate_limited(lim.requests_per_minute, limits.window_frees_in(
            None if frees is None else _int(frees), now))
    principal_bytes = row.get("principal_active_bytes")
    return {"limits": lim, "refusal": refusal,
            "principal_active_bytes": None if principal_bytes is None else _int(principal_bytes)}


SQL_LOAD_PAGE_FOR_RETRIEVAL = _roleplay_read(
    _page_columns(prefix="page_") + ",\n       (c.page_id IS NOT NULL AND c.expires_at > ?4) AS page_active",
    "  LEFT JOIN context_pages c ON c.page_id = ?3")


async def load_page_for_retrieval(db: Executor, key_sha256: str, session_id: str,
                                  page_id: str, now: int) -> Optional[RetrievalFacts]:
    """Raw facts for a retrieval, in one statement; the caller does every check
    (ownership, session, authority, revision, expiry, signature). None = unknown key."""
    row = await db.first(SQL_LOAD_PAGE_FOR_RETRIEVAL, [key_sha256, session_id, page_id, int(now)])
    if row is None:
        return None
    page = None
    if row.get("page_page_id") is not None:
        page = decoded(row["page_" + c] for c in PAGE_COLUMNS)
    return RetrievalFacts(
        **_key_facts(row),
        session=_session(row),
        page=page,
        page_active=bool(row["page_active"]),
    )


SQL_LOAD_SESSION_PAGES = _roleplay_read(f"""(SELECT json_group_array(json_array({_page_columns()}))
          FROM context_pages c
         WHERE c.principal = k.principal AND c.session_id = ?2 AND c.authority = ?4
           AND c.policy_revision = p.revision AND c.expires_at > ?3) AS pages""")


@dataclass(frozen=True)
class SessionPages:
    """A search's facts: the key's, the session's and every active roleplay row of
    (principal, session, current revision), unexpired (all PAGE_COLUMNS each)."""
    principal: str
    key_revoked: bool
    policy: Optional[Policy]
    session: SessionState
    pages: list


async def load_session_pages(db: Executor, key_sha256: str, session_id: str,
                             now: int) -> Optional[SessionPages]:
    """Raw facts for a search, in one statement; the caller re-checks every row as a
    retrieval would (docs/design.md §6.1). None = unknown key."""
    return session_pages(await read_session_row(db, key_sha256, session_id, now))


async def read_session_row(db: Executor, key_sha256: str, session_id: str,
                           now: int) -> Optional[dict]:
    """The one statement of `load_session_pages`, its row undecoded."""
    return await db.first(SQL_LOAD_SESSION_PAGES, [key_sha256, session_id, int(now), ROLEPLAY])


def session_pages(row: Optional[dict]) -> Optional[SessionPages]:
    """Decode the row of `read_session_row` (pure CPU: timed apart from the read)."""
    if row is None:
        return None
    pages = [decoded(values) for values in json.loads(row.get("pages") or "[]")]
    return SessionPages(**_key_facts(row), session=_session(row), pages=pages)


SQL_LOAD_PRINCIPAL = _roleplay_read(session=False)


async def load_principal(db: Executor, key_sha256: str) -> Optional[PrincipalInfo]:
    """Key -> principal + current policy (session routes). None = unknown key."""
    row = await db.first(SQL_LOAD_PRINCIPAL, [key_sha256])
    if row is None:
        return None
    return PrincipalInfo(**_key_facts(row))


# The model list of a roleplay key (docs/design.md §2, `GET /v1/models`): the key's facts
# and every model name, in one statement; the route keeps those a provider serves.
SQL_LOAD_PRINCIPAL_MODELS = _roleplay_read(
    "(SELECT json_group_array(m.model) FROM models m) AS models", session=False)


@dataclass(frozen=True)
class PrincipalModels:
    principal: str
    key_revoked: bool
    policy: Optional[Policy]
    models: tuple[str, ...]   # every name in the models table, sorted


async def load_principal_models(db: Executor, key_sha256: str) -> Optional[PrincipalModels]:
    """Key -> principal, current policy and the models table's names, in one statement
    (`GET /v1/models`). None = unknown key."""
    row = await db.first(SQL_LOAD_PRINCIPAL_MODELS, [key_sha256])
    if row is None:
        return None
    names = json.loads(row.get("models") or "[]")
    return PrincipalModels(**_key_facts(row),
                           models=tuple(sorted(n for n in names if isinstance(n, str))))


SQL_MISSING_TABLES = """
SELECT w.value AS name
  FROM json_each(?1) w
 WHERE w.value NOT IN (SELECT name FROM sqlite_master WHERE type = 'table')
 ORDER BY w.key
"""


async def missing_tables(db: Executor) -> list[str]:
    """Which of the five edge tables are absent (empty list = ready)."""
    rows = await db.all(SQL_MISSING_TABLES, [_json_list(TABLES)])
    return [r["name"] for r in rows]


# The providers registered models name (the part of `provider:model` before its first ':').
SQL_MODEL_PROVIDERS = """
SELECT DISTINCT substr(model, 1, instr(model, ':') - 1) AS provider FROM models ORDER BY provider
"""


async def model_providers(db: Executor) -> list[str]:
    """The providers the `models` table names (/healthz compares them with PROVIDERS)."""
    return [r["provider"] for r in await db.all(SQL_MODEL_PROVIDERS, [])]


# ---------------------------------------------------------------------------
# Page upsert (allowance check + write, one statement)
# ---------------------------------------------------------------------------

# ?1 rows: [[page_id, sha256, byte_length, key index in ?6, r2_offset, body_written_at,
#            expires_at, signature, moved-from key index in ?6 or null, moved-from offset], ...];
# ?2 principal, ?3 session, ?4 now, ?5 allowance, ?6 distinct object keys (rows of one
# request share one), ?7 authority, ?8 policy revision, ?9 young: a row whose body was
# written after ?9 is not due for a rewrite, ?10 page ids left out of both sums (single
# pages a block of the plan holds again, docs/design.md §5.9).
SQL_UPSERT_PAGES = """
WITH incoming AS (
  SELECT json_extract(j.value, '$[0]') AS page_id,
         json_extract(j.value, '$[1]') AS sha256,
         json_extract(j.value, '$[2]') AS byte_length,
         json_extract(?6, '$[' || json_extract(j.value, '$[3]') || ']') AS r2_key,
         json_extract(j.value, '$[4]') AS r2_offset,
         json_extract(j.value, '$[5]') AS body_written_at,
         json_extract(j.value, '$[6]') AS expires_at,
         json_extract(j.value, '$[7]') AS signature,
         json_extract(?6, '$[' || json_extract(j.value, '$[8]') || ']') AS from_key,
         json_extract(j.value, '$[9]') AS from_offset
    FROM json_each(?1) j
),
verdict AS (
  SELECT (SELECT COALESCE(SUM(c.byte_length), 0)
            FROM context_pages c
           WHERE c.principal = ?2 AND c.session_id = ?3 AND c.policy_revision = ?8
             AND c.expires_at > ?4
             AND c.page_id NOT IN (SELECT page_id FROM incoming)
             AND c.page_id NOT IN (SELECT value FROM json_each(?10)))
       + (SELECT COALESCE(SUM(byte_length), 0) FROM incoming
           WHERE page_id NOT IN (SELECT value FROM json_each(?10))) <= ?5
     AND NOT EXISTS (SELECT 1
                       FROM context_pages c JOIN incoming i ON c.page_id = i.page_id
                      WHERE c.principal <> ?2 OR c.session_id <> ?3
                         OR c.authority <> ?7)
     -- the principal's `active_bytes` across its sessions (docs/design.md §4.1), if set
     AND COALESCE((SELECT (SELECT COALESCE(SUM(c.byte_length), 0)
                             FROM context_pages c
                            WHERE c.principal = ?2 AND c.authority = ?7 AND c.policy_revision = ?8
                              AND c.expires_at > ?4
                              AND c.page_id NOT IN (SELECT page_id FROM incoming)
                              AND c.page_id NOT IN (SELECT value FROM json_each(?10)))
                        + (SELECT COALESCE(SUM(byte_length), 0) FROM incoming
                            WHERE page_id NOT IN (SELECT value FROM json_each(?10))) <= l.active_bytes
                     FROM principal_limits l
                    WHERE l.principal = ?2 AND l.active_bytes IS NOT NULL), 1) AS ok
),
-- A row that a concurrent request has just written elsewhere (active, young body, another
-- location) stays as it is: repointing it would leave that request's object without rows.
-- A merge moves a row only from where it was read (compare and swap, docs/design.md §5.9).
resolved AS (
  SELECT i.page_id, i.sha256, i.byte_length,
         COALESCE(k.r2_key, i.r2_key) AS r2_key,
         COALESCE(k.r2_offset, i.r2_offset) AS r2_offset,
         COALESCE(k.body_written_at, i.body_written_at) AS body_written_at,
         COALESCE(k.expires_at, i.expires_at) AS expires_at,
         COALESCE(k.signature, i.signature) AS signature
    FROM incoming i
    LEFT JOIN context_pages k
      ON k.page_id = i.page_id AND k.expires_at > ?4 AND k.body_written_at > ?9
     AND (k.r2_key <> i.r2_key OR k.r2_offset <> i.r2_offset)
     AND NOT (i.from_key IS NOT NULL AND k.r2_key = i.from_key AND k.r2_offset = i.from_offset)
)
INSERT INTO context_pages (page_id, authority, principal, session_id, policy_revision, sha256,
                           byte_length, r2_key, r2_offset, body_written_at, created_at,
                           expires_at, signature)
SELECT r.page_id, ?7, ?2, ?3, ?8, r.sha256, r.byte_length, r.r2_key, r.r2_offset,
       r.body_written_at, ?4, r.expires_at, r.signature
  FROM resolved r
 WHERE (SELECT ok FROM verdict)
ON CONFLICT(page_id) DO UPDATE SET
  policy_revision = excluded.policy_revision,
  sha256          = excluded.sha256,
  byte_length     = excluded.byte_length,
  r2_key          = excluded.r2_key,
  r2_offset       = excluded.r2_offset,
  body_written_at = excluded.body_written_at,
  created_at      = CASE WHEN context_pages.expires_at > ?4 THEN context_pages.created_at
                         ELSE excluded.created_at END,
  expires_at      = excluded.expires_at,
  signature       = excluded.signature
RETURNING page_id, r2_key, r2_offset, body_written_at, expires_at, byte_length
"""

# The columns an incoming row carries (principal, session and created_at are the statement's).
_UPSERT_STR = tuple(c for c in STR_COLUMNS if c not in ("principal", "session_id"))
_UPSERT_INT = tuple(c for c in PAGE_COLUMNS if c in INT_COLUMNS and c != "created_at")


def _upsert_item(r: dict, principal: str, session_id: str, now: int) -> dict:
    if r.get("principal") != principal or r.get("session_id") != session_id:
        raise ValueError("page row does not belong to this principal/session")
    # Rows built before shared objects have no offset / body time: a whole object, written now.
    r = {"r2_offset": 0, "body_written_at": now, **r}
    item = {}
    for k in _UPSERT_STR:
        if not isinstance(r.get(k), str):
            raise ValueError(f"page row field {k} must be a string")
        item[k] = r[k]
    for k in _UPSERT_INT:
        v = r.get(k)
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"page row field {k} must be an integer")
        item[k] = v
    moved = r.get("moved_from")   # (key, offset) a merge moves the row from, or absent
    if moved is not None:
        key, offset = moved
        if not isinstance(key, str) or isinstance(offset, bool) or not isinstance(offset, int):
            raise ValueError("page row field moved_from must be (key, offset)")
        item["moved_from"] = (key, offset)
    return item


def _upsert_payload(items: list[dict]) -> tuple[str, str]:
    """Rows as compact arrays (D1 caps a value at 2 MB) and their distinct keys."""
    keys: dict[str, int] = {}
    rows = []
    for i in items:
        k = keys.setdefault(i["r2_key"], len(keys))
        row = [i["page_id"], i["sha256"], i["byte_length"], k, i["r2_offset"],
               i["body_written_at"], i["expires_at"], i["signature"]]
        moved = i.get("moved_from")
        if moved is not None:
            row += [keys.setdefault(moved[0], len(keys)), moved[1]]
        rows.append(row)
    return _json_list(rows), _json_list(keys)


@dataclass(frozen=True)
class PageSession:
    """The principal and session whose page rows `upsert_pages` writes."""
    principal: str
    session_id: str


async def upsert_pages(db: Executor, rows: Sequence[dict], owner: PageSession, now: int,
                       allowance: int, young_after: Optional[int] = None,
                       uncounted: Sequence[str] = ()) -> Upserted:
    """Write page rows for `owner` (principal, session_id) iff the session's active allowance
    holds: SUM(byte_length) of active rows (expires_at > now, same policy revision) not
    among the incoming page_ids + SUM(incoming byte_length) <= allowance, and so does the
    principal's `active_bytes` limit if set (the same sum over all its roleplay sessions). Existing rows
    are rewritten (expires_at, location, signature), never double counted, except one a
    concurrent request wrote elsewhere after `young_after` (default: now), which is kept;
    a row carrying `moved_from` (key, offset: a merge, docs/design.md §5.9) is moved
    only if it still stands there.
    All or nothing: accepted iff the rows went in. Refused also if an incoming page_id
    already belongs to another principal/session/authority (never overwritten).

    Each row: page_id, authority, principal, session_id, policy_revision, sha256,
    byte_length, r2_key, r2_offset, body_written_at, expires_at, signature (created_at
    is `now` for a new or revived row). One authority and revision per call. Rows
    repeating a page_id must be identical (they are written once). `uncounted`: page_ids
    whose bytes another counted row holds (single pages a block covers, docs/design.md
    §5.9), left out of both sums."""
    now, principal, session_id = int(now), owner.principal, owner.session_id
    by_id: dict[str, dict] = {}
    for r in rows:
        item = _upsert_item(r, principal, session_id, now)
        prev = by_id.get(item["page_id"])
        if prev is not None and prev != item:
            raise ValueError("conflicting rows for one page_id")
        by_id[item["page_id"]] = item
    if not by_id:
        return Upserted(True, {})
    first = next(iter(by_id.values()))
    if any((i["authority"], i["policy_revision"]) != (first["authority"], first["policy_revision"])
           for i in by_id.values()):
        raise ValueError("one authority and policy revision per upsert")
    payload, keys = _upsert_payload(list(by_id.values()))
    young = now if young_after is None else int(young_after)
    out = await db.all(SQL_UPSERT_PAGES, [payload, principal, session_id, now, int(allowance), keys,
                                          first["authority"], first["policy_revision"], young,
                                          _json_list(uncounted)])
    return Upserted(bool(out), {r["page_id"]: active(r["expires_at"], r["body_written_at"], r["r2_key"],
                                                     r["r2_offset"], r["byte_length"])
                                for r in out})


# ---------------------------------------------------------------------------
# Limits: what a principal may still do (docs/design.md §4.1)
# ---------------------------------------------------------------------------

def _count_columns(principal: str, now: str, day_start: str, authority: str) -> str:
    """What counts against each limit at ``now`` (SQL expressions for the principal, now,
    the UTC day's first second, the authority), counted as the enforcing statements count:
    requests in the sliding window (and the oldest of them), sessions created since the
    UTC day began, active roleplay page bytes (current revision, unexpired) across
    sessions. One text for the limits' read and the usage route's, so both say the same."""
    return f"""(SELECT COUNT(*) FROM principal_requests r
         WHERE r.principal = {principal} AND r.at > {now} - 60) AS requests_in_window,
       (SELECT r.at FROM principal_requests r
         WHERE r.principal = {principal} AND r.at > {now} - 60 ORDER BY r.at LIMIT 1) AS requests_oldest,
       (SELECT COUNT(*) FROM roleplay_sessions s
         WHERE s.principal = {principal} AND s.created_at >= {day_start}) AS sessions_today,
       (SELECT COALESCE(SUM(c.byte_length), 0)
          FROM context_pages c JOIN principal_policies pp ON pp.principal = c.principal
         WHERE c.principal = {principal} AND c.authority = {authority}
           AND c.policy_revision = pp.revision AND c.expires_at > {now}) AS active_bytes"""


# ?1 principal, ?2 now, ?3 the UTC day's first second, ?4 authority.
SQL_PRINCIPAL_LIMITS_AND_COUNTS = """
SELECT """ + _LIMIT_COLUMNS + """,
       """ + _count_columns("?1", "?2", "?3", "?4") + """
  FROM (SELECT 1)
  LEFT JOIN principal_limits l ON l.principal = ?1
"""


@dataclass(frozen=True)
class PrincipalCounts:
    """A principal's limits and what counts against them at ``now`` (tokens aside:
    they are `principal_usage`'s)."""
    limits: limits.Limits
    requests_in_window: int     # generations counted in the last 60 s (only with requests_per_minute set)
    requests_oldest: Optional[int]   # when the oldest of them was counted (None: none)
    sessions_today: int         # sessions created since the UTC day began
    active_bytes: int           # active roleplay page bytes across its sessions
    now: int

    def remaining(self, tokens_today: int) -> dict:
        """Per limit name, what is left now (never below 0); None where no limit is set.
        ``tokens_today``: input + output tokens of the UTC day (`principal_usage`)."""
        used = {"requests_per_minute": self.requests_in_window, "tokens_per_day": int(tokens_today),
                "sessions_per_day": self.sessions_today, "active_bytes": self.active_bytes}
        return {name: None if limit is None else max(0, limit - used[name])
                for name, limit in self.limits.as_dict().items()}


def _counts_of(row: dict, now: int) -> PrincipalCounts:
    oldest = row.get("requests_oldest")
    return PrincipalCounts(limits.limits_of(row, "limit_"), _int(row.get("requests_in_window") or 0),
                           None if oldest is None else _int(oldest),
                           _int(row.get("sessions_today") or 0), _int(row.get("active_bytes") or 0), now)


async def principal_limits_and_counts(db: Executor, principal: str, now: int) -> PrincipalCounts:
    """The principal's limits and current counts, in one statement (a refused session's
    or upsert's figures, the admin CLI's `limits show`)."""
    now = int(now)
    row = await db.first(SQL_PRINCIPAL_LIMITS_AND_COUNTS,
                         [principal, now, limits.day_start(now), ROLEPLAY]) or {}
    return _counts_of(row, now)


# ---------------------------------------------------------------------------
# Scheduled cleanup
# ---------------------------------------------------------------------------

# Roleplay rows only: managed rows belong to the Flask side. No index on expires_at: the
# subquery scans (rows read are cheap), an index would add a row written to every write.
SQL_PURGE_EXPIRED = """
DELETE FROM context_pages
 WHERE page_id IN (SELECT page_id FROM context_pages
                    WHERE authority = ?3 AND expires_at < ?1
                    LIMIT ?2)
"""


@dataclass(frozen=True)
class Purged:
    deleted: int
    batches: int
    more: bool  # the last batch was full: rows may remain for the next run


async def purge_expired_pages(db: Executor, expired_before: int, batch_rows: int,
                              max_batches: int) -> Purged:
    """Delete roleplay rows with expires_at < expired_before, at most batch_rows per
    statement and max_batches statements."""
    deleted = batches = 0
    n = batch_rows
    while batches < max_batches and n == batch_rows:
        n = await db.run(SQL_PURGE_EXPIRED, [int(expired_before), int(batch_rows), ROLEPLAY])
        deleted += n
        batches += 1
    return Purged(deleted, batches, n == batch_rows)


# Request-window rows that left the window (docs/design.md §4.1): the admission counts
# only the last 60 s, so older rows are dead weight. rowid order: oldest first.
SQL_PURGE_OLD_REQUESTS = """
DELETE FROM principal_requests
 WHERE rowid IN (SELECT rowid FROM principal_requests WHERE at <= ?1 LIMIT ?2)
"""


async def purge_old_requests(db: Executor, now: int, batch_rows: int, max_batches: int) -> Purged:
    """Delete `principal_requests` rows out of the window at ``now``, at most batch_rows
    per statement and max_batches statements."""
    deleted = batches = 0
    n = batch_rows
    while batches < max_batches and n == batch_rows:
        n = await db.run(SQL_PURGE_OLD_REQUESTS, [int(now) - limits.WINDOW_SECONDS, int(batch_rows)])
        deleted += n
        batches += 1
    return Purged(deleted, batches, n == batch_rows)


# ---------------------------------------------------------------------------
# Sessions
# ---------------------------------------------------------------------------

# ?4 the UTC day's first second: with `sessions_per_day` set, the session goes in only
# while fewer were created today (check and insert in one statement: no race).
SQL_CREATE_SESSION = """
INSERT INTO roleplay_sessions (session_id, principal, created_at, ended_at)
SELECT ?1, ?2, ?3, NULL
 WHERE NOT EXISTS (SELECT 1 FROM principal_limits l
                    WHERE l.principal = ?2 AND l.sessions_per_day IS NOT NULL
                      AND (SELECT COUNT(*) FROM roleplay_sessions s
                            WHERE s.principal = ?2 AND s.created_at >= ?4) >= l.sessions_per_day)
"""

SQL_END_SESSION = """
UPDATE roleplay_sessions SET ended_at = ?3
 WHERE session_id = ?1 AND principal = ?2 AND ended_at IS NULL
"""


async def create_session(db: Executor, session_id: str, principal: str, now: int) -> bool:
    """Insert an open session (raises on a duplicate id, which a random id never hits).
    False: the principal's `sessions_per_day` is reached (nothing inserted)."""
    now = int(now)
    return await db.run(SQL_CREATE_SESSION, [session_id, principal, now, limits.day_start(now)]) > 0


async def end_session(db: Executor, session_id: str, principal: str, now: int) -> bool:
    """End an open session of this principal. False: unknown, foreign or already ended."""
    return await db.run(SQL_END_SESSION, [session_id, principal, int(now)]) > 0


# ---------------------------------------------------------------------------
# Usage per principal, UTC day and model (docs/design.md §4.1; migrations/0003)
# ---------------------------------------------------------------------------

# One statement per answered turn, after the answer: the turn's figures added to the
# (principal, day, model) row. No content and no key: names and numbers only.
SQL_RECORD_USAGE = """
INSERT INTO principal_usage (principal, day, model, requests, input_tokens, cached_input_tokens,
                             cache_write_tokens, output_tokens, estimated)
VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?7, ?8)
ON CONFLICT(principal, day, model) DO UPDATE SET
  requests            = requests + 1,
  input_tokens        = input_tokens + excluded.input_tokens,
  cached_input_tokens = cached_input_tokens + excluded.cached_input_tokens,
  cache_write_tokens  = cache_write_tokens + excluded.cache_write_tokens,
  output_tokens       = output_tokens + excluded.output_tokens,
  estimated           = estimated + excluded.estimated
"""


async def record_usage(db: Executor, principal: str, day: str, model: str, usage) -> None:
    """Add one turn's `formats.usage.Usage` to its row."""
    await db.run(SQL_RECORD_USAGE, [principal, day, model, int(usage.input_tokens),
                                    int(usage.cached_input_tokens), int(usage.cache_write_tokens),
                                    int(usage.output_tokens), int(bool(usage.estimated))])


# `GET /v1/roleplay/usage` in one statement: the key's facts, the principal's limits and
# what counts against each now (the limits' own columns: ?3 now, ?4 the UTC day's start,
# ?5 authority), and its days' usage since ?2 (a UTC date, summed over models).
SQL_LOAD_USAGE = _roleplay_read(_LIMIT_COLUMNS + """,
       """ + _count_columns("k.principal", "?3", "?4", "?5") + """,
       (SELECT json_group_array(json_array(d.day, d.input_tokens, d.cached_input_tokens,
                                           d.cache_write_tokens, d.output_tokens, d.requests,
                                           d.estimated))
          FROM (SELECT u.day, SUM(u.input_tokens) AS input_tokens,
                       SUM(u.cached_input_tokens) AS cached_input_tokens,
                       SUM(u.cache_write_tokens) AS cache_write_tokens,
                       SUM(u.output_tokens) AS output_tokens, SUM(u.requests) AS requests,
                       SUM(u.estimated) AS estimated
                  FROM principal_usage u
                 WHERE u.principal = k.principal AND u.day >= ?2
                 GROUP BY u.day) d) AS days""", _LIMITS_JOIN, session=False)


@dataclass(frozen=True)
class DayUsage:
    day: str
    input_tokens: int
    cached_input_tokens: int
    cache_write_tokens: int
    output_tokens: int
    requests: int
    estimated: int       # turns whose figures were estimated


@dataclass(frozen=True)
class PrincipalUsage:
    """A principal's usage and limits as `GET /v1/roleplay/usage` reports them."""
    principal: str
    key_revoked: bool
    policy: Optional[Policy]
    counts: PrincipalCounts   # its limits and what counts against them now
    days: dict                # 'YYYY-MM-DD' -> DayUsage

    def tokens_on(self, day: str) -> int:
        """Input + output tokens of ``day``: what counts against `tokens_per_day`."""
        d = self.days.get(day)
        return d.input_tokens + d.output_tokens if d else 0


async def load_usage(db: Executor, key_sha256: str, since_day: str, now: int,
                     day_start: int) -> Optional[PrincipalUsage]:
    """The key's facts, limits, counts and usage per day since ``since_day``, in one
    statement. None = unknown key."""
    row = await db.first(SQL_LOAD_USAGE, [key_sha256, since_day, int(now), int(day_start), ROLEPLAY])
    if row is None:
        return None
    days = {}
    for values in json.loads(row.get("days") or "[]"):
        d = DayUsage(values[0], *(_int(v or 0) for v in values[1:]))
        days[d.day] = d
    return PrincipalUsage(**_key_facts(row), counts=_counts_of(row, int(now)), days=days)


#: The UTC date of a time, as principal_usage's `day` holds it: the limits' one rule.
utc_day = limits.utc_day


SQL_PURGE_USAGE = """
DELETE FROM principal_usage
 WHERE rowid IN (SELECT rowid FROM principal_usage WHERE day < ?1 LIMIT ?2)
"""


async def purge_usage(db: Executor, before_day: str, batch_rows: int, max_batches: int) -> Purged:
    """Delete usage rows of days before ``before_day``, in bounded batches (§5.12)."""
    deleted = batches = 0
    n = batch_rows
    while batches < max_batches and n == batch_rows:
        n = await db.run(SQL_PURGE_USAGE, [before_day, int(batch_rows)])
        deleted += n
        batches += 1
    return Purged(deleted, batches, n == batch_rows)
