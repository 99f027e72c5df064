"""Store a candidate's pages before it is dispatched (docs/design.md §5.8, §5.9): the
R2 + D1 transaction and its compensating deletes.

`store_pages` decides (core.page_writes: new, stale, due, reused; merging; the single
pages a block covers), checks the allowance with the figures read with the context,
then writes: ONE R2 put of every body to write, then ONE D1 upsert of the new and due
rows, which checks the allowance atomically. Nothing at all when nothing is new or due.
Refused or failed after the put, the object is deleted (no orphan) unless rows already
point into it. It returns what it stored; it mutates nothing of its caller's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from ..base.errors import EdgeError, StorageError, StorageFailed
from ..base.platform import Bucket, Database
from ..base.timing import LogRecord
from ..core import config, limits, page_writes
from ..core.pages import Lifetime, Owner, PageSigner
from ..core.rows import ActivePage
from ..storage import store


@dataclass(frozen=True)
class Shelf:
    """Where and for whom a request stores, and what it knew before this candidate:
    ``known`` the active rows (the context's, then what earlier candidates stored),
    ``active_bytes`` the session's active page bytes counted so far."""
    db: Database
    bucket: Bucket
    sign: PageSigner
    owner: Owner
    now: int
    horizon: int                        # PAGE_REWRITE_AFTER_SECONDS
    known: Mapping[str, ActivePage]
    active_bytes: int
    # the principal's `active_bytes` limit (None: unlimited) and its active page bytes
    # across its sessions counted so far (docs/design.md §4.1)
    principal_limit: int | None = None
    principal_active_bytes: int = 0


@dataclass(frozen=True)
class Stored:
    """What storing one candidate's pages did."""
    rows: dict = field(default_factory=dict)     # page_id -> ActivePage: reused, then written
    new_bytes: int = 0                           # page bytes added to the session
    new_pages: int = 0
    covered: dict = field(default_factory=dict)  # page_id -> bytes of single pages a block holds again


def counted_bytes(active_bytes: int, covered: dict) -> int:
    """The session's active page bytes as the allowance counts them: the single pages
    ``covered`` (those a block of the plan holds again) once, as the block (§5.9)."""
    return active_bytes - sum(covered.values())


def session_limit(active: int, needed: int) -> EdgeError:
    """The 413 with the figures a client's window needs (docs/design.md §5.11): the
    session's active page bytes as counted, the allowance, and the bytes this candidate
    would add."""
    return EdgeError(413, "context_session_limit_exceeded",
                     "The context window was exceeded and this session's stored context "
                     "pages would exceed their allowance.",
                     allowance_bytes=config.SESSION_ALLOWANCE_BYTES, active_bytes=active,
                     limit_bytes=config.SESSION_ALLOWANCE_BYTES, needed_bytes=needed)


async def store_pages(shelf: Shelf, pages, record: LogRecord,
                      superseded: Callable[[set], list] | None = None) -> Stored:
    """Store what this candidate's pages need. ``superseded``: the plan's (paging.Plan),
    the bodies merging may also rewrite."""
    if not pages:
        return Stored()
    known, now = shelf.known, shelf.now
    with record.cpu("sign"):
        w = page_writes.classify(pages, known, now, config.PAGE_TTL_SECONDS, shelf.horizon)
        covered = page_writes.covered_rows(pages, known, now, superseded)
        # The D1 upsert enforces the allowance atomically; checking the figures read with
        # the context first avoids writing an object that could never get a row.
        active = counted_bytes(shelf.active_bytes, covered)
        if active + w.new_bytes > config.SESSION_ALLOWANCE_BYTES \
                or len(known) + w.new_pages > config.MAX_SESSION_PAGES:
            raise session_limit(active, w.new_bytes)
        if shelf.principal_limit is not None:
            held = counted_bytes(shelf.principal_active_bytes, covered)
            if held + w.new_bytes > shelf.principal_limit:
                raise limits.principal_limit(held, shelf.principal_limit, w.new_bytes)
        if w.bodies:  # moved rows are existing rows (same bytes): the pre-check holds
            page_writes.merge(w, known, now, pages, superseded, page_writes.MERGE)
    if w.empty:
        return Stored(dict(w.reused), covered=covered)
    written = await _write(shelf, w, record, covered)
    return Stored({**w.reused, **written}, w.new_bytes, w.new_pages, covered)


async def _write(shelf: Shelf, w: page_writes.Writes, record: LogRecord, covered: dict) -> dict:
    """ONE R2 put of the bodies to write, then ONE D1 upsert of the new and due rows →
    the rows as written."""
    with record.cpu("sign"):
        key, data, rows = page_writes.rows(w, shelf.sign, shelf.owner,
                                           Lifetime(shelf.now, config.PAGE_TTL_SECONDS))
    # The key is derived from the written pages' ids: only their own rows can point into
    # it. It is ours (to delete on failure) only if none of them did before.
    ours = key is not None and all(shelf.known[p.page_id].r2_key != key
                                   for p in w.packed if p.page_id in shelf.known)
    try:
        if key is not None:
            await shelf.bucket.put(key, data)
            record.count("r2_puts")
        done = await store.upsert_pages(
            shelf.db, rows, store.PageSession(shelf.owner.principal, shelf.owner.session_id),
            shelf.now, config.SESSION_ALLOWANCE_BYTES, young_after=shelf.now - shelf.horizon,
            uncounted=list(covered))
    except StorageError:
        if ours:
            await discard_object(shelf.bucket, key, record)
        raise StorageFailed("Context pages could not be stored.") from None
    if not done:
        if ours:
            await discard_object(shelf.bucket, key, record)
        raise await refused(shelf, covered, w.new_bytes)
    # A concurrent request may have written every page of the object first (its rows won).
    if ours and all(r.r2_key != key for r in done.rows.values()):
        await discard_object(shelf.bucket, key, record)
    record.count("rows_written", len(done.rows))
    record.count("pages_rewritten", len(w.bodies) - w.new_pages)
    record.count("rows_refreshed", len(w.refresh))
    record.count("pages_moved", len(w.moved))
    return done.rows


async def refused(shelf: Shelf, covered: dict, needed: int) -> EdgeError:
    """Which allowance refused the upsert: the session's if its figures say so, else the
    principal's when a limit may be set (a concurrent request filled it: its figures are
    read again), else the session's (a concurrent request in the same session)."""
    active = counted_bytes(shelf.active_bytes, covered)
    if active + needed <= config.SESSION_ALLOWANCE_BYTES:
        try:
            row = await store.principal_limits_and_counts(shelf.db, shelf.owner.principal, shelf.now)
        except StorageError:
            raise StorageFailed("Context pages could not be stored.") from None
        limit = row.limits.active_bytes
        if limit is not None:
            held = counted_bytes(row.active_bytes, covered)
            if held + needed > limit:
                return limits.principal_limit(held, limit, needed)
    return session_limit(active, needed)


async def discard_object(bucket: Bucket, key: str, record: LogRecord) -> None:
    """Delete an object no row points to. Best effort: a failure is counted in the log
    line (never the key) and the bucket's lifecycle rule removes the object later."""
    try:
        await bucket.delete(key)
        record.count("r2_objects_deleted")
    except StorageError:
        record.count("r2_delete_failed")
