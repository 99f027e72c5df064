"""A session past its corpus's bound (issue 45, tenth pass): recalling steady turns of
the roleplay chat at 3,000 to 6,000 exchanges on one 32k-token window.

Each size plays ``TURNS`` turns of ``bench_turn_chain``'s chain (each body the last plus
one exchange, each asking words no turn asked: ``bench_turn.new_words``) in a new
isolate (``STATE.reset()``, a new ``LastTurns``); the first is the full path and the
steady turns from ``FROM`` on are timed (those paging what the turn before paged). Beside
the median: whether the session's corpus is kept after its last turn, its bytes and
whether it is compacted (``Corpus.compact``), and whether the turn itself is kept
(``LastTurns``: a body over half its bound is not, docs/design.md §5.13). CPU time in
CPython, wall-clock in Pyodide (``node bench/pyodide_bench.mjs bench_long_chain``,
``AB_SIZES`` for other sizes).

    python bench/bench_long_chain.py [SRC]

``SRC``: the ``src`` directory of the tree to time (default: this one's).
"""

from __future__ import annotations

import gc
import json
import statistics
import sys

import timed_tree  # (this folder: the script's own, first on the path)

SRC = timed_tree.use()

import multillm_edge  # noqa: E402, F401  (first: the benches below put this tree's src on the path)
import bench_turn as bt  # noqa: E402
import bench_turn_chain as bc  # noqa: E402
from multillm_edge.core.last_turns import LastTurns  # noqa: E402
from multillm_edge.search.corpus import CORPORA  # noqa: E402

SIZES = (3000, 3500, 4500, 6000)
TURNS, FROM = bc.TURNS, bc.FROM
BUDGET = 32000 - 1024 - 256


def chain(n: int, clock) -> dict:
    """One chain of ``n`` exchanges in a new isolate: its steady turns' median (ms) and
    what is kept after it."""
    raws = bc.chain_bodies(n, True)
    bt.CACHE.clear()
    bt.STATE.reset()
    memory, fits, times = LastTurns(), [], []
    for k, raw in enumerate(raws):
        raw = raw.replace(bc.ASK, json.dumps(bt.new_words(n, k)).encode())
        gc.collect()
        t0 = clock()
        p = bt.resumed_turn(raw, BUDGET, {}, memory, True)
        dt = clock() - t0
        fits.append(p.fit.k)
        if k >= FROM and fits[-1] == fits[-2]:
            times.append(dt)
    kept = CORPORA.kept[-1] if CORPORA.kept else None
    return {"steady": statistics.median(times) * 1000 if times else float("nan"),
            "paged": fits[-1], "corpus": kept is not None,
            "corpus_mb": kept.held_bytes() / 2**20 if kept is not None else 0.0,
            "compacted": getattr(kept, "canon", None) is not None,
            "turn_kept": memory.get(bt.KEY) is not None}


def main(runtime: str = "CPython") -> int:
    clock, sizes = timed_tree.clock(runtime), timed_tree.sizes(SIZES)
    print(f"recalling steady turns past the corpus's bound — {runtime} {sys.version.split()[0]}, "
          f"{SRC} (ms, medians of the steady turns of one chain)")
    print("| exchanges | paged | steady turn | corpus kept | its MB | compacted | turn kept |")
    print("|---:|---:|---:|---|---:|---|---|")
    for n in sizes:
        r = chain(n, clock)
        print(f"| {n:,} | {r['paged']:,} | {r['steady']:.1f} | {'yes' if r['corpus'] else 'no'} | "
              f"{r['corpus_mb']:.1f} | {'yes' if r['compacted'] else 'no'} | {'yes' if r['turn_kept'] else 'no'} |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
