"""A ranking's sums, made with fewer list passes, are the very floats they were (issue
45, docs/design.md §6.2): a term's part added from 0.0 in the terms' order, the first
list part copied (0.0 + x is x: no part is -0.0), the window's parts not multiplied by
a weight of 1.0 (x × 1.0 is x)."""

from __future__ import annotations

import math
import types
from itertools import repeat
from operator import add, mul

from hypothesis import given, settings
from hypothesis import strategies as st

from multillm_edge.search import STATE, bm25, ranker
from multillm_edge.search.ranker import Scoring

from test_search_top import WORDS, chats


def _from_zeros(scores, got, n):
    """What the ranking did before: every part added to a list of 0.0."""
    scores = [0.0] * n if scores is None else scores
    if type(got) is not dict:       # a list, or the corpus's array of it
        scores[:] = map(add, scores, got)
    else:
        for d, v in got.items():
            scores[d] += v
    return scores


def _bits(xs: list) -> list:
    return [(x, math.copysign(1.0, x)) for x in xs]


counts = st.integers(1, 40)
norms = st.floats(0.3, 8.0)
weights = st.floats(0.0001, 9.0)


@st.composite
def term_parts(draw):
    """Parts as bm25.part makes them: dense (a list, 0.0 where none) or sparse (a dict)."""
    n = draw(st.integers(1, 30))
    out = []
    for _ in range(draw(st.integers(0, 6))):
        w = draw(weights)
        held = draw(st.sets(st.integers(0, n - 1), min_size=1))
        tf = {d: draw(counts) for d in sorted(held)}
        norm = [draw(norms) for _ in range(n)]
        out.append(bm25.part(w, norm, tf, n))
    return n, out


@settings(max_examples=500, deadline=None)
@given(case=term_parts(), window=st.floats(-1e300, 1e300, allow_nan=False))
def test_parts_added_from_the_first_are_the_sums_from_zero(case, window):
    n, parts = case
    got = want = None
    for p in parts:
        got = bm25.added(got, p, n)
        want = _from_zeros(want, p, n)
    got = got if got is not None else [0.0] * n
    want = want if want is not None else [0.0] * n
    assert _bits(got) == _bits(want)
    assert _bits(list(map(mul, repeat(1.0), got))) == _bits(got)
    assert window * 1.0 == window


query = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)
scorings = st.sampled_from([Scoring(), Scoring(rerank=12), Scoring(window=0.5), Scoring(window=2.0),
                            Scoring(asked=False), Scoring(passage=0.0)])


@settings(max_examples=300, deadline=None)
@given(chat=chats, q=query, scoring=scorings, indexed=st.booleans())
def test_a_ranking_scores_every_exchange_as_it_did(chat, q, scoring, indexed):
    """Every exchange's score, bit for bit, against the sums made from 0.0."""
    docs = [[("user", u), ("assistant", r)] for u, r in chat]
    seen = []
    real = ranker._scores

    def spy(*a, **k):
        out = real(*a, **k)
        seen.append(list(out[0]))
        return out
    got = {}
    for how in ("now", "from zeros"):
        STATE.reset()
        seen.clear()
        was_scores, was_bm25 = ranker._scores, ranker.bm25
        ranker._scores = spy
        if how == "from zeros":
            ranker.bm25 = types.SimpleNamespace(**{**vars(bm25), "added": _from_zeros})
        try:
            ranker.rank(q, docs, 6, indexed=indexed, scoring=scoring, excerpts=False)
        finally:
            ranker._scores, ranker.bm25 = was_scores, was_bm25
        got[how] = [_bits(s) for s in seen]
    STATE.reset()
    assert got["now"] == got["from zeros"]


@settings(max_examples=300, deadline=None)
@given(chat=chats, queries=st.lists(query, min_size=1, max_size=5), scoring=scorings,
       touched=st.sampled_from([1, 2, 8, 1000]))
def test_the_kept_sums_of_common_words_score_every_exchange_as_without_them(chat, queries, scoring, touched):
    """Queries asked in turn of one kept corpus (the later ones get the sums of their
    common words' list parts back, and their order): every exchange's score, bit for
    bit, and the hits (exchange, score, relevance, order, ties), as summed anew."""
    docs = [[("user", u), ("assistant", r)] for u, r in chat]
    keys = [(f"sums {u!r} {r!r} {i}", 0) for i, (u, r) in enumerate(chat)]
    real = ranker._scores
    got = {}
    for kept in (True, False):
        seen = []

        def spy(*a, **k):
            out = real(*a, **k)
            seen.append((_bits(out[0]), sorted(out[2])))
            return out
        STATE.reset()
        was = ranker._scores, ranker.KEPT_SUMS, ranker.TOUCHED
        ranker._scores, ranker.KEPT_SUMS, ranker.TOUCHED = spy, kept, 1 / touched
        try:
            for q in queries + queries[:2]:
                seen.append(ranker.rank(q, docs, 6, keys=keys, indexed=True, scoring=scoring,
                                        excerpts=False))
        finally:
            ranker._scores, ranker.KEPT_SUMS, ranker.TOUCHED = was
        got[kept] = seen
    STATE.reset()
    assert got[True] == got[False]


def test_the_sums_are_kept_and_found_again_for_the_same_common_words():
    docs = [[("user", f"the whales sing at port {i}"), ("assistant", f"whales, songs and port {i}")]
            for i in range(40)]
    keys = [("kept sums", i) for i in range(40)]
    STATE.reset()
    made = []
    real = ranker._sum
    ranker._sum = lambda parts, n: made.append(len(parts)) or real(parts, n)
    try:
        first = ranker.rank("whales sing at port 7", docs, 6, keys=keys, indexed=True, excerpts=False)
        calls = len(made)
        second = ranker.rank("whales sing at port 9", docs, 6, keys=keys, indexed=True, excerpts=False)
    finally:
        ranker._sum = real
    assert first[0].doc == 7 and second[0].doc == 9
    assert calls == 2 and len(made) == 2     # the list parts' sums made once, for both queries
    STATE.reset()


def test_a_memo_key_naming_counts_by_id_is_kept_only_with_them(monkeypatch):
    """What a corpus keeps under a term's counts' id (``Corpus.kept``; the common words'
    sums too) is kept only while those counts are: a memo emptied when full lets them go,
    and a new term's counts may then take their id — a kept value would answer for them."""
    from multillm_edge.search import corpus as corpus_mod
    corpus = corpus_mod.Corpus()
    monkeypatch.setattr(corpus_mod, "MEMO_ENTRIES", 10)
    tf = {0: 1, 1: 2}
    corpus._keep(id(tf), tf)                 # a term's counts, the corpus's own
    made = []
    got = corpus.kept("norms of", tf, lambda: made.append(1) or [0.5] * 8)   # 3 + 8 + 1 > 10
    assert got == [0.5] * 8 and made == [1]
    assert corpus.memo == {}                 # emptied: and the value not kept under tf's id
    corpus._keep(id(tf), tf)
    sums = corpus.kept(("list sums", (id(tf),)), None, lambda: [1.0] * 3, (tf,))
    assert corpus.memo[(("list sums", (id(tf),)), id(None))] is sums
    other = {0: 9}
    assert corpus.kept(("list sums", (id(other),)), None, lambda: [2.0], (other,)) == [2.0]
    assert (("list sums", (id(other),)), id(None)) not in corpus.memo    # not its own counts


@settings(max_examples=300, deadline=None)
@given(chat=chats, queries=st.lists(query, min_size=1, max_size=5), rerank=st.integers(1, 8),
       limit=st.integers(1, 8), touched=st.sampled_from([1, 8, 1000]))
def test_the_best_of_the_kept_sums_order_are_the_best_of_all(chat, queries, rerank, limit, touched):
    """Every exchange holding a common word ("sea"), few reranked: the best found among
    the kept sums' first few and the exchanges summed anew (``_best_kept``) are the
    hits — exchange, score, relevance, order, ties — of sorting every exchange."""
    docs = [[("user", u + " sea"), ("assistant", r)] for u, r in chat]
    keys = [(f"order {u!r} {r!r} {i}", 0) for i, (u, r) in enumerate(chat)]
    scoring = Scoring(rerank=rerank)
    got = {}
    for kept in (True, False):
        STATE.reset()
        was = ranker.KEPT_SUMS, ranker.TOUCHED
        ranker.KEPT_SUMS, ranker.TOUCHED = kept, 1 / touched
        try:
            got[kept] = [ranker.rank(q + " sea", docs, min(limit, rerank), keys=keys, indexed=True,
                                     scoring=scoring, excerpts=False) for q in queries + queries[:2]]
        finally:
            ranker.KEPT_SUMS, ranker.TOUCHED = was
    STATE.reset()
    assert got[True] == got[False]


@settings(max_examples=500, deadline=None)
@given(data=st.data(), n=st.integers(1, 40), k=st.integers(1, 12))
def test_the_best_among_the_kept_order_and_the_touched_are_the_best_of_all(data, n, k):
    """``_best_kept``'s contract, whatever the scores: ties (few distinct values), the
    documents summed anew scoring above or below the others."""
    values = st.sampled_from([0.5, 1.0, 1.5, 2.25, 7.0])
    sums = data.draw(st.lists(values, min_size=n, max_size=n))
    touched = data.draw(st.sets(st.integers(0, n - 1)))
    scores = list(sums)
    for d in touched:
        scores[d] = data.draw(st.sampled_from([0.25, 1.0, 1.5, 3.0, 9.0]))
    order = ranker._best(sums, range(n), n)
    assert ranker._best_kept(scores, order, touched, k) == ranker._best(scores, range(n), k)


def test_a_long_corpus_keeps_its_common_words_parts_between_rankings(monkeypatch):
    """The memo's bound grows with the corpus (``MEMO_PER_EXCHANGE``): a ranking's lists
    (norms, the common words' parts over exchanges and windows, their sums) are kept for
    the next one, which makes only its new word's two. With the fixed bound alone
    (here 64 entries, as 2^15 was for a 3,000-exchange chat) the memo is emptied by
    every ranking and every part is made again."""
    from multillm_edge.search import corpus as corpus_mod
    docs = [[("user", f"the whales sing at port {i}"), ("assistant", f"whales, songs and port {i}")]
            for i in range(60)]
    keys = [("long corpus", i) for i in range(60)]
    monkeypatch.setattr(corpus_mod, "MEMO_ENTRIES", 64)
    made = []
    real = bm25.part
    monkeypatch.setattr(bm25, "part", lambda *a: made.append(1) or real(*a))
    for per, again in ((corpus_mod.MEMO_PER_EXCHANGE, 2), (0, 5)):
        monkeypatch.setattr(corpus_mod, "MEMO_PER_EXCHANGE", per)
        STATE.reset()
        ranker.rank("whales sing port 7", docs, 6, keys=keys, indexed=True, excerpts=False)
        made.clear()
        got = ranker.rank("whales sing port 9", docs, 6, keys=keys, indexed=True, excerpts=False)
        assert got[0].doc == 9 and len(made) == again, (per, made)
    STATE.reset()
