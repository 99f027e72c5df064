"""Step 2: store a candidate's pages before it is dispatched (docs/design.md §5.9)."""

from __future__ import annotations

import time

from ...base.errors import EdgeError, StorageError
from ...core import config
from ...core.pages import ROLEPLAY as AUTHORITY, Lifetime, Owner
from ...storage import page_writes, store
from .scope import Scope, Turn, count, error, spent


def session_limit(active: int, needed: int) -> EdgeError:
    """The 413 with the figures a client's window needs (docs/design.md §5.11): the
    session's active page bytes as read with the context (plus this request's earlier
    writes), the allowance, and the bytes this candidate would add."""
    return EdgeError(413, "context_session_limit_exceeded",
                     "The context window was exceeded and this session's stored context "
                     "pages would exceed their allowance.",
                     allowance_bytes=config.SESSION_ALLOWANCE_BYTES, active_bytes=active,
                     limit_bytes=config.SESSION_ALLOWANCE_BYTES, needed_bytes=needed)


def counted_bytes(ctx, turn: Turn, covered: dict) -> int:
    """The session's active page bytes as the allowance counts them: what the context
    read found, plus this request's writes, minus the single pages `covered` (those a
    candidate's blocks hold again, page_writes.covered_rows)."""
    return ctx.active_bytes + turn.new_bytes - sum(covered.values())


def storage_failed() -> EdgeError:
    return error("storage_failed", "Context pages could not be stored.", 503)


async def discard_object(bucket, key: str, turn: Turn) -> None:
    """Delete an object no row points to. Best effort: a failure is counted in the log
    line (never the key) and the bucket's lifecycle rule removes the object later."""
    try:
        await bucket.delete(key)
        count(turn, "r2_objects_deleted")
    except StorageError:
        count(turn, "r2_delete_failed")


async def store_pages(scope: Scope, pages, turn: Turn, stored: set, superseded=None) -> dict:
    """Store what this candidate's pages need (page_writes): nothing when nothing is
    new or due. `stored` collects the ids of the pages whose bodies this request wrote.
    `superseded`: the plan's (paging.Plan), the bodies merging may also rewrite.
    Returns the active single pages this candidate's blocks cover (counted once, §5.9)."""
    if not pages:
        return {}
    platform, ctx = scope.rc.platform, scope.rc.caller
    bucket = scope.rc.page_bodies()
    now = platform.now()
    horizon = config.rewrite_after(platform.var("PAGE_REWRITE_AFTER_SECONDS"))
    t = time.perf_counter()
    # an earlier candidate's rows first; a plain dict (ChainMap lookups run in Python)
    known = {**ctx.active_pages, **turn.rows} if turn.rows else ctx.active_pages
    w = page_writes.classify(pages, known, now, config.PAGE_TTL_SECONDS, horizon)
    # Single pages this plan's blocks hold again are counted once, as the blocks (§5.9).
    covered = page_writes.covered_rows(pages, known, now, superseded)
    # The D1 upsert enforces the allowance atomically; checking the figures read with the
    # context first avoids writing an object that could never get a row.
    active = counted_bytes(ctx, turn, covered)
    if active + w.new_bytes > config.SESSION_ALLOWANCE_BYTES \
            or len(known) + w.new_pages > config.MAX_SESSION_PAGES:
        raise session_limit(active, w.new_bytes)
    turn.rows.update(w.reused)
    if w.bodies:  # moved rows are existing rows (same bytes): the pre-check holds
        page_writes.merge(w, known, now, pages, superseded, page_writes.MERGE)
    spent(turn, "sign", t)
    if not w.empty:
        await write_pages(scope, bucket, w, turn, (now, horizon), known, covered)
    stored.update(p.page_id for p in w.packed)
    return covered


async def write_pages(scope: Scope, bucket, w: page_writes.Writes, turn: Turn, clock: tuple,
                      known, covered: dict) -> None:
    """ONE R2 put of the bodies to write, then ONE D1 upsert of the new and due rows.
    Refused or failed after the put: the object is deleted (no orphan) unless rows
    already point into it (the same pages rewritten: same content, same key).
    `clock` is (now, rewrite horizon)."""
    ctx, session_id, (now, horizon) = scope.rc.caller, scope.rc.session_id, clock
    t = time.perf_counter()
    owner = Owner(AUTHORITY, ctx.principal, session_id, ctx.policy.revision)
    key, data, rows = page_writes.rows(w, scope.sign, owner, Lifetime(now, config.PAGE_TTL_SECONDS))
    spent(turn, "sign", t)
    # The key is derived from the written pages' ids: only their own rows can point into
    # it. It is ours (to delete on failure) only if none of them did before.
    ours = key is not None and all(known[p.page_id].r2_key != key
                                   for p in w.packed if p.page_id in known)
    try:
        if key is not None:
            await bucket.put(key, data)
            count(turn, "r2_puts")
        done = await store.upsert_pages(scope.rc.db, rows, store.PageSession(ctx.principal, session_id),
                                        now, config.SESSION_ALLOWANCE_BYTES, young_after=now - horizon,
                                        uncounted=list(covered))
    except StorageError:
        if ours:
            await discard_object(bucket, key, turn)
        raise storage_failed() from None
    if not done:
        if ours:
            await discard_object(bucket, key, turn)
        raise session_limit(counted_bytes(ctx, turn, covered), w.new_bytes)
    # A concurrent request may have written every page of the object first (its rows won).
    if ours and all(r.r2_key != key for r in done.rows.values()):
        await discard_object(bucket, key, turn)
    turn.rows.update(done.rows)
    turn.new_bytes += w.new_bytes
    turn.new_pages += w.new_pages
    count(turn, "rows_written", len(done.rows))
    count(turn, "pages_rewritten", len(w.bodies) - w.new_pages)
    count(turn, "rows_refreshed", len(w.refresh))
    count(turn, "pages_moved", len(w.moved))
