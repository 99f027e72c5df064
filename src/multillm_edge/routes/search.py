"""Search over a session's stored pages (docs/design.md §6.1).

`POST /v1/context/search` with the roleplay key and `X-Roleplay-Session-ID` (without
the header app.route forwards the path to the origin), body `{"query", "limit"?}`.
The same authority as retrieval (service/access.py), in the same order:

1. no key                                 → 401 (no storage touched)
2. empty or absurd session header         → 400
3. paging off → 404 PageNotFound (the bytes of retrieval's), whatever the body: with the
   feature off the route answers as if nothing existed, as retrieval does
4. body over MAX_SEARCH_BODY              → 413; not strict JSON, a bad `query` or
   `limit`                                → 400 naming the field (`param`); then the
   signer, D1, R2 bindings → 503
5. ONE D1 statement (store.load_session_pages): key, policy, session and every active
   roleplay row of (principal, session, current revision); 401 key, 403 grant
6. zero retention → 403; unknown, ended or foreign session → the same 404
7. every row through retrieval's checks (`service.access.row_misses`: expiry, principal, session,
   revision, authority, page-id HMAC, row signature, location); a row failing one is
   left out, as retrieval would 404 it
8. R2 (`service.bodies.read_pages`): the rows grouped by object, each object read once (one ranged get spanning its
   pages, a legacy per-page object whole), at most R2_CONCURRENCY at a time; every
   page's byte length and SHA-256 checked, and its JSON parsed: a missing or corrupted
   body → 503 `context_page_corrupted` (never skipped), R2 failure → 503
9. pages ranked oldest first (created_at, object, offset: ties break newest first);
   hits quoting a message text another better hit quotes are dropped (a page per
   exchange and a block page may hold the same exchange); 200, `private, no-store`.

Search never calls a provider. Logs: counts and CPU only (pages, objects, bytes, hits);
never the query, excerpts, page ids, the session id or the key.
"""

from __future__ import annotations

from functools import partial

from .. import formats
from ..base.errors import PageNotFound, StorageError, StorageFailed, ZeroRetention
from ..base.http import NO_CACHE, Incoming, Outgoing
from ..base.jsonbytes import compact
from ..base.platform import Platform
from ..base.timing import LogRecord
from ..core import validation
from ..search import page_texts, search
from ..service import bodies
from ..service.access import SESSION_HEADER, Reader, key_digest, paging_enabled, request_context, row_misses
from ..storage import store

#: Hits asked of the ranker per hit answered, so dropping duplicates still fills `limit`.
_OVERFETCH = 3


async def search_pages(req: Incoming, platform: Platform) -> Outgoing:
    record = req.record
    digest = key_digest(req)                                        # 1. 401
    session_id = validation.session_id(req.header(SESSION_HEADER))  # 2. 400
    if not paging_enabled(platform):                                # 3. 404
        record.note(miss="paging_disabled")
        raise PageNotFound()
    raw = await platform.read_body(validation.MAX_SEARCH_BODY)      # 4. 413
    with record.cpu("parse"):
        query, limit = validation.search_request(raw)               # 4. 400
    rc = await request_context(req, platform, session_id,           # 4.-5.
                               partial(_load, record, digest, session_id), paged=True)
    if rc.policy.retention == "zero":                               # 6. 403
        raise ZeroRetention()
    facts = rc.caller
    if not facts.session.open:                                      # 6. 404
        record.note(miss="session")
        raise PageNotFound()
    with record.cpu("check"):
        rows = _servable(record, facts.pages, rc.reader(facts.principal, many=True))   # 7.
    found = await bodies.read_pages(record, rc.page_bodies(), rows)   # 8.
    with record.cpu("verify"):
        pages = [bodies.items(record, found[row["page_id"]]) for row in rows]
        record.note(pages=len(pages))
    with record.cpu("rank"):
        data = _ranked(query, limit, rows, pages)                   # 9.
    record.note(hits=len(data))
    with record.cpu("response"):
        doc = {"object": "list", "data": data, "pages_searched": len(rows)}
        try:
            payload = compact(doc)
        except UnicodeEncodeError:   # a lone surrogate escaped in a page: quote it escaped
            payload = compact(doc, ascii=True)
    return Outgoing(200, [("content-type", "application/json")] + NO_CACHE, payload)


async def _load(record: LogRecord, digest: str, session_id: str, db, now: int):
    with record.wall("d1_ms"):
        try:
            row = await store.read_session_row(db, digest, session_id, now)
        except StorageError:
            raise StorageFailed("Context page metadata could not be read.") from None
    with record.cpu("load"):
        return store.session_pages(row)


def _servable(record: LogRecord, rows: list, reader: Reader) -> list:
    """The rows passing every retrieval check, oldest first."""
    kept = [row for row in rows if not row_misses(row, row.get("page_id"), reader)]
    record.count("rows_left_out", len(rows) - len(kept))
    kept.sort(key=lambda r: (r["created_at"], r["r2_key"], r["r2_offset"]))
    return kept


def _exchange_texts(items) -> tuple[list, list]:
    """A page's texts and the text index where each of its exchanges starts (the
    exchanges retrieval's `exchange=N` reads, formats.exchange_starts)."""
    bounds = formats.exchange_starts(items) + [len(items)]
    texts, starts = [], []
    for a, b in zip(bounds, bounds[1:]):
        starts.append(len(texts))
        texts.extend(page_texts(items[a:b]))
    return texts, starts


def _ranked(query: str, limit: int, rows: list, pages: list) -> list:
    texts, starts = zip(*map(_exchange_texts, pages)) if pages else ((), ())
    data, quoted = [], set()
    for hit in search(query, texts, min(len(texts), _OVERFETCH * limit), starts=starts):
        message = texts[hit.page][hit.message_index][1]
        if message in quoted:          # the same exchange in another page: keep the better
            continue
        quoted.add(message)
        row = rows[hit.page]
        data.append({"page_id": row["page_id"], "sha256": row["sha256"],
                     "expires_at": row["expires_at"], "score": hit.score,
                     "exchange": hit.exchange + 1,
                     "excerpt": {"role": hit.role, "text": hit.text}})
        if len(data) == limit:
            break
    return data
