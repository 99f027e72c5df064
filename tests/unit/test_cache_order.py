"""The budget ranks the isolate's caches by name (service/budget.ORDER, docs/design.md
§7.2): a cache registered under a name ORDER does not hold would silently rank among
the least valuable and give way first. Every cache the Worker registers is named."""

import multillm_edge.app  # noqa: F401 — every module that registers a cache
from multillm_edge.service import budget


def test_every_cache_the_worker_registers_is_ranked():
    names = [name for name, _ in budget.caches()]
    assert sorted(names) == sorted(budget.ORDER)
    assert names == list(budget.ORDER)          # least valuable first, as ranked


def test_the_caches_own_bounds_fit_beside_the_reserve():
    """With no request in flight every cache has its own bound: their sum fits in the
    budget less the reserve the isolate's first request takes (§7.2). Past it the least
    valuable would sit at 0 for the isolate's life (the memos were, once the reserve came)."""
    own = sum(cache.max_bytes for _, cache in budget.caches())
    assert own <= budget.BUDGET_BYTES - budget.RESERVE_BYTES, own / budget.MIB
