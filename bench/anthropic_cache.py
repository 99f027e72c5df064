"""A model of Anthropic's prompt cache (its prompt-caching documentation), for
bench_cache.py (issue 38, docs/design.md §5.7).

- The prompt is a list of blocks, in the order Anthropic renders it: each tool, each
  system block, then each message's content blocks (a string ``content`` is one text
  block; a chat message's ``tool_calls`` one block each). A block's identity is its
  bytes without ``cache_control`` (a marker, not content) — with its message's role.
- A breakpoint is a block carrying ``cache_control``; a top-level ``cache_control``
  (automatic caching) is one on the last block.
- A read looks for an entry at each breakpoint and at the block boundaries up to
  ``LOOKBACK`` before it; the longest prefix found is served (read at 0.1×).
- An entry is written at each breakpoint whose prefix is at least ``MIN_PREFIX`` (the
  bytes between what was read and the last breakpoint are written, at 1.25×; what
  follows the last breakpoint is plain input, 1×).

Chat Completions to a router taking breakpoints is modelled the same way (system
messages become system blocks, content parts blocks). Entries never expire here: the
turns of a replay are consecutive.
"""

from __future__ import annotations

from hashlib import sha256

from multillm_edge.base.jsonbytes import compact

LOOKBACK = 20           # boundaries a read checks before a breakpoint (besides its own)
MIN_PREFIX = 1024       # bytes (as tokens): the shortest prefix Anthropic caches
READ, WRITE = 0.1, 1.25


def _plain(block) -> dict:
    if type(block) is dict and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _marked(block) -> bool:
    return type(block) is dict and "cache_control" in block


def _content_blocks(m: dict) -> list:
    c = m.get("content")
    out = [{"type": "text", "text": c}] if type(c) is str else list(c or ())
    for call in m.get("tool_calls") or ():          # chat: a router makes each a tool_use
        out.append({"type": "tool_use", "call": call})
    return out


def blocks(body: dict) -> list:
    """[(block bytes, carries a breakpoint)] in Anthropic's order (Messages or chat)."""
    out = [(compact(_plain(t)), _marked(t)) for t in body.get("tools") or ()]
    system = body.get("system")
    system = [{"type": "text", "text": system}] if type(system) is str else list(system or ())
    msgs = []
    for m in body.get("messages") or ():
        if m.get("role") in ("system", "developer"):
            system.extend(_content_blocks(m))
        else:
            msgs.append(m)
    out += [(compact(_plain(b)), _marked(b)) for b in system]
    for m in msgs:
        role = compact(m.get("role"))
        for i, b in enumerate(_content_blocks(m)):
            out.append(((role if i == 0 else b"") + compact(_plain(b)), _marked(b)))
    if body.get("cache_control") and out:                # automatic: the last block
        out[-1] = (out[-1][0], True)
    return out


class Cache:
    """One conversation's entries, turn after turn."""

    def __init__(self):
        self.entries: set = set()

    def turn(self, body: dict) -> dict:
        """What one request is served and costs: ``served`` (bytes read), ``total``,
        ``cost`` (relative units: 1 per uncached byte), ``breakpoints``."""
        bl = blocks(body)
        keys, ends, h, n = [], [], b"", 0
        for data, _ in bl:
            h = sha256(h + data).digest()
            n += len(data)
            keys.append(h)
            ends.append(n)
        marks = [i for i, (_, mark) in enumerate(bl) if mark]
        served = 0
        for b in marks:
            for j in range(b, max(b - LOOKBACK - 1, -1), -1):
                if keys[j] in self.entries:
                    served = max(served, ends[j])
                    break
        written_to = served
        for b in marks:
            if ends[b] >= MIN_PREFIX:
                self.entries.add(keys[b])
                written_to = max(written_to, ends[b])
        cost = READ * served + WRITE * (written_to - served) + (n - written_to)
        return {"served": served, "total": n, "cost": cost, "breakpoints": len(marks)}
