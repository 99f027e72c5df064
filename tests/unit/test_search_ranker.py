"""Ranking and excerpts of the page search (docs/design.md §6.1)."""

from hypothesis import given, settings, strategies as st

from multillm_edge.search import EXCERPT_MAX, search
from multillm_edge.search.ranker import ELLIPSIS

FILLER = "The caravan moves on through the dusty road and nobody speaks. "


def page(*texts, role="assistant"):
    return [(role, t) for t in texts]


def test_finds_the_page_by_other_inflections():
    pages = [page(FILLER * 3), page("Ilsabeth promised the silver key near the old mill."), page(FILLER)]
    [hit, *_] = search("Which keys is Ilsabeth promising?", pages, 5)
    assert (hit.page, hit.role, hit.text) == (1, "assistant", "Ilsabeth promised the silver key near the old mill.")


def test_ties_break_newest_first_and_results_repeat():
    pages = [page("a lantern glows")] * 4
    hits = search("lanterns", pages, 3)
    assert [h.page for h in hits] == [3, 2, 1]
    assert search("lanterns", pages, 3) == hits


def test_pages_without_a_query_term_are_left_out_and_limit_holds():
    pages = [page("key"), page("nothing"), page("keys and key")]
    assert sorted(h.page for h in search("key", pages, 10)) == [0, 2]
    assert len(search("key", pages, 1)) == 1
    assert search("zzz", pages, 5) == [] and search("   ", pages, 5) == [] and search("key", [], 5) == []


def test_whole_words_only():
    assert search("key", [page("a monkey")], 5) == []


def test_cjk_and_russian():
    pages = [page("トナルは塔のそばで黄金の短剣を隠した。"), page("Мирослава спрятала ключ у моста."), page("何もない")]
    assert search("短剣を隠したのは誰？", pages, 1)[0].page == 0
    assert search("ключи Мирославы", pages, 1)[0].page == 1


def test_long_message_excerpt_is_centered_on_the_match():
    text = FILLER * 20 + "Ilsabeth hid the key. " + FILLER * 20
    [hit] = search("Ilsabeth", [page(text)], 5)
    assert hit.text.startswith(ELLIPSIS) and hit.text.endswith(ELLIPSIS) and len(hit.text) == EXCERPT_MAX
    assert "Ilsabeth hid the key." in hit.text
    assert hit.text[1:-1] == text[hit.start:hit.end]


def test_best_message_of_the_page_is_quoted():
    [hit] = search("silver key", [page("a key", "the silver key", "silver", role="user")], 5)
    assert (hit.message_index, hit.role, hit.text) == (1, "user", "the silver key")


pieces = st.sampled_from(list("ab ßİﬁ𝔘🌙é\u0301夜の森Кл.,\n") + ["key", "Key ", "ＫＥＹ"])
message = st.lists(pieces, max_size=400).map("".join)


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(message, min_size=1, max_size=4),
       query=st.sampled_from(["key", "夜の", "ß", "кл", "ﬁ", "a b"]))
def test_excerpt_is_verbatim_bounded_and_cut_at_code_points(texts, query):
    pages = [page(*texts)]
    for hit in search(query, pages, 5):
        msg = pages[hit.page][hit.message_index][1]
        core = hit.text[(hit.start > 0):len(hit.text) - (hit.end < len(msg))]
        assert core == msg[hit.start:hit.end]                     # verbatim
        assert hit.text == (ELLIPSIS if hit.start else "") + core + (ELLIPSIS if hit.end < len(msg) else "")
        assert len(hit.text) <= EXCERPT_MAX                       # ellipses included
        assert len(msg) <= EXCERPT_MAX or len(hit.text) == EXCERPT_MAX    # as long as allowed


def test_a_block_page_ranks_by_the_exchange_that_says_it():
    # Page 0 is a long block of exchanges; the words of the query are said together in
    # one of them (a page-level BM25 would weigh them down by the page's length). Page 1 holds the same words spread over exchanges that say other things.
    block = [("user", "we walk on"), ("assistant", "*rain*"),
             ("user", "Who hid the silver key?"), ("assistant", "Mira hid the silver key under the bridge."),
             ("user", "onwards"), ("assistant", "*wind*")] + [
             ("user", "step"), ("assistant", "*the long road goes on and on through the hills*")] * 40
    spread = [("user", "a silver cup, a silver plate"), ("assistant", "*the bridge creaks*"),
              ("user", "a key, a key to the cellar"), ("assistant", "She hid nothing. They hid."),
              ("user", "and Mira?"), ("assistant", "Mira sleeps. Mira dreams.")]
    [first, second] = search("where did Mira hide the silver key", [block, spread], 5)
    assert first.page == 0 and first.message_index == 3 and first.text == block[3][1]
    assert second.page == 1
    # plain BM25 sees each page whole
    assert {h.page for h in search("mira silver key", [block, spread], 5, stem=False, extras=False)} == {0, 1}


def test_an_irregular_form_is_found_from_its_verb():
    pages = [[("user", "we search the docks")], [("assistant", "Wynros found the cursed map.")],
             [("user", "the map is lost")]]
    [top, *_] = search("who was finding the map", pages, 3)
    assert top.page == 1
