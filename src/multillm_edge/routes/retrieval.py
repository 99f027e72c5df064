"""Roleplay page retrieval at the edge (docs/design.md §6).

`GET /v1/context/pages/{page_id}?roleplay_session_id=S` with the roleplay key.
(Without `roleplay_session_id` the request is a managed-handle retrieval: no route
matches it and app.route gives it to forwarding, unchanged, docs/design.md §7.)

Order of the checks — nothing is read from R2 until every metadata check passed, and
nothing leaves the edge until the body's length and SHA-256 match the signed row
(2–6 but the retention: `service.access.request_context`, as for generation):

1. no key at all                         → 401 (no storage touched)
2. paging disabled (flag off / invalid)  → 404 PageNotFound (no storage touched:
   with the feature off the route answers as if nothing existed, for every caller)
3. configuration: signing secret, D1 binding, R2 binding missing → 503
4. ONE D1 statement (store.load_page_for_retrieval): key, policy, session, page row
5. unknown or revoked key                → 401
6. no current chat grant / zero retention → 403.  docs/design.md §6 lists these as properties
   of the principal's *current policy*, and §5.2 checks them before the session too.
   They are decided here, before any session or page check, on purpose: the 403
   depends only on the caller's own key, never on the session id or page id it sent,
   so it cannot serve as an oracle for sessions or pages (checking the page first
   would let a principal without a grant learn "404 vs 403" = "page/session is
   wrong vs right"). A zero-retention principal gets 403 even for pages written
   before its retention changed: zero retention means nothing is served back.
7. every page/session cause → the SAME 404 (PageNotFound, identical bytes):
   malformed page id, unknown/foreign/ended session, absent/expired page, other
   authority (`managed`), foreign principal, other session, stale policy revision,
   page id that does not verify against the row's fields, row signature that does not
   verify, a body location the edge never writes (neither the legacy per-page object
   `context-pages/<page_id>` at offset 0 nor a range of a shared object under
   `context-pages/`). All checks are evaluated (no early exit) so the work done does
   not depend on which one failed.
8. ONE R2 get (`service.bodies.read_page`): the page's byte range of its request's object (a whole legacy per-page
   object is read whole, so an object grown or shrunk is caught); missing body, byte
   length or SHA-256 mismatch, unparsable body → 503 `context_page_corrupted` (never the
   bytes); R2 failure → 503 `storage_failed`.
9. 200 `{page_id, sha256, expires_at, exchanges, messages, body_base64}`, `Cache-Control:
   private, no-store`. Retrieval never calls a provider.

Logs: the request's record gets counts only (page bytes, a coarse miss reason); never the page
id (a capability), the session id, the key or any content.
"""

from __future__ import annotations

import base64
from functools import partial

from .. import formats
from ..base.errors import Corrupted, PageNotFound, StorageError, StorageFailed, ZeroRetention, invalid_field
from ..base.http import NO_CACHE, Incoming, Outgoing
from ..base.jsonbytes import compact
from ..base.platform import Platform
from ..base.timing import LogRecord
from ..core.pages import canonical_bytes, is_well_formed_page_id
from ..core.rows import PageRow
from ..service import bodies
from ..service.access import key_digest, page_misses, request_context
from ..storage import store

SESSION_PARAM = "roleplay_session_id"
EXCHANGE_PARAM = "exchange"


async def retrieve_page(req: Incoming, platform: Platform) -> Outgoing:
    digest = key_digest(req)                                   # 1. 401 without a key
    page_id = req.params["page_id"]
    values = req.query.get(SESSION_PARAM) or [""]
    session_id = values[0] if len(set(values)) == 1 else ""
    # 2. flag off → 404, 3. signer, D1, R2 → 503, 4. one D1 statement, 5. 401, 6. 403 (grant)
    rc = await request_context(req, platform, session_id,
                               partial(_load, req.record, digest, session_id, page_id), paged=True)
    if rc.policy.retention == "zero":                          # 6. 403 (principal only)
        raise ZeroRetention()
    exchange = _exchange_param(req)        # 400, before any R2 read (after the flag's 404)
    facts = rc.caller
    misses = page_misses(page_id, facts, rc.reader(facts.principal))
    if misses:                                                 # 7. one 404 for all
        req.record.note(miss=",".join(misses))   # reason codes only, for operators
        raise PageNotFound()
    body = await bodies.read_page(req.record, rc.page_bodies(), facts.page)   # 8. checked
    return _served(req.record, page_id, facts.page, body, exchange)   # 9. 200


async def _load(record: LogRecord, digest: str, session_id: str, page_id: str, db,
                now: int) -> store.RetrievalFacts:
    """The one D1 statement. A malformed id is never sent to D1 (it cannot match; this
    also bounds the parameter size). It still costs the statement, so a bad key is a
    401 and the timing does not say whether the id was well formed."""
    lookup_id = page_id if is_well_formed_page_id(page_id) else ""
    with record.wall("d1_ms"):
        try:
            return await store.load_page_for_retrieval(db, digest, session_id, lookup_id, now)
        except StorageError:
            raise StorageFailed("Context page metadata could not be read.") from None


def _exchange_param(req: Incoming) -> int | None:
    """`exchange=N` (a page may hold a block of exchanges, docs/design.md §5.7, §6):
    absent → the whole page; else a decimal integer from 1 (400 otherwise)."""
    values = req.query.get(EXCHANGE_PARAM)
    if values is None:
        return None
    v = values[0] if len(set(values)) == 1 else ""
    if not (v.isascii() and v.isdigit() and 0 < len(v) <= 6 and int(v) >= 1):
        raise invalid_field(EXCHANGE_PARAM, "must be an integer from 1")
    return int(v)


def _one_exchange(messages: list, starts: list, body: bytes, exchange: int) -> tuple[list, bytes]:
    """Exchange ``exchange`` of a page (its exchanges begin at ``starts``): its items and
    their bytes, which are a slice of the page's (a page is its items' bytes
    comma-joined, each exchange a run of them). Past the last: 400 naming how many."""
    if exchange > len(starts):
        err = invalid_field(EXCHANGE_PARAM, f"must be from 1 to {len(starts)}, the exchanges "
                                            "this page holds")
        err.details["exchanges"] = len(starts)
        raise err
    end = starts[exchange] if exchange < len(starts) else len(messages)
    items = messages[starts[exchange - 1]:end]
    part = canonical_bytes(items)
    if part[1:-1] not in body:        # never: the page is its items' bytes, comma-joined
        raise Corrupted()
    return items, part


def _served(record: LogRecord, page_id: str, row: PageRow, body: bytes,
            exchange: int | None = None) -> Outgoing:
    messages = bodies.items(record, body)
    record.note(page_bytes=len(body))
    starts = formats.exchange_starts(messages)
    doc = {"page_id": page_id, "sha256": row["sha256"], "expires_at": row["expires_at"]}
    if exchange is not None:
        messages, body = _one_exchange(messages, starts, body, exchange)
        doc["exchange"] = exchange
    doc.update(exchanges=len(starts), messages=messages, body_base64=base64.b64encode(body).decode("ascii"))
    try:
        payload = compact(doc)
    except UnicodeEncodeError:  # a lone surrogate escaped in the page: stay lossless
        payload = compact(doc, ascii=True)
    return Outgoing(200, [("content-type", "application/json")] + NO_CACHE, payload)
