"""Recall's corpus kept between turns never changes an answer (docs/design.md §6.2):
random sequences of turns of a few sessions in one isolate (append, swipe, an old
message edited, a step crossed, the query alone changed, another session's turn) are
planned with everything the isolate kept, and again from scratch (``STATE.reset()``,
as in a new isolate): the same moments, scores, order and upstream bytes. The same for
the ranking alone, every hit. And the corpora stay within their bounds."""

from __future__ import annotations

import hashlib
import sys
from contextlib import contextmanager

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from multillm_edge.core import paging
from multillm_edge.core.pages import PageSigner
from multillm_edge.search import STATE, corpus, rank
from multillm_edge.search import bm25 as bm25_module
from multillm_edge.search import docs as docs_module
from multillm_edge.search import match as match_module
from multillm_edge.search import stems as stems_module
from multillm_edge.search.docs import CACHE
from multillm_edge.search.ranker import Scoring

SIGNER = PageSigner(b"recall-reuse-signing-secret-0123456789")
WORDS = ("whale", "whales", "sang", "singing", "port", "ports", "lantern", "compass", "silver",
         "mill", "buried", "bury", "storm", "Mira", "caravan", "rain", "12", "3.5", "kitsune",
         "grey", "road", "road?", "why?", "ёлка", "ёлки", "港口", "の歌")
said = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)
exchange = st.tuples(said, said)
# (what happens, to which session, what is said, where, how many)
turn = st.tuples(st.sampled_from(["append", "append", "swipe", "edit", "step", "ask", "cut"]),
                 st.integers(0, 2), exchange, st.integers(0, 10_000), st.integers(2, 9))


def play(sessions: list, op: tuple) -> int:
    """Apply one turn to ``sessions`` (each [exchanges, latest question]); its index."""
    what, s, (user, reply), where, many = op
    chat = sessions[s]
    ex = chat[0]
    if what == "append":
        ex.append((chat[1], reply))
        chat[1] = user
    elif what == "swipe" and ex:
        ex[-1] = (ex[-1][0], reply)
    elif what == "edit" and ex:
        ex[where % len(ex)] = (user, reply)
    elif what == "step":
        ex.extend((f"{user} {i}", f"{reply} {i}") for i in range(many))
    elif what == "cut":
        del ex[len(ex) - where % (len(ex) + 1):]
    else:
        chat[1] = user
    return s


def body(chat: list) -> dict:
    msgs = [{"role": "system", "content": "You are Mira, a storyteller."}]
    for user, reply in chat[0]:
        msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
    msgs.append({"role": "user", "content": chat[1]})
    return {"model": "m", "messages": msgs}


def planned(chat: list, s: int, prompt_cache: bool, budget: int) -> tuple:
    ids = SIGNER.page_ids("roleplay", "p", f"s{s}", 1)
    (p,) = paging.plan_candidates("chat", body(chat), [budget], ids, recalling=True,
                                  prompt_cache=prompt_cache)
    if isinstance(p, Exception):
        return ("error", p.status)
    return p.encoded("m"), p.size, [(m.page_id, m.exchange, m.score, m.lines) for m in p.recall]


def within_bounds() -> bool:
    """The corpora within their bounds, each one's sums those of its exchanges, its
    postings those of its word counts: every word of an exchange posted one by one
    (from ``lazy`` on), a word asked (``filled``) for the others too."""
    kept = corpus.CORPORA.kept
    return len(kept) <= corpus.CORPORA_KEPT and corpus.CORPORA.held_bytes() <= corpus.CORPORA.max_bytes and all(
        c.memo_entries <= max(corpus.MEMO_ENTRIES, corpus.MEMO_PER_EXCHANGE * len(c.words)) + 1
        and c.counted == sum(map(len, c.words))
        and len(c.keys) == len(c.words) and c.keys_bytes == corpus.keys_bytes(c.keys)
        and c.sized_counted == sum(map(len, c.words[:c.sized])) and c.sized_size == sum(c.sizes[:c.sized])
        and c.bound_bytes() >= c.held_bytes() == c._own_bytes() + words_bytes(c) + sum(
            map(corpus.numbers_bytes, (c.sizes, c.lines_of, c.ids))) and c.ids == list(range(len(c.words)))
        and c.size == sum(c.sizes) and c.lines == sum(c.lines_of)
        and c.posted == sum(map(len, c.postings.values())) and postings_true(c) and cjk_true(c)
        and merged_true(c) for c in kept)


def merged_true(c) -> bool:
    """Its merged postings: at most ``MERGED_KEPT``, each its forms' counts summed in
    every exchange holding one (exchanges ascending), their entries counted."""
    return len(c.merged) <= corpus.MERGED_KEPT and c.merged_posted == sum(map(len, c.merged.values())) and all(
        p == {d: sum([ws.get(f, 0) for f in forms]) for d, ws in enumerate(c.words) if not ws.keys().isdisjoint(forms)}
        and list(p) == sorted(p) for forms, p in c.merged.items())


def cjk_true(c) -> bool:
    """Its CJK runs: blocks of ``BLOCK`` exchanges, one each, in order, their bytes
    counted; each kept CJK posting the one counted from them anew."""
    if c.cjk is None:
        return not c.cjk_postings and c.cjk_bytes == 0
    firsts = [b[0] for b in c.cjk]
    sizes = [len(b[2]) for b in c.cjk]
    return (firsts == list(range(0, len(c.words), corpus.BLOCK)) and sum(sizes) == len(c.words)
            and all(k == corpus.BLOCK for k in sizes[:-1])
            and c.cjk_bytes == sum(map(corpus._cjk_block_bytes, c.cjk))
            and c.cjk_posted == sum(map(len, c.cjk_postings.values()))
            and all(p == c._cjk_fill(v) and list(p) == sorted(p) for v, p in c.cjk_postings.items()))


def words_bytes(c) -> int:
    """Its word counts' bytes: a compacted exchange's table alone, its words once in
    ``canon`` (their strings the corpus's own, counted there), another's with its words."""
    if c.canon is None:
        return sum(map(corpus.word_counts_bytes, c.words))
    assert all(w is c.canon[w] for ws in c.words for w in ws)
    assert c.canon_bytes == corpus.strings_bytes(c.canon)
    return sum(map(corpus.table_bytes, map(len, c.words)))


def postings_true(c) -> bool:
    expected: dict = {}
    for d, counts in enumerate(c.words):
        for w, n in counts.items():
            if d >= c.lazy or w in c.filled:
                expected.setdefault(w, {})[d] = n
    return c.postings == expected and all(list(p) == sorted(p) for p in c.postings.values()) and all(
        c.posting(w) == {d: ws[w] for d, ws in enumerate(c.words) if w in ws} for w in list(c.filled)[:3]) \
        and blocks_true(c)


def blocks_true(c) -> bool:
    """The blocks of the exchanges posted per word: exchanges 0..lazy-1 in order, each
    block's set holding its exchanges' words, their bytes counted."""
    ends = [0] + [b for _, b, _ in c.blocks]
    return ([a for a, _, _ in c.blocks] == ends[:-1] and ends[-1] == c.lazy
            and all(a < b and held.issuperset(set().union(*c.words[a:b])) for a, b, held in c.blocks)
            and c.blocks_bytes == sum(sys.getsizeof(held) + corpus.BLOCK_BYTES for _, _, held in c.blocks))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=st.lists(st.lists(exchange, min_size=0, max_size=30), min_size=3, max_size=3),
       turns=st.lists(turn, min_size=1, max_size=14), prompt_cache=st.booleans(),
       budget=st.integers(900, 2500), eager=st.sampled_from([corpus.EAGER, 0, 3]), compact=st.booleans())
def test_a_plan_with_what_the_isolate_kept_is_the_plan_from_scratch(start, turns, prompt_cache, budget, eager,
                                                                   compact):
    sessions = [[list(ex), "Where did the whales sing, by the port?"] for ex in start]
    STATE.reset()
    with posted_at_once_past(eager), compacted(compact):
        play_plans(sessions, turns, prompt_cache, budget)


@contextmanager
def posted_at_once_past(eager: int):
    """``corpus.EAGER`` set to ``eager`` (small: the exchanges a corpus is made with
    posted per word when asked, as for a long chat, in blocks of as many)."""
    was = corpus.EAGER, corpus.BLOCK
    corpus.EAGER = eager
    if eager < was[0]:      # blocks of a few exchanges: a chat of many blocks
        corpus.BLOCK = max(1, eager)
    try:
        yield
    finally:
        corpus.EAGER, corpus.BLOCK = was


@contextmanager
def compacted(on: bool):
    """When ``on``, every kept corpus compacted after each ranking, as the bound compacts
    a long chat's (then extended, cut, found again: compacted as it goes)."""
    trim = corpus.Corpora.trim

    def compacting(self) -> None:
        for c in self.kept:
            c.compact()
        trim(self)
    if on:
        corpus.Corpora.trim = compacting
    try:
        yield
    finally:
        corpus.Corpora.trim = trim


def play_plans(sessions: list, turns: list, prompt_cache: bool, budget: int) -> None:
    for op in turns:
        s = play(sessions, op)
        kept = planned(sessions[s], s, prompt_cache, budget)
        assert within_bounds()
        STATE.reset()
        fresh = planned(sessions[s], s, prompt_cache, budget)
        assert kept == fresh, op
        event("recalled" if kept[0] != "error" and kept[2] else "none recalled")
        planned(sessions[s], s, prompt_cache, budget)        # the isolate warm again
    STATE.reset()


def ranked(docs: list, query: str, keyed: bool, scoring: Scoring) -> list:
    keys = [(hashlib.sha256(repr(d).encode()).hexdigest(), 0) for d in docs] if keyed else None
    return rank(query, docs, 10_000, keys=keys, indexed=True, scoring=scoring, excerpts=False)


@settings(max_examples=150, deadline=None)
@given(start=st.lists(exchange, min_size=1, max_size=40), turns=st.lists(turn, min_size=1, max_size=20),
       scoring=st.sampled_from([Scoring(rerank=12), Scoring(), Scoring(window=0.0, lidf=False),
                                Scoring(asked=False, passage=0.0), Scoring(stem=False, irregular=False)]),
       eager=st.sampled_from([corpus.EAGER, 0, 3]), compact=st.booleans(), lose=st.booleans())
def test_every_hit_ranked_from_the_kept_corpus_is_the_hit_from_scratch(start, turns, scoring, eager, compact,
                                                                       lose):
    """The ranking alone, every hit of it, exchanges keyed by content as recall keys
    them (two sessions' equal exchanges share their analyses and may share a corpus);
    ``lose``: each turn ranked again with the analyses cache emptied (a long chat's pass
    its bound), so those the kept corpus holds are made again from its word counts, then
    again with the corpora dropped, so that a corpus is made of analyses made so."""
    sessions = [[list(start), "whales"], [list(start[: len(start) // 2]), "port"], [[], "mill"]]
    STATE.reset()
    with posted_at_once_past(eager), compacted(compact):
        rank_turns(sessions, turns, scoring, lose)


def rank_turns(sessions: list, turns: list, scoring: Scoring, lose: bool = False) -> None:
    for op in turns:
        s = play(sessions, op)
        ex, query = sessions[s]
        docs = [[("user", u), ("assistant", r)] for u, r in ex]
        if not docs:
            continue
        kept = ranked(docs, query, True, scoring)
        if lose:
            CACHE.clear()
            assert ranked(docs, query, True, scoring) == kept
            corpus.CORPORA.clear()
            assert ranked(docs, query, True, scoring) == kept
        assert within_bounds()
        STATE.reset()
        assert kept == ranked(docs, query, False, scoring), op
        ranked(docs, query, True, scoring)      # warm again
    STATE.reset()


def test_the_corpora_stay_within_their_bounds_and_a_corpus_over_it_is_not_kept(monkeypatch):
    docs = [[("user", f"the whales sang at port {i}"), ("assistant", f"lantern {i} and rain")]
            for i in range(40)]
    keys = [(f"bound{i}", 0) for i in range(40)]
    STATE.reset()
    for n in range(5, 41, 5):       # sessions of different lengths: one corpus each
        rank("whales port", docs[:n][::-1], 5, keys=keys[:n][::-1], indexed=True)
    assert len(corpus.CORPORA) == 8 and within_bounds()
    monkeypatch.setattr(corpus.CORPORA, "max_bytes", 3000)
    expected = ranked(docs, "whales lantern rain", False, Scoring())
    assert ranked(docs, "whales lantern rain", True, Scoring()) == expected
    assert len(corpus.CORPORA) == 0     # alone over the bound: used, not kept
    STATE.reset()


def test_a_session_growing_extends_its_corpus_and_an_edit_cuts_it_back():
    docs = [[("user", f"the whales sang at port {i}"), ("assistant", "a lantern in the rain")]
            for i in range(30)]
    keys = [(f"grow{i}", 0) for i in range(30)]
    STATE.reset()
    rank("whales port", docs[:20], 5, keys=keys[:20], indexed=True)
    (c,) = corpus.CORPORA.kept
    rank("whales port", docs[:25], 5, keys=keys[:25], indexed=True)
    assert corpus.CORPORA.kept == [c] and len(c.words) == 25 and c.posting("whales") == {d: 1 for d in range(25)}
    edited = docs[:20] + [[("user", "a storm over the mill")]] + docs[21:25]
    rank("whales port", edited, 5, keys=keys[:20] + [("edited", 0)] + keys[21:25], indexed=True)
    assert corpus.CORPORA.kept == [c] and len(c.words) == 25
    assert c.posting("whales") == {d: 1 for d in range(25) if d != 20}
    assert c.size == sum(len("\n".join(t for _, t in d)) for d in edited)
    STATE.reset()


def test_a_question_moved_to_its_answer_keeps_every_part_of_the_others(monkeypatch):
    """Real chats ask: an exchange whose last line asks and holds a query term lends it
    to the next one (*asked*, docs/design.md §6.1). Only those two exchanges are scored
    anew; every term's parts over the others are the corpus's, kept: a later question
    asking the same words with a new rare one makes none of them again (where the
    lengths a moved line changed made every exchange's norm and every part anew, each
    turn: O(the chat) on most real questions), and reads no question again (each
    term's are kept with its counts). The hits are those from scratch."""
    docs = [[("user", f"Did the whales sing at port {i}?"), ("assistant", f"The whales sang {i}. Lantern rain {i}?")]
            for i in range(40)]
    keys = [(f"asked {i:02d}", 0) for i in range(40)]
    made = parts_made(monkeypatch)
    read = []
    real_counts = match_module.Matcher.indexed_counts
    monkeypatch.setattr(match_module.Matcher, "indexed_counts",
                        lambda self, a, which: read.append(which) or real_counts(self, a, which))
    STATE.reset()
    hits = {}
    for i in (3, 7, 11):
        made.clear()
        read.clear()
        hits[i] = rank(f"whales lantern kilo{i}", docs, 5, keys=keys, indexed=True)
        assert len(made) == (4 if i == 3 else 0)        # whales', lantern's; the rare one held by none
        assert len(read) == (39 if i == 3 else 0)       # every question but the last's, then kept
    for i, got in hits.items():
        STATE.reset()
        assert got == rank(f"whales lantern kilo{i}", docs, 5, keys=keys, indexed=True)
        assert got == rank(f"whales lantern kilo{i}", docs, 5)
    STATE.reset()


def test_a_step_extends_the_merged_postings_of_a_terms_forms_and_an_edit_cuts_them():
    """A word term of several forms (whale, whales; sang, singing: one stem, one verb)
    has their postings merged once, kept with the corpus (docs/design.md §6.2): a turn
    crossing a step (more exchanges paged) extends the kept merge by the new exchanges
    instead of merging over the chat again, an edit cuts it back; the hits are those
    from scratch."""
    docs = [[("user", f"did the whales sing at port {i}?"), ("assistant", f"a whale sang {i}")]
            for i in range(40)]
    keys = [(f"merge{i:02d}", 0) for i in range(40)]      # one size: keys_bytes sizes by the first
    STATE.reset()
    rank("whales singing", docs[:30], 5, keys=keys[:30], indexed=True)
    (c,) = corpus.CORPORA.kept
    merges = {forms: p for forms, p in c.merged.items()}
    assert len(merges) == 2 and all(len(p) == 30 for p in merges.values())
    got = rank("whales singing", docs[:36], 5, keys=keys[:36], indexed=True)
    assert corpus.CORPORA.kept == [c] and c.merged == merges
    assert all(c.merged[forms] is p and len(p) == 36 for forms, p in merges.items())      # extended, not made again
    assert within_bounds()
    edited = docs[:33] + [[("user", "a storm over the mill")]] + docs[34:36]
    edited_keys = keys[:33] + [("merge-e", 0)] + keys[34:36]
    cut = rank("whales singing", edited, 5, keys=edited_keys, indexed=True)
    assert all(c.merged[forms] is p and 33 not in p and len(p) == 35 for forms, p in merges.items())
    assert within_bounds()
    STATE.reset()
    assert got == rank("whales singing", docs[:36], 5, keys=keys[:36], indexed=True)
    STATE.reset()
    assert cut == rank("whales singing", edited, 5, keys=edited_keys, indexed=True)
    STATE.reset()


CJK_SAID = ["港口の歌", "鯨は歌った", "ああああ", "港", "夜", "tea 港 cake", "", "の歌の歌", "歌"]


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["grow", "cut"]), st.integers(1, 9)), min_size=1, max_size=12),
       block=st.sampled_from([1, 3, 128]), said=st.lists(st.sampled_from(CJK_SAID), min_size=60, max_size=60))
def test_a_cjk_terms_posting_is_its_count_in_each_exchanges_text(steps, block, said):
    """A CJK term's posting (docs/design.md §6.2) — kept from the turn it is first
    asked, extended as exchanges are appended (into the last block while it has room,
    then new ones), cut back on an edit — is ``str.count`` of the term in each
    exchange's text, "ああ" in "ああああ" twice (no overlap), a lone character
    wherever it stands; the exchanges' texts are read only the first time."""
    was, corpus.BLOCK = corpus.BLOCK, block
    try:
        cjk_postings_counted(steps, said)
    finally:
        corpus.BLOCK = was


def cjk_postings_counted(steps: list, said: list) -> None:
    docs = [[("user", f"{said[i]} {i}"), ("assistant", said[(i * 7) % 60])] for i in range(60)]
    terms = ["港口", "の歌", "ああ", "港", "歌", "夜", "鯨は"]
    c = corpus.Corpus()
    n, read = 0, []

    def texts():
        read.append(n)
        return ["\n".join(t for _, t in d) for d in docs[:n]]

    def analysed(lo, hi):
        return [docs_module.analyze(d, stems_module.Stems()) for d in docs[lo:hi]]
    for what, k in steps:
        if what == "grow":
            c.extend(analysed(n, min(60, n + k)), [(f"cjk{i}", 0) for i in range(n, min(60, n + k))])
            n = min(60, n + k)
        else:
            n = max(0, n - k)
            c.cut(n)
        for v in terms[:1 + n % len(terms)]:       # more terms asked as it goes
            assert c.cjk_tf(v, texts) == {d: got for d in range(n)
                                          if (got := "\n".join(t for _, t in docs[d]).count(v))}, (v, n)
        assert cjk_true(c)
    assert len(read) <= 1


@settings(max_examples=200, deadline=None)
@given(docs=st.lists(st.tuples(st.sampled_from(CJK_SAID + list(WORDS)), st.sampled_from(CJK_SAID + list(WORDS))),
                     min_size=1, max_size=30),
       query=st.lists(st.sampled_from(CJK_SAID + list(WORDS)), min_size=1, max_size=3).map(" ".join))
def test_a_ranking_of_cjk_terms_from_the_corpus_is_the_scans(docs, query):
    """The corpus's CJK postings rank as the scan counts (``str.count`` in each
    exchange's text), every hit."""
    docs = [[("user", u), ("assistant", r)] for u, r in docs]
    STATE.reset()
    indexed = rank(query, docs, 10_000, indexed=True, excerpts=False)
    STATE.reset()
    assert indexed == rank(query, docs, 10_000, indexed=False, excerpts=False)


def test_a_branch_of_a_long_chat_takes_its_start_and_leaves_it_whole(monkeypatch):
    """A ranking whose exchanges share a kept corpus's start, less than half of it (a
    branch of a long chat: the same pages, the same keys), gets a corpus of its own made
    from that start (docs/design.md §6.2); the long chat's is left as it was, so that
    its next turn analyses nothing. Both rank as from scratch."""
    docs = [[("user", f"did the whales sing at port {i}?"), ("assistant", f"a lantern {i} in the rain")]
            for i in range(300)]
    keys = [(f"long{i}", 0) for i in range(300)]
    STATE.reset()
    rank("whales port", docs[:100], 5, keys=keys[:100], indexed=True)     # posted per word when asked,
    for n in range(150, 301, 50):                                           # then one by one
        rank("whales port", docs[:n], 5, keys=keys[:n], indexed=True)
    (long,) = corpus.CORPORA.kept
    assert long.lazy == 100 and len(long.words) == 300
    whole = (len(long.words), long.size, dict(long.posting("whales")), dict(long.posting("lantern")))
    branch = docs[:140] + [[("user", "a storm over the mill")]]
    got = rank("whales storm mill", branch, 5, keys=keys[:140] + [("branch", 0)], indexed=True)
    assert len(corpus.CORPORA.kept) == 2 and corpus.CORPORA.kept[0] is long
    mine = corpus.CORPORA.kept[1]
    assert len(mine.words) == 141 and mine.words[:140] == long.words[:140]
    assert mine.posting("whales") == {d: 1 for d in range(140)} and mine.posting("storm") == {140: 1}
    assert (len(long.words), long.size, long.posting("whales"), long.posting("lantern")) == whole
    counted = []
    real = docs_module._index
    monkeypatch.setattr(docs_module, "_index", lambda *a, **k: counted.append(1) or real(*a, **k))
    again = rank("whales port 250", docs, 5, keys=keys, indexed=True)
    assert not counted and corpus.CORPORA.kept[-1] is long
    monkeypatch.undo()
    STATE.reset()
    assert got == rank("whales storm mill", branch, 5, keys=keys[:140] + [("branch", 0)], indexed=True)
    STATE.reset()
    assert again == rank("whales port 250", docs, 5, keys=keys, indexed=True)
    STATE.reset()


def test_an_exchange_the_kept_corpus_holds_is_read_again_without_counting_its_words(monkeypatch):
    """Its analysis let go by the cache (a long chat's analyses pass their bound), an
    exchange the kept corpus holds that a ranking reads (a passage, a question) is made
    again from its text, its word counts the corpus's own (docs/design.md §6.2): no word
    of the chat counted again, and the hits are those from scratch."""
    docs = [[("user", f"did the whales sing at port {i}?"), ("assistant", f"a lantern {i} in the rain")]
            for i in range(40)]
    keys = [(f"read{i}", 0) for i in range(40)]
    STATE.reset()
    rank("whales port", docs, 5, keys=keys, indexed=True)
    CACHE.clear()
    counted = []
    real = docs_module._index
    monkeypatch.setattr(docs_module, "_index", lambda *a, **k: counted.append(1) or real(*a, **k))
    got = rank("lantern rain 7", docs, 5, keys=keys, indexed=True)
    assert not counted and CACHE.entries         # read, and kept again
    STATE.reset()
    assert got == rank("lantern rain 7", docs, 5, keys=keys, indexed=True)
    STATE.reset()


def test_a_corpus_found_by_equal_keys_takes_the_rankings_own(monkeypatch):
    """A session whose kept turn was lost makes its exchanges' keys again: equal to the
    kept corpus's, other objects. The corpus takes the ranking's, so that its next turn
    finds it by identity (docs/design.md §6.2), not by comparing every key's strings;
    the hits are those from scratch."""
    docs = [[("user", f"the whales sang at port {i}"), ("assistant", f"a lantern {i} in the rain")]
            for i in range(30)]

    def keys():     # made anew: equal, not the same objects
        return [("".join(["page", str(i)]), 0) for i in range(30)]
    STATE.reset()
    rank("whales port", docs, 5, keys=keys(), indexed=True)
    (c,) = corpus.CORPORA.kept
    again = keys()
    assert all(a == b and a is not b for a, b in zip(c.keys, again))
    before = c.keys_bytes
    got = rank("lantern rain 7", docs, 5, keys=again, indexed=True)
    assert corpus.CORPORA.kept == [c] and len(c.keys) == 30
    assert all(a is b for a, b in zip(c.keys, again)) and c.keys_bytes == before
    STATE.reset()
    assert got == rank("lantern rain 7", docs, 5, keys=keys(), indexed=True)
    STATE.reset()


def test_sessions_taking_turns_keep_what_their_rankings_derived():
    """Two sessions' turns interleave in a busy isolate: each corpus keeps its memo (the
    norms and parts its rankings derived) while the other ranks, so a session's next
    turn derives nothing again (docs/design.md §6.2); the hits are those from scratch."""
    a = [[("user", f"did the whales sing at port {i}?"), ("assistant", f"a lantern {i} in the rain")]
         for i in range(120)]
    b = [[("user", f"the caravan crossed the mill road {i}"), ("assistant", f"silver storm {i}")]
         for i in range(90)]
    ka, kb = [(f"a{i}", 0) for i in range(120)], [(f"b{i}", 0) for i in range(90)]
    STATE.reset()
    first = rank("whales port lantern", a, 5, keys=ka, indexed=True)
    mine = corpus.CORPORA.kept[-1]
    memo = dict(mine.memo)
    assert memo
    rank("caravan storm road", b, 5, keys=kb, indexed=True)
    assert mine.memo == memo                    # the other session's turn left it whole
    again = rank("whales port lantern", a, 5, keys=ka, indexed=True)
    assert corpus.CORPORA.kept[-1] is mine and again == first
    assert mine.memo.keys() == memo.keys() and all(mine.memo[k] is v for k, v in memo.items())
    STATE.reset()
    assert again == rank("whales port lantern", a, 5, keys=ka, indexed=True)
    STATE.reset()


def test_a_question_of_many_common_terms_keeps_their_parts_turn_after_turn(monkeypatch):
    """A question holding many words every exchange holds (a Japanese one's bigrams of
    particles: issue 45, fourteenth pass) has a part over every exchange for each, and
    the corpus keeps them (as doubles, docs/design.md §6.2): the next question asking
    them again with a new rare word makes none of them again, where lists of floats
    emptied the memo each turn (a turn over 3,000 exchanges then derived every part
    anew). The hits are those from scratch."""
    monkeypatch.setattr(corpus, "MEMO_ENTRIES", 64)     # the bound: 16 entries an exchange
    common = "alpha bravo charlie delta echo foxtrot golf"
    docs = [[("user", f"{common} kilo{i}"), ("assistant", f"lima{i} {common}")] for i in range(60)]
    keys = [(f"common {i}", 0) for i in range(60)]
    made = parts_made(monkeypatch)
    STATE.reset()
    hits = {}
    for i in (3, 7, 11):
        made.clear()
        hits[i] = rank(f"{common} kilo{i}", docs, 5, keys=keys, indexed=True)
        if i == 3:
            assert made.count(True) == 14       # each common word's part and its window's
        else:
            assert made.count(True) == 0        # kept: only the rare word's parts made
    for i, got in hits.items():
        STATE.reset()
        assert got == rank(f"{common} kilo{i}", docs, 5, keys=keys, indexed=True)
    STATE.reset()


def parts_made(monkeypatch) -> list:
    """The BM25 parts a ranking makes from now on, one entry each: True for a part over
    every exchange (a list, or a window's column), False for a dict of a few."""
    made = []
    real_part, real_column = bm25_module.part, bm25_module.column_part

    def part(weight, norm, tf, n):
        got = real_part(weight, norm, tf, n)
        made.append(type(got) is not dict)
        return got

    def column_part(weight, norm, counts):
        made.append(True)
        return real_column(weight, norm, counts)
    monkeypatch.setattr(bm25_module, "part", part)
    monkeypatch.setattr(bm25_module, "column_part", column_part)
    return made
