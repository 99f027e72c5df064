"""Blocks (docs/design.md §5.7): several consecutive pageable exchanges in one page, with
boundaries defined by content, so a growing history keeps reusing its pages."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from devkit.plans import body_size, marker_content, marker_ids, plan_paging, unpage
from multillm_edge.core import paging
from multillm_edge.base.errors import EdgeError
from multillm_edge.core.pages import PageSigner, canonical_bytes

SIGNER_IDS = PageSigner(b"blocks-test-secret").page_ids("roleplay", "p" * 64, "rps_t", 3)
RULES = [paging.block_rule(), (2, 4, 65536), (3, 64, 1500)]


def dumps(o) -> bytes:
    return json.dumps(o, ensure_ascii=False, separators=(",", ":")).encode()


def chat(exchanges: list, latest: str = "And then?") -> dict:
    msgs = [{"role": "system", "content": "Card. " * 40}]
    for u, a in exchanges:
        msgs += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
    msgs.append({"role": "user", "content": latest})
    return {"model": "p:m", "max_tokens": 100, "messages": msgs}


def paged_count(plan) -> int:
    """Exchanges not in the upstream body: each remaining reply is an unpaged exchange."""
    return sum(1 for m in plan.body["messages"] if m["role"] == "assistant")


exchange = st.tuples(st.text(min_size=0, max_size=40).map(lambda t: "u " + t * 3),
                     st.integers(20, 600).map(lambda n: "*r* " + "é" * n))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(exchange, min_size=2, max_size=60), exchange, st.floats(0.05, 0.9),
       st.sampled_from(RULES))
def test_a_history_grown_by_one_exchange_reuses_its_pages(history, new, frac, rule):
    before_body, after_body = chat(history), chat(history + [new])
    budget = int(body_size(before_body) * frac)
    try:
        before = plan_paging("chat", before_body, budget, SIGNER_IDS, rule=rule)
    except EdgeError:
        return
    try:
        after = plan_paging("chat", after_body, budget, SIGNER_IDS, rule=rule)
    except EdgeError as e:      # the window cannot carry one more (the latest is protected)
        assert e.code == "context_window_exceeded"
        return
    k0 = len(history) - sum(1 for m in before.body["messages"] if m["role"] == "assistant")
    k1 = len(history) + 1 - sum(1 for m in after.body["messages"] if m["role"] == "assistant")
    assert k1 >= k0
    old = {p.page_id: p for p in before.pages}
    new_ids = [p.page_id for p in after.pages if p.page_id not in old]
    # rows written: at most one new page per newly paged exchange, plus the block the
    # previously open tail may close
    assert len(new_ids) <= k1 - k0 + 1
    if any(len(p.body) > len(canonical_bytes(p.items[:1])) for p in after.pages):
        event("blocks")
    # a page left out is superseded by a block holding its items, in place
    kept = {p.page_id for p in after.pages}
    after_dumps = [dumps(p.items)[1:-1] for p in after.pages]
    for pid, p in old.items():
        if pid not in kept:
            event("superseded")
            inner = dumps(p.items)[1:-1]
            assert any(inner in b and len(b) > len(inner) for b in after_dumps)


def test_blocks_carry_a_long_chat_on_a_small_window_and_unpage_exactly():
    ex = [(f"[{i}] tell me " * 8, f"*{i}* the wind " * 40) for i in range(300)]
    body = chat(ex)
    plan = plan_paging("chat", body, 7000, SIGNER_IDS)
    assert plan.size == len(dumps(plan.body)) <= 7000
    blocks = [p for p in plan.pages if len(p.items) > 2]
    assert len(blocks) >= 10 and len(plan.pages) < 100
    for p in plan.pages:
        assert p.body == canonical_bytes(p.items) and json.loads(p.body) == p.items
        assert len(p.body) <= paging.BLOCK_MAX_BYTES
    named = [i for m in plan.body["messages"] for i in marker_ids(marker_content(m)) or []]
    assert named == [p.page_id for p in plan.pages]        # oldest first, one per handle
    restored = unpage("chat", plan.body, plan.pages, True)
    assert dumps(restored) == dumps(body)
    # without blocks (span 1) the same window does not carry it
    try:
        plan_paging("chat", body, 7000, SIGNER_IDS, rule=paging.block_rule(span=1))
        raise AssertionError("fits without blocks")
    except EdgeError as e:
        assert e.code == "context_window_exceeded"


def test_editing_an_old_exchange_changes_only_nearby_pages():
    ex = [(f"[{i}] go on " * 8, f"*{i}* onward " * 40) for i in range(200)]
    edited = list(ex)
    edited[50] = (edited[50][0] + " (edited)", edited[50][1])
    a = plan_paging("chat", chat(ex), 20000, SIGNER_IDS)
    b = plan_paging("chat", chat(edited), 20000, SIGNER_IDS)
    ids_a = {p.page_id for p in a.pages}
    changed = [p for p in b.pages if p.page_id not in ids_a]
    assert len(b.pages) > 10 and len(changed) <= 3


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(exchange, min_size=30, max_size=80), exchange, st.integers(1, 3),
       st.sampled_from(RULES))
def test_a_window_that_slides_writes_only_its_new_pages(history, new, dropped, rule):
    # A client window leaves out its oldest exchanges as new ones come (README's recipe):
    # the pages of what it still sends are the pages it had, but for the newly paged.
    budget = 6000
    try:
        before = plan_paging("chat", chat(history), budget, SIGNER_IDS, rule=rule)
        after = plan_paging("chat", chat(history[dropped:] + [new]), budget, SIGNER_IDS, rule=rule)
    except EdgeError:
        return
    old = {p.page_id for p in before.pages}
    fresh = [p for p in after.pages if p.page_id not in old]
    k0 = len(history) - paged_count(before)
    k1 = len(history) - dropped + 1 - paged_count(after)
    newly = max(k1 - (k0 - dropped), 0)
    event(f"newly paged: {min(newly, 3)}")
    # New blocks: at most one per exchange newly paged at the far end (each may close
    # one). New single pages: the newly paged exchanges, or the run's head (up to its
    # first boundary, which moved if the window slid past it: those exchanges were single
    # pages once, before their block closed). Nothing else is re-cut, wherever the
    # window starts.
    assert sum(1 for p in fresh if len(p.items) > 2) <= max(newly, 1)
    first_block = next((i for i, p in enumerate(after.pages) if len(p.items) > 2), len(after.pages))
    allowed = {p.page_id for p in after.pages[:first_block]}
    allowed |= {p.page_id for p in after.pages[len(after.pages) - newly - 1:]}
    assert all(p.page_id in allowed for p in fresh if len(p.items) <= 2)
    if fresh and first_block < len(after.pages):
        event("blocks while sliding")


def test_a_run_head_is_paged_one_exchange_a_page_until_its_first_boundary():
    ex = [(f"[{i}] go on " * 8, f"*{i}* onward " * 40) for i in range(200)]
    plan = plan_paging("chat", chat(ex), 20000, SIGNER_IDS)
    sizes = [len(p.items) for p in plan.pages]
    head = next(i for i, n in enumerate(sizes) if n > 2)
    assert head >= 1 and all(n == 2 for n in sizes[:head])      # singles, then blocks
    # the head's last single is the content boundary the first block starts after
    from zlib import crc32
    assert crc32(plan.pages[head - 1].body) % paging.BLOCK_SPAN == 0
