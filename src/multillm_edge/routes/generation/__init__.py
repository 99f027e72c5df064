"""Roleplay generation at the edge (docs/design.md §5): auth, plan, store before dispatch, fallbacks.

The order is the contract: validate → one D1 round trip (the admission against the
principal's limits; key, policy, session, models, active pages) → plan every candidate → for the candidate being tried, put the bodies it
must write in ONE R2 object and upsert its new and due rows in one D1 statement (nothing
at all when nothing is new or due) → dispatch. Any storage fault is a 503 before the
provider is called, and leaves no object behind; nothing is ever truncated to make it fit.
"""

from __future__ import annotations

from functools import partial

from ...base.errors import SessionNotFound, StorageError, StorageFailed
from ...base.http import Incoming, Outgoing
from ...base.platform import Platform
from ...base.timing import LogRecord, timed
from ...core import config
from ...core import resume
from ...core.last_turns import LAST_TURNS
from ...core.validation import session_id as valid_session_id
from ...storage import store
from ...service import budget
from ...service.access import SESSION_HEADER, key_digest, request_context, warner
# One module per step; `generate` calls each through this module's names.
from .scope import Scope, Turn, settle
from .planning import candidates, plan_all, requested_models, wants_paging, wants_recall
from .dispatching import Held, dispatch
from .responding import annotate, idle_event, info_headers, page_list_comment, respond  # noqa: F401


async def load_context(turn: Turn, record: LogRecord, digest: str, session_id: str,
                       models: list, db, now: int) -> store.GenerationContext | None:
    """The one D1 round trip of a turn: the admission and the read, one batch
    (access.request_context then checks key and grant)."""
    with timed(turn.timings, "load_ms"):
        try:
            row, counted = await store.read_generation_rows(db, digest, session_id, models, now)
        except StorageError:
            raise StorageFailed("Roleplay state could not be read.") from None
    with record.cpu("load"):
        return store.generation_context(row, counted, now)


async def generate(req: Incoming, platform: Platform) -> Outgoing:
    """route (app: `req.params["fmt"]`) → context → load → plan → store → dispatch → respond."""
    fmt, turn, record = req.params["fmt"], Turn(notes=req.notes), req.record
    digest = key_digest(req)                                       # 401 before anything
    session_id = valid_session_id(req.header(SESSION_HEADER))     # 400
    raw = await platform.read_body(config.MAX_REQUEST_BYTES,       # 413; 503 edge_busy
                                   budget.reading(req, budget.BODY_FACTOR),
                                   budget.room(req, budget.BODY_FACTOR))
    # the session's last turn in this isolate: only what follows what they share is
    # parsed and checked again (docs/design.md §5.13)
    memory_key = (digest, session_id, fmt)
    with record.cpu("parse"):
        body, prior = resume.parse_request(LAST_TURNS, memory_key, fmt, raw)
        models = requested_models(body)
    await budget.parsed(req, len(raw), prior.brackets)      # a dense body needs more (§7.2)
    # context + load: flag, D1 binding (503), the one D1 read, key and grant (401/403)
    rc = await request_context(req, platform, session_id,
                               partial(load_context, turn, record, digest, session_id, models))
    if not rc.caller.session.open:
        raise SessionNotFound()
    if rc.caller.refusal is not None:   # a limit (docs/design.md §4.1): nothing stored or sent
        req.record.note(limit=rc.caller.refusal.details["limit"])
        raise rc.caller.refusal
    with record.cpu("plan"):
        providers = configured_providers(platform, models, rc.caller.models)
        cands = candidates(fmt, body, models, rc.caller, providers,
                           config.safety_tokens(platform.var("CONTEXT_SAFETY_TOKENS")))
        scope = settle(req, rc, fmt, wants_paging(body))
    try:
        with record.cpu("plan"), timed(turn.timings, "plan_ms"):
            plan_all(scope, body, cands, prior)
    finally:    # its own phase: keeping is not planning (docs/design.md §8)
        with record.cpu("keep"), timed(turn.timings, "keep_ms"):
            resume.keep(LAST_TURNS, memory_key, raw, body, prior)
    # what was taken from the last turn (§5.13): counts only
    req.notes.update(resumed=prior.reused if prior.used else 0, resumed_items=prior.items_reused())
    recalling = scope.paging and wants_recall(body)
    # From here the request holds its body and parse only through `held`, which dispatch
    # lets go before the last candidate waits for its provider (docs/design.md §7.2).
    held = Held(body, raw)
    del body, raw, prior
    try:  # store → dispatch, per candidate
        upstream, chosen = await dispatch(scope, cands, held, turn)
    finally:  # the log line keeps every attempt, answered or not
        note(req, scope, turn, cands)
    sent = chosen.sent
    turn.pages, turn.compacted = list(sent.pages), sent.dropped
    turn.covered = chosen.covered
    if recalling:
        turn.recalled = list(sent.recall)
        req.notes["recalled"] = len(turn.recalled)
    req.notes.update(pages=len(turn.pages), compacted=turn.compacted, model_index=cands.index(chosen))
    return await respond(scope, upstream, turn)


def configured_providers(platform: Platform, models: list, registered) -> dict:
    """PROVIDERS (503 if invalid); an invalid value, or a registered model whose provider it
    lacks, is one warning per isolate (docs/design.md §3)."""
    warn = warner(platform)
    providers = config.providers(platform.var(config.PROVIDERS_NAME), warn)
    if any(m in registered and config.split_model(m)[0] not in providers for m in models):
        config.warn_unserved(warn)
    return providers


def note(req: Incoming, scope: Scope, turn: Turn, cands: list) -> None:
    req.notes.update(paging=scope.paging, new_pages=turn.new_pages, attempts=turn.attempts,
                     **turn.timings)
    skipped = [c.skipped.code for c in cands if c.skipped]
    if skipped:
        req.notes["skipped"] = skipped
