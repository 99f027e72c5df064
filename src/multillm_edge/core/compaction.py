"""The existing lossy fallback (no paging), loud: docs/design.md §5 "Existing behaviour".

A body that fits is returned unchanged. One that does not fit loses its oldest
unprotected complete exchanges (same grouping and protection as paging: system and
developer messages, incomplete exchanges, exchanges holding a
``context_protected_indices`` index, and the latest user exchange with everything after
it are kept) until it fits; the caller reports the count to the client as
``context_compaction``. If dropping every droppable exchange still does not fit:
413 ``context_window_exceeded``. Sizes are computed as in paging (linear).

By default every field is kept as received (this path dispatches the request as the
client sent it); ``strip`` names top-level fields to remove first (the caller's choice:
see ``generation.consumed_fields``). Kept fields count towards the size.
"""

from __future__ import annotations

from ..base.errors import EdgeError
from .paging import Plan, per_budget, unpaged
from .prepared import Prepared


def compact_candidates(fmt: str, body: dict, budgets: list, *, strip: tuple = (),
                       prior=None) -> list:
    """One ``(body, dropped_count)`` or 413 EdgeError per budget; grouping and sizing
    are done once for all candidates (``prior``: as in ``paging.plan_candidates``)."""
    prep = Prepared(fmt, body, None, strip=strip, prior=prior)
    return per_budget(lambda b: _compact(prep, b), budgets)


def _compact(prep: Prepared, budget: int) -> Plan:
    if prep.total <= budget:
        return unpaged(prep, budget)
    inner = prep.inner
    sum_units = prep.sum_inner
    n_units = len(prep.groups)
    size = prep.total
    dropped = []
    for gi in prep.pageable:
        sum_units -= inner[gi]
        n_units -= 1
        dropped.append(gi)
        size = prep.fixed + sum_units + (n_units - 1 if n_units else 0)
        if size <= budget:
            break
    else:
        raise EdgeError(
            413, "context_window_exceeded",
            "This request exceeds the model's context window (maximum context length) "
            f"even after dropping every older exchange that may be dropped: it needs "
            f"{size} bytes and the budget is {budget}.",
            budget=budget, estimated_size=prep.total, protected_bytes=size)
    drop = set(dropped)
    prep.fill_items([gi for gi in range(len(prep.groups)) if gi not in drop])     # §5.13
    items = prep.items
    out_items = []
    for gi, g in enumerate(prep.groups):
        if gi not in drop:
            out_items.extend(items[g.start:g.end])
    out = dict(prep.base)
    out[prep.mod.ITEMS_KEY] = out_items
    return Plan(out, [], size, budget, dropped=len(dropped), history=prep.kept_history(drop))
