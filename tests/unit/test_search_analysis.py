"""The search's analysis and stems: what a page or query turns into (docs/design.md §6.1)."""

from multillm_edge.search import STATE, analysis, stems as stems_module
from multillm_edge.search.stems import Stems


def terms(q):
    return [(t.kind, t.value) for t in analysis.query_terms(q, Stems())]


def test_nfkc_and_casefold_fold_fullwidth_ligatures_and_case():
    assert analysis.fold("ＩＬＳＡＢＥＴＨ ﬁre Straße ΣΊΣΥΦΟΣ") == "ilsabeth fire strasse σίσυφοσ"
    assert terms("ＰＲＯＭＩＳＥＳ") == terms("promises") == [("w", "promis")]


def test_english_inflections_share_a_stem():
    assert {t for t in terms("promised promises promising")} == {("w", "promis")}
    assert terms("bridges") == terms("bridge") == [("w", "bridg")]


def test_russian_inflections_share_a_stem():
    assert terms("обещала обещал") == [("w", "обеща")]
    assert terms("мостом") == terms("мост") == [("w", "мост")]
    assert terms("Мирославы") == terms("мирослава")


def test_names_and_numbers_stay_whole():
    assert terms("Ilsabeth's") == [("w", "ilsabeth")]            # lone letter dropped
    assert terms("rolled 3d6 for 1,200 gold at 10:30") == [
        ("w", "roll"), ("w", "3d6"), ("w", "1,200"), ("w", "gold"), ("w", "10:30")]
    assert terms("1200") == [("w", "1200")]                        # not the same term as 1,200


def test_cjk_runs_become_bigrams_and_a_lone_char_itself():
    assert terms("夜の森へ") == [("c", "夜の"), ("c", "の森"), ("c", "森へ")]
    assert terms("ア") == [("c", "ア")]
    assert terms("김치찌개") == [("c", "김치"), ("c", "치찌"), ("c", "찌개")]
    assert analysis.cjk_terms(analysis.fold("ｱｲ")) == ["アイ"]       # halfwidth katakana by NFKC


def test_stopwords_go_even_when_nothing_else_is_left():
    assert terms("what did the bridge do") == [("w", "bridg")]
    assert terms("what did") == []


def test_plain_mode_does_not_stem():
    assert [t.value for t in analysis.query_terms("promised", Stems(False))] == ["promised"]


def test_each_word_is_stemmed_once():
    s = Stems()
    s("running")
    s.stem = None       # a second call would need the stemmer
    assert s("running") == "run"


def test_fold_equals_whole_text_nfkc_for_every_stable_character():
    import sys
    import unicodedata

    from hypothesis import given, settings, strategies as st
    stable = [chr(c) for c in range(sys.maxunicode + 1)
              if not analysis._UNSTABLE_RE.fullmatch("a" + chr(c)) and not 0xd800 <= c < 0xe000]
    assert all(unicodedata.normalize("NFKC", c) == c and not unicodedata.combining(c) for c in stable)
    pieces = st.sampled_from(list("aeoAкaかカハ가各\u0301\u0308\u3099\u309a\u309b（ＡｱﾞｶﾞﬁⅣ²\u1161\u11a8 \n？！：）…\u00a0\u3000ㄱㅏ") + stable[::997])

    @settings(max_examples=1500, deadline=None)
    @given(st.lists(pieces, max_size=40).map("".join))
    def same(text):
        assert analysis.fold(text) == unicodedata.normalize("NFKC", text).casefold()
    same()


def test_irregular_forms_stem_with_their_verb():
    from multillm_edge.search.stems import variants
    st = Stems()
    assert st("found") == st("finding") == st("find")
    assert st("stole") == st("stolen") == st("stealing")
    assert st("нашла") == st("найти") and st("украла") == st("украсть")
    assert "found" in variants(st("find"), st)
    assert st("rose") != st("rise")            # as often a flower: left out
    assert Stems(stem=False)("found") == "found" and variants("find", Stems(stem=False)) == []


# Letters of several scripts, digits and the separators of numbers, ASCII and non-ASCII
# punctuation and whitespace, CJK, a combining mark, a lone surrogate, newlines.
from collections import Counter  # noqa: E402

from hypothesis import given, settings, strategies as st  # noqa: E402

bag_text = st.lists(st.sampled_from(list(
    "ab Z9_.,:;'’—–“”…é\u0301\u00a0\u3000\u2028\x1c\t港口の歌чёрный١٢ \ud800-!?\n") + ["3.5", "10:30", "don’t"]),
    max_size=120).map("".join)


@settings(max_examples=1500, deadline=None)
@given(text=bag_text)
def test_word_bag_holds_the_words_each_as_often(text):
    assert Counter(analysis.word_bag(text)) == Counter(analysis.words(text))
    assert [Counter(b) for b in analysis.line_bags(text)] == [
        Counter(analysis.words(line)) for line in text.split("\n")]


# Texts holding more non-ASCII bytes than the cuts' memo keys (``CUT_KEY_BYTES``), most
# of them Cyrillic (their cutting characters found by ``_MAY_CUT_RE``) or CJK (a set of
# every character); digits that make no number (², ①), non-ASCII digits that do.
long_bag_text = st.tuples(st.lists(st.sampled_from(list(
    "ab Z9_.,:'’—“…é\u0301\u00a0\u2028港口のчёрныйЖΣσ²①١٢ \ud800-?\n") + [
        "3.5", "огонь", "ночь", "λόγος", "١.٢"]), max_size=200).map("".join),
    st.sampled_from([" огонь ночь" * 30, " 港口の歌を聴く、" * 30])).map("".join)


@settings(max_examples=800, deadline=None)
@given(text=long_bag_text)
def test_a_long_non_ascii_texts_word_bag_holds_the_words_each_as_often(text):
    folded = analysis.fold(text)
    assert len(folded.encode("utf-8", "surrogatepass").translate(None, bytes(range(128)))) > analysis.CUT_KEY_BYTES
    assert Counter(analysis.word_bag(folded)) == Counter(analysis.words(folded))
    assert [Counter(b) for b in analysis.line_bags(folded)] == [
        Counter(analysis.words(line)) for line in folded.split("\n")]


def test_a_long_cyrillic_text_is_cut_by_its_few_cutting_characters():
    """Issue 45: a text of many non-ASCII bytes (a Russian chat's) is cut in C by the
    few characters in it that cut a word, not by WORD_RE."""
    text = analysis.fold("«Ночь», — сказала она… Огонь горел ярко; ² и ① — не числа. " * 8)
    raw = text.encode()
    assert len(raw.translate(None, bytes(range(128)))) > analysis.CUT_KEY_BYTES
    spaced = analysis._spaced(text, analysis._ASCII_SPACE)
    assert spaced is not None and Counter(spaced.split()) == Counter(analysis.words(text))
    assert analysis._spaced(text + " ١.٢", analysis._ASCII_SPACE) is None     # a number of ١, ٢
    cjk = analysis.fold("港口の歌を聴く、tea and 夜cake。" * 30)      # mostly CJK: a set of every character
    assert Counter(analysis._spaced(cjk, analysis._ASCII_SPACE).split()) == Counter(analysis.words(cjk))


def test_word_bag_cuts_many_cjk_characters_and_numbers_as_words_does():
    cjk = "".join(chr(0x4E00 + i) for i in range(40)) + " tea and 夜cake"
    assert sorted(analysis.word_bag(cjk)) == sorted(analysis.words(cjk)) == ["and", "cake", "tea"]
    assert sorted(analysis.word_bag("pi is 3.14, or ٣.١")) == sorted(["pi", "is", "3.14", "or", "٣.١"])


def test_forms_lead_from_a_stem_back_to_its_words():
    s = Stems()
    s.known(Counter(["whales", "whale", "whaling", "sing"]))
    assert {"whales", "whale"} <= set(s.forms("whale")) and "sing" in s.forms("sing")
    s.pin({"whale": frozenset({"whale"})})
    assert set(s.forms("whale")) == {"whale"} and not s.forms("sing")


@settings(max_examples=1500, deadline=None)
@given(texts=st.lists(st.text(alphabet=st.sampled_from(list(
    "aAΣσς\u0301\u0327\u0345ﬁＫ①ßİ\u1100\u1161\u11a8가夜\u3099か\ud800 \n")), max_size=12), max_size=4))
def test_folding_messages_joined_by_newlines_is_folding_each(texts):
    """An exchange's texts are folded joined: a newline composes with nothing."""
    assert analysis.fold("\n".join(texts)) == "\n".join(analysis.fold(t) for t in texts)


def waits_as_it_must(word: str) -> None:
    """What lets a word wait to be stemmed until a stem it may have is asked for; and
    the one prefix rule the scan reads: every word starts with one of its stem's
    ``starts`` (ё read as е)."""
    s = Stems()
    if stems_module.waits(word):
        assert word.startswith(stems_module.stem_prefix(s.stem(word))), word
    plain = word.replace("ё", "е")
    assert any(plain.startswith(p.replace("ё", "е")) for p in stems_module.starts(s.stem(word), s)), word


@settings(max_examples=3000, deadline=None)
@given(word=st.text(alphabet=st.sampled_from(list("abcdefghijklmnopqrstuvwxyzéßüàçñ"
                                                  "абвгдеёжзийклмнопрстуфхцчшщъыьэюя0")), min_size=1, max_size=12)
       | st.sampled_from(["ying", "yings", "ёё"]).flatmap(lambda tail: st.sampled_from(list("bdlétж")).map(lambda c: c + tail)))
def test_a_word_that_waits_starts_with_its_stems_prefix(word):
    waits_as_it_must(word)


def test_the_words_snowball_rewrites_early_wait_only_where_they_may():
    # a vowel-initial word losing all but its first letter, the "ying" rule, Snowball's
    # exceptions, irregular forms, ё, a rewritten last letter, a lone letter
    for word in ("ued юей lying vyings dyings eying skies нашла нашёл ran went сёстры possibilities hoping x "
                 "3.5 d20 cried cry").split():
        waits_as_it_must(word)


def test_an_irregular_form_waits_under_its_verb_which_starts_with_its_stems_prefix():
    from multillm_edge.search import irregular
    s = Stems()
    for form, verb in irregular.FORMS.items():
        assert verb.startswith(stems_module.stem_prefix(s.stem(form))), (form, verb)


@settings(max_examples=300, deadline=None)
@given(words=st.lists(st.sampled_from("whales whale whaling sang sing singing dying die lying "
                                      "ёлка елки cried cry crying abacus ran run running ое "
                                      "ue ued юей уходили уходит went gone go goes found finds нашла найти".split()),
                      min_size=1, max_size=12),
       asked=st.sampled_from("whale sing die lie ёлк елк cri run уход ue u ю go find найт".split()))
def test_forms_of_words_registered_to_wait_are_every_word_with_the_stem(words, asked):
    STATE.reset()
    try:
        s = Stems()
        s.known(Counter(words))
        eager = {w for w in words if Stems().stem(w) == asked}
        assert set(s.forms(asked)) == eager
        assert all(s(w) == s.stem(w) for w in words)       # each word's own stem, waiting or not
        assert set(s.forms(asked)) == eager                 # and asked again: each form once
        assert len(s.forms(asked)) == len(eager)
    finally:
        STATE.reset()


def test_the_irregular_forms_of_a_stem_are_those_of_the_whole_table():
    """``variants`` stems only the verbs that may have a stem (issue 45): for every stem
    of the table's verbs and forms, and others, the forms the whole table stemmed gives."""
    from multillm_edge.search import irregular
    from multillm_edge.search.stems import STATE, variants
    st = Stems()
    whole: dict = {}
    for form, base in irregular.FORMS.items():
        whole.setdefault(st(base), []).append(form)
    asked = set(whole) | {st(f) for f in irregular.FORMS} | {"", "a", "wh", "whale", "найт", "ш"}
    STATE.reset()
    st = Stems()
    for stem in sorted(asked):
        assert variants(stem, st) == whole.get(stem, []), stem


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(st.sampled_from(list("abz09_é€ж港") + ["\U0001f600"]), max_size=12),
                       st.integers(1, 300), max_size=40))
def test_the_bytes_of_word_counts_are_their_objects_sizes(counted):
    """``docs.counts_bytes`` adds up ASCII words from their joined length (issue 45):
    the same as ``getsizeof`` of the dict and of each word."""
    from sys import getsizeof
    from multillm_edge.search import docs as search_docs
    assert search_docs.counts_bytes(counted) == getsizeof(counted) + sum(map(getsizeof, counted))
    assert search_docs.words_bytes(list(counted) * 2) == 2 * sum(map(getsizeof, counted))


# ASCII of either case, non-ASCII characters that are plain (stable, casefolding to
# themselves) and some that are not (uppercase, ß, İ, ς, ſ, Kelvin, ligatures, a
# combining mark, a lone surrogate), so a text takes either way of folding.
fold_text = st.lists(st.sampled_from(list(
    "aZ 9\n.:'_—–“”…¡«©²™½éàÉÀ港口の歌чЧёЁßẞİıΣσςſ\u212aＫﬁ\u0301\u00a0\u3000\ud800ǅ١") + ["Qué", "ÀB", "3.5"]),
    max_size=60).map("".join)


@settings(max_examples=2000, deadline=None)
@given(text=fold_text)
def test_fold_by_lowered_bytes_is_nfkc_casefold(text):
    """Issue 45: a text whose non-ASCII characters are plain folds as its UTF-8 bytes
    lowered; either way the fold is NFKC + casefold, and the bytes it hands the word
    cutter are the fold's own."""
    import unicodedata
    folded, raw, others = analysis.fold_utf8(text)
    assert folded == unicodedata.normalize("NFKC", text).casefold() == analysis.fold(text)
    if raw is not None:
        assert raw == folded.encode("utf-8", "surrogatepass")
        assert others == raw.translate(None, bytes(range(128)))
    assert analysis.word_bag(folded, raw, others) == analysis.word_bag(folded)


def test_fold_takes_the_bytes_way_only_for_plain_characters():
    assert analysis.fold_utf8("Port — ¡QUÉ! 港口")[1] is None          # É casefolds to é
    folded, raw, _ = analysis.fold_utf8("Port — ¡Qué! 港口の歌")
    assert folded == "port — ¡qué! 港口の歌" and raw == folded.encode()
    assert analysis.fold_utf8("Straße")[1] is None and analysis.fold("Straße") == "strasse"
    assert analysis.fold_utf8("ASCII Only") == ("ascii only", None, None)
