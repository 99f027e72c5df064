"""Cache breakpoints on the wire (docs/design.md §5.7): Anthropic's ``cache_control`` on a
content block, as Messages takes it and as routers to Claude take it on a Chat
Completions content part. The shapes are the same in both: a text block or part
``{"type": "text", "text": …, "cache_control": {"type": "ephemeral"}}``.

A format that takes breakpoints declares ``ANCHOR_BLOCKS``: the block types that may
carry one (Messages: what Anthropic caches; chat: text parts, what routers document).
"""

from __future__ import annotations

MAX_BREAKPOINTS = 4     # Anthropic's limit per request; a top-level one counts as one
EPHEMERAL = {"type": "ephemeral"}
_KEY = b'"cache_control":'


def count(encoded: bytes) -> int:
    """``cache_control`` keys in compact JSON bytes, one C-speed scan: inside a string a
    quote is escaped (``\\"``), so only a key is followed by ``":`` (an object key of that
    name inside a tool's input counts too: an over-count never makes a request exceed
    the limit)."""
    return encoded.count(_KEY)


def text_block(text: str) -> dict:
    """One text block carrying a breakpoint."""
    return {"type": "text", "text": text, "cache_control": dict(EPHEMERAL)}


def marker(text: str) -> dict:
    """The marker as one text block carrying a breakpoint: the stable prefix up to it
    (tools, system, the paged handles) is cached even when what follows changes."""
    return {"role": "user", "content": [text_block(text)]}


def anchored(message, blocks: tuple):
    """``message`` with a breakpoint on its last content block (a string ``content``
    becomes one text block of the same text), nothing else changed; None when it cannot
    carry one of the edge's: no content, an empty text (Anthropic rejects a breakpoint
    there), a last block of another type (a thinking block), or a block that already
    carries the client's ``cache_control`` (then it is a breakpoint already)."""
    if type(message) is not dict:
        return None
    c = message.get("content")
    if type(c) is str:
        return {**message, "content": [text_block(c)]} if c else None
    if type(c) is not list or not c:
        return None
    last = c[-1]
    if (type(last) is not dict or last.get("type") not in blocks or "cache_control" in last
            or (last.get("type") == "text" and not last.get("text"))):
        return None
    return {**message, "content": c[:-1] + [{**last, "cache_control": dict(EPHEMERAL)}]}
