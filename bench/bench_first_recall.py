"""Where a new isolate's first recall goes, step by step (issue 45).

The turn ``bench_turn_chain`` calls "turn + recall, new isolate" (the roleplay chat, a
question about port n/10, every memo emptied first: no analysis, no stem, no corpus),
run with each step of recall wrapped in a timer that adds up its calls' time; beside it
the same turn without recall. Times are inclusive (a step's figure holds those of the
steps it calls) and the wrappers add their own (~1 µs a call: the per-exchange steps,
756 calls at 800 exchanges, read ~1 ms high). Medians of ``RUNS`` rounds. Usage:
``python bench/bench_first_recall.py`` or ``node bench/pyodide_bench.mjs
bench_first_recall`` (``AB_SIZES=200`` for another size; 800 by default; ``AB_CHAT=ru``
for the same chat in Russian, ``bench_paging.roleplay_body_ru``).
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import bench_turn as bt  # noqa: E402
from bench_paging import roleplay_body_ru  # noqa: E402
from multillm_edge.core import paging, recall  # noqa: E402
from multillm_edge.search import docs, ranker, stems  # noqa: E402

RUNS = 7
ACC: dict = {}


def wrap(owner, name: str, label: str) -> None:
    """Replace ``owner.name`` by the same callable adding its time to ``ACC[label]``."""
    f = getattr(owner, name)
    clock = time.perf_counter

    def timed(*a, **k):
        t0 = clock()
        try:
            return f(*a, **k)
        finally:
            ACC[label] = ACC.get(label, 0.0) + clock() - t0
    setattr(owner, name, timed)


STEPS = [
    (paging, "_plan_recalling", "plan with recall (all of it)"),
    (paging, "_paged_kept", "  the paged exchanges listed"),
    (recall, "rank", "  ranking (search.rank)"),
    (recall._Texts, "__getitem__", "    each exchange's texts"),
    (ranker, "analyses", "    analyses"),
    (docs, "analyze", "      each analysed"),
    (docs, "fold_utf8", "        fold"),
    (docs, "_index", "        index"),
    (docs, "word_bag", "          words cut"),
    (docs, "counts", "          words counted"),
    (docs, "Index", "          index sized"),
    (stems.Stems, "known", "          words registered"),
    (docs.Cache, "keep", "      kept in the cache"),
    (ranker.CORPORA.__class__, "of", "    corpus made"),
    (ranker, "_tfs", "    terms' counts (postings)"),
    (ranker, "_scores", "    scores (passages too)"),
    (ranker, "passages", "      passages"),
]


def main(runtime: str = "CPython") -> int:
    n = int(os.environ.get("AB_SIZES", "").split(",")[0] or 800)
    for owner, name, label in STEPS:
        wrap(owner, name, label)
    budget = max(32000, 100 * n) - 1024 - 256
    russian = os.environ.get("AB_CHAT") == "ru"
    body = (roleplay_body_ru if russian else bt.roleplay_body)(n)
    body["messages"][-1]["content"] = (f"*хмурится* Снова порт {n // 10}? Что там пели киты?" if russian else
                                       f"*frowns* Port {n // 10} again? What did the whales sing there?")
    raws = {}
    for recalling in (True, False):
        body["capabilities"] = ["multillm_context_retrieve"] + (["multillm_context_recall"] if recalling else [])
        raws[recalling] = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    figures = {"active_bytes": 1, "limit_bytes": 1048576, "active_pages": 1}
    turns: dict = {True: [], False: []}
    steps: dict = {}
    for r in range(RUNS + 1):
        for recalling in (True, False):
            bt.CACHE.clear()
            bt.STATE.reset()
            gc.collect()
            ACC.clear()
            t0 = time.perf_counter()
            bt.one_turn(raws[recalling], budget, figures, recalling)
            if r:
                turns[recalling].append(time.perf_counter() - t0)
                if recalling:
                    for k, v in ACC.items():
                        steps.setdefault(k, []).append(v)
    with_recall, without = (statistics.median(turns[x]) * 1000 for x in (True, False))
    print(f"a new isolate's first recall, {n:,} exchanges{', Russian chat' if russian else ''} — {runtime} {sys.version.split()[0]} "
          f"(ms, wall-clock, medians of {RUNS}, steps wrapped)")
    print(f"turn + recall {with_recall:.1f}, turn {without:.1f}, ratio {with_recall / without:.2f}")
    print("| step (inclusive) | ms |\n|---|---:|")
    for _, _, label in STEPS:
        if label in steps:
            step = label.strip()
            print(f"| {'· ' * ((len(label) - len(step)) // 2)}{step} | {statistics.median(steps[label]) * 1000:.2f} |")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
