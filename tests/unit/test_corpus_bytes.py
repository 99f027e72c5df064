"""Recall's corpora are bounded in the bytes they really hold (docs/design.md §6.2; the
cache protocol every isolate cache keeps: ``held_bytes``, ``shrink``, ``max_bytes``):
filled with adversarial exchanges — blank lines, tiny messages, very long words,
``[{}]`` content (no text at all), many distinct words — the estimate stays within
25 % of what tracemalloc measures in CPython, and the bound holds."""

from __future__ import annotations

import gc
import tracemalloc
from sys import getsizeof

import pytest

from multillm_edge.search import STATE, corpus, rank


def blank_lines(i: int) -> list:
    return [("user", "\n" * 300), ("assistant", f"ok {i}" + "\n" * 300)]


def tiny(i: int) -> list:
    return [("user", "a"), ("assistant", f"k{i}")]


def long_words(i: int) -> list:
    return [("user", " ".join(f"{chr(97 + j)}{i}" * 400 for j in range(5))), ("assistant", f"w{i}" * 2000)]


def empty(i: int) -> list:        # [{}] content: parts with no text
    return [("user", ""), ("assistant", "")]


def many_words(i: int) -> list:
    return [("user", " ".join(f"word{i}x{j} thing{j % 50}" for j in range(120))),
            ("assistant", " ".join(f"reply{(i * 7 + j) % 900} пример{j}" for j in range(80)))]


def wide_words(i: int) -> list:     # words of non-ASCII letters, long ones, CJK, emoji
    return [("user", " ".join(f"слово{i}ё{j} qué{j % 9} ñandú{'á' * (j % 40)}" for j in range(60))),
            ("assistant", "港口の歌" * 50 + " 🌬️ " * 20 + "Ж" * 3000)]


def japanese(i: int) -> list:     # CJK runs kept for its CJK queries' postings
    return [("user", f"港{i}のことを教えて。" * 20), ("assistant", "鯨たちは夕暮れに昇り、その歌は雲の海を転がっていく。" * 30)]


def prose(i: int) -> list:
    return [("user", f"*leans on the rail* Tell me about port {i}, captain. What do the whales sing?"),
            ("assistant", f"Port {i} — the whales rise at dusk, their songs rolling like thunder. " * 3)]


def questions(i: int) -> list:    # each exchange ends asking: recall's questions kept per term
    return [("user", f"*leans on the rail* Tell me about port {i}, captain."),
            ("assistant", f"The whales sang at port {i}, a whale for each mast.\nDid you hear the whales sing at port {i}?")]


KINDS = {"blank lines": blank_lines, "tiny messages": tiny, "very long words": long_words,
         "[{}] content": empty, "many distinct words": many_words, "wide words": wide_words, "prose": prose,
         "japanese": japanese, "questions": questions}
QUERIES = ("whales port sing", "thing1 word3x4 reply17", "a k3 ok", "aaaa b3 w7", "港口の歌 の港 鯨たち")


def fill(make, n: int, sessions: int = 1) -> None:
    """``sessions`` chats of ``n`` exchanges made by ``make``, each ranked for every
    query (a corpus each; postings asked for, memos made), then grown by one exchange."""
    for s in range(sessions):
        docs = [make(s * 100_000 + i) for i in range(n + 1)]
        keys = [(f"{make.__name__}-{s}-{i}", 0) for i in range(n + 1)]
        for q in QUERIES:
            rank(q, docs[:n], 5, keys=keys[:n], indexed=True, excerpts=False)
        rank(QUERIES[0], docs, 5, keys=keys, indexed=True, excerpts=False)


def measured(make, n: int, sessions: int = 1, compact: bool = False) -> tuple:
    """(held_bytes, the bytes tracemalloc sees the corpora hold): everything made
    traced, the isolate's other memos emptied, the corpora dropped: what that frees.
    The cheap bound ``Corpora.trim`` reads first is at least ``held_bytes``.
    ``compact``: each corpus compacted first (``Corpus.compact``)."""
    STATE.reset()
    gc.collect()
    tracemalloc.start()
    try:
        fill(make, n, sessions)
        if compact:     # (in a comprehension's scope: no name here holds a corpus)
            [c.compact() for c in corpus.CORPORA.kept]
        for part in STATE._parts.values():      # the analyses, vocabularies, memos: the
            if part is not corpus.CORPORA:      # corpora then the only holders of their
                part.clear()                    # word counts and words
        gc.collect()
        bound = sum(c.bound_bytes() for c in corpus.CORPORA.kept)     # before any is sized
        held = corpus.CORPORA.held_bytes()
        assert bound >= sum(c.held_bytes() for c in corpus.CORPORA.kept), (bound, held)
        before = tracemalloc.get_traced_memory()[0]
        corpus.CORPORA.clear()
        gc.collect()
        return held, before - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        STATE.reset()


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("n", [30, 300])
def test_held_bytes_is_what_tracemalloc_measures_within_a_quarter(kind, n, compact):
    held, real = measured(KINDS[kind], n, compact=compact)
    assert 0.75 * real <= held <= 1.25 * real, (kind, n, held, real)


def test_a_compacted_corpus_holds_a_long_chats_words_once():
    """Prose repeats its words exchange after exchange: compacted, the corpus holds each
    word's string once, and frees over 30 % of what it held (measured: 34 % counted,
    41 % freed; these exchanges hold ~25 distinct words each, a roleplay's ~60)."""
    loose, loose_real = measured(prose, 300)
    held, real = measured(prose, 300, compact=True)
    assert held < 0.7 * loose and real < 0.7 * loose_real, (held, loose, real, loose_real)


def test_a_corpus_compacted_then_extended_and_cut_counts_what_it_holds():
    """Once compacted, what it is extended by is compacted too, and a cut counts back
    exactly: its bytes are those of a corpus made compacted from the same exchanges."""
    STATE.reset()
    docs = [many_words(i) for i in range(80)]
    keys = [(f"cx-{i}", 0) for i in range(80)]
    rank("word3x4 reply17", docs[:50], 5, keys=keys[:50], indexed=True, excerpts=False)
    (c,) = corpus.CORPORA.kept
    c.held_bytes()
    c.compact()
    assert len(c.words) == 50 and all(w is c.canon[w] for counts in c.words for w in counts)
    rank("word3x4 reply17", docs, 5, keys=keys, indexed=True, excerpts=False)
    assert corpus.CORPORA.kept == [c] and len(c.words) == 80
    assert all(w is c.canon[w] for counts in c.words for w in counts)
    c.cut(60)
    assert len(c.words) == 60 and c.held_bytes() == c._own_bytes() + sum(
        map(corpus.table_bytes, map(len, c.words))) + sum(map(corpus.numbers_bytes, (c.sizes, c.lines_of, c.ids)))
    STATE.reset()


def test_the_posted_at_once_path_is_counted_too(monkeypatch):
    monkeypatch.setattr(corpus, "EAGER", 10)
    held, real = measured(many_words, 200)
    assert 0.75 * real <= held <= 1.25 * real, (held, real)


@pytest.mark.parametrize("kind", ["many distinct words", "very long words", "blank lines", "prose"])
def test_the_corpora_stay_within_their_bound_in_real_bytes(kind, monkeypatch):
    """Many sessions under a small bound: what is kept, measured, is within it (+25 %)."""
    monkeypatch.setattr(corpus.CORPORA, "max_bytes", 3 << 20)
    held, real = measured(KINDS[kind], 120, sessions=8)
    assert held <= 3 << 20 and real <= 1.25 * (3 << 20), (held, real)


def test_a_terms_questions_are_counted_with_their_pairs():
    """Recall keeps each term's questions ({exchange: (count, code points)}, ranker's
    ``_Parts.questions``): a tuple an item besides the dict's slot, counted as two memo
    entries — as one, a chat whose exchanges all ask held twice what it counted."""
    STATE.reset()
    docs = [questions(i) for i in range(300)]
    rank("whales port sing", docs, 5, keys=[(f"qb-{i}", 0) for i in range(300)], indexed=True, excerpts=False)
    (c,) = corpus.CORPORA.kept
    kept = [v for k, v in c.memo.items() if type(k) is tuple and k[0] == "questions"]
    assert len(kept) == 3 and all(len(v) == 299 for v in kept)
    for v in kept:      # what the memo counts for it, alone
        alone = corpus.Corpus()
        alone._keep(("questions", 0), v)
        real = getsizeof(v) + sum(map(getsizeof, v.values()))
        counted = corpus.MEMO_ENTRY_BYTES * alone.memo_entries
        assert 0.75 * real <= counted <= 1.25 * real, (counted, real)
    STATE.reset()


def test_shrink_drops_the_least_recently_used_first():
    STATE.reset()
    for s in range(3):
        docs = [prose(s * 1000 + i) for i in range(20)]
        rank("whales port", docs, 5, keys=[(f"lru{s}-{i}", 0) for i in range(20)], indexed=True)
    kept = list(corpus.CORPORA.kept)
    assert len(kept) == 3
    assert all(c.memo_entries > 0 for c in kept)    # each keeps what its rankings derived
    corpus.CORPORA.shrink(corpus.CORPORA.held_bytes() - 1)     # the memos of those not in
    assert corpus.CORPORA.kept == kept and [c.memo_entries > 0 for c in kept] == [False, True, True]
    corpus.CORPORA.shrink(corpus.CORPORA.held_bytes() - 1)     # use, least recently used first
    assert [c.memo_entries > 0 for c in kept] == [False, False, True]
    assert all(c.canon is None for c in kept)
    loose = corpus.CORPORA.held_bytes()
    corpus.CORPORA.shrink(loose - 1)        # then compacted: the same counts, fewer bytes
    assert corpus.CORPORA.kept == kept and kept[-1].memo_entries > 0
    assert all(c.canon is not None for c in kept) and corpus.CORPORA.held_bytes() < loose
    corpus.CORPORA.shrink(corpus.CORPORA.held_bytes() - 1)
    assert corpus.CORPORA.kept == kept and kept[-1].memo_entries == 0   # then the last one's memo
    one = kept[-1].held_bytes()
    corpus.CORPORA.shrink(corpus.CORPORA.held_bytes() - 1)
    assert corpus.CORPORA.kept == kept[1:]
    corpus.CORPORA.shrink(one + 200)
    assert corpus.CORPORA.kept == kept[2:] and corpus.CORPORA.held_bytes() <= one + 200
    corpus.CORPORA.shrink(0)
    assert corpus.CORPORA.kept == [] and corpus.CORPORA.held_bytes() <= 100
    STATE.reset()
