"""What a complete JSON response gains (docs/design.md §5.11): ``context_pages``,
``context_session`` (the session's page budget) and ``context_compaction``, added after the
provider's own fields.

A paged turn lists every page of its plan, each with the same tool schema: hundreds of
entries. Encoding them as dicts was the costliest step of a steady turn's response, so
the list is written as text, the schema encoded once. Page ids and digests are the
edge's own ASCII (``cp_`` + base64url, lowercase hex): nothing in them needs escaping.
The output is byte-identical to encoding the doc with the keys appended (tested).
"""

from __future__ import annotations

from functools import lru_cache
from itertools import chain, repeat
from operator import itemgetter

from ..base.errors import EdgeError
from ..base.jsonbytes import compact_text
from .validation import parse_json

ADDED_KEYS = ("context_pages", "context_recall", "context_session", "context_compaction")


def pages_text(pages, rows, schema_text: str) -> str:
    """The ``context_pages`` array as compact JSON; ``pages`` are ``(page_id, sha256, …)``
    tuples (a Page, or what a waiting request keeps of one, docs/design.md §7.2); ``rows``
    maps a page id to its row as stored (``store.ActivePage``: the real expiry), null for
    a page without one; ``schema_text``: the format's tool schema as compact JSON
    (``schema_text(tool_schema)``)."""
    if not pages:
        return "[]"
    # every entry's parts joined in one C pass (no string per entry, no format string:
    # ~1.3x faster than a head formatted per page in Pyodide at 256 pages), the schema's
    # text each one's tail; a page without a row is null
    ids = list(map(_ID, pages))
    if rows:
        expiries = ["null" if row is None else str(row.expires_at) for row in map(rows.get, ids)]
    else:
        expiries = repeat("null")
    heads = chain(('[{"page_id":"',), repeat(',{"page_id":"'))
    parts = zip(heads, ids, repeat('","sha256":"'), map(_SHA, pages), repeat('","expires_at":'),
                expiries, repeat(',"tool_schema":' + schema_text + "}"))
    return "".join(chain(chain.from_iterable(parts), ("]",)))


@lru_cache(maxsize=8)      # a format's: three
def schema_text(schema_of) -> str:
    """The compact JSON of ``schema_of()`` (a format's ``tool_schema``: the same every
    call), made once."""
    return compact_text(schema_of())


_ID, _SHA = itemgetter(0), itemgetter(1)


def recall_list(moments) -> list:
    """``context_recall`` (docs/design.md §6.2): what recall's message quotes, best first."""
    return [{"page_id": m.page_id, "exchange": m.exchange, "score": m.score} for m in moments]


def annotate(payload: bytes, pages_json: str | None, compacted: int,
             session: dict | None = None, recalled: list | None = None) -> bytes:
    """``payload`` (a provider's JSON object) with the added keys; anything that is not
    a JSON object the edge would accept (too deep, NaN, not UTF-8) passes unchanged.
    ``session``: the figures of ``context_session`` (with the pages only); ``recalled``:
    ``context_recall``'s entries, when the request declared recall (with the pages only)."""
    if pages_json is None and not compacted:
        return payload
    try:   # the request boundary's parse: a provider's answer could nest deep enough
        doc = parse_json(payload)       # to overflow Pyodide's stack too
    except EdgeError:
        return payload
    if not isinstance(doc, dict):
        return payload
    extra = []      # each added key's name, then its value's text
    if pages_json is not None:
        extra += ['"context_pages":', pages_json]
        if recalled is not None:
            extra += [',"context_recall":', compact_text(recalled)]
        if session is not None:
            extra += [',"context_session":', compact_text(session)]
    if compacted:
        extra += [',"context_compaction":' if extra else '"context_compaction":',
                  compact_text({"dropped_exchanges": compacted})]
    for k in ADDED_KEYS:   # a provider's own key of that name is replaced
        doc.pop(k, None)
    try:
        head = compact_text(doc)[:-1].encode("utf-8")
    except UnicodeEncodeError:   # a lone surrogate escaped in the provider's JSON
        head = compact_text(doc, ascii=True)[:-1].encode("utf-8")
    # each part encoded alone, then joined once: the page list (hundreds of entries,
    # ASCII) is copied twice, never widened to the answer's non-ASCII text's width and
    # encoded back, nor concatenated with its key first
    return b"".join([head, b"," if doc else b"", *map(str.encode, extra), b"}"])
