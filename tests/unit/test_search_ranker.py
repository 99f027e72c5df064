"""Ranking of exchanges and their excerpts (docs/design.md §6.1, §6.2)."""

import re
import unicodedata

from hypothesis import assume, given, settings, strategies as st

from multillm_edge.search import EXCERPT_MAX, analyzer, rank, ranker
from multillm_edge.search.ranker import BASELINE, ELLIPSIS, PLAIN, Scoring

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


def test_neighbour_smoothing_lifts_the_answer_to_a_question_asked_before_it():
    docs = [doc(FILLER), doc("Where did you bury the crown?"), doc("Under the old oak, by the river."),
            doc("The crown of the river king, under glass."), doc(FILLER)]
    assert rank("crown river oak", docs, 1)[0].doc in (2, 3)
    assert rank("crown river oak", docs, 1, scoring=Scoring(neighbour=0.0, passage=0.0))[0].doc in (2, 3)


def test_the_term_cap_keeps_the_rarest():
    docs = [doc(f"common word {i} zyx") for i in range(30)] + [doc("rare needle")]
    query = " ".join(f"common word{i}" for i in range(40)) + " needle"
    assert rank(query, docs, 1)[0].doc == 30


def test_the_analysis_cache_is_bounded_and_keyed(monkeypatch):
    ranker.clear_cache()
    monkeypatch.setattr(ranker, "CACHE_CODE_POINTS", 50)
    docs = [doc("x" * 20 + " key"), doc("y" * 20 + " key"), doc("z" * 20 + " key")]
    hits = rank("key", docs, 5, keys=["a", "b", "c"])
    assert list(ranker._cache) == ["b", "c"] and ranker._cached[0] <= 50
    assert rank("key", docs, 5, keys=["a", "b", "c"]) == hits == rank("key", docs, 5)
    ranker.clear_cache()


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
            folded = analyzer.fold(t)
            words += [(w, d) for w in analyzer.words(folded) + analyzer.CJK_RE.findall(folded)]
    words = [(w, d) for w, d in words if w not in analyzer.STOPWORDS]
    assume(words)
    word, _ = words[pick % len(words)]
    hits = rank(word, docs, 10)
    holding = {d for w, d in words if w == word}
    assert hits and hits[0].doc in holding or any(h.doc in holding for h in hits), (word, texts)


def test_fold_is_nfkc_casefold():
    assert analyzer.fold("ＩＬＳＡ") == unicodedata.normalize("NFKC", "ＩＬＳＡ").casefold()


def test_measured_options_left_off_by_default_still_rank():
    # bench/bench_recall.py ablates them; the default Scoring uses none of them
    assert (Scoring().asked, Scoring().lidf) == (ranker.ASK_MOVE, True)
    docs = [doc(FILLER), doc("Ana: where is the crown?", "Bo: the crown lies under the oak."), doc(FILLER),
            doc("Ana: nothing here", "Bo: the river runs.")]
    for s in (Scoring(lidf=False), Scoring(asked=0), Scoring(asked=ranker.ASK_COPY), Scoring(pairs=False),
              Scoring(window=0.0, neighbour=0.5)):
        assert rank("crown oak", docs, 1, scoring=s)[0].doc == 1
        assert [h.doc for h in rank("river", docs, 5, scoring=s)] == [3]


def test_a_question_ending_an_exchange_counts_for_the_answer_after_it():
    docs = [doc(FILLER), doc("Ana: the weather turned.", "Bo: What did you bury under the old oak?"),
            doc("Ana: I buried the crown there, long ago.", "Bo: I see."), doc(FILLER)]
    assert rank("what did Ana bury under the old oak", docs, 1)[0].doc == 2
    assert rank("what did Ana bury under the old oak", docs, 1, scoring=Scoring(asked=0))[0].doc == 1
    # the asking exchange still holds its words: queried alone, they find it
    assert 1 in [h.doc for h in rank("oak", docs, 5)]


def test_line_idf_weighs_a_word_in_every_exchange_but_few_lines():
    an = [ranker.analyze(doc("Ana: a\nBo: b\nBo: c\nBo: d")) for _ in range(4)]
    per_doc = {"ana": {d: 1 for d in range(4)}}
    per_line = [a.lines for a in an]
    assert ranker._line_idf(per_doc, per_line, None, {})["ana"] > 0.5
    # a dense term's column counts the same
    assert ranker._line_idf(per_doc, per_line, None, {"ana": [1] * 4}) == ranker._line_idf(per_doc, per_line, None, {})


def test_an_indexed_ranking_is_the_same_after_the_vocabulary_is_emptied(monkeypatch):
    docs = [doc(f"The whales sang at port {i}.", f"Whale songs, number {i}, drift.") for i in range(12)]
    docs += [doc("Crying gulls over the port; a whale sings below."), doc("Nothing to see.")]
    keys = [("vocabulary", i) for i in range(len(docs))]
    query = "whales singing at the port, crying"

    def ranked():
        return rank(query, docs, 5, keys=keys, indexed=True, excerpts=False)

    ranker.clear_cache()
    expected = ranked()
    assert [h.doc for h in expected][:1] == [12]
    analyzer._VOCABULARIES[(True, True)].clear()     # the analyses' words are forgotten
    assert ranked() == expected                       # registered again
    monkeypatch.setattr(analyzer, "STEM_CACHE_WORDS", 8)
    analyzer._VOCABULARIES[(True, True)].clear()
    assert ranked() == expected                       # this call's words overflow: its own forms
    assert rank(query, docs, 5, indexed=True, excerpts=False) == expected    # nothing cached
    ranker.clear_cache()


def test_the_cache_counts_what_an_index_grows_and_stays_bounded(monkeypatch):
    """Lines, edge and question lines counted after an exchange is cached count against
    the bound as they are made; the count is always the cached analyses' weights."""
    docs = [doc(f"Where is the lantern {i}?", "\n".join(["The lantern flickers."] * 20)) for i in range(30)]
    keys = [("grow", i) for i in range(len(docs))]

    def consistent():
        return ranker._cached[0] == sum(a.weight for a in ranker._cache.values())

    ranker.clear_cache()
    rank("lantern flickers", docs, 5, keys=keys, indexed=True)
    assert consistent()
    grown = [a for a in ranker._cache.values() if a.index.extra]
    assert grown and all(a.weight > a.length + ranker.STEM_WEIGHT * len(a.index.words) for a in grown)
    total = ranker._cached[0]
    monkeypatch.setattr(ranker, "CACHE_CODE_POINTS", total // 2)   # enforced as it grows:
    rank("where is the lantern", docs, 5, keys=[("again", i) for i in range(len(docs))], indexed=True)
    assert consistent() and ranker._cached[0] <= total // 2 and len(ranker._cache) < len(docs)
    ranker.clear_cache()
    assert ranker._cached[0] == 0 and not any(a.index.cached for a in grown)
    monkeypatch.undo()
    # an analysis cached unindexed (the scan) indexed in its place, a key given twice,
    # one moved from the key it had before (``former``): still counted once each
    rank("lantern", docs[:4], 5, keys=keys[:4])
    assert consistent() and all(ranker._cache[k].index is None for k in keys[:4])
    rank("lantern", docs[:4] + docs[:1], 5, keys=keys[:4] + keys[:1], indexed=True)
    assert consistent() and len(ranker._cache) == 4 and all(ranker._cache[k].index for k in keys[:4])
    moved = ranker._cache[keys[0]]
    rank("lantern", docs[:5], 5, keys=[("moved", 0)] + keys[1:5], indexed=True,
         former=lambda i: keys[0] if i == 0 else None)
    assert consistent() and keys[0] not in ranker._cache and ranker._cache[("moved", 0)] is moved
    ranker.clear_cache()


@settings(max_examples=400, deadline=None)
@given(text=st.lists(st.sampled_from(["gold", "golden", "goldenrod", "3", "3.5", "35", "3,500",
                                      " ", ".", "夜", "_", "x", "\n"]), max_size=30).map("".join),
       literals=st.lists(st.sampled_from(["gold", "golden", "3", "3.5", "35", "go"]), min_size=1, max_size=4))
def test_the_scanner_leaving_out_a_longer_literal_finds_the_same_words(text, literals):
    """A literal that is another one followed by word characters is left out of the
    scan; one like "3.5" after "3" is not (its "." is no word character)."""
    alts = "|".join(f"{re.escape(p)}(?<!{ranker._BEFORE}.{{{len(p)}}})"
                    for p in sorted(set(literals), key=lambda p: (-len(p), p)))
    every = re.compile(f"(?:{alts}){ranker._WORDCHAR}*", re.S)
    assert ranker._scanner(literals).findall(text) == every.findall(text)


def test_a_number_is_a_whole_word_for_the_search_as_for_recall():
    """``3`` is not the 3 of ``3.5`` nor ``1`` the 1 of ``1,200`` (one word each), in the
    scan as in the index."""
    docs = [doc("It costs 3.5 gold, or 1,200 copper."), doc("Three: 3 coins, and 1 ring.")]
    for indexed in (False, True):
        assert [h.doc for h in rank("3", docs, 5, indexed=indexed)] == [1]
        assert [h.doc for h in rank("1", docs, 5, indexed=indexed)] == [1]
        assert [h.doc for h in rank("3.5", docs, 5, indexed=indexed)] == [0]


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(st.lists(st.sampled_from(["3", "3.5", "35", "1,200", "1", "d20", "20", " ", ".",
                                                 ",", "\n", "x", "夜"]), max_size=25).map("".join),
                      min_size=1, max_size=4),
       query=st.sampled_from(["3", "3.5", "1", "20", "d20", "1,200"]))
def test_numeric_terms_count_whole_words(texts, query):
    units = [(d, analyzer.fold(t)) for d, t in enumerate(texts)]      # (exchange, its text)
    stems = analyzer.Stems()
    terms = analyzer.query_terms(query, stems)
    got = ranker._word_tfs(terms, units, stems)
    for t in terms:
        want = {at: c for at, f in units if (c := analyzer.words(f).count(t.value))}
        assert got[t] == want
