"""Plans seen from outside, for tests, benches and diagnostics (the Worker never needs
these): one budget's plan, the inverse of a plan, marker parsing, body sizes.

``unpage(fmt, plan.body, plan.pages, created)`` gives back the request body minus the
edge's own fields: each marker replaced by its pages' items, the retrieve tool removed
(and its list too when the plan created it: ``created`` is whether the request had no
``tools`` — or, for a Chat request on the legacy parameter, no ``functions`` — list).
"""

from __future__ import annotations

import json

from multillm_edge import formats
from multillm_edge.formats import breakpoints
from multillm_edge.core import paging, recall
from multillm_edge.core.config import MAX_PAGE_BYTES
from multillm_edge.base.errors import EdgeError
from multillm_edge.base.jsonbytes import compact


def marker_ids(text):
    """The page ids named by a marker text (with or without the search tool's words),
    or None if ``text`` is not one."""
    suffix = formats.MARKER_SUFFIX
    for prefix in (formats.MARKER_PREFIX, formats.MARKER_PREFIX_SEARCH):
        if (isinstance(text, str) and text.startswith(prefix) and text.endswith(suffix)
                and len(text) > len(prefix) + len(suffix)):
            return text[len(prefix):len(text) - len(suffix)].split(formats.MARKER_SEP)
    return None


def _tool_name(entry) -> str | None:
    return entry.get("name") or (entry.get("function") or {}).get("name") if isinstance(entry, dict) else None


def remove_tool(fmt: str, body: dict, created: bool) -> None:
    """Undo ``add_tool``: drop the context tools appended last — retrieve, then search
    when it was declared — and the list they created."""
    key = "functions" if fmt == "chat" and body.get("tools") is None and "functions" in body else "tools"
    tools = body.get(key)
    if not isinstance(tools, list) or not tools:
        return
    n = 2 if len(tools) >= 2 and _tool_name(tools[-1]) == formats.SEARCH_TOOL_NAME else 1
    if _tool_name(tools[-n]) != formats.TOOL_NAME:
        return
    if created and len(tools) == n:
        del body[key]
    else:
        body[key] = tools[:-n]


def is_recall(item) -> bool:
    """Whether ``item`` is recall's message (docs/design.md §6.2)."""
    text = marker_content(item)
    return isinstance(text, str) and text.startswith(recall.INTRO)


def stable_prefix(sent: bytes, key: str = "messages", client: list | None = None) -> bytes:
    """Upstream bytes up to the end of the window's history: before recall's message and
    the latest turn — what the next turn must start with between steps (docs/design.md
    §5.7). ``key``: the history's field, the body's first list of that name. ``client``:
    the history the client sent that turn, to undo the edge's anchor on the window's last
    message (the next turn sends that message as the client wrote it)."""
    kept = json.loads(sent)[key][:-1]
    if kept and is_recall(kept[-1]):
        kept = kept[:-1]
    if client is not None and kept:
        blocks = formats.get("messages").ANCHOR_BLOCKS      # chat's text parts included
        kept[-1] = next((c for c in client if c != kept[-1]
                         and breakpoints.anchored(c, blocks) == kept[-1]), kept[-1])
    lead = sent[:sent.index(b'"' + key.encode() + b'":[') + len(key) + 4]
    return lead + b",".join(compact(it) for it in kept)


def unanchor(fmt: str, items: list, client: list) -> list:
    """``items`` (an unpaged history) with the edge's window anchor undone: where an item
    is the client's with a breakpoint added (``breakpoints.anchored``), the client's."""
    blocks = getattr(formats.get(fmt), "ANCHOR_BLOCKS", ())
    if len(items) != len(client):
        return items
    return [c if it != c and it == breakpoints.anchored(c, blocks) else it
            for it, c in zip(items, client)]


def unpage(fmt: str, body: dict, pages, created: bool = False, client: dict | None = None) -> dict:
    """The client's body back from an upstream ``body`` and its ``pages``; ``client`` (the
    body as sent): the edge's anchor is undone too (docs/design.md §5.7)."""
    mod = formats.get(fmt)
    by_id = {p.page_id: p for p in pages}
    out = dict(body)
    items = formats.history(out, mod.ITEMS_KEY)
    if items is None or not by_id:
        return out
    restored = []
    for it in items:
        ids = marker_ids(marker_content(it))
        if ids is not None and all(i in by_id for i in ids):
            for i in ids:
                restored.extend(by_id[i].items)
        elif not is_recall(it):
            restored.append(it)
    if client is not None:
        restored = unanchor(fmt, restored, formats.history(client, mod.ITEMS_KEY) or [])
    out[mod.ITEMS_KEY] = restored
    remove_tool(fmt, out, created)
    return out


def created_tools(fmt: str, body: dict) -> bool:
    """Whether planning ``body`` creates the tools list the retrieve tool goes into."""
    legacy = fmt == "chat" and body.get("tools") is None and isinstance(body.get("functions"), list)
    return ("functions" if legacy else "tools") not in body


def body_size(body) -> int:
    """The byte length of ``body``'s compact serialization: what a plan's size must be."""
    return len(compact(body))


def marker_content(item):
    """The text of an item shaped exactly like `marker(...)` (or, with the prompt cache's
    anchor, like `breakpoints.marker(...)`), else None."""
    if type(item) is not dict or item.get("role") != "user" or len(item) != 2:
        return None
    c = item.get("content")
    if type(c) is list and len(c) == 1 and type(c[0]) is dict:
        text = c[0].get("text")
        return text if item == breakpoints.marker(text) else c
    return c


def plan_paging(fmt: str, body: dict, budget: int, page_id_for, *,
                max_page_bytes: int = MAX_PAGE_BYTES, rule: tuple | None = None,
                search: bool = False, prompt_cache: bool = False) -> paging.Plan:
    """The plan for one budget (blocks closing by ``rule``, by default the production
    ``paging.block_rule``); its 413 (or any 400) raised."""
    (plan,) = paging.plan_candidates(fmt, body, [budget], page_id_for,
                                     max_page_bytes=max_page_bytes, rule=rule, search=search,
                                     prompt_cache=prompt_cache)
    if isinstance(plan, EdgeError):
        raise plan
    return plan
