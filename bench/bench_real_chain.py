"""A long real chat as a session's recalling steady turns (issue 45, eighth pass).

The five LoCoMo conversations of ``bench_recall.py``'s set (read in place; skipped when
absent), said one after another as one chat (~1,300 exchanges paged on a 32k-token
window), each turn asking one of their questions and answered with one exchange: the
chain of ``bench_turn_chain.py`` on real text, whose exchanges ask questions of their
own (recall's ``_asked``) where the synthetic chat's never do. Each round plays
``TURNS`` turns in a new ``LastTurns``, the recall state kept between rounds; the
steady turns from ``FROM`` on are timed (CPU time in CPython, wall-clock in Pyodide:
``node bench/pyodide_bench.mjs bench_real_chain``, this tree only). ``--analyses-bytes N``
bounds the analyses cache (``docs.CACHE``) at N bytes: a chat past its bound, as a
3,000-exchange one is at 14 MiB. ``--exchanges N`` says the chat's first N exchanges,
the five chats said again from the first as often as it takes (so that one kind of
text is timed at several lengths; ``AB_SIZES=400,1300,2600`` in Pyodide, one run a
size).

    python bench/bench_real_chain.py [SRC] [--analyses-bytes N] [--exchanges N]

``SRC``: the ``src`` directory of the tree to time (default: this one's), so that two
trees are compared by alternating runs.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys

import timed_tree  # (this folder: the script's own, first on the path)

SRC = timed_tree.use()

import multillm_edge  # noqa: E402  (first: the benches below put this tree's src on the path)
import bench_recall  # noqa: E402
import bench_turn as bt  # noqa: E402
from multillm_edge.core.last_turns import LastTurns  # noqa: E402
from multillm_edge.search import docs  # noqa: E402
from multillm_edge.search.corpus import CORPORA  # noqa: E402

TURNS, FROM, ROUNDS = 8, 3, 12
BUDGET = 32000 - 1024 - 256


def chat(exchanges: int = 0) -> tuple:
    """(the conversations' messages as one chat, their questions); ``exchanges``: that
    many, the conversations said again from the first as often as it takes."""
    msgs, questions = [{"role": "system", "content": "They talk."}], []
    convs = [conv for _, conv in bench_recall.locomo_conversations()]
    for i, conv in enumerate(convs * 16):
        if (i >= len(convs) and not exchanges) or (exchanges and len(msgs) > 2 * exchanges + 1):
            break
        body, _ = bench_recall.locomo_body(conv)
        for m in body["messages"][1:]:
            if msgs[-1]["role"] == m["role"]:
                msgs[-1]["content"] += "\n" + m["content"]
            else:
                msgs.append(dict(m))
        questions += [q["question"] for q in conv["qa"] if q.get("category") in bench_recall.CATEGORIES]
    if exchanges:
        del msgs[2 * exchanges + 1:]
    if msgs[-1]["role"] == "user":
        msgs.pop()
    return msgs, questions


def bodies(msgs: list, questions: list, r: int) -> list:
    """Round ``r``'s ``TURNS`` bodies: each asks its own question, then gets an answer."""
    out = []
    for i in range(TURNS):
        ask = {"role": "user", "content": questions[(r * TURNS + i) % len(questions)]}
        out.append(json.dumps({"model": "bench:rp", "max_tokens": 1024, "messages": msgs + [ask],
                               "capabilities": bt.CACHE_CAPS + ["multillm_context_recall"]},
                              ensure_ascii=False, separators=(",", ":")).encode())
        msgs = msgs + [ask, {"role": "assistant", "content": f"I remember, {i}."}]
    return out


def main(runtime: str = "CPython") -> int:
    clock = timed_tree.clock(runtime)
    assert os.path.dirname(multillm_edge.__file__).startswith(SRC), multillm_edge.__file__
    if not bench_recall.locomo_conversations():
        print(f"real chain: LoCoMo not found at {bench_recall.LOCOMO}: skipped")
        return 0
    exchanges = [int(x) for x in os.environ.get("AB_SIZES", "").split(",") if x]
    for a in sys.argv[1:]:
        if a.startswith("--analyses-bytes="):
            docs.CACHE.max_bytes = int(a.split("=", 1)[1])
        if a.startswith("--exchanges="):
            exchanges = [int(a.split("=", 1)[1])]
    for n in exchanges or [0]:
        CORPORA.clear()
        docs.CACHE.clear()
        one(clock, runtime, n)
    return 0


def one(clock, runtime: str, exchanges: int) -> None:
    """Time the steady recalling turns of the chat of ``exchanges`` (0: the five once)."""
    msgs, questions = chat(exchanges)
    figures = {"active_bytes": 1, "limit_bytes": 1048576, "active_pages": 1}
    times, paged = [], 0
    for r in range(ROUNDS):
        memory, fits = LastTurns(), []
        for k, raw in enumerate(bodies(msgs, questions, r)):
            gc.collect()
            t0 = clock()
            p = bt.resumed_turn(raw, BUDGET, figures, memory, True)
            dt = clock() - t0
            fits.append(p.fit.k)
            if r and k >= FROM and fits[-1] == fits[-2]:
                times.append(dt)
        paged = fits[-1]
    corpus = CORPORA.kept[-1].held_bytes() if CORPORA.kept else 0
    what = "CPU time" if runtime == "CPython" else "wall-clock"
    print(f"real chain, {runtime} ({SRC}): {len(msgs) // 2} exchanges, {paged} paged; analyses cache "
          f"{docs.CACHE.max_bytes:,} bytes; steady recalling turn {statistics.median(times) * 1000:.2f} ms "
          f"(median of {len(times)}, {what}); corpus {corpus / 1e6:.2f} MB")


if __name__ == "__main__":
    sys.exit(main())
