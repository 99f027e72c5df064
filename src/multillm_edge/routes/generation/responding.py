"""Step 4: the response: annotated JSON, or the relayed stream (docs/design.md §5.10)."""

from __future__ import annotations

import time

from ...base.http import Outgoing
from ...core import annotation, config
from ...formats import get as format_module
from .scope import Scope, Turn, error, spent


def annotate(payload: bytes, turn: Turn, fmt: str) -> bytes:
    """Add `context_pages` / `context_compaction` to a complete JSON response."""
    pages = None
    if turn.pages:
        pages = annotation.pages_text(turn.pages, turn.rows, format_module(fmt).tool_schema())
    return annotation.annotate(payload, pages, turn.compacted)


def info_headers(turn: Turn) -> list:
    headers = []
    if turn.pages:
        headers.append(("x-multillm-context-page-count", str(len(turn.pages))))
        ids = ",".join(p.page_id for p in turn.pages)
        if len(ids) <= config.MAX_PAGE_LIST_HEADER:
            headers.append(("x-multillm-context-pages", ids))
    if turn.compacted:
        headers.append(("x-multillm-context-compaction", str(turn.compacted)))
    return headers

PAGE_LIST_COMMENT = b": multillm-context-pages "


def page_list_comment(turn: Turn) -> bytes:
    """The SSE comment line that leads a paged stream: every page id, however many
    (the header is capped, SSE parsers skip comment lines)."""
    if not turn.pages:
        return b""
    return PAGE_LIST_COMMENT + ",".join(p.page_id for p in turn.pages).encode() + b"\n\n"


def idle_event(fmt: str, idle: float) -> bytes:
    """The SSE event that ends a stream the provider left silent, in its own shape:
    the OpenAI SDKs raise on a `data: {"error": …}` line, Anthropic's on `event: error`."""
    message = f"The provider sent nothing for {idle:g} seconds; the stream was ended."
    return format_module(fmt).idle_event(message)


async def respond(scope: Scope, upstream, turn: Turn) -> Outgoing:
    t = time.perf_counter()
    headers = [(k, v) for k, v in upstream.headers
               if k not in ("content-length", "content-encoding", "transfer-encoding", "connection")]
    ctype = dict(upstream.headers).get("content-type", "")
    if "json" in ctype and 200 <= upstream.status < 300 and (turn.pages or turn.compacted):
        spent(turn, "response", t)
        try:
            payload = await upstream.read(scope.idle, config.MAX_ANNOTATED_BYTES)
        except TimeoutError:
            raise error("upstream_timeout", "The provider stopped sending its response.", 504) from None
        t = time.perf_counter()
        if payload is not None:
            out = Outgoing(upstream.status, headers + info_headers(turn), annotate(payload, turn, scope.fmt))
            spent(turn, "response", t)
            return out
        # Too large to parse and re-encode whole in the isolate: relayed as it comes.
    sse = ctype.split(";")[0].strip().lower() == "text/event-stream"
    prefix = page_list_comment(turn) if sse and 200 <= upstream.status < 300 else b""
    stream = upstream.relay(prefix, scope.idle, idle_event(scope.fmt, scope.idle) if sse else None)
    spent(turn, "response", t)
    return Outgoing(upstream.status, headers + info_headers(turn), stream=stream)
