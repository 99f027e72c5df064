"""What a provider's prompt cache can serve, turn by turn (issue 33, docs/design.md §5.7).

Each conversation is replayed as a client sends it: turn t is the history up to its
t-th user message, planned for one 32k-token model (bench_recall's budget). The figure
is the byte prefix turn t's upstream request shares with turn t-1's, as a share of turn
t's bytes: what an automatic prefix cache (OpenAI, DeepSeek, Gemini; Anthropic with a
breakpoint after it) can serve. Figures are over the turns the method pages (or trims).

Methods: the client trims its oldest exchanges itself (what a frontend does without the
edge: the edge's compaction is that rule), the edge's paging (seed rule), each with and
without recall, and the paging with ``multillm_context_prompt_cache``.

Per conversation: the prefix share (median, mean, share of turns ≥ 0.9), the window fill
(upstream bytes over the budget, mean), pages written and R2 puts per turn (a page is
written the first turn that sends it), and the input cost relative to no caching under
two price models — Anthropic (read 0.1×, write 1.25×: what is not read is written) and
OpenAI (read 0.5×) — counting a prefix only from 1,024 bytes (the providers' minimum,
bytes as tokens). Then the trade curve: the step's share of the budget against the
share of turns ≥ 0.9 and the fill.

Data: the shared LoCoMo conversations (``../shared/data``, read in place) in all three
formats, and the synthetic corpus (bench/recall_corpus.py). Usage:
``python bench/bench_cache.py [--quick] [--check]`` (``--quick``: the first two
conversations and the synthetic ones' first 120 turns; ``--check``: exit 1 when the prompt-cache
targets of docs/design.md §5.7 are missed on the shared set).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
for path in (SRC, HERE, os.path.dirname(HERE)):     # the repository too: devkit
    if os.path.isdir(path) and path not in sys.path:
        sys.path.insert(0, path)

import anthropic_cache  # noqa: E402
import recall_corpus  # noqa: E402
from bench_paging import PRINCIPAL, REVISION, SESSION, SIGNER  # noqa: E402
from bench_recall import BUDGET, locomo_body, locomo_conversations  # noqa: E402
from multillm_edge import formats  # noqa: E402
from multillm_edge.base.jsonbytes import compact  # noqa: E402
from multillm_edge.core import compaction, paging  # noqa: E402
from devkit import roleplay as rp  # noqa: E402

MIN_PREFIX = 1024          # bytes (as tokens): the smallest prefix a provider caches
PRICES = {"anthropic": (0.1, 1.25), "openai": (0.5, 1.0)}   # (read, uncached/written)
METHODS = {                 # name -> (paging, recalling, prompt_cache)
    "client trims": (False, False, False),
    "paging": (True, False, False),
    "paging + recall": (True, True, False),
    "prompt cache": (True, False, True),
    "prompt cache + recall": (True, True, True),
}
STEPS = (0.05, 0.10, 0.15, 0.20, 0.25, 0.30)
TARGETS = {"turns >= 0.9": 0.90, "fill": 0.80, "fill (no recall)": 0.85, "cost (anthropic)": 0.25}


def rendered(fmt: str, plan) -> bytes:
    """The upstream body in the order a provider renders its prompt — everything but the
    history (tools, system, settings), then the history — so the history's end is the
    prompt's end, as a provider's cache sees it (JSON key order is not prompt order).
    Cache breakpoints are taken out (``unmarked``): they mark the prompt, they are not
    in it, so the byte prefix is what the content shares."""
    key = formats.get(fmt).ITEMS_KEY
    body = unmarked(plan.body, key)
    return (compact({k: v for k, v in body.items() if k != key})
            + compact(body.get(key, [])))


def _unmarked_item(m):
    if type(m) is not dict or type(m.get("content")) is not list:
        return m
    c = [anthropic_cache._plain(b) for b in m["content"]]
    if len(c) == 1 and type(c[0]) is dict and set(c[0]) == {"type", "text"} and c[0]["type"] == "text":
        c = c[0]["text"]          # one text block is its string, to Anthropic as to the edge
    return {**m, "content": c}


def unmarked(body: dict, key: str) -> dict:
    """``body`` without ``cache_control`` (top level, tools, system, content blocks)."""
    out = {k: v for k, v in body.items() if k != "cache_control"}
    for field in ("tools", "system"):
        if type(out.get(field)) is list:
            out[field] = [anthropic_cache._plain(b) for b in out[field]]
    if type(out.get(key)) is list:
        out[key] = [_unmarked_item(m) for m in out[key]]
    return out


def shared_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix of ``a`` and ``b`` (slice compares: C speed)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


# -- conversations in three formats -----------------------------------------------

def as_responses(chat: dict) -> dict:
    items, instructions = [], None
    for m in chat["messages"]:
        if m["role"] == "system":
            instructions = m["content"]
        elif m["role"] == "user":
            items.append({"role": "user", "content": m["content"]})
        else:
            items.append({"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": m["content"]}]})
    return {"model": chat["model"], "instructions": instructions, "input": items,
            "max_output_tokens": chat["max_tokens"]}


def as_messages(chat: dict) -> dict:
    system = [m["content"] for m in chat["messages"] if m["role"] == "system"]
    msgs = [m for m in chat["messages"] if m["role"] != "system"]
    return {"model": chat["model"], "system": "\n".join(system), "messages": msgs,
            "max_tokens": chat["max_tokens"]}


def conversations(quick: bool = False) -> list:
    """[(set, name, format, body, turns)]: the shared set in three formats, then the
    synthetic corpus (its three conversations, one format each; ``quick``: fewer)."""
    out = []
    real = locomo_conversations()[:2 if quick else None]
    for name, conv in real:
        chat, _ = locomo_body(conv)
        for fmt, body in (("chat", chat), ("responses", as_responses(chat)),
                          ("messages", as_messages(chat))):
            out.append(("shared", name, fmt, body, None))
    for fmt, body, _ in recall_corpus.corpus():
        out.append(("synthetic", "synthetic", fmt, body, 120 if quick else None))
    return out


def turns(fmt: str, body: dict, limit: int | None = None):
    """Each turn's body: the history up to and including its t-th genuine user message
    (the first ``limit`` turns)."""
    mod = formats.get(fmt)
    items = body[mod.ITEMS_KEY]
    starts = [i for i, it in enumerate(items) if mod.classify(it)[0] == formats.USER]
    for t in starts[1:limit]:
        yield {**body, mod.ITEMS_KEY: items[:t + 1]}


# -- one replay --------------------------------------------------------------------

def plan_turn(fmt: str, body: dict, method: tuple):
    paged, recalling, cache = method
    if not paged:
        (plan,) = compaction.compact_candidates(fmt, body, [BUDGET])
        return plan, bool(plan.dropped)
    ids = SIGNER.page_ids("roleplay", PRINCIPAL, SESSION, REVISION)
    (plan,) = paging.plan_candidates(fmt, body, [BUDGET], ids, recalling=recalling,
                                     prompt_cache=cache)
    return plan, bool(plan.pages)


def replay(fmt: str, body: dict, method: tuple, limit: int | None = None) -> dict:
    """The figures of one method on one conversation (over the turns it pages)."""
    shares, fills, costs, pages, puts = [], [], {k: [0.0, 0] for k in PRICES}, [], []
    written, before = set(), None
    for b in turns(fmt, body, limit):
        plan, active = plan_turn(fmt, b, method)
        sent = rendered(fmt, plan)
        new = [p for p in plan.pages if p.page_id not in written]
        written.update(p.page_id for p in new)
        if active and before is not None:
            prefix = shared_prefix(before, sent)
            shares.append(prefix / len(sent))
            fills.append(len(sent) / BUDGET)
            pages.append(len(new))
            puts.append(1 if new else 0)
            cached = prefix if prefix >= MIN_PREFIX else 0
            for k, (read, write) in PRICES.items():
                costs[k][0] += read * cached + write * (len(sent) - cached)
                costs[k][1] += len(sent)
        before = sent
    if not shares:
        return {}
    return {"turns": len(shares), "median": statistics.median(shares),
            "mean": statistics.fmean(shares),
            "turns >= 0.9": sum(s >= 0.9 for s in shares) / len(shares),
            "fill": statistics.fmean(fills),
            "pages/turn": statistics.fmean(pages), "puts/turn": statistics.fmean(puts),
            **{f"cost ({k})": c / max(n, 1) for k, (c, n) in costs.items()}}


# -- what Anthropic serves (anthropic_cache.py) -------------------------------------

#: name -> (format, recall, the client's top-level cache_control). Chat goes to a provider
#: whose PROVIDERS entry declares ``cache_breakpoints`` (a router to Claude). All with the
#: prompt-cache capability; the client sets no block breakpoint.
ANTHROPIC = {
    "messages, recall": ("messages", True, False),
    "messages, recall, top-level": ("messages", True, True),
    "messages": ("messages", False, False),
    "messages, top-level": ("messages", False, True),
    "chat (cache_breakpoints), recall": ("chat", True, False),
    "chat (cache_breakpoints)": ("chat", False, False),
}
A_COLUMNS = ("turns", "byte prefix", "anthropic", "gap", "cost (anthropic)", "max blocks added",
             "max breakpoints")
A_TARGETS = {"anthropic": 0.85, "gap": 0.03, "cost (anthropic)": 0.25}


def replay_anthropic(chat: dict, case: tuple, limit: int | None = None) -> dict:
    """One conversation (given as chat) on one ``ANTHROPIC`` case: per paged turn, the
    byte prefix shared with the last turn and what the model of Anthropic's cache serves
    (shares of the turn's prompt), its input cost against uncached, and the most blocks
    one turn adds (over ``anthropic_cache.LOOKBACK``, a read could miss last turn's entry)."""
    fmt, recalling, top = case
    body = as_messages(chat) if fmt == "messages" else chat
    if top:
        body = {**body, "cache_control": {"type": "ephemeral"}}
    ids = SIGNER.page_ids("roleplay", PRINCIPAL, SESSION, REVISION)
    cache, prefix, served, cost, total, grew, marks = anthropic_cache.Cache(), [], [], 0.0, 0, [], 0
    before = None
    for b in turns(fmt, body, limit):
        (plan,) = paging.plan_candidates(fmt, b, [BUDGET], ids, recalling=recalling,
                                         prompt_cache=True, breakpoints=[True])
        got = cache.turn(plan.body)
        sent, n = rendered(fmt, plan), len(anthropic_cache.blocks(plan.body))
        if plan.pages and before is not None:
            prefix.append(shared_prefix(before[0], sent) / len(sent))
            served.append(got["served"] / got["total"])
            cost, total = cost + got["cost"], total + got["total"]
            grew.append(n - before[1])
            marks = max(marks, got["breakpoints"])
        before = (sent, n)
    if not served:
        return {}
    p, a = statistics.fmean(prefix), statistics.fmean(served)
    return {"turns": len(served), "byte prefix": p, "anthropic": a, "gap": p - a,
            "cost (anthropic)": cost / total, "max blocks added": max(grew),
            "max breakpoints": marks}


def anthropic_rows(convs: list) -> list:
    """[(set, name, case, figures)] over the conversations given in chat."""
    return [(s, name, case, replay_anthropic(body, spec, limit))
            for s, name, fmt, body, limit in convs if fmt == "chat"
            for case, spec in ANTHROPIC.items()]


def anthropic_table(rows: list) -> None:
    print("| conversation | case | " + " | ".join(A_COLUMNS) + " |")
    print("|---|---|" + "---:|" * len(A_COLUMNS))
    for name, case, r in rows:
        cells = [f"{r[c]:.0f}" if c in ("turns", "max blocks added", "max breakpoints")
                 else f"{r[c]:.2f}" for c in A_COLUMNS]
        print(f"| {name} | {case} | " + " | ".join(cells) + " |")


def anthropic_means(rows: list, which: str) -> dict:
    out = {}
    for case in ANTHROPIC:
        got = [r for s, _, c, r in rows if s == which and c == case and r]
        if got:
            out[case] = {c: (max if c.startswith("max") else statistics.fmean)(r[c] for r in got)
                         for c in A_COLUMNS}
    return out


def anthropic_misses(means: dict) -> list:
    """The issue-38 targets (docs/design.md §5.7) the shared set misses: with recall, the
    client setting no breakpoint, on Messages and on chat to a cache_breakpoints provider."""
    out = []
    for case in ("messages, recall", "chat (cache_breakpoints), recall"):
        r = means[case]
        if r["anthropic"] < A_TARGETS["anthropic"]:
            out.append(f"{case}: anthropic")
        if abs(r["gap"]) > A_TARGETS["gap"]:
            out.append(f"{case}: gap")
        if r["cost (anthropic)"] > A_TARGETS["cost (anthropic)"]:
            out.append(f"{case}: cost")
    return out


def anchor_choice(convs: list) -> list:
    """Without recall, where the window's anchor reads back best (§5.7, measured, not
    assumed): [(case, where, anthropic, cost)] with the anchor on the message before the
    latest turn and on the request's last message (the edge's rule)."""
    real, out = paging._anchors.of, []
    before = lambda prep, _: real(prep, prep.latest - 1 if prep.latest else -1)   # noqa: E731
    try:
        for where, of in (("the message before the latest turn", before), ("the request's last", real)):
            paging._anchors.of = of
            for case in ("messages", "chat (cache_breakpoints)"):
                got = [r for r in (replay_anthropic(body, ANTHROPIC[case], limit)
                                   for _, _, fmt, body, limit in convs if fmt == "chat") if r]
                out.append((case, where, statistics.fmean(r["anthropic"] for r in got),
                            statistics.fmean(r["cost (anthropic)"] for r in got)))
    finally:
        paging._anchors.of = real
    return out


COLUMNS = ("turns", "median", "mean", "turns >= 0.9", "fill", "pages/turn", "puts/turn",
           "cost (anthropic)", "cost (openai)")


def table(rows: list) -> None:
    print("| conversation | format | method | " + " | ".join(COLUMNS) + " |")
    print("|---|---|---|" + "---:|" * len(COLUMNS))
    for name, fmt, method, r in rows:
        cells = [f"{r[c]:.0f}" if c == "turns" else f"{r[c]:.2f}" for c in COLUMNS]
        print(f"| {name} | {fmt} | {method} | " + " | ".join(cells) + " |")


def summary(rows: list, which: str) -> dict:
    """Per method, the mean over the conversations of ``which`` set."""
    out = {}
    for method in METHODS:
        got = [r for s, _, _, m, r in rows if s == which and m == method and r]
        if got:
            out[method] = {c: statistics.fmean(r[c] for r in got) for c in COLUMNS}
    return out


def curve(convs: list) -> list:
    """[(step share, recall, turns >= 0.9, fill, cost (anthropic))] on ``convs``."""
    keep, out = paging.STEP_SHARE, []
    try:
        for share in STEPS:
            paging.STEP_SHARE = share
            for recalling in (False, True):
                got = [replay(fmt, body, (True, recalling, True), limit)
                       for _, _, fmt, body, limit in convs]
                got = [g for g in got if g]
                out.append((share, recalling, statistics.fmean(g["turns >= 0.9"] for g in got),
                            statistics.fmean(g["fill"] for g in got),
                            statistics.fmean(g["cost (anthropic)"] for g in got)))
    finally:
        paging.STEP_SHARE = keep
    return out


def misses(means: dict) -> list:
    """The prompt-cache targets (docs/design.md §5.7) the shared set's means miss."""
    withr, without = means["prompt cache + recall"], means["prompt cache"]
    checks = [("turns >= 0.9", withr["turns >= 0.9"] >= TARGETS["turns >= 0.9"]),
              ("fill", withr["fill"] >= TARGETS["fill"]),
              ("fill (no recall)", without["fill"] >= TARGETS["fill (no recall)"]),
              ("cost (anthropic)", withr["cost (anthropic)"] <= TARGETS["cost (anthropic)"])]
    return [name for name, ok in checks if not ok]


def anchor_cpu(exchanges: int = 1500, rounds: int = 15) -> tuple:
    """CPU of one prompt-cache plan with and without the anchors (chat, the provider
    declaring ``cache_breakpoints`` or not), best of ``rounds``: (without, with) seconds."""
    items = [m for i in range(exchanges) for m in rp.long_exchange(i)]
    body = {"model": "bench:rp", "messages": [{"role": "system", "content": rp.CARD}, *items,
                                               {"role": "user", "content": "Onward?"}],
            "max_tokens": 1024}
    best = {False: float("inf"), True: float("inf")}
    for _ in range(rounds):
        for declared in best:
            ids = SIGNER.page_ids("roleplay", PRINCIPAL, SESSION, REVISION)
            t = time.process_time()
            paging.plan_candidates("chat", body, [4 * BUDGET], ids, prompt_cache=True,
                                   breakpoints=[declared])
            best[declared] = min(best[declared], time.process_time() - t)
    return best[False], best[True]


def prefix_report(convs: list) -> list:
    """The byte-prefix table and its means; the targets the shared set misses."""
    rows = [(s, name, fmt, method, replay(fmt, body, spec, limit))
            for s, name, fmt, body, limit in convs for method, spec in METHODS.items()]
    print(f"## Prompt cache, turn by turn (budget {BUDGET} bytes, step "
          f"{paging.STEP_SHARE:.0%} of it)\n")
    table([(name, fmt, m, r) for _, name, fmt, m, r in rows if r])
    failed = []
    for which in ("shared", "synthetic"):
        means = summary(rows, which)
        if means:
            print(f"\n### Mean over the {which} conversations\n")
            table([("all", "all", m, r) for m, r in means.items()])
            failed += misses(means) if which == "shared" else []
    return failed


def anthropic_report(convs: list) -> list:
    """What Anthropic serves, per conversation and on average, and where the anchor goes
    without recall; the issue-38 targets the shared set misses."""
    a_rows = anthropic_rows(convs)
    print("\n## What Anthropic serves (a model of its cache: anthropic_cache.py), "
          "prompt cache on, per conversation\n")
    anthropic_table([(name, c, r) for _, name, c, r in a_rows if r])
    failed = []
    for which in ("shared", "synthetic"):
        means = anthropic_means(a_rows, which)
        if means:
            print(f"\n### Mean over the {which} conversations\n")
            anthropic_table([("all", c, r) for c, r in means.items()])
            failed += anthropic_misses(means) if which == "shared" else []
    shared = [c for c in convs if c[0] == "shared"] or convs
    print("\n### Without recall: where the window's anchor goes (mean over the shared set)\n")
    print("| case | anchor on | anthropic | cost (anthropic) |\n|---|---|---:|---:|")
    for case, where, served, cost in anchor_choice(shared):
        print(f"| {case} | {where} | {served:.3f} | {cost:.3f} |")
    return failed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--no-curve", action="store_true")
    ap.add_argument("--anthropic-only", action="store_true",
                    help="only what Anthropic serves (and the anchor's placement)")
    ap.add_argument("--cpu", action="store_true", help="only the anchors' CPU cost")
    args = ap.parse_args(argv)
    if args.cpu:
        plain, anchored = anchor_cpu()
        print(f"prompt-cache plan, chat, 1,500 ~1.9 KB exchanges, 126k-byte budget (CPU, best "
              f"of 15): without anchors {plain * 1e3:.1f} ms, with {anchored * 1e3:.1f} ms, "
              f"ratio {anchored / plain:.2f}")
        return 0
    convs = conversations(args.quick)
    if not any(s == "shared" for s, *_ in convs):
        print("bench_cache: ../shared/data/locomo-dev.zip is absent; the synthetic corpus only")
    failed = [] if args.anthropic_only else prefix_report(convs)
    failed += anthropic_report(convs)
    if not (args.no_curve or args.anthropic_only):
        shared = [c for c in convs if c[0] == "shared"] or convs
        print("\n### Trade curve (prompt cache, the shared set): step against cache and fill\n")
        print("| step (share of budget) | recall | turns >= 0.9 | fill | cost (anthropic) |")
        print("|---:|---|---:|---:|---:|")
        for share, recalling, hit, fill, cost in curve(shared):
            print(f"| {share:.2f} | {'yes' if recalling else 'no'} | {hit:.2f} | {fill:.2f} | {cost:.2f} |")
    if failed:
        print(f"\ntargets missed: {', '.join(failed)}")
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())
