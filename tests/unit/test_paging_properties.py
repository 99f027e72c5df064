"""Property-based tests of the paging plan over generated conversations (all formats).

The generator builds a format-neutral conversation (system messages, an optional
greeting, exchanges with text replies and parallel tool calls, some incomplete), renders
it in a wire format, and records the ground-truth groups. A naive reference planner
(re-serializes the whole body for every candidate prefix, and finds the blocks from
their definition, docs/design.md §5.7) says what the plan must be.
"""

from __future__ import annotations

import hashlib
import json
import zlib

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from multillm_edge.core.pages import canonical_bytes
from devkit.plans import body_size, created_tools, is_recall, plan_paging, unpage
from multillm_edge import formats
from multillm_edge.formats import breakpoints
from multillm_edge.core import paging
from multillm_edge.base.errors import EdgeError

FMTS = ("chat", "responses", "messages")
SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

SPECIALS = ["", " ", "\t", "\r\n", "trailing  ", "  lead", "🙂", "👩‍👩‍👧", "你好世界",
            "e\u0301", "שלום עולם", "مرحبا", "\U00010348\U0001F600", '"quoted" \\ back',
            "\u0000\u001f", "\u2028\u2029", "line1\nline2", "*waves*", "{\"a\":1}"]

_chars = st.characters(blacklist_categories=("Cs",))
word = st.one_of(st.sampled_from(SPECIALS), st.text(_chars, max_size=30))
text = st.lists(word, max_size=6).map("".join)
big = st.builds(lambda t, n: (t or "x") * n, text, st.integers(50, 1500))
result_text = st.one_of(text, text, big)


def varying_ids(sha: str) -> str:
    # deterministic, and of varying length: the plan sizes each page id as it comes
    return "cp_" + sha[: 8 + int(sha[0], 16)]


def signer_like_ids(sha: str) -> str:
    # one declared length, nothing to escape, like the signer's: sized before pages are made
    return "cp_" + sha[:43]


signer_like_ids.length = 46


def escaped_ids(sha: str) -> str:
    # one length, but the marker escapes a quote in each: sized one by one again
    return 'cp_"' + sha[:12]


ID_FUNCS = (varying_ids, signer_like_ids, escaped_ids)


# ---------------------------------------------------------------- conversation model
@st.composite
def conversations(draw):
    segs = []
    n_calls = [0]

    def new_id():
        n_calls[0] += 1
        return "call_%d_%s" % (n_calls[0], draw(st.sampled_from(["", "é", "🙂", "x"])))

    if draw(st.booleans()):
        segs.append(("system", draw(text)))
    if draw(st.booleans()):
        segs.append(("greeting", draw(st.lists(text, min_size=1, max_size=2))))
    for _ in range(draw(st.one_of(st.integers(0, 3), st.integers(4, 14)))):
        r = draw(st.integers(0, 14))
        if r == 0:
            segs.append(("system", draw(text)))
            continue
        steps = []
        for _ in range(draw(st.integers(0, 3))):
            if draw(st.booleans()):
                steps.append(("text", draw(text)))
            else:
                calls = [(new_id(), draw(st.sampled_from(["roll_dice", "lookup", "日記"])),
                          draw(st.one_of(st.just("{}"), text.map(lambda t: json.dumps({"q": t}, ensure_ascii=False)))),
                          draw(result_text))
                         for _ in range(draw(st.integers(1, 3)))]
                steps.append(("tools", calls, draw(text)))
        defect = None
        if any(s[0] == "tools" for s in steps) and draw(st.integers(0, 5)) == 0:
            defect = "missing"
        elif draw(st.integers(0, 12)) == 0:
            defect = "orphan"
        segs.append(("exchange", draw(text), steps, defect, draw(st.booleans())))
    return segs


def render(fmt: str, segs) -> tuple[list, list, dict]:
    """-> (items, ground-truth groups [(start, end, kind, complete)], extra top-level)"""
    items: list = []
    truth = []
    extra: dict = {}
    for seg in segs:
        start = len(items)
        if seg[0] == "system":
            if fmt == "messages":
                extra["system"] = seg[1]
                continue
            role = "developer" if len(seg[1]) % 2 else "system"
            items.append({"role": role, "content": seg[1]})
            truth.append((start, len(items), formats.STANDALONE, True))
            continue
        if seg[0] == "greeting":
            for t in seg[1]:
                items.append(_assistant_text(fmt, t))
            truth.append((start, len(items), formats.LEAD, True))
            continue
        _, utext, steps, defect, array_form = seg
        items.append(_user(fmt, utext, array_form))
        tools_seen = [i for i, s in enumerate(steps) if s[0] == "tools"]
        for i, s in enumerate(steps):
            if s[0] == "text":
                items.append(_assistant_text(fmt, s[1]))
            else:
                calls = s[1]
                drop = calls[-1][0] if (defect == "missing" and i == tools_seen[-1]) else None
                items.extend(_tool_step(fmt, calls, s[2], drop))
        if defect == "orphan":
            items.append(_result(fmt, [("orphan_%d" % start, "x")]))
        truth.append((start, len(items), formats.EXCHANGE, defect is None))
    return items, truth, extra


def _user(fmt, t, array_form):
    if fmt == "responses":
        if array_form:
            return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": t}]}
        return {"role": "user", "content": t}
    if array_form:
        return {"role": "user", "content": [{"type": "text", "text": t}]}
    return {"role": "user", "content": t}


def _assistant_text(fmt, t):
    if fmt == "responses":
        return {"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": t, "annotations": []}]}
    if fmt == "messages":
        return {"role": "assistant", "content": [{"type": "text", "text": t}]}
    return {"role": "assistant", "content": t}


def _result(fmt, pairs):
    if fmt == "chat":
        return [{"role": "tool", "tool_call_id": cid, "content": out} for cid, out in pairs][0] \
            if len(pairs) == 1 else None
    if fmt == "responses":
        return {"type": "function_call_output", "call_id": pairs[0][0], "output": pairs[0][1]}
    return {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": cid, "content": out} for cid, out in pairs]}


def _tool_step(fmt, calls, lead_text, drop):
    out = []
    if fmt == "chat":
        out.append({"role": "assistant", "content": lead_text or None, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": n, "arguments": a}}
            for cid, n, a, _ in calls]})
        out += [{"role": "tool", "tool_call_id": cid, "content": r}
                for cid, _, _, r in calls if cid != drop]
    elif fmt == "responses":
        if lead_text:
            out.append({"type": "reasoning", "id": "rs_" + calls[0][0],
                        "summary": [{"type": "summary_text", "text": lead_text}]})
        out += [{"type": "function_call", "call_id": cid, "name": n, "arguments": a}
                for cid, n, a, _ in calls]
        out += [{"type": "function_call_output", "call_id": cid, "output": r}
                for cid, _, _, r in calls if cid != drop]
    else:
        blocks = [{"type": "text", "text": lead_text}] if lead_text else []
        blocks += [{"type": "tool_use", "id": cid, "name": "t_" + str(len(n)),
                    "input": {"arguments": a}} for cid, n, a, _ in calls]
        out.append({"role": "assistant", "content": blocks})
        res = [{"type": "tool_result", "tool_use_id": cid, "content": r}
               for cid, _, _, r in calls if cid != drop]
        if res:
            out.append({"role": "user", "content": res})
    return out


def make_body(fmt, items, extra, protected, tools_present):
    body = {"model": "prov:model-🙂"}
    if fmt == "responses":
        body["instructions"] = "Stay in character."
        body["input"] = items
        body["max_output_tokens"] = 500
    else:
        body.update(extra)
        body["messages"] = items
        body["max_tokens"] = 500
    if tools_present:
        body["tools"] = [formats.get(fmt).tool_schema() | {}]  # some pre-existing tool
        body["tools"][0] = json.loads(json.dumps(body["tools"][0]).replace(
            formats.TOOL_NAME, "roll_dice"))
    body["capabilities"] = ["multillm_context_retrieve"]
    if protected is not None:
        body["context_protected_indices"] = protected
    body["temperature"] = 0.7
    return body


def assert_upstream_bytes(plan) -> None:
    """What is dispatched: the plan's body encoded, the history from the bytes it holds."""
    assert plan.encoded() == dumps(plan.body)
    assert plan.encoded("z:other") == dumps({**plan.body, "model": "z:other"})
    assert plan.encoded(plan.body.get("model")) == dumps(plan.body)


def dumps(o) -> bytes:
    return json.dumps(o, ensure_ascii=False, separators=(",", ":")).encode()


# ------------------------------------------------------------------ reference planner
def truth_pageable(truth, protected):
    last_user = None
    for gi in range(len(truth) - 1, -1, -1):
        if truth[gi][2] == formats.EXCHANGE:
            last_user = gi
            break
    if last_user is None:
        return []
    return [gi for gi in range(last_user)
            if truth[gi][2] != formats.STANDALONE and truth[gi][3]
            and not any(truth[gi][0] <= i < truth[gi][1] for i in protected)]


def reference_blocks(items, truth, pageable, rule):
    """The closed blocks of the pageable groups, by their definition: a block closes after
    a group whose bytes' CRC-32 is a multiple of the span, at max_groups groups, or before
    an adjacent pageable group that would take its bytes over the cap; a run of adjacent
    pageable groups never continues across a gap, and a run's groups up to its first such
    CRC boundary are never in a block (where a run starts moves as a client's window
    slides). -> list of group lists (any length)."""
    span, max_groups, cap = rule
    closed, cur, prev, synced = [], [], None, False
    for pos, g in enumerate(pageable):
        if prev is None or g != prev + 1:
            cur, synced = [], False
        prev = g
        if not synced:
            closed.append([g])
            synced = zlib.crc32(dumps(items[truth[g][0]:truth[g][1]])) % span == 0
            continue
        cur.append(g)
        nxt = pageable[pos + 1] if pos + 1 < len(pageable) else None
        over = nxt == g + 1 and len(dumps(items[truth[cur[0]][0]:truth[nxt][1]])) > cap
        if zlib.crc32(dumps(items[truth[g][0]:truth[g][1]])) % span == 0 \
                or len(cur) >= max_groups or over:
            closed.append(cur)
            cur = []
    return closed


def reference_handles(items, truth, pageable, k, rule):
    """{first group: (start, end) items of its handle} and the groups a block covers,
    for the k oldest pageable groups paged."""
    paged = set(pageable[:k])
    first, covered = {}, set()
    for blk in reference_blocks(items, truth, pageable, rule):
        if len(blk) > 1 and all(g in paged for g in blk):
            first[blk[0]] = (truth[blk[0]][0], truth[blk[-1]][1])
            covered.update(blk[1:])
    for g in paged:
        if g not in covered and g not in first:
            first[g] = (truth[g][0], truth[g][1])
    return first, covered


def reference_body(fmt, base, items, truth, paged, page_id_for, handles=None, search=False):
    mod = formats.get(fmt)
    first, covered = handles or ({g: (truth[g][0], truth[g][1]) for g in paged}, set())
    out_items = []
    run = None
    for gi, (s, e, _, _) in enumerate(truth):
        if gi in covered:
            continue
        if gi in paged:
            hs, he = first[gi]
            pid = page_id_for(hashlib.sha256(dumps(items[hs:he])).hexdigest())
            if run is None:
                run = []
                out_items.append(run)
            run.append(pid)
        else:
            run = None
            out_items.extend(items[s:e])
    out_items = [formats.marker(formats.marker_text(x, search)) if isinstance(x, list) else x
                 for x in out_items]
    out = dict(base)
    out[mod.ITEMS_KEY] = out_items
    mod.add_tool(out, search)
    return out


# Block rules: production, none (span 1), and small ones so short histories have blocks.
RULES = st.sampled_from(["default", (1, 64, 65536), (2, 3, 65536), (2, 3, 65536),
                         (3, 64, 900), (2, 64, 65536), (2, 64, 65536)])


scenario = st.tuples(
    st.sampled_from(FMTS), conversations(), st.integers(0, 110).map(lambda x: x / 100),
    st.one_of(st.none(), st.lists(st.integers(0, 40), max_size=3)),
    st.booleans(), st.sampled_from([65536, 65536, 65536, 2000]), st.sampled_from(ID_FUNCS),
    RULES, st.booleans())     # the last: the search tool declared too (§6.1)


def rule_for(rule, max_page):
    return paging.block_rule(max_page) if rule == "default" else \
        (rule[0], rule[1], min(rule[2], max_page))


def build(fmt, segs, protected, tools_present):
    items, truth, extra = render(fmt, segs)
    body = make_body(fmt, items, extra, protected, tools_present)
    return body, items, truth


@SETTINGS
@given(scenario)
def test_plan_matches_reference_and_is_reversible(sc):
    fmt, segs, frac, protected, tools_present, max_page, page_id_for, rule, search = sc
    rule = rule_for(rule, max_page)
    body, items, truth = build(fmt, segs, protected, tools_present)
    original = dumps(body)
    base = paging.strip_edge_fields(body)
    full = len(dumps(base))
    mod = formats.get(fmt)
    pageable = truth_pageable(truth, protected or [])
    # budgets spread over [everything paged - 5 %, nothing paged + 5 %]
    every = set(pageable)

    def ref_paged(k):
        return reference_body(fmt, base, items, truth, set(pageable[:k]), page_id_for,
                              reference_handles(items, truth, pageable, k, rule), search)
    low = len(dumps(ref_paged(len(pageable)))) if pageable else full
    if low < full:
        budget = int(low + (frac - 0.05) * (full - low))
    else:
        budget = int(full + (frac - 0.2) * 200)

    # grouping agrees with the ground truth
    groups = formats.group_items(items, mod.classify)
    assert [tuple(g) for g in groups] == truth

    # reference: smallest k such that paging the k oldest pageable exchanges fits
    expected = None
    for k in range(len(pageable) + 1):
        ref = base if k == 0 else ref_paged(k)
        if len(dumps(ref)) <= budget:
            expected = (k, ref)
            break

    try:
        plan = plan_paging(fmt, body, budget, page_id_for, max_page_bytes=max_page, rule=rule,
                           search=search)
    except EdgeError as e:
        event(e.code)
        assert e.status == 413
        if e.code == "context_window_exceeded":
            assert expected is None  # 413 only when no oldest-first prefix fits ...
            all_paged = ref_paged(len(pageable)) if pageable else base
            assert len(dumps(all_paged)) > budget  # ... in particular paging every one
            assert e.details["protected_bytes"] == len(dumps(all_paged))
            assert e.details["budget"] == budget and e.details["estimated_size"] == full
            assert "context window" in e.message and "maximum context length" in e.message
        else:
            assert e.code == "context_page_too_large"
            assert expected is not None and expected[0] > 0
            k = expected[0]
            sizes = [len(dumps(items[truth[g][0]:truth[g][1]])) for g in pageable[:k]]
            assert max(sizes) > max_page
            assert e.details["page_bytes"] == next(s for s in sizes if s > max_page)
        assert dumps(body) == original  # input not mutated
        return

    assert dumps(body) == original  # input not mutated
    assert expected is not None
    k, ref = expected
    event("paged=0" if k == 0 else "paged=1" if k == 1 else "paged>1")
    if k and any(pageable[i] + 1 == pageable[i + 1] for i in range(k - 1)):
        event("run of >1 consecutive pages")
    # fits, exact size arithmetic
    assert plan.size == len(dumps(plan.body)) == body_size(plan.body)
    assert_upstream_bytes(plan)
    assert plan.size <= budget and plan.budget == budget
    # minimal and oldest-first: identical to the reference (which checked k-1 did not fit)
    assert dumps(plan.body) == dumps(ref)
    for f in paging.EDGE_FIELDS:
        assert f not in plan.body
    if k == 0:
        assert plan.pages == []
        if not any(f in body for f in paging.EDGE_FIELDS):
            assert plan.body is body
        return
    # pages: the k oldest pageable exchanges, each alone or in its closed block,
    # deduplicated by content, bytes parse back
    first, covered = reference_handles(items, truth, pageable, k, rule)
    if covered:
        event("blocks")
    want = []
    for g in sorted(first):
        s, e = first[g]
        if all(p != items[s:e] for p in want):
            want.append(items[s:e])
    assert [p.items for p in plan.pages] == want
    assert len({p.sha256 for p in plan.pages}) == len(plan.pages)
    for p in plan.pages:
        assert json.loads(p.body) == p.items
        assert p.body == canonical_bytes(p.items)
        assert p.sha256 == __import__("hashlib").sha256(p.body).hexdigest()
        assert p.page_id == page_id_for(p.sha256)
        assert len(p.body) <= max_page
        assert len(p.body) <= rule[2] or p.items in [items[truth[g][0]:truth[g][1]] for g in pageable]
    # reversible
    restored = unpage(fmt, plan.body, plan.pages, created_tools(fmt, body))
    assert dumps(restored) == dumps(base)
    # each context tool's schema once: retrieve, and search only when declared (§6.1)
    tools = plan.body.get("tools") if plan.body.get("tools") is not None else plan.body.get("functions", [])
    names = [t.get("name") or t.get("function", {}).get("name") for t in tools if isinstance(t, dict)]
    assert names.count(formats.TOOL_NAME) == 1
    assert names.count(formats.SEARCH_TOOL_NAME) == (1 if search else 0)
    # protected items never paged: system, protected indices, latest exchange onwards
    # are sent upstream as they are (the same objects: a paged item is not sent)
    sent_ids = {id(x) for x in plan.body[mod.ITEMS_KEY]}
    last_user = max((gi for gi, t in enumerate(truth) if t[2] == formats.EXCHANGE), default=0)
    for gi, (s, e, kind, complete) in enumerate(truth):
        if kind == formats.STANDALONE or not complete or gi >= last_user or \
                any(s <= i < e for i in (protected or [])):
            assert all(id(x) in sent_ids for x in items[s:e])
    # valid: every call/result pair in the output is intact and in order
    check_pairs(fmt, plan.body[mod.ITEMS_KEY], items)


def _pairs(fmt, items):
    mod = formats.get(fmt)
    seq = []
    for pos, it in enumerate(items):
        _, calls, results = mod.classify(it)
        seq += [("call", c, pos) for c in calls] + [("result", r, pos) for r in results]
    return seq


def check_pairs(fmt, out_items, in_items):
    out = _pairs(fmt, out_items)
    inn = _pairs(fmt, in_items)
    # output's calls/results are a subsequence of the input's, and for every id either
    # all of its occurrences are kept or none (a pair is never separated)
    kinds_out = [(k, c) for k, c, _ in out]
    kinds_in = [(k, c) for k, c, _ in inn]
    it = iter(kinds_in)
    assert all(x in it for x in kinds_out)
    for key in {c for _, c in kinds_in}:
        n_in = sum(1 for _, c in kinds_in if c == key)
        n_out = sum(1 for _, c in kinds_out if c == key)
        assert n_out in (0, n_in)
    # a call's result still follows it
    for k, c, pos in out:
        if k == "result":
            assert any(k2 == "call" and c2 == c and p2 <= pos for k2, c2, p2 in out) or \
                not any(k2 == "call" and c2 == c for k2, c2, _ in inn)


@SETTINGS
@given(scenario)
def test_deterministic_and_candidates_share_pages(sc):
    fmt, segs, frac, protected, tools_present, max_page, page_id_for, rule, search = sc
    rule = rule_for(rule, max_page)
    body, items, truth = build(fmt, segs, protected, tools_present)
    full = body_size(paging.strip_edge_fields(body))
    budgets = [int(full * frac), int(full * frac * 0.8), full, int(full * frac)]

    def run():
        out = []
        for r in paging.plan_candidates(fmt, body, budgets, page_id_for, max_page_bytes=max_page,
                                        rule=rule, search=search):
            if isinstance(r, EdgeError):
                out.append((r.status, r.code, r.details))
            else:
                out.append((dumps(r.body), [(p.page_id, p.sha256, p.body) for p in r.pages], r.size))
        return out

    assert run() == run()
    # each candidate equals the single-budget plan
    res = paging.plan_candidates(fmt, body, budgets, page_id_for, max_page_bytes=max_page, rule=rule,
                                 search=search)
    for b, r in zip(budgets, res):
        try:
            single = plan_paging(fmt, body, b, page_id_for, max_page_bytes=max_page, rule=rule,
                                 search=search)
            assert not isinstance(r, EdgeError)
            assert dumps(single.body) == dumps(r.body) and single.size == r.size
        except EdgeError as e:
            assert isinstance(r, EdgeError) and (r.code, r.details) == (e.code, e.details)
    # identical pages across plans are the same object
    by_sha = {}
    for r in res:
        if not isinstance(r, EdgeError):
            for p in r.pages:
                assert by_sha.setdefault(p.sha256, p) is p


# -- recall (docs/design.md §6.2) --------------------------------------------------

def at_budget(sc):
    """A scenario's body built, with a budget of 30-100 % of its upstream size:
    (fmt, body, items, truth, budget, page_id_for, max_page, rule, search)."""
    fmt, segs, frac, protected, tools_present, max_page, page_id_for, rule, search = sc
    body, items, truth = build(fmt, segs, protected, tools_present)
    budget = int(len(dumps(paging.strip_edge_fields(body))) * (0.3 + frac * 0.7))
    return fmt, body, items, truth, budget, page_id_for, max_page, rule_for(rule, max_page), search


def _plain_or_error(fmt, body, budget, page_id_for, max_page, rule, search):
    try:
        return plan_paging(fmt, body, budget, page_id_for, max_page_bytes=max_page, rule=rule,
                           search=search)
    except EdgeError as e:
        return e


@SETTINGS
@given(scenario, st.integers(0, 5), st.integers(1, 12))
def test_recall_fits_exactly_never_413s_and_quotes_only_what_the_plan_pages(sc, pick, words):
    from multillm_edge.core import prepared, recall
    from multillm_edge.search import page_texts
    fmt, body, items, truth, budget, page_id_for, max_page, rule, search = at_budget(sc)
    original = dumps(body)
    # the query: words of one exchange of the history (so recall has something to find)
    texts = [t for g in truth for _, t in page_texts(items[g[0]:g[1]])] or ["nothing"]
    query = " ".join(texts[pick % len(texts)].split()[:words])
    prep = prepared.Prepared(fmt, body, page_id_for, search=search)
    plain = _plain_or_error(fmt, body, budget, page_id_for, max_page, rule, search)
    try:
        plan = paging._plan_recalling(prep, budget, max_page, rule, query)
    except EdgeError as e:     # only where the plan without recall fails the same way
        assert isinstance(plain, EdgeError) and (e.status, e.code) == (plain.status, plain.code)
        return
    assert not isinstance(plain, EdgeError)
    assert dumps(body) == original
    assert plan.size == len(dumps(plan.body)) <= budget and plan.budget == budget
    assert_upstream_bytes(plan)
    again = paging._plan_recalling(prepared.Prepared(fmt, body, page_id_for, search=search),
                                   budget, max_page, rule, query)
    assert dumps(again.body) == dumps(plan.body)          # deterministic
    if not plan.recall:
        event("recalled none")
        assert dumps(plan.body) == dumps(plain.body)      # nothing recalled: as without it
        return
    event(f"recalled {len(plan.recall)}")
    added = len(dumps(recall.text(plan.recall))) - 2
    assert added <= recall.room(budget)
    by_id = {p.page_id: p for p in plan.pages}
    for m in plan.recall:
        page = by_id[m.page_id]                           # a page this plan sends
        starts = formats.exchange_starts(page.items) + [len(page.items)]
        exchange = page_texts(page.items[starts[m.exchange - 1]:starts[m.exchange]])
        assert [r for r, _ in exchange] == [r for r, _ in m.lines]
        for (_, whole), (_, quoted) in zip(exchange, m.lines):   # verbatim, cut with …
            assert len(quoted) <= recall.EXCERPT_MAX
            assert quoted == whole or quoted.strip("\u2026") in whole


# -- prompt cache (docs/design.md §5.7) --------------------------------------------

def _paged_items(fmt, body, plan) -> list:
    """The client's items the plan does not send (an anchored one is sent, §5.7)."""
    sent = plan.body[formats.get(fmt).ITEMS_KEY]
    ids = {id(x) for x in sent}
    blocks = getattr(formats.get(fmt), "ANCHOR_BLOCKS", ())
    return [it for it in body[formats.get(fmt).ITEMS_KEY]
            if id(it) not in ids and not any(x is not it and x == breakpoints.anchored(it, blocks)
                                             for x in sent)]


@SETTINGS
@given(scenario, st.booleans())
def test_prompt_cache_fits_where_the_seed_fits_reversibly_within_one_step(sc, recalling):
    fmt, body, items, truth, budget, page_id_for, max_page, rule, search = at_budget(sc)
    original = dumps(body)
    seed = _plain_or_error(fmt, body, budget, page_id_for, max_page, rule, search)

    def planned():
        (p,) = paging.plan_candidates(fmt, body, [budget], page_id_for, max_page_bytes=max_page,
                                      rule=rule, search=search, recalling=recalling,
                                      prompt_cache=True)
        return p
    plan = planned()
    assert dumps(body) == original
    if isinstance(seed, EdgeError):           # a 413 stays the seed's 413
        # the same figures: anchors never cause a 413 (planned without them)
        assert isinstance(plan, EdgeError) and (plan.code, plan.details) == (seed.code, seed.details)
        return
    assert not isinstance(plan, EdgeError)     # a fit stays a fit
    assert plan.size == len(dumps(plan.body)) <= budget
    assert_upstream_bytes(plan)
    assert dumps(planned().body) == dumps(plan.body)             # a pure function of the body
    if not seed.pages:
        assert dumps(plan.body) == dumps(seed.body)
        return
    mod = formats.get(fmt)
    kept = [it for it in plan.body[mod.ITEMS_KEY] if not is_recall(it)]
    restored = unpage(fmt, {**plan.body, mod.ITEMS_KEY: kept}, plan.pages, created_tools(fmt, body),
                      client=body)
    assert dumps(restored) == dumps(paging.strip_edge_fields(body))   # reversible
    check_pairs(fmt, kept, items)
    # pages more than the seed by at most one step (plus the exchange that crosses it)
    more, least = _paged_items(fmt, body, plan), _paged_items(fmt, body, seed)
    assert more[:len(least)] == least
    extra = sum(len(dumps(it)) + 1 for it in more[len(least):])
    assert extra <= paging.step_bytes(budget) + max(len(dumps(items[s:e])) for s, e, *_ in truth)
    event("stepped further" if extra else "seed's boundary")


# -- the prompt cache's anchors (docs/design.md §5.7, "Anchors") ---------------------

_CC = {"type": "ephemeral"}


def _with_client_breakpoints(fmt, body, where: list) -> dict:
    """``body`` with the client's own ``cache_control`` in each of ``where``: the
    top level, a system block, a tool's definition, a key inside a tool's input schema,
    a history item's last block."""
    body = json.loads(json.dumps(body))
    for w in where:
        if w == "top":
            body["cache_control"] = dict(_CC)
        elif w == "system" and fmt == "messages":
            body["system"] = [{"type": "text", "text": "card", "cache_control": dict(_CC)}]
        elif w == "tool_input":
            body["tools"] = [{"name": "roll", "description": "d", "input_schema": {
                "type": "object", "properties": {"cache_control": {"type": "string"}}}}]
        elif isinstance(w, int) and body.get("messages"):
            m = body["messages"][w % len(body["messages"])]
            c = m.get("content")
            if type(c) is str and c:
                m["content"] = [{"type": "text", "text": c, "cache_control": dict(_CC)}]
    return body


def _anchor_differences(fmt, client: list, sent: list, pages: list) -> list:
    """The client's items the plan sends with a breakpoint added (and nothing else).
    By identity: the plan sends the client's own objects where it changes nothing, and a
    paged item (a page holds the client's own objects) is not sent at all, even when
    equal to one sent (a repeated message: the client's own breakpoint, or the anchor
    the plan added to the later one)."""
    blocks = formats.get(fmt).ANCHOR_BLOCKS
    ids = {id(c) for c in client}
    paged = {id(it) for p in pages for it in p.items}
    made = [s for s in sent if id(s) not in ids]
    return [c for c in client if id(c) not in paged and not any(c is s for s in sent)
            and breakpoints.anchored(c, blocks) in made]


@SETTINGS
@given(scenario, st.booleans(), st.lists(st.one_of(st.sampled_from(["top", "system", "tool_input"]),
                                                   st.integers(0, 60)), max_size=5))
def test_anchors_stay_within_four_change_only_cache_control_and_never_reach_a_page(sc, recalling, where):
    fmt = "chat" if sc[0] == "responses" else sc[0]        # the formats taking breakpoints
    fmt, body, items, truth, budget, page_id_for, max_page, rule, search = at_budget((fmt, *sc[1:]))
    body = _with_client_breakpoints(fmt, body, where)
    items = body["messages"]
    theirs = breakpoints.count(dumps(body))
    original = dumps(body)

    def planned(cache, declared):
        (p,) = paging.plan_candidates(fmt, body, [budget], page_id_for, max_page_bytes=max_page,
                                      rule=rule, search=search, recalling=recalling,
                                      prompt_cache=cache, breakpoints=[declared])
        return p
    plan, plain = planned(True, True), planned(True, False)
    assert dumps(body) == original
    if isinstance(plan, EdgeError):
        assert isinstance(plain, EdgeError) and plan.details == plain.details
        return
    sent = plan.encoded()
    assert plan.size == len(sent) <= budget
    if not plan.pages:                                      # a fit: nothing added
        assert sent == plain.encoded()
        return
    assert breakpoints.count(sent) <= max(4, theirs)       # within 4, the client's first
    if fmt == "chat":                                        # without the setting: none added
        assert breakpoints.count(plain.encoded()) <= theirs
    kept = [it for it in plan.body["messages"] if not is_recall(it)]
    changed = _anchor_differences(fmt, items, kept, plan.pages)
    assert len(changed) <= 1                                # one message, by cache_control only
    # the stable prefix's last message: before recall's, else the request's last (§5.7)
    end = truth_latest_start(items, fmt) - 1 if recalling or "cache_control" in body else -1
    assert not changed or changed[0] is items[end]
    event("window anchored" if changed else "no window anchor")
    for p in plan.pages:        # pages: the client's bytes (a run of its items), no anchor's
        n = len(p.items)
        assert any(p.body == canonical_bytes(items[i:i + n]) for i in range(len(items) - n + 1))
    restored = unpage(fmt, {**plan.body, "messages": kept}, plan.pages, created_tools(fmt, body),
                      client=body)
    assert dumps(restored) == dumps(paging.strip_edge_fields(body))
    # the same without the capability: the seed's bytes, declared or not
    (a,), (b,) = (paging.plan_candidates(fmt, body, [budget], page_id_for, max_page_bytes=max_page,
                                         rule=rule, search=search, breakpoints=[d])
                  for d in (True, False))
    assert (a.encoded() if not isinstance(a, EdgeError) else a.details) == \
        (b.encoded() if not isinstance(b, EdgeError) else b.details)


def truth_latest_start(items, fmt) -> int:
    """Where the latest genuine user turn starts (docs/design.md §5.6)."""
    mod = formats.get(fmt)
    return max(i for i, it in enumerate(items) if mod.classify(it)[0] == formats.USER)
