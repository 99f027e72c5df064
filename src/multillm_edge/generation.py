"""Roleplay generation at the edge (DESIGN §5): auth, plan, store before dispatch, fallbacks.

The order is the contract: validate → one D1 read (key, policy, session, models,
active pages) → plan every candidate → for the candidate being tried, put the bodies it
must write in ONE R2 object and upsert its new and due rows in one D1 statement (nothing
at all when nothing is new or due) → dispatch. Any storage fault is a 503 before the
provider is called, and leaves no object behind; nothing is ever truncated to make it fit.
"""

from __future__ import annotations

import json
import time
from collections import ChainMap
from contextlib import contextmanager
from dataclasses import dataclass, field

from . import compaction, config, page_writes, paging, store
from .auth import (SESSION_HEADER, SESSION_NOT_FOUND, check_principal, database, key_digest,
                   paging_enabled, signer)
from .errors import EdgeError, StorageError
from .formats import get as format_module
from .http import Incoming, Outgoing
from .pages import PageSigner

CAPABILITY = "multillm_context_retrieve"
AUTHORITY = "roleplay"
FORMAT_BY_PATH = {"/v1/chat/completions": "chat", "/v1/responses": "responses", "/v1/messages": "messages"}
RETRY_STATUSES = frozenset({408, 429}) | frozenset(range(500, 600))
# Client headers a provider may need; everything else (the roleplay key above all) stays here.
PASSED_HEADERS = ("accept", "anthropic-version", "anthropic-beta", "openai-beta")


@dataclass
class Candidate:
    model: str                      # provider:model, as the client named it
    provider: config.Provider
    window: store.ModelWindow
    budget: int
    plan: object = None             # paging.Plan, or the body/compaction result
    skipped: str | None = None      # why it was never sent


@dataclass
class Turn:
    """What one generation request learned, for the response and the log line."""
    fmt: str
    paging: bool = False
    pages: list = field(default_factory=list)   # Page objects of the dispatched plan
    rows: dict = field(default_factory=dict)    # page_id -> store.ActivePage, as stored now
    new_bytes: int = 0                          # page bytes this request added to the session
    notes: dict = field(default_factory=dict)   # storage counts for the request's log line
    strip: tuple = ()                           # request fields the upstream body goes without
    compacted: int = 0
    new_pages: int = 0
    attempts: int = 0
    timings: dict = field(default_factory=dict)


def _error(code: str, message: str, status: int = 400) -> EdgeError:
    return EdgeError(status, code, message)


def parse_body(raw: bytes) -> dict:
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise _error("invalid_json", "Request body is not valid UTF-8.") from None
    except ValueError:
        raise _error("invalid_json", "Request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise _error("invalid_request", "Request body must be a JSON object.")
    return body


def requested_models(body: dict) -> list[str]:
    models = [body.get("model")]
    extra = body.get("models")
    if extra is not None:
        if not isinstance(extra, list) or not all(isinstance(m, str) for m in extra):
            raise _error("invalid_request", "`models` must be an array of provider:model strings.")
        models += [m for m in extra if m != body.get("model")]
    for m in models:
        config.split_model(m)
    return list(dict.fromkeys(models))


def wants_paging(body: dict) -> bool:
    caps = body.get("capabilities")
    if caps is None:
        return False
    if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
        raise _error("invalid_request", "`capabilities` must be an array of strings.")
    return CAPABILITY in caps


def consumed_fields(flag_on: bool) -> tuple:
    """Request fields the edge acts on itself, which providers reject as unknown
    parameters: `models` always (the edge runs the fallbacks), and with the flag on
    `capabilities` and `context_protected_indices` (DESIGN §5.10) — whether or not
    this request is paged (no capability, zero retention)."""
    return ("models",) + (paging.EDGE_FIELDS if flag_on else ())


def candidates(fmt: str, body: dict, models: list[str], ctx: store.GenerationContext,
               providers: dict, safety: int) -> list[Candidate]:
    reserve = paging.output_reservation(fmt, body)
    out = []
    for name in models:
        window = ctx.models.get(name)
        if window is None:
            raise _error("unknown_model", f"Unknown model: {name}.")
        provider = providers.get(config.split_model(name)[0])
        if provider is None or not provider.serves(fmt):
            raise _error("unknown_model", f"No provider serves {name} in this format.")
        reservation = reserve if reserve is not None else window.max_output_tokens
        out.append(Candidate(name, provider, window, window.input_tokens - reservation - safety))
    return out


def session_limit() -> EdgeError:
    return EdgeError(413, "context_session_limit_exceeded",
                     "The context window was exceeded and this session's stored context "
                     "pages would exceed their allowance.",
                     allowance_bytes=config.SESSION_ALLOWANCE_BYTES)


def storage_failed() -> EdgeError:
    return _error("storage_failed", "Context pages could not be stored.", 503)


def _count(turn: Turn, name: str, n: int = 1) -> None:
    if n:
        turn.notes[name] = turn.notes.get(name, 0) + n


async def discard_object(bucket, key: str, turn: Turn) -> None:
    """Delete an object no row points to. Best effort: a failure is counted in the log
    line (never the key) and the bucket's lifecycle rule removes the object later."""
    try:
        await bucket.delete(key)
        _count(turn, "r2_objects_deleted")
    except StorageError:
        _count(turn, "r2_delete_failed")


async def store_pages(platform, db, pages, ctx: store.GenerationContext, session_id: str,
                      sign: PageSigner, turn: Turn, stored: set) -> None:
    """Store what this candidate's pages need (page_writes): nothing when nothing is
    new or due. `stored` collects the ids of the pages whose bodies this request wrote."""
    if not pages:
        return
    bucket = platform.pages
    if bucket is None:
        raise _error("storage_unavailable", "The R2 binding is not configured.", 503)
    now = platform.now()
    horizon = config.rewrite_after(platform.var("PAGE_REWRITE_AFTER_SECONDS"))
    known = ChainMap(turn.rows, ctx.active_pages)      # an earlier candidate's rows first
    w = page_writes.classify(pages, known, now, config.PAGE_TTL_SECONDS, horizon)
    # The D1 upsert enforces the allowance atomically; checking the figures read with the
    # context first avoids writing an object that could never get a row.
    if ctx.active_bytes + turn.new_bytes + w.new_bytes > config.SESSION_ALLOWANCE_BYTES \
            or len(known) + w.new_pages > config.MAX_SESSION_PAGES:
        raise session_limit()
    turn.rows.update(w.reused)
    if not w.empty:
        await write_pages(bucket, db, w, ctx, session_id, sign, turn, now, horizon, known)
    stored.update(p.page_id for p in w.bodies)


async def write_pages(bucket, db, w: page_writes.Writes, ctx, session_id: str, sign: PageSigner,
                      turn: Turn, now: int, horizon: int, known) -> None:
    """ONE R2 put of the bodies to write, then ONE D1 upsert of the new and due rows.
    Refused or failed after the put: the object is deleted (no orphan) unless rows
    already point into it (the same pages rewritten: same content, same key)."""
    key, data, rows = page_writes.rows(w, sign, AUTHORITY, ctx.principal, session_id,
                                       ctx.policy.revision, now, config.PAGE_TTL_SECONDS)
    ours = key is not None and all(a.r2_key != key for a in known.values())
    try:
        if key is not None:
            await bucket.put(key, data)
            _count(turn, "r2_puts")
        done = await store.upsert_pages(db, rows, ctx.principal, session_id, now,
                                        config.SESSION_ALLOWANCE_BYTES, young_after=now - horizon)
    except StorageError:
        if ours:
            await discard_object(bucket, key, turn)
        raise storage_failed() from None
    if not done:
        if ours:
            await discard_object(bucket, key, turn)
        raise session_limit()
    # A concurrent request may have written every page of the object first (its rows won).
    if ours and all(r.r2_key != key for r in done.rows.values()):
        await discard_object(bucket, key, turn)
    turn.rows.update(done.rows)
    turn.new_bytes += w.new_bytes
    turn.new_pages += w.new_pages
    _count(turn, "rows_written", len(done.rows))
    _count(turn, "pages_rewritten", len(w.bodies) - w.new_pages)
    _count(turn, "rows_refreshed", len(w.refresh))


def upstream_headers(req: Incoming, fmt: str, provider: config.Provider, platform) -> list:
    key = platform.var(provider.api_key_secret)
    auth = config.provider_auth_headers(fmt, key, req.header("anthropic-version"))
    headers = [("content-type", "application/json")]
    headers += [(k, req.header(k)) for k in PASSED_HEADERS
                if req.header(k) is not None and k not in auth]
    return headers + list(auth.items())


def encode(body: dict) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def plan_all(body: dict, cands: list[Candidate], turn: Turn, page_id_for):
    """Fill each candidate's plan: a paging.Plan, or (body, dropped) for existing
    behaviour; a candidate that cannot fit is skipped with its 413."""
    budgets = [c.budget for c in cands]
    if turn.paging:
        results = paging.plan_candidates(turn.fmt, body, budgets, page_id_for, strip=turn.strip)
    else:
        results = compaction.compact_candidates(turn.fmt, body, budgets, strip=turn.strip)
    for c, result in zip(cands, results):
        if isinstance(result, EdgeError):
            c.skipped = result
        else:
            c.plan = result
    if all(c.skipped for c in cands):
        raise cands[0].skipped


def dispatch_body(c: Candidate, body: dict, raw: bytes, turn: Turn) -> bytes:
    """The bytes sent for candidate `c`: the request as received when its plan is the
    received body itself (planning returns a new object whenever it removes a field,
    drops or pages an exchange); otherwise the plan's body, naming the candidate's model
    as its provider wants it."""
    out = c.plan.body if turn.paging else c.plan[0]
    model = c.provider.upstream_model(c.model)
    if out is body and body.get("model") == model:
        return raw
    return encode(out if out.get("model") == model else {**out, "model": model})


def _expires_at(turn: Turn, page_id: str):
    """The page row's real expiry (every page of the dispatched plan has been stored)."""
    row = turn.rows.get(page_id)
    return row.expires_at if row is not None else None


def annotate(payload: bytes, turn: Turn) -> bytes:
    """Add `context_pages` / `context_compaction` to a complete JSON response."""
    extra = {}
    if turn.pages:
        schema = format_module(turn.fmt).tool_schema()
        extra["context_pages"] = [{"page_id": p.page_id, "sha256": p.sha256,
                                   "expires_at": _expires_at(turn, p.page_id), "tool_schema": schema}
                                  for p in turn.pages]
    if turn.compacted:
        extra["context_compaction"] = {"dropped_exchanges": turn.compacted}
    if not extra:
        return payload
    try:
        doc = json.loads(payload)
    except ValueError:
        return payload
    if not isinstance(doc, dict):
        return payload
    doc.update(extra)
    return encode(doc)


def info_headers(turn: Turn) -> list:
    headers = []
    if turn.pages:
        headers.append(("x-multillm-context-page-count", str(len(turn.pages))))
        ids = ",".join(p.page_id for p in turn.pages)
        if len(ids) <= config.MAX_PAGE_LIST_HEADER:
            headers.append(("x-multillm-context-pages", ids))
    if turn.compacted:
        headers.append(("x-multillm-context-compaction", str(turn.compacted)))
    return headers


async def respond(upstream, turn: Turn) -> Outgoing:
    headers = [(k, v) for k, v in upstream.headers
               if k not in ("content-length", "content-encoding", "transfer-encoding", "connection")]
    ctype = dict(upstream.headers).get("content-type", "")
    if "json" in ctype and 200 <= upstream.status < 300 and (turn.pages or turn.compacted):
        body = annotate(await upstream.read(), turn)
        return Outgoing(upstream.status, headers + info_headers(turn), body)
    return Outgoing(upstream.status, headers + info_headers(turn), stream=upstream.stream)


@contextmanager
def timed(turn: Turn, name: str):
    started = time.monotonic()
    try:
        yield
    finally:
        turn.timings[name] = round((time.monotonic() - started) * 1000, 1)


async def load_context(platform, db, digest: str, session_id: str, models: list, turn: Turn):
    """The one D1 read of a turn, then the key, grant and session checks."""
    with timed(turn, "load_ms"):
        try:
            ctx = await store.load_generation_context(db, digest, session_id, models, platform.now())
        except StorageError:
            raise _error("storage_failed", "Roleplay state could not be read.", 503) from None
    check_principal(ctx)
    if not ctx.session.open:
        raise SESSION_NOT_FOUND
    return ctx


async def dispatch(req: Incoming, platform, db, cands: list, body: dict, raw: bytes, ctx,
                   session_id: str, sign, turn: Turn):
    """Try each candidate in order, storing its pages first → (upstream, candidate).
    A retryable answer is relayed if no later candidate gives a better one."""
    stored: set = set()
    upstream = chosen = None
    for c in cands:
        if c.skipped:
            continue
        # Its provider key first: a misconfigured provider (503) stores nothing.
        headers = upstream_headers(req, turn.fmt, c.provider, platform)
        if turn.paging:
            with timed(turn, "store_ms"):
                await store_pages(platform, db, c.plan.pages, ctx, session_id, sign, turn, stored)
        turn.attempts += 1
        try:
            with timed(turn, "upstream_ms"):
                answer = await platform.fetch(c.provider.endpoint(turn.fmt), "POST", headers,
                                              dispatch_body(c, body, raw, turn))
        except OSError:
            continue
        if upstream is not None:
            await upstream.discard()
        upstream, chosen = answer, c
        if answer.status not in RETRY_STATUSES:
            break
    if upstream is None:
        raise _error("upstream_unreachable", "No provider could be reached.", 502)
    return upstream, chosen


async def generate(req: Incoming, platform) -> Outgoing:
    turn = Turn(FORMAT_BY_PATH[req.path], notes=req.notes)
    digest = key_digest(req)
    session_id = req.header(SESSION_HEADER).strip()
    raw = await platform.read_body(config.MAX_REQUEST_BYTES)
    body = parse_body(raw)
    models = requested_models(body)
    asked = wants_paging(body)
    flag_on = paging_enabled(platform)
    db = database(platform)
    ctx = await load_context(platform, db, digest, session_id, models, turn)
    cands = candidates(turn.fmt, body, models, ctx, config.parse_providers(platform.var("PROVIDERS")),
                       config.safety_tokens(platform.var("CONTEXT_SAFETY_TOKENS")))
    turn.paging = flag_on and asked and ctx.policy.retention != "zero"
    turn.strip = consumed_fields(flag_on)
    sign = signer(platform) if turn.paging else None

    def page_id_for(sha):
        return sign.page_id(AUTHORITY, ctx.principal, session_id, ctx.policy.revision, sha)

    with timed(turn, "plan_ms"):
        plan_all(body, cands, turn, page_id_for)
    upstream, chosen = await dispatch(req, platform, db, cands, body, raw, ctx, session_id, sign, turn)
    if turn.paging:
        turn.pages = list(chosen.plan.pages)
    else:
        turn.compacted = chosen.plan[1]
    req.notes.update(paging=turn.paging, pages=len(turn.pages), new_pages=turn.new_pages,
                     compacted=turn.compacted, attempts=turn.attempts,
                     model_index=cands.index(chosen), **turn.timings)
    skipped = [c.skipped.code for c in cands if c.skipped]
    if skipped:
        req.notes["skipped"] = skipped
    return await respond(upstream, turn)
