"""The best hits are found among the exchanges whose passages were scored (issue 45,
docs/design.md §6.2): a passage only adds to a score, so the same hits — exchange,
score, relevance, order, ties — as sorting every exchange holding a term."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from multillm_edge.search import STATE, ranker
from multillm_edge.search.ranker import Scoring, rank

WORDS = ("the", "sea", "ship", "night", "sea", "ship", "whale", "whales", "sang", "port", "lantern",
         "Mira", "12", "3.5", "ёлка", "港口", "where?", "sing?", "storm", "mill")
said = st.lists(st.sampled_from(WORDS), min_size=1, max_size=10).map(" ".join)
chats = st.lists(st.tuples(said, said), min_size=1, max_size=50)
query = st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join)
scorings = st.sampled_from([Scoring(rerank=12), Scoring(), Scoring(rerank=3), Scoring(rerank=1),
                            Scoring(window=0.0, lidf=False, rerank=4), Scoring(asked=False, rerank=6),
                            Scoring(stem=False, irregular=False, rerank=6), Scoring(passage=0.0)])


@settings(max_examples=400, deadline=None)
@given(chat=chats, q=query, scoring=scorings, limit=st.integers(1, 14), keyed=st.booleans(),
       indexed=st.booleans())
def test_the_best_found_among_the_top_are_the_best_of_all(chat, q, scoring, limit, keyed, indexed):
    docs = [[("user", u), ("assistant", r)] for u, r in chat]
    keys = [(f"top {u!r} {r!r}", 0) for u, r in chat] if keyed else None
    got = {}
    for from_top in (False, True):
        STATE.reset()
        was, ranker.FROM_TOP = ranker.FROM_TOP, from_top
        try:
            got[from_top] = rank(q, docs, limit, keys=keys, indexed=indexed, scoring=scoring, excerpts=False)
        finally:
            ranker.FROM_TOP = was
    STATE.reset()
    assert got[True] == got[False]
