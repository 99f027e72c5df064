"""The edge's prompt-cache anchors (docs/design.md §5.7, "Anchors").

Anthropic writes a cache entry only at a breakpoint and reads one back at the
breakpoint or at an earlier block boundary, up to about 20 blocks before it. With the
prompt cache (``multillm_context_prompt_cache``), on Messages and on Chat Completions to a
provider declaring ``cache_breakpoints``, a paged plan carries at most two anchors, in
this order of value:

1. **the window**: the last content block of the stable prefix's last message. With
   recall, the last client message before the latest user turn (recall's message, which
   changes every turn, follows it). Without recall, the request's last message: the
   whole request is the next turn's prefix (measured on the shared set: 0.922 of the
   prompt served against 0.916 one message back; bench_cache.py) — unless the client's top-level
   ``cache_control`` already ends it with a breakpoint. Next turn that entry stands a few
   blocks before the new anchor and is read back: the marker, the handles, the window.
2. **the marker**: the stable prefix through the handles, still served when the window
   changed (an edited message) or its entry was evicted.

The client's own breakpoints are counted first (``formats.breakpoints.count``): the
edge fills only what is left of Anthropic's 4. Anchors are added after the fit (the
plan's size counts their bytes exactly, as ``Anchors.extra``) and only to the upstream
body: a page is the client's bytes and never holds one. A plan that does not fit with
its anchors is planned without them (a fit stays a fit; a 413 is the seed's).
"""

from __future__ import annotations

from typing import NamedTuple

from .. import formats as _formats
from ..formats import breakpoints as bp
from .prepared import Prepared, dumps, utf8_len


class Anchors(NamedTuple):
    """One request's anchors (for every candidate that takes breakpoints)."""
    group: int          # the group whose last item carries the window anchor (-1: none)
    item: dict | None   # that item, anchored
    tail: bytes         # the group's bytes with that item anchored, between its brackets
    window: int         # bytes the window anchor adds to the body
    marker: int         # bytes the marker's breakpoint adds over a plain marker
    free: int           # breakpoints the client leaves the edge (4 less its own)

    def on_window(self, window_paged: bool) -> bool:
        return self.group >= 0 and not window_paged and self.free >= 1

    def on_marker(self, window_paged: bool) -> bool:
        return self.free >= 1 + self.on_window(window_paged)

    def extra(self, window_paged: bool) -> int:
        """What the anchors add to the body while the window's group is (not) paged."""
        return (self.window * self.on_window(window_paged)
                + self.marker * self.on_marker(window_paged))


def takes_breakpoints(mod, declared: bool) -> bool:
    """Whether a candidate's upstream takes breakpoints: Messages always; chat when its
    provider declares ``cache_breakpoints`` (routers to Claude and Gemini); Responses never."""
    return bool(getattr(mod, "ANCHOR_BLOCKS", None)) and (
        getattr(mod, "NATIVE_BREAKPOINTS", False) or declared)


def window_group(prep: Prepared, recalling: bool) -> int:
    """The group whose last item ends the stable prefix (-1: none)."""
    if prep.items is None or not prep.groups:
        return -1
    if recalling or "cache_control" in prep.base:
        return prep.latest - 1 if prep.latest else -1
    return len(prep.groups) - 1


def of(prep: Prepared, group: int) -> Anchors:
    """The anchors of ``prep``: the window's on the last item of ``group``
    (``window_group``; none when that item cannot carry one or the body already holds 4
    breakpoints)."""
    mod = prep.mod
    marks = prep.marks
    used = bp.count(dumps(prep.skel).encode("utf-8")) + (marks[-1] if marks else 0)
    free = max(bp.MAX_BREAKPOINTS - used, 0)
    marker = utf8_len(dumps(bp.marker(""))) - utf8_len(dumps(_formats.marker("")))
    if group >= 0:
        prep.fill_items((group,))       # a group the kept turn held as bytes only (§5.13)
    last = prep.items[prep.groups[group].end - 1] if group >= 0 else None
    item = bp.anchored(last, mod.ANCHOR_BLOCKS) if group >= 0 else None
    if item is None:
        return Anchors(-1, None, b"", 0, marker, free)
    was, now = dumps(last).encode("utf-8"), dumps(item).encode("utf-8")
    prep.fill((group,))
    tail = prep.raw[group][1:-1 - len(was)] + now
    return Anchors(group, item, tail, len(now) - len(was), marker, free)
