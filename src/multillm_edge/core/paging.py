"""Reversible context paging: the plan (docs/design.md §5 steps 4-8).

Pure Python, stdlib only. Given a parsed request body in one of the three wire
formats and a byte budget, decide which complete, unprotected exchanges leave the
upstream body (oldest first, one page per exchange, until it fits), and build the
upstream body with one ``user`` marker per run of consecutive paged exchanges plus the
``multillm_context_retrieve`` tool schema.

Sizes. The size of a body is the UTF-8 byte length of
``json.dumps(body, ensure_ascii=False, separators=(",", ":"))``. It is computed once,
arithmetically: the body with an empty history list (the "skeleton") is serialized
once, and each group of items is serialized once as a list (those bytes are also the
page body when the group is paged). Size of a body = skeleton + sum of the groups'
inner sizes + one comma between groups; paging a group replaces its inner size by the
marker's (whose text is a fixed prefix/suffix plus the page ids joined by a fixed
separator; JSON escaping is per character, so this too is a sum). Nothing is
re-serialized per paging step: the cost is linear in the history size. ``Plan.size``
equals the byte length of ``Plan.body``'s compact serialization exactly (tested).

Page bytes are ``pages.canonical_bytes(items)`` (produced here by the shared encoder,
tested equal); ``sha256`` is over those bytes; the page id comes
from the caller's ``page_id_for(sha256_hex)`` (an HMAC in production, see pages.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from typing import Callable

from .. import formats as _formats
from .config import MAX_PAGE_BYTES
from ..base.errors import EdgeError
from ..base.jsonbytes import compact, compact_with_list
from .prepared import (EDGE_FIELDS, EncodedHistory, Page, Prepared, _blen, _dumps,  # noqa: F401
                       strip_edge_fields)

@dataclass
class Plan:
    """What one candidate sends, from paging or compaction alike."""
    body: dict          # upstream body to send
    pages: list         # list[Page], in order of appearance (deduplicated by sha256)
    size: int           # bytes of the compact serialization of `body`
    budget: int
    dropped: int = 0    # exchanges compaction removed (never with pages)
    as_received: bool = False   # `body` is the request body itself: its bytes may go as sent
    # The body's history as bytes already made (the upstream bytes need no second
    # encoding of it); None: `encoded` encodes the whole body.
    history: EncodedHistory | None = None

    def encoded(self, model: str | None = None) -> bytes:
        """``compact(body)``, naming ``model`` when given (the provider's name for it)."""
        body = self.body
        if model is not None and body.get("model") != model:
            body = {**body, "model": model}
        if self.history is None:
            return compact(body)
        return compact_with_list(body, self.history.key, self.history.joined())


def output_reservation(fmt: str, body: dict):
    """The request's max-tokens field for ``fmt``; None if absent."""
    return _formats.get(fmt).output_reservation(body)


def _id_len(page_id: str) -> int:
    """Serialized length of a page id inside the marker text (for a ``page_id_for``
    that does not declare one length for all its ids)."""
    return _blen(_dumps(page_id)) - 2


def _window_error(budget: int, estimated: int, protected_bytes: int) -> EdgeError:
    return EdgeError(
        413, "context_window_exceeded",
        "This request exceeds the model's context window (maximum context length): "
        f"the estimated size is {estimated} bytes, the protected content plus page "
        f"handles need {protected_bytes} bytes, and the budget is {budget}. "
        "Shorten the conversation or its protected messages.",
        budget=budget, estimated_size=estimated, protected_bytes=protected_bytes)


def unpaged(prep: Prepared, budget: int) -> Plan:
    """The history as received; its bytes ready unless the body may go as sent."""
    if prep.base is prep.received:
        return Plan(prep.base, [], prep.total, budget, as_received=True)
    return Plan(prep.base, [], prep.total, budget, history=prep.kept_history())


def _id_lengths(prep: Prepared):
    """Each pageable group's page id length in the marker text, in order. The signer
    declares one length for all its ids (``page_id_for.length``; base64url, nothing to
    escape), so no page is made before the plan knows which it needs, and none for a
    413. Any other ``page_id_for``: every pageable group's page is made, each id sized."""
    length = getattr(prep.page_id_for, "length", None)
    if length is not None:
        return repeat(length)
    return [_id_len(p.page_id) for p in prep.pages(prep.pageable)]


def _fit(prep: Prepared, budget: int, id_lens) -> tuple[int, int]:
    """``(k, size)``: paging the ``k`` oldest pageable groups is the first that fits;
    ``k == 0``: none does, ``size`` is then with all of them paged."""
    fixed = prep.fixed_with_tool
    mbase, sep, inner = prep.marker_base, prep.marker_sep, prep.inner
    sum_units = prep.sum_inner
    n_units = len(prep.groups)
    prev = -2
    size = prep.total
    for k, (gi, id_len) in enumerate(zip(prep.pageable, id_lens), 1):
        sum_units -= inner[gi]
        if gi == prev + 1:       # extends the current run: same marker
            sum_units += sep + id_len
            n_units -= 1
        else:                    # a new run: a new marker replaces the group
            sum_units += mbase + id_len
        prev = gi
        size = fixed + sum_units + (n_units - 1 if n_units else 0)
        if size <= budget:
            return k, size
    return 0, size


def _plan(prep: Prepared, budget: int, max_page_bytes: int) -> Plan:
    if prep.total <= budget:
        return unpaged(prep, budget)
    if not prep.pageable:
        raise _window_error(budget, prep.total, prep.total)
    k, size = _fit(prep, budget, _id_lengths(prep))
    if not k:
        raise _window_error(budget, prep.total, size)
    chosen = prep.pageable[:k]
    raw = prep.raw
    oversize = next((len(raw[gi]) for gi in chosen if len(raw[gi]) > max_page_bytes), None)
    if oversize is not None:
        raise EdgeError(
            413, "context_page_too_large",
            "This request exceeds the model's context window (maximum context length) "
            f"and fitting it would need a stored page of {oversize} bytes, "
            f"over the {max_page_bytes}-byte page limit.",
            budget=budget, estimated_size=prep.total, page_bytes=oversize,
            max_page_bytes=max_page_bytes)
    return _build(prep, dict(zip(chosen, prep.pages(chosen))), size, budget)


def _build(prep: Prepared, chosen: dict, size: int, budget: int) -> Plan:
    mod = prep.mod
    items = prep.items
    groups = prep.groups
    out_items: list = []
    parts: list = []           # out_items' encodings: a group's index, or a marker's bytes
    pages: list = []
    seen = set()
    run_ids = None
    run_at = -1

    def close_run():
        m = _formats.marker(_formats.marker_text(run_ids))
        out_items[run_at] = m
        parts[run_part] = _dumps(m).encode("utf-8")

    for gi, g in enumerate(groups):
        p = chosen.get(gi)
        if p is not None:
            if p.sha256 not in seen:
                seen.add(p.sha256)
                pages.append(p)
            if run_ids is None:
                run_ids = []
                run_at, run_part = len(out_items), len(parts)
                out_items.append(None)
                parts.append(None)
            run_ids.append(p.page_id)
        else:
            if run_ids is not None:
                close_run()
                run_ids = None
            out_items.extend(items[g.start:g.end])
            parts.append(gi)
    if run_ids is not None:
        close_run()
    out = dict(prep.base)
    out[mod.ITEMS_KEY] = out_items
    mod.add_tool(out)
    return Plan(out, pages, size, budget, history=prep.history(parts))



def plan_candidates(fmt: str, body: dict, budgets: list, page_id_for: Callable[[str], str],
                    *, max_page_bytes: int = MAX_PAGE_BYTES, strip: tuple = EDGE_FIELDS) -> list:
    """One Plan or EdgeError per budget. Grouping and sizing are done once; a page with
    the same content is the same Page object across the plans. A 400 (invalid
    ``context_protected_indices``) concerns the request, not a candidate: raised.
    ``strip`` names the top-level fields the upstream body goes without."""
    prep = Prepared(fmt, body, page_id_for, strip=strip)
    return per_budget(lambda b: _plan(prep, b, max_page_bytes), budgets)


def per_budget(plan_one: Callable[[int], object], budgets: list) -> list:
    """``plan_one(budget)`` for each budget. A 413 is that candidate's result (it does
    not fit there); any other error concerns the request itself and is raised."""
    out = []
    for b in budgets:
        try:
            out.append(plan_one(b))
        except EdgeError as e:
            if e.status != 413:
                raise
            # kept without its traceback: its frames hold `out`, which holds it (a cycle
            # that would pin the whole request body until the next cycle collection)
            out.append(e.with_traceback(None))
    return out

