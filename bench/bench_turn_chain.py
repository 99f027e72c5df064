"""A production session's steady turn (issue 45): the 2nd, 3rd, … turn resumed in a chain.

``bench_turn``'s steady rows time the second turn of a pair kept in a new ``LastTurns``:
the FIRST turn resumed from a full-path turn, which verifies the whole kept body once
(``resume._verified``) and makes the kept turn's grid ends. A session's turns are mostly
later ones: each body is the last one plus an exchange, resumed from a turn that was
itself resumed. Here a chain of ``TURNS`` such bodies runs in one ``LastTurns`` (its
first turn the full path) and the turns from ``FROM`` on are timed, those between steps
(the same exchanges paged as the turn before) only. Recalling, each turn asks words no
turn asked before, in any round (``bench_turn.new_words``, numbered by round).

Beside them, in the same interleaved rounds: the first resumed turn (``bench_turn``'s
"steady" rows), a turn with and without recall in a new isolate (issue 45's third
target), and what of the plain steady turn is its body's compare with the kept one
(``resume._shared``: every byte, in C — design §5.13 accepts a body only so), the part
that grows with the history byte for byte; and the least a new isolate's first recall
can cost with an index: every paged exchange's words counted (its C passes alone). CPU time in CPython, wall-clock in Pyodide (no CPU clock there). Usage:
``python bench/bench_turn_chain.py`` or ``node bench/pyodide_bench.mjs bench_turn_chain``.
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
from multillm_edge.core import recall, resume  # noqa: E402
from multillm_edge.search.analysis import counts, fold_utf8, word_bag  # noqa: E402
from multillm_edge.core.last_turns import LastTurns  # noqa: E402

SIZES = (200, 800, 3000)
TURNS, FROM = 8, 3      # turns 0..7; 0 the full path, 1 the first resumed; timed from 3
ROUNDS = 15
ASK = b"\x01ASK\x01"      # the question's place in a chain's bodies (JSON-escaped, unique)
PLAIN = "*takes a deep breath* Let's set sail."


def chain_bodies(n: int, recalling: bool, chat=bt.roleplay_body) -> list:
    """``TURNS`` bodies of one session from ``n`` exchanges (``chat(n)``), each the last
    plus one exchange; the latest user message is ``ASK``'s place (filled per round)."""
    body = chat(n)
    body["capabilities"] = bt.CACHE_CAPS + (["multillm_context_recall"] if recalling else [])
    raws = []
    for i in range(TURNS):
        body["messages"][-1]["content"] = "\x01ASK\x01"
        raws.append(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
                    .replace(b'"\\u0001ASK\\u0001"', ASK))
        body["messages"][-1]["content"] = f"*nods* On we go, {i}."
        body["messages"] += [{"role": "assistant", "content": body["messages"][-2]["content"]},
                             {"role": "user", "content": ""}]
    return raws


def chain(n: int, recalling: bool, clock, anchored: bool = False):
    """A zero-argument callable running one chain (round ``r`` asking its own words):
    the median seconds of its steady turns from ``FROM`` on. ``anchored``: the provider
    declares ``cache_breakpoints``, so the plan carries the prompt cache's anchors (§5.7)."""
    budget = max(32000, 100 * n) - 1024 - 256
    raws, rounds = chain_bodies(n, recalling), iter(range(1 << 20))
    figures = {"active_bytes": 1, "limit_bytes": 1048576, "active_pages": 1}

    def run() -> float:
        r = next(rounds)
        asks = [json.dumps(bt.new_words(n, 1000 * r + i) if recalling else PLAIN).encode()
                for i in range(TURNS)]
        bodies = [raw.replace(ASK, a) for raw, a in zip(raws, asks)]
        memory, fits, times = LastTurns(), [], []
        for k, raw in enumerate(bodies):
            gc.collect()
            t0 = clock()
            p = bt.resumed_turn(raw, budget, figures, memory, recalling, anchored=anchored)
            dt = clock() - t0
            fits.append(p.fit.k)
            if k >= FROM and fits[-1] == fits[-2]:
                times.append(dt)
        return statistics.median(times)
    return run


def first_resumed(n: int, recalling: bool, new: bool, clock):
    budget = max(32000, 100 * n) - 1024 - 256
    pair, _ = bt.turn_pairs(n, budget, recalling, new=new)
    figures = {"active_bytes": 1, "limit_bytes": 1048576, "active_pages": 1}

    def run() -> float:
        memory = LastTurns()
        bt.resumed_turn(pair[0], budget, figures, memory, recalling)
        gc.collect()
        t0 = clock()
        bt.resumed_turn(pair[1], budget, figures, memory, recalling)
        return clock() - t0
    return run


def compared(n: int, clock):
    """The plain chain's compare of a steady turn's body with the session's kept one
    (``resume._shared``), alone: the chain played up to ``FROM``, then the next body
    compared."""
    budget = max(32000, 100 * n) - 1024 - 256
    bodies = [raw.replace(ASK, json.dumps(PLAIN).encode()) for raw in chain_bodies(n, False)]
    figures = {"active_bytes": 1, "limit_bytes": 1048576, "active_pages": 1}
    memory = LastTurns()
    for raw in bodies[:FROM + 1]:
        bt.resumed_turn(raw, budget, figures, memory, False)
    last, raw = memory.get(bt.KEY), bodies[FROM + 1]
    assert resume._shared(last, raw) == len(last.groups) - 1     # all it can hold

    def run() -> float:
        gc.collect()
        t0 = clock()
        resume._shared(last, raw)
        return clock() - t0
    return run


def branched(n: int, clock):
    """A session's steady recalling turn with a turn of a branch of it between (its
    first quarter then a new question: the same pages, so the same keys; issue 45's
    twelfth pass): each round the branch's turn, then the session's, twice, the last
    one timed (the first two settle what the new isolate rows reset: a corpus
    compacted, once, when both pass the bound). Until then each cut the other's corpus,
    and the session analysed its history again."""
    budget = max(32000, 100 * n) - 1024 - 256
    main, side = bt.roleplay_body(n), bt.roleplay_body(max(n // 4, 2))
    for body, asked in ((main, 11), (side, 12)):
        body["capabilities"] = bt.CACHE_CAPS + ["multillm_context_recall"]
        body["messages"][-1]["content"] = bt.new_words(n, asked)
    raws = [json.dumps(b, ensure_ascii=False, separators=(",", ":")).encode() for b in (main, side)]
    figures = {"active_bytes": 1, "limit_bytes": 1048576, "active_pages": 1}
    memories = (LastTurns(), LastTurns())      # each session's kept turn

    def turn(i: int):
        return bt.resumed_turn(raws[i], budget, figures, memories[i], True)

    def run() -> float:
        for i in (1, 0, 1):     # settle what a new isolate's rows reset
            turn(i)
        gc.collect()
        t0 = clock()
        turn(0)
        return clock() - t0
    return run


def isolate_turn(n: int, recalling: bool, clock):
    """The turn in a new isolate (no analysis, no stem made), with or without recall."""
    budget = max(32000, 100 * n) - 1024 - 256
    asked = bt.roleplay_body(n)
    asked["messages"][-1]["content"] = f"*frowns* Port {n // 10} again? What did the whales sing there?"
    asked["capabilities"] = ["multillm_context_retrieve"] + (["multillm_context_recall"] if recalling else [])
    raw = json.dumps(asked, ensure_ascii=False, separators=(",", ":")).encode()
    figures = {"active_bytes": 1, "limit_bytes": 1048576, "active_pages": 1}

    def run() -> float:
        bt.CACHE.clear()
        bt.STATE.reset()
        gc.collect()
        t0 = clock()
        bt.one_turn(raw, budget, figures, recalling)
        return clock() - t0
    return run


def words_counted(n: int, clock):
    """The least an index of a new isolate's first recall costs (issue 45's third
    target): every paged exchange's text folded, cut into words and counted — the C
    passes its analysis makes, no cache, no object, no ranking — over the exchanges the
    recalling turn in a new isolate pages (their texts made beforehand)."""
    budget = max(32000, 100 * n) - 1024 - 256
    asked = bt.roleplay_body(n)
    asked["messages"][-1]["content"] = f"*frowns* Port {n // 10} again? What did the whales sing there?"
    asked["capabilities"] = ["multillm_context_retrieve", "multillm_context_recall"]
    got = {}
    real = recall.rank
    recall.rank = lambda q, texts, *a, **k: got.setdefault("paged", texts._paged) and []
    try:
        bt.one_turn(json.dumps(asked, ensure_ascii=False, separators=(",", ":")).encode(), budget, {}, True,
                    new=True)
    finally:
        recall.rank = real
    texts = ["\n".join([t for _, t in recall.page_texts(recall.items_of(p))]) for p in got["paged"]]

    def run() -> float:
        gc.collect()
        t0 = clock()
        for text in texts:
            counts(word_bag(*fold_utf8(text)))
        return clock() - t0
    return run


ROWS = {
    "first resumed turn": lambda n, c: first_resumed(n, False, False, c),
    "steady turn, chain (3rd+ resumed)": lambda n, c: chain(n, False, c),
    "steady turn, chain, anchors": lambda n, c: chain(n, False, c, anchored=True),
    "of which the body's compare": compared,
    "first resumed + recall, new words": lambda n, c: first_resumed(n, True, True, c),
    "steady + recall, new words, chain": lambda n, c: chain(n, True, c),
    "steady + recall, a branch's turn between": branched,
    "turn, new isolate": lambda n, c: isolate_turn(n, False, c),
    "turn + recall, new isolate": lambda n, c: isolate_turn(n, True, c),
    "of which every word counted (its least)": words_counted,
}


def main(runtime: str = "CPython") -> int:
    clock = time.process_time if runtime == "CPython" else time.perf_counter
    fns = {(name, n): make(n, clock) for n in SIZES for name, make in ROWS.items()}
    times = {k: [] for k in fns}
    for _ in range(ROUNDS):
        for k, f in fns.items():
            times[k].append(f())
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    what = "CPU time" if runtime == "CPython" else "wall-clock"
    load = f"; load at the end {os.getloadavg()[0]:.1f}" if runtime == "CPython" else ""
    print(f"steady turns in a chain — {runtime} {sys.version.split()[0]} (ms, {what}, medians of "
          f"{ROUNDS} interleaved rounds{load})")
    print("| turn | " + " | ".join(f"{n:,}" for n in SIZES) + " | "
          + " | ".join(f"{n:,} / {SIZES[0]:,}" for n in SIZES[1:]) + " |")
    print("|---|" + "---:|" * (2 * len(SIZES) - 1))
    for name in ROWS:
        print(f"| {name} | " + " | ".join(f"{med[(name, n)]:.2f}" for n in SIZES) + " | "
              + " | ".join(f"{med[(name, n)] / med[(name, SIZES[0])]:.2f}" for n in SIZES[1:]) + " |")
    # what the ratios hold besides the floors (issue 45, fourteenth pass): the
    # plain turn less the compare §5.13 makes of every body byte; recall's own step
    # (the recalling chain less the plain one); a new isolate's first recall against
    # its least (the turn plus every paged word counted)
    derived = {
        "steady turn, chain, less its body's compare":
            lambda n: med[("steady turn, chain (3rd+ resumed)", n)] - med[("of which the body's compare", n)],
        "recall's own step (recalling chain less the plain one)":
            lambda n: med[("steady + recall, new words, chain", n)] - med[("steady turn, chain (3rd+ resumed)", n)],
    }
    for name, f in derived.items():
        print(f"| {name} | " + " | ".join(f"{f(n):.2f}" for n in SIZES) + " | "
              + " | ".join(f"{f(n) / f(SIZES[0]):.2f}" for n in SIZES[1:]) + " |")
    for n in SIZES:
        least = med[("turn, new isolate", n)] + med[("of which every word counted (its least)", n)]
        print(f"| turn + recall, new isolate / (turn + every word counted), {n:,} | "
              f"{med[('turn + recall, new isolate', n)] / least:.2f} |")
    for n in SIZES:
        print(f"| turn + recall, new isolate / turn, new isolate, {n:,} | "
              f"{med[('turn + recall, new isolate', n)] / med[('turn, new isolate', n)]:.2f} |")
        print(f"| (turn + every word counted) / turn, new isolate, {n:,} | "
              f"{1 + med[('of which every word counted (its least)', n)] / med[('turn, new isolate', n)]:.2f} |")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
