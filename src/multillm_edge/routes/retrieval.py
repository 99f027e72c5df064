"""Roleplay page retrieval at the edge (docs/design.md §6).

`GET /v1/context/pages/{page_id}?roleplay_session_id=S` with the roleplay key.
(Without `roleplay_session_id` the request is a managed-handle retrieval: app.route
returns None and it is forwarded to the Flask origin unchanged, docs/design.md §7.)

Order of the checks — nothing is read from R2 until every metadata check passed, and
nothing leaves the edge until the body's length and SHA-256 match the signed row
(2–6 but the retention: `auth.request_context`, as for generation):

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
8. ONE R2 get: the page's byte range of its request's object (a whole legacy per-page
   object is read whole, so an object grown or shrunk is caught); missing body, byte
   length or SHA-256 mismatch, unparsable body → 503 `context_page_corrupted` (never the
   bytes); R2 failure → 503 `storage_failed`.
9. 200 `{page_id, sha256, expires_at, messages, body_base64}`, `Cache-Control:
   private, no-store`. Retrieval never calls a provider.

Logs: `req.notes` gets counts only (page bytes, a coarse miss reason); never the page
id (a capability), the session id, the key or any content.
"""

from __future__ import annotations

import base64
import json
from functools import partial

from ..storage import store
from .auth import key_digest, request_context
from .. import formats
from ..base.errors import EdgeError, PageNotFound, StorageError, invalid_field
from ..base.http import Incoming, Outgoing
from ..base.jsonbytes import compact
from ..base.timing import timed
from ..core.pages import ROLEPLAY as AUTHORITY, PageSigner, canonical_bytes, is_legacy_location, is_valid_location, is_well_formed_page_id, sha256_hex

SESSION_PARAM = "roleplay_session_id"



class ZeroRetention(EdgeError):
    status, code = 403, "retention_zero"
    message = "This key's policy has zero retention: no context pages are served."


class Corrupted(EdgeError):
    status, code = 503, "context_page_corrupted"
    message = "The stored context page failed its integrity check."


NO_CACHE = [("cache-control", "private, no-store")]

# A syntactically valid id that no row can carry (HMAC output is never this), used
# to keep the verification work constant when the row is absent.
_DUMMY_SHA = "0" * 64


def _page_misses(page_id: str, session_id: str, facts: store.RetrievalFacts,
                 policy: store.Policy, sign: PageSigner, now: int) -> list[str]:
    """Every reason the page may not be served (empty = servable). No early exit."""
    row = facts.page
    misses = []
    if not is_well_formed_page_id(page_id):
        misses.append("malformed")
    if not facts.session.open:
        misses.append("session")
    if row is None:
        # Same HMAC work as a present row, then the miss.
        sign.verify_page_id(page_id, AUTHORITY, facts.principal, session_id,
                            policy.revision, _DUMMY_SHA)
        sign.verify_row({"signature": "", "page_id": page_id})
        misses.append("absent")
        return misses
    if not facts.page_active:
        misses.append("expired")
    return misses + [m for m in row_misses(row, page_id, facts.principal, session_id,
                                           policy, sign, now) if m not in misses]


def row_misses(row: dict, page_id: str, principal: str, session_id: str,
               policy: store.Policy, sign: PageSigner, now: int, verify_id=None) -> list[str]:
    """Every reason a page row may not be served to (principal, session_id) under
    ``policy``, the session's state aside (empty = servable). Shared with search
    (docs/design.md §6.1): a page is ranked only after these. No early exit.
    ``verify_id``: ``sign.page_id_verifier`` of these facts, for many rows."""
    misses = []
    if not isinstance(row.get("expires_at"), int) or row["expires_at"] <= now:
        misses.append("expired")
    if row.get("page_id") != page_id:
        misses.append("absent")
    if row.get("authority") != AUTHORITY:
        misses.append("authority")
    if row.get("principal") != principal:
        misses.append("principal")
    if row.get("session_id") != session_id:
        misses.append("other_session")
    if row.get("policy_revision") != policy.revision:
        misses.append("stale_revision")
    if not is_valid_location(row):
        misses.append("r2_key")
    # The id must be the HMAC of (authority, principal, session, CURRENT revision,
    # sha256) — computed from the caller's facts, not only the row's — and the row
    # must carry a valid signature over all its fields.
    if verify_id is None:
        id_ok = sign.verify_page_id(page_id, AUTHORITY, principal, session_id,
                                    policy.revision, row.get("sha256"))
    else:
        id_ok = verify_id(page_id, row.get("sha256"))
    row_ok = sign.verify_row(row)
    if not id_ok:
        misses.append("page_id_signature")
    if not row_ok:
        misses.append("row_signature")
    return misses


async def retrieve_page(req: Incoming, platform) -> Outgoing:
    digest = key_digest(req)                                   # 1. 401 without a key
    page_id = req.params["page_id"]
    values = req.query.get(SESSION_PARAM) or [""]
    session_id = values[0] if len(set(values)) == 1 else ""
    # 2. flag off → 404, 3. signer, D1, R2 → 503, 4. one D1 statement, 5. 401, 6. 403 (grant)
    rc = await request_context(req, platform, session_id,
                               partial(_load, req, digest, session_id, page_id), paged=True)
    if rc.policy.retention == "zero":                          # 6. 403 (principal only)
        raise ZeroRetention()
    exchange = _exchange_param(req)        # 400, before any R2 read (after the flag's 404)
    facts = rc.caller
    misses = _page_misses(page_id, session_id, facts, rc.policy, rc.sign, rc.now)
    if misses:                                                 # 7. one 404 for all
        req.notes["miss"] = ",".join(misses)   # reason codes only, for operators
        raise PageNotFound()
    body = await _read_body(req, rc.page_bodies(), facts.page)   # 8. one R2 get, checked
    return _served(req, page_id, facts.page, body, exchange)   # 9. 200


async def _load(req: Incoming, digest: str, session_id: str, page_id: str, db,
                now: int) -> store.RetrievalFacts:
    """The one D1 statement. A malformed id is never sent to D1 (it cannot match; this
    also bounds the parameter size). It still costs the statement, so a bad key is a
    401 and the timing does not say whether the id was well formed."""
    lookup_id = page_id if is_well_formed_page_id(page_id) else ""
    with timed(req.notes, "d1_ms"):
        try:
            return await store.load_page_for_retrieval(db, digest, session_id, lookup_id, now)
        except StorageError:
            raise EdgeError(503, "storage_failed", "Context page metadata could not be read.") from None


async def _read_body(req: Incoming, bucket, row: dict) -> bytes:
    """The page's bytes with one (ranged) R2 get; missing, wrong length or SHA-256 → 503."""
    with timed(req.notes, "r2_ms"):
        try:
            if is_legacy_location(row):
                body = await bucket.get(row["r2_key"])
            else:
                body = await bucket.get(row["r2_key"], row["r2_offset"], row["byte_length"])
        except StorageError:
            raise EdgeError(503, "storage_failed", "The context page could not be read.") from None
    return checked(req, row, body)


def checked(req: Incoming, row: dict, body: bytes | None) -> bytes:
    """``body`` if it is the row's page (byte length and SHA-256), else 503 Corrupted."""
    if body is None or len(body) != row["byte_length"] or sha256_hex(body) != row["sha256"]:
        req.notes["corrupted"] = "missing" if body is None else "mismatch"
        raise Corrupted()
    return body


EXCHANGE_PARAM = "exchange"


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


def _served(req: Incoming, page_id: str, row: dict, body: bytes, exchange: int | None = None) -> Outgoing:
    try:
        messages = json.loads(body.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError is a ValueError
        messages = None
    if type(messages) is not list:    # the edge stores only lists of items (§5.8)
        req.notes["corrupted"] = "unparsable"
        raise Corrupted()
    req.notes["page_bytes"] = len(body)
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
