"""Ranking of exchanges and their excerpts (docs/design.md §6.1, §6.2)."""

import re
import unicodedata

from hypothesis import assume, given, settings, strategies as st

from multillm_edge.search import EXCERPT_MAX, STATE, analysis, bm25, docs as search_docs, match, rank, ranker, stems
from multillm_edge.search.corpus import Corpus
from multillm_edge.search.docs import CACHE
from multillm_edge.search.excerpt import ELLIPSIS
from multillm_edge.search.ranker import BASELINE, PLAIN, Scoring
from multillm_edge.search.stems import Stems

FILLER = "The caravan moves on through the dusty road and nobody speaks. "


def doc(*texts, role="assistant"):
    return [(role, t) for t in texts]


def test_finds_the_exchange_by_other_inflections():
    docs = [doc(FILLER * 3), doc("Ilsabeth promised the silver key near the old mill."), doc(FILLER)]
    [hit, *_] = rank("Which keys is Ilsabeth promising?", docs, 5)
    assert (hit.doc, hit.role, hit.text) == (1, "assistant", "Ilsabeth promised the silver key near the old mill.")


def test_ties_break_newest_first_and_results_repeat():
    docs = [doc("a lantern glows")] * 4
    hits = rank("lanterns", docs, 3, scoring=BASELINE)
    assert [h.doc for h in hits] == [3, 2, 1]
    assert rank("lanterns", docs, 3, scoring=BASELINE) == hits


def test_exchanges_without_a_query_term_are_left_out_and_limit_holds():
    docs = [doc("key"), doc("nothing"), doc("keys and key")]
    assert sorted(h.doc for h in rank("key", docs, 10)) == [0, 2]
    assert len(rank("key", docs, 1)) == 1
    assert rank("zzz", docs, 5) == [] and rank("   ", docs, 5) == [] and rank("key", [], 5) == []


def test_a_query_of_stop_words_only_has_no_hits():
    docs = [doc("What did they do there when it was then?"), doc("и что это было")]
    assert rank("What did they do there?", docs, 5) == []
    assert rank("и что было", docs, 5) == []


def test_whole_words_only():
    assert rank("key", [doc("a monkey")], 5) == []


def test_cjk_and_russian():
    docs = [doc("トナルは塔のそばで黄金の短剣を隠した。"), doc("Мирослава спрятала ключ у моста."), doc("何もない")]
    assert rank("短剣を隠したのは誰？", docs, 1)[0].doc == 0
    assert rank("ключи Мирославы", docs, 1)[0].doc == 1


def test_an_exact_word_is_found_whatever_its_stem():
    docs = [doc("the dying light"), doc("чёрный кот"), doc("a 3.5abc token"), doc("森key")]
    assert [h.doc for h in rank("dying", docs, 5)] == [0]        # stem "die"
    assert [h.doc for h in rank("чёрный", docs, 5)] == [1]       # Snowball folds ё to е
    assert [h.doc for h in rank("abc", docs, 5)] == [2]          # a word after a number
    assert [h.doc for h in rank("key", docs, 5)] == [3]          # a word after CJK


def test_long_message_excerpt_is_centered_on_the_match():
    text = FILLER * 20 + "Ilsabeth hid the key. " + FILLER * 20
    [hit] = rank("Ilsabeth", [doc(text)], 5)
    assert hit.text.startswith(ELLIPSIS) and hit.text.endswith(ELLIPSIS) and len(hit.text) == EXCERPT_MAX
    assert "Ilsabeth hid the key." in hit.text
    assert hit.text[1:-1] == text[hit.start:hit.end]


def test_best_message_of_the_exchange_is_quoted():
    [hit] = rank("silver key", [doc("a key", "the silver key", "silver", role="user")], 5)
    assert (hit.message_index, hit.role, hit.text) == (1, "user", "the silver key")


def test_several_hits_may_come_from_neighbouring_exchanges_and_limit_counts_exchanges():
    docs = [doc("Mira hid the key."), doc(FILLER), doc("Mira lost the key."), doc("Mira found the key.")]
    hits = rank("Mira key", docs, 2)
    assert len(hits) == 2 and {h.doc for h in hits} <= {0, 2, 3}


def test_relevance_is_the_share_of_the_query_idf_held():
    docs = [doc("the silver key"), doc("a silver cup"), doc(FILLER), doc(FILLER)]
    [full, half] = rank("silver key", docs, 5)
    assert (full.doc, full.relevance) == (0, 1.0)
    assert half.doc == 1 and 0 < half.relevance < 0.5          # "key" is the rarer term


def test_the_window_lifts_the_answer_to_a_question_asked_before_it():
    docs = [doc(FILLER), doc("Where did you bury the crown?"), doc("Under the old oak, by the river."),
            doc("The crown of the river king, under glass."), doc(FILLER)]
    assert rank("crown river oak", docs, 1)[0].doc in (2, 3)
    assert rank("crown river oak", docs, 1, scoring=Scoring(passage=0.0))[0].doc in (2, 3)


def test_an_answer_scores_its_question_against_the_exchanges_own_statistics():
    """*asked* (docs/design.md §6.1): the exchange answering a question scores that
    line's terms and length as its own, against the exchanges' statistics as they are —
    their df, mean length and windows — so that a moved question changes only the
    exchanges it moves between (their parts over the others are the corpus's, kept)."""
    docs = [doc("Did the whales sing at the port?"), doc("They did, all night long."),
            doc("The port was quiet; the whales rested."), doc(FILLER)]
    an = [search_docs.analyze(d) for d in docs]
    n, avg = 4, sum(a.length for a in an) / 4
    question = an[0].question
    assert question
    for indexed in (False, True):
        STATE.reset()
        hits = {h.doc: h.score for h in rank("whales sing", docs, 4, scoring=Scoring(window=0.0, passage=0.0),
                                             keys=[(f"q{i}", 0) for i in range(4)] if indexed else None,
                                             indexed=indexed)}
        whales, sing = bm25.idf(n, 2), bm25.idf(n, 1)       # held by 0 and 2; by 0 (not by 1: its question)
        answer = bm25.score_in_order({"w": whales, "s": sing}, {"w": 1, "s": 1},
                                     bm25.norm(an[1].length + len(question), avg))
        asker = bm25.score_in_order({"w": whales, "s": sing}, {"w": 1, "s": 1}, bm25.norm(an[0].length, avg))
        assert hits[1] == round(answer, 4) and hits[0] == round(asker, 4)
        assert hits[2] == round(whales * (1 * bm25._K / (1 + bm25.norm(an[2].length, avg))), 4)
    STATE.reset()


def test_the_term_cap_keeps_the_rarest():
    docs = [doc(f"common word {i} zyx") for i in range(30)] + [doc("rare needle")]
    query = " ".join(f"common word{i}" for i in range(40)) + " needle"
    assert rank(query, docs, 1)[0].doc == 30


def test_the_analysis_cache_is_bounded_and_keyed(monkeypatch):
    CACHE.clear()
    docs = [doc("x" * 20 + " key"), doc("y" * 20 + " key"), doc("z" * 20 + " key")]
    one = search_docs.analyze(docs[0]).weight
    monkeypatch.setattr(CACHE, "max_bytes", 2 * one + 10)
    hits = rank("key", docs, 5, keys=["a", "b", "c"])
    assert list(CACHE.entries) == ["b", "c"] and CACHE.units <= 2 * one + 10
    assert rank("key", docs, 5, keys=["a", "b", "c"]) == hits == rank("key", docs, 5)
    CACHE.clear()


def test_plain_and_baseline_modes():
    docs = [doc("promised keys"), doc("a promise of a key")]
    assert [h.doc for h in rank("promise key", docs, 5, scoring=PLAIN)] == [1]
    assert {h.doc for h in rank("promise key", docs, 5, scoring=BASELINE)} == {0, 1}


def test_an_irregular_form_is_found_from_its_verb_and_a_bit_is_not_bitten():
    docs = [doc("we search the docks"), doc("Wynros found the cursed map."), doc("the map is lost")]
    assert rank("who was finding the map", docs, 3)[0].doc == 1
    assert rank("bite", [doc("a bit of bread"), doc("the dog bit him")], 5) == []


pieces = st.sampled_from(list("ab ßİﬁ𝔘🌙é\u0301夜の森Кл.,\n") + ["key", "Key ", "ＫＥＹ"])
message = st.lists(pieces, max_size=400).map("".join)


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(message, min_size=1, max_size=4),
       query=st.sampled_from(["key", "夜の", "ß", "кл", "ﬁ", "a b"]))
def test_excerpt_is_verbatim_bounded_and_cut_at_code_points(texts, query):
    docs = [doc(*texts)]
    for hit in rank(query, docs, 5):
        msg = docs[hit.doc][hit.message_index][1]
        core = hit.text[(hit.start > 0):len(hit.text) - (hit.end < len(msg))]
        assert core == msg[hit.start:hit.end]                     # verbatim
        assert hit.text == (ELLIPSIS if hit.start else "") + core + (ELLIPSIS if hit.end < len(msg) else "")
        assert len(hit.text) <= EXCERPT_MAX                       # ellipses included
        assert len(msg) <= EXCERPT_MAX or len(hit.text) == EXCERPT_MAX    # as long as allowed


# Letters of several scripts (Latin with diacritics, Greek, Cyrillic with ё, Arabic,
# Hebrew, Devanagari, Thai, CJK, Hangul), digits, separators and punctuation.
alphabet = st.sampled_from(list("abcdeyingsßİıéèøñ\u0301ΣσςДЁёжчёрнйыאבגعربиक्षาไทย夜の森カタ한글0123456789.,:' -_\n!?（）"))
word_text = st.lists(alphabet, min_size=1, max_size=60).map("".join)


@settings(max_examples=400, deadline=None)
@given(texts=st.lists(st.lists(word_text, min_size=1, max_size=3), min_size=1, max_size=4), pick=st.integers(0, 10_000))
def test_any_word_queried_alone_finds_an_exchange_holding_it(texts, pick):
    docs = [doc(*ts) for ts in texts]
    words = []
    for d, ts in enumerate(texts):
        for t in ts:
            folded = analysis.fold(t)
            words += [(w, d) for w in analysis.words(folded) + analysis.CJK_RE.findall(folded)]
    words = [(w, d) for w, d in words if w not in analysis.STOPWORDS]
    assume(words)
    word, _ = words[pick % len(words)]
    hits = rank(word, docs, 10)
    holding = {d for w, d in words if w == word}
    assert hits and hits[0].doc in holding or any(h.doc in holding for h in hits), (word, texts)


def test_fold_is_nfkc_casefold():
    assert analysis.fold("ＩＬＳＡ") == unicodedata.normalize("NFKC", "ＩＬＳＡ").casefold()


def test_each_part_the_bench_ablates_still_ranks_without_it():
    docs = [doc(FILLER), doc("Ana: where is the crown?", "Bo: the crown lies under the oak."), doc(FILLER),
            doc("Ana: nothing here", "Bo: the river runs.")]
    for s in (Scoring(lidf=False), Scoring(asked=False), Scoring(window=0.0), Scoring(passage=0.0)):
        assert rank("crown oak", docs, 1, scoring=s)[0].doc == 1
        assert [h.doc for h in rank("river", docs, 5, scoring=s)] == [3]


def test_a_question_ending_an_exchange_counts_for_the_answer_after_it():
    docs = [doc(FILLER), doc("Ana: the weather turned.", "Bo: What did you bury under the old oak?"),
            doc("Ana: I buried the crown there, long ago.", "Bo: I see."), doc(FILLER)]
    assert rank("what did Ana bury under the old oak", docs, 1)[0].doc == 2
    assert rank("what did Ana bury under the old oak", docs, 1, scoring=Scoring(asked=False))[0].doc == 1
    # the asking exchange still holds its words: queried alone, they find it
    assert 1 in [h.doc for h in rank("oak", docs, 5)]


def test_line_idf_weighs_a_word_in_every_exchange_but_few_lines():
    an = [search_docs.analyze(doc("Ana: a\nBo: b\nBo: c\nBo: d")) for _ in range(4)]
    per_doc = {"ana": {d: 1 for d in range(4)}}
    parts = ranker._Parts(an, None)
    assert ranker._line_idf(per_doc, parts)["ana"] > 0.5
    # one line of four in each exchange: the idf of 4 lines in 16
    assert ranker._line_idf(per_doc, parts)["ana"] == bm25.idf(16, 4)


def test_an_indexed_ranking_is_the_same_after_the_vocabulary_is_emptied(monkeypatch):
    docs = [doc(f"The whales sang at port {i}.", f"Whale songs, number {i}, drift.") for i in range(12)]
    docs += [doc("Crying gulls over the port; a whale sings below."), doc("Nothing to see.")]
    keys = [("vocabulary", i) for i in range(len(docs))]
    query = "whales singing at the port, crying"

    def ranked():
        return rank(query, docs, 5, keys=keys, indexed=True, excerpts=False)

    CACHE.clear()
    expected = ranked()
    assert [h.doc for h in expected][:1] == [12]
    stems._VOCABULARIES.clear()     # a new vocabulary: the analyses' words are forgotten
    assert ranked() == expected                       # registered again
    monkeypatch.setattr(stems, "STEM_CACHE_WORDS", 8)
    stems._VOCABULARIES.clear()
    assert ranked() == expected                       # this call's words overflow: its own forms
    assert rank(query, docs, 5, indexed=True, excerpts=False) == expected    # nothing cached
    CACHE.clear()


def test_the_cache_counts_what_an_index_grows_and_stays_bounded(monkeypatch):
    """Lines, edge and question lines counted after an exchange is cached count against
    the bound as they are made; the count is always the cached analyses' weights."""
    docs = [doc(f"Where is the lantern {i}?", "\n".join(["The lantern flickers."] * 20)) for i in range(30)]
    keys = [("grow", i) for i in range(len(docs))]

    def consistent():
        return CACHE.units == sum(a.weight for a in CACHE.entries.values())

    CACHE.clear()
    rank("lantern flickers", docs, 5, keys=keys, indexed=True)
    assert consistent()
    grown = [a for a in CACHE.entries.values() if a.index.extra]
    assert grown and all(a.weight > a.length + a.index.held for a in grown)
    total = CACHE.units
    monkeypatch.setattr(CACHE, "max_bytes", total // 2)   # enforced as it grows:
    rank("where is the lantern", docs, 5, keys=[("again", i) for i in range(len(docs))], indexed=True)
    assert consistent() and CACHE.units <= total // 2 and len(CACHE.entries) < len(docs)
    CACHE.clear()
    assert CACHE.units == 0 and not any(a.index.cached for a in grown)
    monkeypatch.undo()
    # an analysis cached unindexed (the scan) indexed in its place, a key given twice,
    # one moved from the key it had before (``former``): still counted once each
    rank("lantern", docs[:4], 5, keys=keys[:4])
    assert consistent() and all(CACHE.entries[k].index is None for k in keys[:4])
    rank("lantern", docs[:4] + docs[:1], 5, keys=keys[:4] + keys[:1], indexed=True)
    assert consistent() and len(CACHE.entries) == 4 and all(CACHE.entries[k].index for k in keys[:4])
    moved = CACHE.entries[keys[0]]
    rank("lantern", docs[:5], 5, keys=[("moved", 0)] + keys[1:5], indexed=True,
         former=lambda i: keys[0] if i == 0 else None)
    assert consistent() and keys[0] not in CACHE.entries and CACHE.entries[("moved", 0)] is moved
    CACHE.clear()


@settings(max_examples=400, deadline=None)
@given(text=st.lists(st.sampled_from(["gold", "golden", "goldenrod", "3", "3.5", "35", "3,500",
                                      " ", ".", "夜", "_", "x", "\n"]), max_size=30).map("".join),
       literals=st.lists(st.sampled_from(["gold", "golden", "3", "3.5", "35", "go"]), min_size=1, max_size=4))
def test_the_scanner_leaving_out_a_longer_literal_finds_the_same_words(text, literals):
    """A literal that is another one followed by word characters is left out of the
    scan; one like "3.5" after "3" is not (its "." is no word character)."""
    alts = match._NUMBERS + [match._alternative(p) for p in sorted(set(literals), key=lambda p: (-len(p), p))]
    every = re.compile(f"(?:{'|'.join(alts)}){analysis.WORD_CHAR}*", re.S)
    assert match.scanner(literals).findall(text) == every.findall(text)


# Characters on either side of the blocks ``holds_cjk`` reads by their high byte, CJK
# of each block (Ext B past U+FFFF), an emoji, curly quotes, accents, Cyrillic.
cjk_edges = st.sampled_from(list("\u10ff\u1100\u11ff\u1200\u3004\u3005\u3040\u3041\u30ff\u4e00\u9fff"
                                 "\ua000\uabff\uac00\ud7af\ud7b0\uf8ff\uf900\ufaff\ufb00\u2019\u201c—é"
                                 "ёж") + ["\U0001f600", "\U00020000", "\U0003134f", "\U00031350"])


@settings(max_examples=600, deadline=None)
@given(text=st.lists(st.one_of(cjk_edges, st.sampled_from(["gold", "golden", "3.5", "35", " ", ".", "_", "ёлка",
                                                             "елка", "x", "\n", "3,500"])), max_size=30).map("".join),
       literals=st.lists(st.sampled_from(["gold", "golden", "3", "3.5", "35", "go", "ел", "x"]), min_size=1, max_size=4))
def test_the_plain_scanner_finds_what_the_scanner_finds(text, literals):
    """Issue 45: a text ``holds_cjk`` clears holds no CJK character; ``scannable`` makes
    each CJK character a space; the plain scanner (compiled ~40x faster) finds there
    the same words at the same places as the scanner in the text."""
    if not match.holds_cjk(text):
        assert analysis.CJK_RE.search(text) is None and match.scannable(text) is text
    plain, full = match.scanner(literals, plain=True), match.scanner(literals)
    assert len(match.scannable(text)) == len(text)
    assert [(m.span(), m.group()) for m in plain.finditer(match.scannable(text))] == [
        (m.span(), m.group()) for m in full.finditer(text)]


def test_a_number_is_a_whole_word_for_the_search_as_for_recall():
    """``3`` is not the 3 of ``3.5`` nor ``1`` the 1 of ``1,200`` (one word each), in the
    scan as in the index."""
    docs = [doc("It costs 3.5 gold, or 1,200 copper."), doc("Three: 3 coins, and 1 ring.")]
    for indexed in (False, True):
        assert [h.doc for h in rank("3", docs, 5, indexed=indexed)] == [1]
        assert [h.doc for h in rank("1", docs, 5, indexed=indexed)] == [1]
        assert [h.doc for h in rank("3.5", docs, 5, indexed=indexed)] == [0]


def test_an_irregular_form_is_quoted_where_it_was_ranked():
    """``find`` ranks an exchange saying ``found``: its quote is the message saying it
    (one matcher ranks and quotes)."""
    docs = [doc("We searched the docks all night.", "Wynros found the cursed map.")]
    [hit] = rank("find", docs, 5)
    assert (hit.message_index, hit.text) == (1, "Wynros found the cursed map.")


# Latin (with the letters of "ying" and accents), Cyrillic with ё, irregular forms,
# CJK, ASCII digits and the separators of numbers, punctuation.
scan_pieces = st.sampled_from(list("abdeilnrsty éßаеёиклнорт夜の森.,:'\n 3") + [
    "dying", "lying", "ying", "cries", "cry", "found", "finds", "went", "go", "нашла", "найти",
    "чёрный", "черные", "3.5", "1,200", "10:30", "森key", "3.5abc", "the", "ran", "running"])
scan_text = st.lists(scan_pieces, max_size=40).map("".join)


@settings(max_examples=500, deadline=None)
@given(texts=st.lists(scan_text, min_size=1, max_size=4), pick=st.integers(0, 10_000),
       extra=st.sampled_from(["die", "cry", "find", "go", "найти", "черный", "3", "3.5", "夜の", "run", ""]))
def test_the_scan_and_the_index_count_the_same(texts, pick, extra):
    """The same term counts per exchange and per line, and so the same ranking, whether
    a term is scanned for or looked up in the exchanges' word counts."""
    docs = [doc(t) for t in texts]
    words = [w for t in texts for w in analysis.words(analysis.fold(t))]
    query = " ".join(filter(None, [words[pick % len(words)] if words else "", extra]))
    s = Stems()
    terms = analysis.query_terms(query, s)
    assume(terms)
    an = [search_docs.analyze(d, s) for d in docs]
    scan, index = match.Matcher(terms, s), match.Matcher(terms, s)
    corpus = Corpus(an)
    index.pin(corpus)
    columns = index.columns(corpus)
    for d, a in enumerate(an):
        want = {t: c for t in terms if (c := columns[t].get(d) if t.kind == "w" else a.text.count(t.value))}
        assert scan.counts(a.text) == want, (query, texts[d])
        assert scan.line_counts(a.text) == index.indexed_line_counts(a), (query, texts[d])
    assert rank(query, docs, 10, excerpts=False) == rank(query, docs, 10, indexed=True, excerpts=False)


def test_a_new_vocabulary_registers_the_cached_indexes_again():
    """Resetting the vocabularies (not the analyses) leaves no cached index counted in
    the new vocabulary as if registered there: the ranking is the same."""
    docs = [doc("The whales sang at the port.", "Whale songs drift."), doc("A whale sings below the port."),
            doc("Nothing to see."), doc("Whaling ships in port.")]
    keys = [("forget", i) for i in range(len(docs))]
    CACHE.clear()
    expected = rank("whales singing at the port", docs, 5, keys=keys, indexed=True, excerpts=False)
    stems._VOCABULARIES.clear()
    assert rank("whales singing at the port", docs, 5, keys=keys, indexed=True, excerpts=False) == expected
    CACHE.clear()


def test_one_reset_empties_every_memo_and_each_is_bounded():
    from multillm_edge.core import recall
    docs = [doc("Ｔｈｅ whales — sang “at” the port."), doc("A whale sings below the port 夜の森.")]
    rank("whales singing", docs, 5, keys=[("reset", 0), ("reset", 1)], indexed=True)
    recall._STARTS.keep("page", [0])
    parts = STATE._parts
    assert {"analyses", "vocabularies", "cuts by characters", "cuts by bytes", "simple characters",
            "irregular forms by stem", "exchange starts"} <= set(parts)
    assert all(isinstance(b, int) and b > 0 for b in STATE.bounds().values())
    assert all(len(p.entries if hasattr(p, "entries") else p) for p in parts.values())
    STATE.reset()
    assert not any(len(p.entries if hasattr(p, "entries") else p) for p in parts.values())
    assert CACHE.units == 0


def test_the_term_cap_counts_a_term_by_a_probe_that_does_not_depend_on_set_order():
    """A word term's rarity probe is its shortest query word or start, the first in
    order among equals (``got`` and ``get`` tie: ``get``), whatever the hash seed."""
    terms = [analysis.Term("w", "get", frozenset({"got"}))] + [
        analysis.Term("w", f"word{i}", frozenset({f"word{i}"})) for i in range(8)]
    texts = ["they get it, get on and get going"] * 20
    assert ranker._rarest(terms, texts, 8) == terms[1:]


class _Reads:
    """Documents that count which of them a ranking read."""
    def __init__(self, docs: list):
        self.docs, self.read = docs, set()

    def __len__(self):
        return len(self.docs)

    def __getitem__(self, i):
        self.read.add(i)
        return self.docs[i]


def test_a_ranking_of_exchanges_a_kept_corpus_holds_reads_only_the_new_and_the_best():
    """Issue 45: a kept corpus is found by its exchanges' keys, so the next turn's
    ranking (one exchange appended, the analyses cache emptied in between) reads and
    analyses the appended exchange and the few whose passages or questions it scores,
    not the history — and ranks as a ranking from scratch does."""
    from multillm_edge.search.corpus import CORPORA
    chat = [doc(f"The whale {i} sang by the port of {i % 7}?", f"A lantern glows {i % 11}.")
            for i in range(400)]
    keys = [("held", i) for i in range(400)]
    STATE.reset()
    rank("whale port lantern", chat[:399], 6, keys=keys[:399], indexed=True, excerpts=False)
    corpus = CORPORA.kept[-1]
    CACHE.clear()
    docs = _Reads(chat)
    got = rank("whale lantern 17 port 3", docs, 6, keys=keys, indexed=True, excerpts=False,
               scoring=Scoring(rerank=12))
    assert CORPORA.kept == [corpus] and len(corpus.words) == 400
    # the appended one, the 12 best and their neighbours, and the questions the best answer
    assert 399 in docs.read and len(docs.read) <= 1 + 3 * 12 + 12, len(docs.read)
    assert len(CACHE.entries) == len(docs.read)
    STATE.reset()
    assert rank("whale lantern 17 port 3", chat, 6, keys=keys, indexed=True, excerpts=False,
                scoring=Scoring(rerank=12)) == got
    STATE.reset()


def test_many_new_indexes_register_their_words_together_or_one_by_one(monkeypatch):
    """Issue 45: a new isolate's first recall registers the words of the exchanges it
    indexes at once (one set of them) when the vocabulary holds them, else index by
    index; either way every index is marked with the vocabulary holding its words, and
    the ranking is the one made registering each as it comes."""
    from multillm_edge.search import docs as docs_module
    chat = [doc(f"The whales sang at port {i}, ёлка {i}.", f"Whale songs, number {i}; dying gulls.")
            for i in range(40)]
    keys = [("together", i) for i in range(len(chat))]
    query = "whales singing at the port, dying"

    calls = []
    known = stems.Stems.known
    monkeypatch.setattr(stems.Stems, "known", lambda self, words: calls.append(len(words)) or known(self, words))

    def ranked(together: int, words: int = stems.STEM_CACHE_WORDS):
        STATE.reset()
        calls.clear()
        monkeypatch.setattr(docs_module, "TOGETHER", together)
        monkeypatch.setattr(stems, "STEM_CACHE_WORDS", words)
        got = rank(query, chat, 5, keys=keys, indexed=True, excerpts=False)
        vocabulary = stems._VOCABULARIES[(True, True)]
        marked = [a.index.vocabulary is vocabulary.mark for a in CACHE.entries.values()]
        held = all(w in vocabulary.stem_of for a in CACHE.entries.values() for w in a.index.words)
        return got, all(marked), held

    one_by_one, marked, held = ranked(10 ** 9)
    assert one_by_one and marked and held
    assert len(calls) == 40
    assert ranked(16) == (one_by_one, True, True) and len(calls) == 1   # 40 new indexes: together
    got, _, _ = ranked(16, words=64)     # more words than the vocabulary holds: one by one,
    assert got == one_by_one            # a vocabulary replaced on the way, the same hits
    STATE.reset()
