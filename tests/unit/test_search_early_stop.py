"""Top-k that stops early (MaxScore, docs/design.md §6.2, issue 45) ranks exactly as the
full scan: random chats and queries, every hit — exchange, score, relevance, order,
ties — the same with the early stop and without it, from a kept corpus (its parts
kept or not), from scratch and by the scan; and it does stop (fewer exchanges scored)
where the k best hold words the others do not."""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from multillm_edge.search import STATE, ranker
from multillm_edge.search.ranker import Scoring, rank

# common words (in most exchanges), mid ones, rare ones; questions ("?") to move
COMMON = ("the", "sea", "ship", "night")
WORDS = COMMON * 4 + ("whale", "whales", "sang", "port", "lantern", "compass", "mill", "buried",
                      "storm", "Mira", "12", "3.5", "ёлка", "港口", "where?", "why?", "sing?")
RARE = ("whale", "whales", "sang", "port", "lantern", "Mira", "12", "3.5", "ёлка", "港口", "sing?")
said = st.lists(st.sampled_from(WORDS), min_size=1, max_size=10).map(" ".join)
MID = ("storm", "mill", "compass", "buried")
plain = st.lists(st.sampled_from(COMMON * 3 + MID + ("where?",)), min_size=1, max_size=8).map(" ".join)
# an exchange of common words, often naming one of a few rarer ones too (the k best)
named = st.tuples(plain, st.sampled_from(("", "", " lantern", " whale sang", " Mira?", " port 12"))).map("".join)
exchange = st.tuples(st.one_of(named, named, said), st.one_of(plain, named, said))
query = st.one_of(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join),
                  st.tuples(st.lists(st.sampled_from(RARE), min_size=1, max_size=3),
                            st.lists(st.sampled_from(COMMON + MID), min_size=1, max_size=3)).map(
                      lambda p: " ".join(p[0] + p[1])))
scorings = st.sampled_from([Scoring(rerank=12), Scoring(), Scoring(rerank=3), Scoring(rerank=1),
                            Scoring(window=0.0, lidf=False, rerank=4), Scoring(asked=False, passage=0.0),
                            Scoring(stem=False, irregular=False, rerank=6), Scoring(passage=0.0)])


def ranked(docs, q, scoring, limit, keys, early: bool) -> list:
    was, ranker.EARLY_STOP = ranker.EARLY_STOP, early
    try:
        return rank(q, docs, limit, keys=keys, indexed=keys is not None, scoring=scoring, excerpts=False)
    finally:
        ranker.EARLY_STOP = was


@settings(max_examples=400, deadline=None)
@given(chat=st.one_of(st.lists(exchange, min_size=1, max_size=20), st.lists(exchange, min_size=30, max_size=90)), q=query, scoring=scorings,
       limit=st.integers(1, 14), mode=st.sampled_from(["corpus", "scratch", "scan"]))
def test_the_early_stop_ranks_as_the_full_scan(chat, q, scoring, limit, mode):
    docs = [[("user", u), ("assistant", r)] for u, r in chat]
    keys = [(f"early {u!r} {r!r}", 0) for u, r in chat] if mode == "corpus" else None
    if limit % 4:       # mostly the k best at most (recall's case: 6 of the best 12)
        limit = min(limit, scoring.rerank if scoring.passage else limit)
    STATE.reset()
    stopped = []
    was = ranker._few
    ranker._few = lambda *a: stopped.append(was(*a)) or stopped[-1]
    try:
        full = ranked(docs, q, scoring, limit, keys, False) if mode != "scan" else rank(
            q, docs, limit, scoring=scoring, excerpts=False)
        early = [ranked(docs, q, scoring, limit, keys, True) for _ in range(2)] if mode != "scan" else [
            rank(q, docs, limit, scoring=scoring, excerpts=False)]    # the 2nd: the parts kept
    finally:
        ranker._few = was
        STATE.reset()
    event("stopped early" if any(s is not None for s in stopped) else "scored all")
    for got in early:
        assert got == full


def test_it_stops_early_where_the_best_hold_words_the_others_do_not():
    """Twenty exchanges name the lantern, two hundred only the sea: the sea's bound is
    below the 12th lantern score, so only the lantern's exchanges and their neighbours
    are scored — the same hits as the full scan."""
    docs = [[("user", f"The sea is calm tonight {i}."), ("assistant", "The sea, the sea.")] for i in range(200)]
    for i in range(0, 200, 10):
        docs[i] = [("user", f"Mira lights the lantern {i} by the sea."), ("assistant", "The lantern glows.")]
    scored = []
    was = ranker._few
    ranker._few = lambda *a: scored.append(was(*a)) or scored[-1]
    try:
        early = ranked(docs, "lantern by the sea", Scoring(rerank=12), 6, None, True)
    finally:
        ranker._few = was
    assert scored[0] is not None and len(scored[0]) <= 60
    assert early == ranked(docs, "lantern by the sea", Scoring(rerank=12), 6, None, False)
    assert [h.doc for h in early] == [190, 180, 170, 160, 150, 140] or len({h.score for h in early}) < 6
