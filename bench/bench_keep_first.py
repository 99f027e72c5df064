"""A session's first turn in an isolate, kept for the next (issue 45, tenth pass).

``bench_turn``'s "new isolate" rows time the request boundary, the plan, the upstream
bytes and the annotation; a Worker's first turn of a session in an isolate then keeps
it (``resume.keep``, docs/design.md §5.13): its groups' items counted
(``last_turns.group_sizes``), its bytes verified, its entry made. This times that keep
alone, after a full-path turn of the roleplay chat (32k window, the prompt cache
declared), and the whole turn with it. CPU time in CPython, wall-clock in Pyodide
(``node bench/pyodide_bench.mjs bench_keep_first``). Usage:

    python bench/bench_keep_first.py [SRC]

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
from multillm_edge.core import paging, resume  # noqa: E402
from multillm_edge.core.last_turns import LastTurns  # noqa: E402

SIZES = (200, 800, 3000)
ROUNDS = 9
BUDGET = 32000 - 1024 - 256


def first_turn(n: int, clock) -> tuple:
    """(the whole first turn, its keep alone), seconds, one round."""
    body = bt.roleplay_body(n)
    body["capabilities"] = bt.CACHE_CAPS
    raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    memory = LastTurns()
    gc.collect()
    t0 = clock()
    b, prior = resume.parse_request(memory, bt.KEY, "chat", raw)
    (p,) = paging.plan_candidates("chat", b, [BUDGET], bt.SIGNER.page_ids("roleplay", bt.PRINCIPAL, bt.SESSION,
                                                                          bt.REVISION),
                                  strip=paging.EDGE_FIELDS, prompt_cache=True, prior=prior)
    p.encoded("provider-model")
    t1 = clock()
    resume.keep(memory, bt.KEY, raw, b, prior)
    t2 = clock()
    assert memory.get(bt.KEY) is not None
    return t2 - t0, t2 - t1


def main(runtime: str = "CPython") -> int:
    clock, sizes = timed_tree.clock(runtime), timed_tree.sizes(SIZES)
    print(f"a session's first turn in an isolate, kept — {runtime} {sys.version.split()[0]}, {SRC} "
          f"(ms, medians of {ROUNDS})")
    print("| exchanges | turn with its keep | of which the keep |\n|---:|---:|---:|")
    for n in sizes:
        runs = [first_turn(n, clock) for _ in range(ROUNDS)]
        whole, keep = (statistics.median(r[i] for r in runs) * 1000 for i in (0, 1))
        print(f"| {n:,} | {whole:.2f} | {keep:.2f} |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
