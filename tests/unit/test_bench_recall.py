"""bench/bench_recall.py's anatomy of the search's misses (bench/README.md): each R@5
miss lands in the row that says why, with speakers' names and stop words not counted as
shared words."""

import os
import sys

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

import bench_recall  # noqa: E402

FILLER = [("user", "Ana: the rain fell."), ("assistant", "Bo: and fell again.")]


def anatomy(evidence_at: int, evidence: str, neighbour: str = "Bo: and fell again."):
    """12 exchanges ranked by position (newest first: 11..7 are the top 5); the
    question "Where did Ana hide the crown?" has one evidence line."""
    docs = [list(FILLER) for _ in range(12)]
    docs[evidence_at] = [("user", evidence), ("assistant", "Bo: I see.")]
    if evidence_at + 1 < 12:
        docs[evidence_at + 1] = [("user", "Ana: later."), ("assistant", neighbour)]
    q = "Where did Ana hide the crown?"
    runs = [("c", docs, [(q, "single-hop", [evidence])])]
    counts = bench_recall.miss_anatomy(runs, {("c", q): bench_recall.ranked(None, q, docs)})
    return [k for k, n in counts.items() if n]


def test_each_miss_lands_in_the_row_that_says_why():
    kinds = bench_recall.MISS_KINDS
    assert anatomy(0, "Ana: hello there.") == [kinds[0]]       # "Ana" is a speaker, not a shared word
    assert anatomy(0, "Ana: hello.", "Bo: the crown, hidden.") == [kinds[1]]
    assert anatomy(6, "Ana: the crown lies here.") == [kinds[2]]        # 7 is a top-5 hit
    assert anatomy(4, "Ana: the crown lies here.") == [kinds[3]]
    assert anatomy(0, "Ana: the crown lies here.") == [kinds[4]]
    assert anatomy(9, "Ana: the crown lies here.") == []        # a hit: no miss
