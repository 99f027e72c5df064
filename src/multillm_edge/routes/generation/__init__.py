"""Roleplay generation at the edge (docs/design.md §5): auth, plan, store before dispatch, fallbacks.

The order is the contract: validate → one D1 read (key, policy, session, models,
active pages) → plan every candidate → for the candidate being tried, put the bodies it
must write in ONE R2 object and upsert its new and due rows in one D1 statement (nothing
at all when nothing is new or due) → dispatch. Any storage fault is a 503 before the
provider is called, and leaves no object behind; nothing is ever truncated to make it fit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial

from ...core import annotation, compaction, config, paging
from ...storage import page_writes, store
from ..auth import SESSION_HEADER, RequestContext, key_digest, request_context
from ...base.errors import EdgeError, SessionNotFound, StorageError
from ...formats import get as format_module
from ...core.validation import has_duplicate_keys, parse_request, session_id as valid_session_id
from ...base.http import Incoming, Outgoing
from ...core.pages import ROLEPLAY as AUTHORITY, Lifetime, Owner, PageSigner
from ...base.timing import timed

CAPABILITY = "multillm_context_retrieve"
RETRY_STATUSES = frozenset({408, 429}) | frozenset(range(500, 600))
# Client headers a provider may need; everything else (the roleplay key above all) stays here.
PASSED_HEADERS = ("accept", "anthropic-version", "anthropic-beta", "openai-beta")


@dataclass
class Candidate:
    model: str                      # provider:model, as the client named it
    provider: config.Provider
    window: store.ModelWindow
    budget: int
    plan: paging.Plan | None = None         # what it sends (paged or compacted alike)
    skipped: EdgeError | None = None        # why it was never sent


@dataclass
class Turn:
    """The running record of one generation request, for the response and the log line."""
    notes: dict = field(default_factory=dict)   # storage counts and CPU for the log line
    rows: dict = field(default_factory=dict)    # page_id -> store.ActivePage, as stored now
    new_bytes: int = 0                          # page bytes this request added to the session
    new_pages: int = 0
    attempts: list = field(default_factory=list)   # {model_index, status, ms} per provider call
    timings: dict = field(default_factory=dict)
    repeats_a_key: bool | None = None           # the raw body repeats a key (checked lazily)
    pages: list = field(default_factory=list)   # Page objects of the dispatched plan
    compacted: int = 0                          # exchanges the dispatched plan dropped


@dataclass(frozen=True)
class Scope:
    """What one generation request fixed before planning; every later step reads it,
    none writes it: the request, its context (auth.RequestContext: platform, database,
    caller, session), the wire format, whether it is paged (docs/design.md §5.3) and its
    signer then, the fields the upstream body goes without, the provider timeouts."""
    req: Incoming
    rc: RequestContext
    fmt: str
    paging: bool
    strip: tuple                    # request fields the upstream body goes without
    timeout: float                  # seconds to the provider's response headers
    idle: float                     # longest silence inside a provider stream
    sign: PageSigner | None         # when paging


def settle(req: Incoming, rc: RequestContext, fmt: str, asked: bool) -> Scope:
    """The request's Scope: paged when the flag is on, the capability asked and the
    retention not zero; its signer then (503 if not configured)."""
    var = rc.platform.var
    paged = rc.paging and asked and rc.policy.retention != "zero"
    return Scope(req, rc, fmt, paged, consumed_fields(rc.paging),
                 config.seconds(var("UPSTREAM_TIMEOUT_SECONDS"), config.DEFAULT_UPSTREAM_TIMEOUT_SECONDS),
                 config.seconds(var("UPSTREAM_IDLE_SECONDS"), config.DEFAULT_UPSTREAM_IDLE_SECONDS),
                 rc.signer() if paged else None)


def _error(code: str, message: str, status: int = 400) -> EdgeError:
    return EdgeError(status, code, message)


def requested_models(body: dict) -> list[str]:
    """`model` then the explicit fallbacks of `models` (validated strings), each once."""
    models = [body.get("model")] + (body.get("models") or [])
    for m in models:
        config.split_model(m)
    return list(dict.fromkeys(models))


def wants_paging(body: dict) -> bool:
    return CAPABILITY in (body.get("capabilities") or ())


def consumed_fields(flag_on: bool) -> tuple:
    """Request fields the edge acts on itself, which providers reject as unknown
    parameters: `models` always (the edge runs the fallbacks), and with the flag on
    `capabilities` and `context_protected_indices` (docs/design.md §5.10) — whether or not
    this request is paged (no capability, zero retention)."""
    return ("models",) + (paging.EDGE_FIELDS if flag_on else ())


def candidates(fmt: str, body: dict, models: list[str], ctx: store.GenerationContext,
               providers: dict, safety: int) -> list[Candidate]:
    """One candidate per model. A model no configured provider serves in this format is
    kept as skipped (a later one may serve), and is the error only when all are."""
    reserve = paging.output_reservation(fmt, body)
    out = []
    for name in models:
        window = ctx.models.get(name)
        if window is None:
            raise _error("unknown_model", f"Unknown model: {name}.")
        provider = providers.get(config.split_model(name)[0])
        reservation = reserve if reserve is not None else window.max_output_tokens
        c = Candidate(name, provider, window, window.input_tokens - reservation - safety)
        if provider is None or not provider.serves(fmt):
            c.skipped = _error("unknown_model", f"No provider serves {name} in this format.")
        out.append(c)
    if all(c.skipped for c in out):
        raise out[0].skipped
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


async def store_pages(scope: Scope, pages, turn: Turn, stored: set) -> None:
    """Store what this candidate's pages need (page_writes): nothing when nothing is
    new or due. `stored` collects the ids of the pages whose bodies this request wrote."""
    if not pages:
        return
    platform, ctx = scope.rc.platform, scope.rc.caller
    bucket = scope.rc.page_bodies()
    now = platform.now()
    horizon = config.rewrite_after(platform.var("PAGE_REWRITE_AFTER_SECONDS"))
    t = time.perf_counter()
    # an earlier candidate's rows first; a plain dict (ChainMap lookups run in Python)
    known = {**ctx.active_pages, **turn.rows} if turn.rows else ctx.active_pages
    w = page_writes.classify(pages, known, now, config.PAGE_TTL_SECONDS, horizon)
    # The D1 upsert enforces the allowance atomically; checking the figures read with the
    # context first avoids writing an object that could never get a row.
    if ctx.active_bytes + turn.new_bytes + w.new_bytes > config.SESSION_ALLOWANCE_BYTES \
            or len(known) + w.new_pages > config.MAX_SESSION_PAGES:
        raise session_limit()
    turn.rows.update(w.reused)
    spent(turn, "sign", t)
    if not w.empty:
        await write_pages(scope, bucket, w, turn, (now, horizon), known)
    stored.update(p.page_id for p in w.bodies)


async def write_pages(scope: Scope, bucket, w: page_writes.Writes, turn: Turn, clock: tuple,
                      known) -> None:
    """ONE R2 put of the bodies to write, then ONE D1 upsert of the new and due rows.
    Refused or failed after the put: the object is deleted (no orphan) unless rows
    already point into it (the same pages rewritten: same content, same key).
    `clock` is (now, rewrite horizon)."""
    ctx, session_id, (now, horizon) = scope.rc.caller, scope.rc.session_id, clock
    t = time.perf_counter()
    owner = Owner(AUTHORITY, ctx.principal, session_id, ctx.policy.revision)
    key, data, rows = page_writes.rows(w, scope.sign, owner, Lifetime(now, config.PAGE_TTL_SECONDS))
    spent(turn, "sign", t)
    # The key is derived from the written pages' ids: only their own rows can point into it.
    ours = key is not None and all(known[p.page_id].r2_key != key
                                   for p in w.bodies if p.page_id in known)
    try:
        if key is not None:
            await bucket.put(key, data)
            _count(turn, "r2_puts")
        done = await store.upsert_pages(scope.rc.db, rows, store.PageSession(ctx.principal, session_id),
                                        now, config.SESSION_ALLOWANCE_BYTES, young_after=now - horizon)
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
    version = format_module(fmt).VERSION_HEADER
    auth = config.provider_auth_headers(fmt, key, req.header(version) if version else None)
    headers = [("content-type", "application/json")]
    headers += [(k, req.header(k)) for k in PASSED_HEADERS
                if req.header(k) is not None and k not in auth]
    return headers + list(auth.items())


def plan_all(scope: Scope, body: dict, cands: list[Candidate]) -> None:
    """Fill each candidate's plan (paged, or the existing behaviour: as received or
    compacted); a candidate that cannot fit is skipped with its 413."""
    live = [c for c in cands if not c.skipped]
    budgets = [c.budget for c in live]
    if scope.paging:
        # One id function per request: its fixed fields are encoded once, not per page.
        ctx = scope.rc.caller
        page_id_for = scope.sign.page_ids(AUTHORITY, ctx.principal, scope.rc.session_id,
                                          ctx.policy.revision)
        results = paging.plan_candidates(scope.fmt, body, budgets, page_id_for, strip=scope.strip)
    else:
        results = compaction.compact_candidates(scope.fmt, body, budgets, strip=scope.strip)
    for c, result in zip(live, results):
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
    out = c.plan.body
    model = c.provider.upstream_model(c.model)
    # With a repeated key, providers disagree on which value wins: send the edge's
    # serialization of the value it validated instead of the raw bytes.
    if c.plan.as_received and out.get("model") == model and not _repeats_a_key(raw, turn):
        return raw
    return c.plan.encoded(model)


def _repeats_a_key(raw: bytes, turn: Turn) -> bool:
    """`has_duplicate_keys(raw)`, parsed at most once per request (fallbacks ask again)."""
    if turn.repeats_a_key is None:
        turn.repeats_a_key = has_duplicate_keys(raw)
    return turn.repeats_a_key


def annotate(payload: bytes, turn: Turn, fmt: str) -> bytes:
    """Add `context_pages` / `context_compaction` to a complete JSON response."""
    pages = None
    if turn.pages:
        pages = annotation.pages_text(turn.pages, turn.rows, format_module(fmt).tool_schema())
    return annotation.annotate(payload, pages, turn.compacted)


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


PAGE_LIST_COMMENT = b": multillm-context-pages "


def page_list_comment(turn: Turn) -> bytes:
    """The SSE comment line that leads a paged stream: every page id, however many
    (the header is capped, SSE parsers skip comment lines)."""
    if not turn.pages:
        return b""
    return PAGE_LIST_COMMENT + ",".join(p.page_id for p in turn.pages).encode() + b"\n\n"


def idle_event(fmt: str, idle: float) -> bytes:
    """The SSE event that ends a stream the provider left silent, in its own shape:
    the OpenAI SDKs raise on a `data: {"error": …}` line, Anthropic's on `event: error`."""
    message = f"The provider sent nothing for {idle:g} seconds; the stream was ended."
    return format_module(fmt).idle_event(message)


async def respond(scope: Scope, upstream, turn: Turn) -> Outgoing:
    t = time.perf_counter()
    headers = [(k, v) for k, v in upstream.headers
               if k not in ("content-length", "content-encoding", "transfer-encoding", "connection")]
    ctype = dict(upstream.headers).get("content-type", "")
    if "json" in ctype and 200 <= upstream.status < 300 and (turn.pages or turn.compacted):
        spent(turn, "response", t)
        try:
            payload = await upstream.read(scope.idle, config.MAX_ANNOTATED_BYTES)
        except TimeoutError:
            raise _error("upstream_timeout", "The provider stopped sending its response.", 504) from None
        t = time.perf_counter()
        if payload is not None:
            out = Outgoing(upstream.status, headers + info_headers(turn), annotate(payload, turn, scope.fmt))
            spent(turn, "response", t)
            return out
        # Too large to parse and re-encode whole in the isolate: relayed as it comes.
    sse = ctype.split(";")[0].strip().lower() == "text/event-stream"
    prefix = page_list_comment(turn) if sse and 200 <= upstream.status < 300 else b""
    stream = upstream.relay(prefix, scope.idle, idle_event(scope.fmt, scope.idle) if sse else None)
    spent(turn, "response", t)
    return Outgoing(upstream.status, headers + info_headers(turn), stream=stream)


def spent(turn: Turn, phase: str, since: float) -> None:
    """Add the CPU since `since` (a perf_counter) to `phase` in the log line. Only ever
    measured across pure-CPU sections: an await's wait is not the Worker's CPU."""
    key = f"cpu_{phase}_ms"
    turn.notes[key] = round(turn.notes.get(key, 0) + (time.perf_counter() - since) * 1000, 2)


async def load_context(turn: Turn, digest: str, session_id: str, models: list, db,
                       now: int) -> store.GenerationContext | None:
    """The one D1 read of a turn (auth.request_context then checks key and grant)."""
    with timed(turn.timings, "load_ms"):
        try:
            row = await store.read_generation_row(db, digest, session_id, models, now)
        except StorageError:
            raise _error("storage_failed", "Roleplay state could not be read.", 503) from None
    t = time.perf_counter()
    ctx = store.generation_context(row)
    spent(turn, "load", t)
    return ctx


async def attempt(scope: Scope, c: Candidate, index: int, headers: list, payload: bytes,
                  turn: Turn):
    """One provider call, recorded in `turn.attempts` → its answer, or None if it gave none
    (network error, or no response headers within UPSTREAM_TIMEOUT_SECONDS)."""
    started, status = time.monotonic(), "client_closed"
    try:
        answer = await scope.rc.platform.fetch(c.provider.endpoint(scope.fmt), "POST", headers,
                                               payload, timeout=scope.timeout)
        status = answer.status
        return answer
    except TimeoutError:
        status = "timeout"
        return None
    except OSError:
        status = "network_error"
        return None
    finally:
        turn.attempts.append({"model_index": index, "status": status,
                              "ms": round((time.monotonic() - started) * 1000, 1)})


def no_answer(turn: Turn, cands: list) -> EdgeError:
    if not turn.attempts:                       # every candidate was skipped
        return next(c.skipped for c in cands if c.skipped)
    if any(a["status"] == "timeout" for a in turn.attempts):
        return _error("upstream_timeout", "No provider answered in time.", 504)
    return _error("upstream_unreachable", "No provider could be reached.", 502)


async def dispatch(scope: Scope, cands: list, body: dict, raw: bytes, turn: Turn):
    """Try each candidate in order, storing its pages first → (upstream, candidate).
    A retryable answer is relayed if no later candidate gives a better one; a candidate
    whose provider is misconfigured is skipped like one that cannot fit."""
    req, platform = scope.req, scope.rc.platform
    stored: set = set()
    upstream = chosen = None
    for index, c in enumerate(cands):
        if c.skipped:
            continue
        try:  # its provider key first: a misconfigured provider stores nothing
            headers = upstream_headers(req, scope.fmt, c.provider, platform)
        except EdgeError as err:
            c.skipped = err.with_traceback(None)    # no frames (and no `cands`) kept
            continue
        if scope.paging:
            with timed(turn.timings, "store_ms"):
                await store_pages(scope, c.plan.pages, turn, stored)
        t = time.perf_counter()
        payload = dispatch_body(c, body, raw, turn)
        spent(turn, "encode", t)
        answer = await attempt(scope, c, index, headers, payload, turn)
        if answer is None:
            continue
        if upstream is not None:
            await upstream.discard()
        upstream, chosen = answer, c
        if answer.status not in RETRY_STATUSES:
            break
    if upstream is None:
        raise no_answer(turn, cands)
    return upstream, chosen


async def generate(req: Incoming, platform) -> Outgoing:
    """route (app: `req.params["fmt"]`) → context → load → plan → store → dispatch → respond."""
    fmt, turn = req.params["fmt"], Turn(notes=req.notes)
    digest = key_digest(req)                                       # 401 before anything
    session_id = valid_session_id(req.header(SESSION_HEADER))     # 400
    raw = await platform.read_body(config.MAX_REQUEST_BYTES)       # 413
    t = time.perf_counter()
    body = parse_request(fmt, raw)
    models = requested_models(body)
    spent(turn, "parse", t)
    # context + load: flag, D1 binding (503), the one D1 read, key and grant (401/403)
    rc = await request_context(req, platform, session_id,
                               partial(load_context, turn, digest, session_id, models))
    if not rc.caller.session.open:
        raise SessionNotFound()
    t = time.perf_counter()
    cands = candidates(fmt, body, models, rc.caller, config.parse_providers(platform.var("PROVIDERS")),
                       config.safety_tokens(platform.var("CONTEXT_SAFETY_TOKENS")))
    scope = settle(req, rc, fmt, wants_paging(body))
    with timed(turn.timings, "plan_ms"):
        plan_all(scope, body, cands)
    spent(turn, "plan", t)
    try:  # store → dispatch, per candidate
        upstream, chosen = await dispatch(scope, cands, body, raw, turn)
    finally:  # the log line keeps every attempt, answered or not
        note(req, scope, turn, cands)
    turn.pages, turn.compacted = list(chosen.plan.pages), chosen.plan.dropped
    req.notes.update(pages=len(turn.pages), compacted=turn.compacted, model_index=cands.index(chosen))
    return await respond(scope, upstream, turn)


def note(req: Incoming, scope: Scope, turn: Turn, cands: list) -> None:
    req.notes.update(paging=scope.paging, new_pages=turn.new_pages, attempts=turn.attempts,
                     **turn.timings)
    skipped = [c.skipped.code for c in cands if c.skipped]
    if skipped:
        req.notes["skipped"] = skipped
