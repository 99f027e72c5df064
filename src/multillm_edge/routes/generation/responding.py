"""Step 4: the response: annotated JSON, or the relayed stream (docs/design.md §5.10)."""

from __future__ import annotations

from ...base.http import Outgoing
from ...base.jsonbytes import compact_text
from ...core import annotation, config
from ...formats import get as format_module
from .scope import Scope, Turn, error
from ...service.budget import hand_to_relay
from ...service.storing import counted_bytes
from ...service import usage


def session_figures(scope: Scope, turn: Turn) -> dict | None:
    """The session's page budget after this turn (docs/design.md §5.11), for a paged
    answer: what the turn's one D1 read found active plus what this request wrote, less
    the single pages its blocks hold again (§5.9); no further statement (a concurrent
    writer's pages show on its next turn)."""
    if not turn.pages:
        return None
    ctx = scope.rc.caller
    return {"active_bytes": counted_bytes(ctx.active_bytes + turn.new_bytes, turn.covered),
            "limit_bytes": config.SESSION_ALLOWANCE_BYTES,
            "active_pages": len(ctx.active_pages) + turn.new_pages - len(turn.covered)}


def annotate(payload: bytes, turn: Turn, fmt: str, session: dict | None = None) -> bytes:
    """Add `context_pages` / `context_session` / `context_compaction` to a complete JSON response."""
    pages = recalled = None
    if turn.pages:
        pages = annotation.pages_text(turn.pages, turn.rows,
                                       annotation.schema_text(format_module(fmt).tool_schema))
        if turn.recalled is not None:
            recalled = annotation.recall_list(turn.recalled)
    return annotation.annotate(payload, pages, turn.compacted, session, recalled)


FIGURE_HEADERS = (("x-multillm-context-active-bytes", "active_bytes"),
                  ("x-multillm-context-limit-bytes", "limit_bytes"),
                  ("x-multillm-context-active-pages", "active_pages"))


def info_headers(turn: Turn, session: dict | None = None) -> list:
    headers = []
    if turn.pages:
        headers.append(("x-multillm-context-page-count", str(len(turn.pages))))
        ids = ",".join(p[0] for p in turn.pages)
        if len(ids) <= config.MAX_PAGE_LIST_HEADER:
            headers.append(("x-multillm-context-pages", ids))
        if turn.recalled is not None:
            headers.append(("x-multillm-context-recall-count", str(len(turn.recalled))))
    if session is not None:
        headers += [(name, str(session[k])) for name, k in FIGURE_HEADERS]
    if turn.compacted:
        headers.append(("x-multillm-context-compaction", str(turn.compacted)))
    return headers

PAGE_LIST_COMMENT = b": multillm-context-pages "
SESSION_COMMENT = b": multillm-context-session "
RECALL_COMMENT = b": multillm-context-recall"


def page_list_comment(turn: Turn, session: dict | None = None) -> bytes:
    """The SSE comment lines that lead a paged stream: every page id, however many
    (the header is capped, SSE parsers skip comment lines), then the session's figures
    as compact JSON."""
    if not turn.pages:
        return b""
    line = PAGE_LIST_COMMENT + ",".join(p[0] for p in turn.pages).encode() + b"\n\n"
    if turn.recalled is not None:   # page_id:exchange of each recalled moment, best first
        moments = ",".join(f"{m.page_id}:{m.exchange}" for m in turn.recalled).encode()
        line += RECALL_COMMENT + (b" " + moments if moments else b"") + b"\n\n"
    if session is not None:
        line += SESSION_COMMENT + compact_text(session).encode() + b"\n\n"
    return line


def idle_event(fmt: str, idle: float) -> bytes:
    """The SSE event that ends a stream the provider left silent, in its own shape:
    the OpenAI SDKs raise on a `data: {"error": …}` line, Anthropic's on `event: error`."""
    message = f"The provider sent nothing for {idle:g} seconds; the stream was ended."
    return format_module(fmt).idle_event(message)


def usage_meter(scope: Scope, turn: Turn, sse: bool, status: int):
    """The answer's usage meter (docs/design.md §4.1): a 2xx answer only, else None."""
    if not usage.meters(status):
        return None
    rc = scope.rc
    return usage.meter(rc.platform, rc.db, scope.fmt, sse, turn.sent_bytes,
                       rc.caller.principal, turn.model, rc.now)


async def respond(scope: Scope, upstream, turn: Turn) -> Outgoing:
    record = scope.req.record
    with record.cpu("response"):
        headers = [(k, v) for k, v in upstream.headers
                   if k not in ("content-length", "content-encoding", "transfer-encoding", "connection")]
        ctype = dict(upstream.headers).get("content-type", "")
        sse = ctype.split(";")[0].strip().lower() == "text/event-stream"
        session = session_figures(scope, turn)
        whole = "json" in ctype and 200 <= upstream.status < 300 and (turn.pages or turn.compacted)
        meter = usage_meter(scope, turn, sse, upstream.status)
    if whole:
        try:
            payload = await upstream.read(scope.idle, config.MAX_ANNOTATED_BYTES)
        except TimeoutError:
            raise error("upstream_timeout", "The provider stopped sending its response.", 504) from None
        if payload is not None:
            with record.cpu("response"):
                meter.feed(payload)
                meter.end()
                return Outgoing(upstream.status, headers + info_headers(turn, session),
                                annotate(payload, turn, scope.fmt, session))
        # Too large to parse and re-encode whole in the isolate: relayed as it comes.
    with record.cpu("response"):
        prefix = page_list_comment(turn, session) if sse and 200 <= upstream.status < 300 else b""
        stream = upstream.relay(prefix, scope.idle, idle_event(scope.fmt, scope.idle) if sse else None,
                                meter, hand_to_relay(scope.req))    # released when the relay ends
        return Outgoing(upstream.status, headers + info_headers(turn, session), stream=stream)
