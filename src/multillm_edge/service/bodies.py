"""Page bodies (docs/design.md §5.9, §6, §6.1): read from R2, checked, decoded.

A page is a byte range of its request's object (or, for rows written before shared
objects, a whole per-page object). Nothing leaves the edge until its byte length and
SHA-256 match the signed row: a missing or altered body is 503 `Corrupted`, never
skipped; an R2 failure is 503 `StorageFailed`.
"""

from __future__ import annotations

import asyncio
import json

from ..base.errors import Corrupted, StorageError, StorageFailed
from ..base.platform import Bucket
from ..base.timing import LogRecord
from ..core.pages import is_legacy_location, sha256_hex
from ..core.rows import PageRow

#: Simultaneous R2 gets: the Workers' limit of open connections per invocation.
R2_CONCURRENCY = 6


def checked(record: LogRecord, row: PageRow, body: bytes | None) -> bytes:
    """``body`` if it is the row's page (byte length and SHA-256), else 503 Corrupted."""
    if body is None or len(body) != row["byte_length"] or sha256_hex(body) != row["sha256"]:
        record.note(corrupted="missing" if body is None else "mismatch")
        raise Corrupted()
    return body


def items(record: LogRecord, body: bytes) -> list:
    """A checked body's items: the edge stores only JSON lists of items (§5.8), so
    anything else is corrupted."""
    try:
        out = json.loads(body.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError is a ValueError
        out = None
    if type(out) is not list:
        record.note(corrupted="unparsable")
        raise Corrupted()
    return out


async def read_page(record: LogRecord, bucket: Bucket, row: PageRow) -> bytes:
    """The page's bytes with one (ranged) R2 get, checked (a whole legacy per-page
    object is read whole, so an object grown or shrunk is caught)."""
    with record.wall("r2_ms"):
        try:
            if is_legacy_location(row):
                body = await bucket.get(row["r2_key"])
            else:
                body = await bucket.get(row["r2_key"], row["r2_offset"], row["byte_length"])
        except StorageError:
            raise StorageFailed("The context page could not be read.") from None
    return checked(record, row, body)


def spans(rows: list) -> dict:
    """r2_key -> (offset, length) of the one get reading its pages; None = whole object."""
    out: dict = {}
    for row in rows:
        key = row["r2_key"]
        if is_legacy_location(row):
            out[key] = None
            continue
        lo, hi = row["r2_offset"], row["r2_offset"] + row["byte_length"]
        if key in out:
            lo, hi = min(lo, out[key][0]), max(hi, out[key][0] + out[key][1])
        out[key] = (lo, hi - lo)
    return out


async def read_pages(record: LogRecord, bucket: Bucket, rows: list) -> dict:
    """page_id -> its checked bytes, each object read once, R2_CONCURRENCY at a time."""
    where = spans(rows)
    objects = await _read_objects(record, bucket, where)
    with record.cpu("verify"):
        bodies = {}
        for row in rows:
            data, span = objects[row["r2_key"]], where[row["r2_key"]]
            if data is not None and span is not None:
                at = row["r2_offset"] - span[0]
                data = data[at:at + row["byte_length"]]
            bodies[row["page_id"]] = checked(record, row, data)   # 503 when missing or altered
    return bodies


async def _read_objects(record: LogRecord, bucket: Bucket, where: dict) -> dict:
    todo = list(where.items())
    objects: dict = {}

    async def worker():
        while todo:
            key, span = todo.pop()
            objects[key] = await (bucket.get(key) if span is None else bucket.get(key, *span))

    with record.wall("r2_ms"):
        done = await asyncio.gather(*(worker() for _ in range(min(R2_CONCURRENCY, len(todo)))),
                                    return_exceptions=True)
    errors = [e for e in done if isinstance(e, BaseException)]
    if any(not isinstance(e, StorageError) for e in errors):
        raise next(e for e in errors if not isinstance(e, StorageError))
    if errors:
        raise StorageFailed("The context pages could not be read.")
    record.note(objects_read=len(objects),
                bytes_read=sum(len(b) for b in objects.values() if b is not None))
    return objects
