"""Search over a session's stored pages (docs/design.md §6.1).

`POST /v1/context/search` with the roleplay key and `X-Roleplay-Session-ID` (without
the header app.route forwards the path to the origin), body `{"query", "limit"?}`.
The same authority as retrieval (routes/retrieval.py), in the same order:

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
7. every row through retrieval's checks (`row_misses`: expiry, principal, session,
   revision, authority, page-id HMAC, row signature, location); a row failing one is
   left out, as retrieval would 404 it
8. R2: the rows grouped by object, each object read once (one ranged get spanning its
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

import asyncio
import json
import time
from functools import partial

from .. import formats
from ..base.errors import EdgeError, PageNotFound, StorageError
from ..base.http import Incoming, Outgoing
from ..base.jsonbytes import compact
from ..base.timing import cpu_spent, timed
from ..core import validation
from ..core.pages import ROLEPLAY, is_legacy_location
from ..search import page_texts, rank
from ..storage import store
from .auth import SESSION_HEADER, key_digest, paging_enabled, request_context
from .retrieval import NO_CACHE, Corrupted, ZeroRetention, checked, row_misses

#: Simultaneous R2 gets: the Workers' limit of open connections per invocation.
R2_CONCURRENCY = 6


async def search_pages(req: Incoming, platform) -> Outgoing:
    digest = key_digest(req)                                        # 1. 401
    session_id = validation.session_id(req.header(SESSION_HEADER))  # 2. 400
    if not paging_enabled(platform):                                # 3. 404
        req.notes["miss"] = "paging_disabled"
        raise PageNotFound()
    raw = await platform.read_body(validation.MAX_SEARCH_BODY)      # 4. 413
    t = time.perf_counter()
    query, limit = validation.search_request(raw)                   # 4. 400
    cpu_spent(req.notes, "parse", t)
    rc = await request_context(req, platform, session_id,           # 4.-5.
                               partial(_load, req, digest, session_id), paged=True)
    if rc.policy.retention == "zero":                               # 6. 403
        raise ZeroRetention()
    facts = rc.caller
    if not facts.session.open:                                      # 6. 404
        req.notes["miss"] = "session"
        raise PageNotFound()
    t = time.perf_counter()
    rows = _servable(req, facts, rc)                                # 7.
    cpu_spent(req.notes, "check", t)
    bodies = await _read_pages(req, rc.page_bodies(), rows)         # 8.
    t = time.perf_counter()
    pages = _decoded(req, rows, bodies)
    cpu_spent(req.notes, "verify", t)
    t = time.perf_counter()
    data, exchanges = _ranked(query, limit, rows, pages)            # 9.
    cpu_spent(req.notes, "rank", t)
    req.notes["hits"] = len(data)
    t = time.perf_counter()
    doc = {"object": "list", "data": data, "pages_searched": len(rows),
           "exchanges_searched": exchanges}
    try:
        payload = compact(doc)
    except UnicodeEncodeError:   # a lone surrogate escaped in a page: quote it escaped
        payload = compact(doc, ascii=True)
    cpu_spent(req.notes, "response", t)
    return Outgoing(200, [("content-type", "application/json")] + NO_CACHE, payload)


async def _load(req: Incoming, digest: str, session_id: str, db, now: int):
    with timed(req.notes, "d1_ms"):
        try:
            row = await store.read_session_row(db, digest, session_id, now)
        except StorageError:
            raise EdgeError(503, "storage_failed", "Context page metadata could not be read.") from None
    t = time.perf_counter()
    facts = store.session_pages(row)
    cpu_spent(req.notes, "load", t)
    return facts


def _servable(req: Incoming, facts: store.SessionPages, rc) -> list:
    """The rows passing every retrieval check, oldest first."""
    rows, left_out = [], 0
    verify_id = rc.sign.page_id_verifier(ROLEPLAY, facts.principal, rc.session_id, rc.policy.revision)
    for row in facts.pages:
        if row_misses(row, row.get("page_id"), facts.principal, rc.session_id,
                      rc.policy, rc.sign, rc.now, verify_id):
            left_out += 1
        else:
            rows.append(row)
    if left_out:
        req.notes["rows_left_out"] = left_out
    rows.sort(key=lambda r: (r["created_at"], r["r2_key"], r["r2_offset"]))
    return rows


def _spans(rows: list) -> dict:
    """r2_key -> (offset, length) of the one get reading its pages; None = whole object."""
    spans: dict = {}
    for row in rows:
        key = row["r2_key"]
        if is_legacy_location(row):
            spans[key] = None
            continue
        lo, hi = row["r2_offset"], row["r2_offset"] + row["byte_length"]
        if key in spans:
            lo, hi = min(lo, spans[key][0]), max(hi, spans[key][0] + spans[key][1])
        spans[key] = (lo, hi - lo)
    return spans


async def _read_pages(req: Incoming, bucket, rows: list) -> dict:
    """page_id -> its checked bytes, each object read once, R2_CONCURRENCY at a time."""
    spans = _spans(rows)
    todo = list(spans.items())
    objects: dict = {}

    async def worker():
        while todo:
            key, span = todo.pop()
            objects[key] = await (bucket.get(key) if span is None else bucket.get(key, *span))

    with timed(req.notes, "r2_ms"):
        done = await asyncio.gather(*(worker() for _ in range(min(R2_CONCURRENCY, len(todo)))),
                                    return_exceptions=True)
    errors = [e for e in done if isinstance(e, BaseException)]
    if any(not isinstance(e, StorageError) for e in errors):
        raise next(e for e in errors if not isinstance(e, StorageError))
    if errors:
        raise EdgeError(503, "storage_failed", "The context pages could not be read.")
    req.notes.update(objects_read=len(objects),
                     bytes_read=sum(len(b) for b in objects.values() if b is not None))
    t = time.perf_counter()
    bodies = {}
    for row in rows:
        data, span = objects[row["r2_key"]], spans[row["r2_key"]]
        if data is not None and span is not None:
            at = row["r2_offset"] - span[0]
            data = data[at:at + row["byte_length"]]
        bodies[row["page_id"]] = checked(req, row, data)   # 503 when missing or altered
    cpu_spent(req.notes, "verify", t)
    return bodies


def _decoded(req: Incoming, rows: list, bodies: dict) -> list:
    """Each page's parsed items (oldest first); an unparsable body is corrupted."""
    out = []
    for row in rows:
        try:
            items = json.loads(bodies[row["page_id"]].decode("utf-8"))
        except ValueError:   # UnicodeDecodeError is a ValueError
            items = None
        if type(items) is not list:    # the edge stores only lists of items (§5.8)
            req.notes["corrupted"] = "unparsable"
            raise Corrupted()
        out.append(items)
    req.notes["pages"] = len(out)
    return out


def _exchange_docs(rows: list, pages: list) -> tuple[list, list, list]:
    """Every exchange of the pages (retrieval's `exchange=N`, formats.exchange_starts) as
    a document, in conversation order (pages oldest first): (docs, cache keys, (row,
    exchange number)). An exchange stored twice (the same bytes in a single page and
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
            keys.append((row["sha256"], n))
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
