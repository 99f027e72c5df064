"""Would a recall room that scales with what the turn adds close the cache gap?
(issue 38 §4; docs/design.md §5.7, §6.2)

With the prompt cache and recall, a turn's uncached tail is what it adds (the last
exchange and the new user turn) plus recall's moments, which change every turn. The
room today is what the step leaves, up to 15 % of the budget (``recall.SHARE``). The
variant caps the moments so that the tail stays within ``LINE`` of the budget:
``room = min(today's room, LINE × budget − what the turn adds)`` (at least 0, or at
least a third of today's room: one moment's share).

Reported for both rooms: on the shared set (Messages, the client setting no
breakpoint) the share of paged turns whose byte prefix is ≥ 0.9 and what Anthropic
serves (bench_cache's replay); the same on the synthetic corpus, whose long exchanges
stand for conversations where moments take more room; and auto-recall@3 on each set's
questions with the prompt cache declared (target ≥ 0.70 on the shared set). Usage:
``LOCOMO_ZIP=… python bench/bench_recall_room.py [--quick]``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys

import bench_cache as bc
import bench_recall as br
from multillm_edge.core import paging, recall

LINE = 0.10          # a turn sharing ≥ 90 % adds at most 10 % (the byte-prefix line)


def added(prep) -> int:
    """Bytes the turn adds to the last one: its latest exchange and the group before."""
    last = prep.latest if prep.latest is not None else len(prep.groups) - 1
    return sum(n + 1 for n in prep.inner[max(last - 1, 0):])


def scaled(prep, budget, max_page_bytes, rule, query, anch=None, floor: bool = False):
    """``paging._plan_recalling_cached`` with the room capped by what the turn adds
    (``floor``: never under one moment's share of today's room)."""
    plan = paging._plan(prep, budget, max_page_bytes, rule, step=paging.step_bytes(budget),
                        anch=anch)
    if plan.fit is None or not query:
        return plan
    least = paging._recall_room(budget) // recall.MAX_MOMENTS if floor else 0
    room = min(paging._recall_room(budget), budget - plan.size,
               max(least, int(LINE * budget) - added(prep)))
    moments = recall.choose(query, paging._paged_exchanges(prep, plan.fit), None, room, paging._recall_size)
    if moments:
        paging._quote(prep, plan, moments)
    return plan


def cache_figures(convs: list) -> dict:
    """Mean share of paged turns ≥ 0.9, byte prefix and Anthropic served (Messages, recall)."""
    got = [bc.replay_anthropic(body, bc.ANTHROPIC["messages, recall"], limit)
           for _, _, fmt, body, limit in convs if fmt == "chat"]
    hits = [bc.replay("messages", bc.as_messages(body), (True, True, True), limit)["turns >= 0.9"]
            for _, _, fmt, body, limit in convs if fmt == "chat"]
    return {"turns >= 0.9": statistics.fmean(hits),
            "anthropic": statistics.fmean(g["anthropic"] for g in got)}


def auto_recall(cases: list) -> tuple:
    """auto-recall@3 as bench_recall measures it, the prompt cache declared, and the share
    of those questions recalling nothing."""
    ids = br.SIGNER.page_ids("roleplay", br.PRINCIPAL, br.SESSION, br.REVISION)
    got = n = nothing = 0
    for fmt, body, needles in cases:
        (plan,) = paging.plan_candidates(fmt, body, [br.BUDGET], ids, recalling=True,
                                         prompt_cache=True)
        docs = [t for p in plan.pages for t in br.exchange_docs([p.items])]
        if not any(br.holds(d, needles) for d in docs):
            continue
        n += 1
        nothing += not plan.recall
        got += any(br.holds(br.moment_texts(plan, m), needles) for m in plan.recall)
    return got / max(n, 1), nothing / max(n, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    convs = bc.conversations(args.quick)
    cases = {"shared": br.locomo_recall_cases(br.locomo_conversations()),
             "synthetic": br.synthetic_recall_cases()}
    today = paging._plan_recalling_cached
    print("| room | set | turns >= 0.9 | anthropic | auto-recall@3 | recalling nothing |")
    print("|---|---|---:|---:|---:|---:|")
    try:
        for name, how in (("today (≤ 15 % of the budget)", today),
                          (f"scaled (≤ {LINE:.0%} of the budget less what the turn adds)", scaled),
                          ("scaled, at least one moment's third of today's room",
                           functools.partial(scaled, floor=True))):
            paging._plan_recalling_cached = how
            for which in ("shared", "synthetic"):
                figs = cache_figures([c for c in convs if c[0] == which])
                hit, nothing = auto_recall(cases[which]) if cases[which] else (float("nan"),) * 2
                print(f"| {name} | {which} | {figs['turns >= 0.9']:.3f} | {figs['anthropic']:.3f} | "
                      f"{hit:.3f} | {nothing:.3f} |")
    finally:
        paging._plan_recalling_cached = today
    return 0


if __name__ == "__main__":
    sys.exit(main())
