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
9. every exchange of the pages is a document (oldest first: created_at, object, offset;
   ties break newest first), an exchange stored twice counted once (search.rank); up to
   `limit` exchanges answered, several of one page if they rank so; 200, `private,
   no-store`, with `pages_searched` and `exchanges_searched`.

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
from ..search import doc_key, page_texts, rank
from ..service import bodies
from ..service.access import SESSION_HEADER, Reader, key_digest, paging_enabled, request_context, row_misses
from ..storage import store


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
        data, exchanges = _ranked(query, limit, rows, pages)        # 9.
    record.note(hits=len(data))
    with record.cpu("response"):
        doc = {"object": "list", "data": data, "pages_searched": len(rows),
               "exchanges_searched": exchanges}
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


def _exchange_docs(rows: list, pages: list) -> tuple[list, list, list]:
    """Every exchange of the pages (retrieval's `exchange=N`, formats.exchange_starts) as
    a document, in conversation order (pages oldest first): (docs, cache keys — the
    page's SHA-256 and the exchange's first item, as recall keys the same exchange
    (core/recall.py), so both share its analysis —, (row, exchange number)). An exchange stored twice (the same bytes in a single page and
    inside a block page: its texts are equal, compared as a tuple rather than by
    re-encoding every item) is one document, named by the newest page holding it."""
    docs, keys, where, at = [], [], [], {}
    for row, items in zip(rows, pages):
        bounds = formats.exchange_starts(items) + [len(items)]
        for n, (a, b) in enumerate(zip(bounds, bounds[1:]), 1):
            texts = page_texts(items[a:b])
            same = tuple(texts)
            if same in at:
                where[at[same]] = (row, n)
                continue
            at[same] = len(docs)
            docs.append(texts)
            keys.append(doc_key(row["sha256"], a))     # as recall keys it
            where.append((row, n))
    return docs, keys, where


def _ranked(query: str, limit: int, rows: list, pages: list) -> tuple[list, int]:
    """The hits, and how many exchanges were searched."""
    docs, keys, where = _exchange_docs(rows, pages)
    data = []
    for hit in rank(query, docs, limit, keys=keys):
        row, n = where[hit.doc]
        data.append({"page_id": row["page_id"], "sha256": row["sha256"],
                     "expires_at": row["expires_at"], "score": hit.score, "exchange": n,
                     "excerpt": {"role": hit.role, "text": hit.text}})
    return data, len(docs)
