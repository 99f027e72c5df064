"""Text -> terms, identically for pages and queries (docs/design.md §6.1).

- Unicode NFKC, then ``str.casefold`` (fullwidth letters, ligatures, ß, Σ fold alike).
- Words: one compiled regex, run once per text in C (``findall``). A word is a run of
  letters and digits (``_`` and punctuation split words; an apostrophe splits too, so
  ``Ilsabeth's`` yields ``ilsabeth`` and ``s``). Counting needs the words in no order:
  ``word_bag`` cuts the same ones several times cheaper (property-tested).
- Numbers stay whole with their inner separators: ``1,200``, ``3.5``, ``10:30`` are one
  term each (``1200`` does not match ``1,200``); a word holding a digit (``3d6``,
  ``d20``, ``2nd``) is one term and never stemmed.
- Names are words like any other: kept whole (never split), case-folded, and stemmed
  with the language's stemmer, which query and page share, so ``Ilsabeth`` matches
  ``ILSABETH`` and ``Ilsabeth's``.
- Stemming: Snowball English for Latin-script words, Snowball Russian for Cyrillic ones;
  other scripts as they are. A word is stemmed at most once per ``Stems`` (a cache).
- Han, Hiragana, Katakana and Hangul have no spaces: each run of them becomes its
  overlapping character bigrams (a lone character: itself). A page counts a bigram with
  ``str.count`` over its folded text, in C, rather than materializing every bigram.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from bisect import bisect_left
from collections import _count_elements   # Counter's counting loop (C in CPython, Pyodide)
from typing import NamedTuple

import snowballstemmer

from . import irregular

# Hangul Jamo, CJK punctuation-free symbols 々〆, Hiragana, Katakana (+ prolonged mark),
# Hangul compatibility Jamo, CJK Ext A, Unified Ideographs, Hangul syllables,
# compatibility ideographs, Ext B and beyond.
_CJK = ("\u1100-\u11ff\u3005\u3006\u3041-\u309f\u30a0-\u30ff\u3130-\u318f"
        "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f")
WORD_RE = re.compile(rf"\d+(?:[.,:]\d+)+|[^\W_{_CJK}]+")
CJK_RE = re.compile(f"[{_CJK}]+")
_DIGIT_RE = re.compile(r"\d")
_CYRILLIC_RE = re.compile("[\u0400-\u04ff]")
_LATIN_RE = re.compile("[a-z\u00df-\u024f]")


# Characters NFKC leaves as they are and that never compose with a neighbour: ASCII,
# precomposed Latin letters, Cyrillic without its combining marks, common quotes and
# dashes, CJK punctuation and brackets, kana without the (combining or spacing)
# voicing marks, Han, Hangul syllables (checked character by character in the tests).
# Runs of anything else, with the character before them (it may compose with a
# combining mark), are normalized alone: NFKC of a whole Japanese page that holds one
# fullwidth "（" costs as much as of the page, ~40 ms per MB.
_UNSTABLE_RE = re.compile(
    ".?[^\\x00-\\x7f\u00ab\u00bb\u00c0-\u00ff\u0100-\u0131\u0134-\u013e\u0141-\u0148"
    "\u014a-\u017e\u0400-\u0482\u048a-\u04ff\u2013\u2014\u2018\u2019\u201c\u201d\u2022"
    "\u3001-\u3003\u3008-\u3011\u3014-\u301f\u3041-\u3096\u30a1-\u30fd"
    "\u4e00-\u9fff\uac00-\ud7a3]+", re.S)


_UNSTABLE_CHAR_RE = re.compile(_UNSTABLE_RE.pattern[2:-1])
_simple: dict = {}


def _nfkc_run(m) -> str:
    return unicodedata.normalize("NFKC", m.group())


def _simple_mapping(c: str):
    """NFKC of ``c`` when it can be replaced alone, wherever it stands (fullwidth and
    general punctuation, Latin-1 symbols, ligatures: their forms hold no combining
    mark, so they never compose with a neighbour); else None."""
    r = _simple.get(c, "")
    if r == "":
        o = ord(c)
        ok = (0xff01 <= o <= 0xff5e or 0x2000 <= o <= 0x206f or o == 0x3000 or 0xa0 <= o <= 0xbf
              or 0xfb00 <= o <= 0xfb06)
        r = unicodedata.normalize("NFKC", c) if ok else None
        if r is not None and any(unicodedata.combining(x) for x in r):
            r = None
        _simple[c] = r
    return r


def fold(text: str) -> str:
    """NFKC + casefold: the form every term is cut from. Equal to
    ``unicodedata.normalize("NFKC", text).casefold()`` (tested), cheaper: the few kinds
    of simple characters a page holds (Japanese ？！（）) are replaced in C, anything
    else is normalized run by run."""
    if not unicodedata.is_normalized("NFKC", text):
        chars = set(_UNSTABLE_CHAR_RE.findall(text))
        maps = [(c, _simple_mapping(c)) for c in chars]
        if all(r is not None for _, r in maps):
            for c, r in maps:
                text = text.replace(c, r)
        else:
            text = _UNSTABLE_RE.sub(_nfkc_run, text)
    return text.casefold()


def words(folded: str) -> list:
    """The words (non-CJK terms before stemming) of folded text."""
    return WORD_RE.findall(folded)


# ASCII bytes that are not letters or digits -> space; the rest (and every byte of a
# non-ASCII character's UTF-8) as they are
_ASCII_SPACE = bytes(c if (48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c > 127) else 32
                     for c in range(256))
_ASCII_SPACE_LINES = _ASCII_SPACE[:10] + b"\n" + _ASCII_SPACE[11:]     # newlines kept
_ASCII_BYTES = bytes(range(128))
# ASCII digits -> "0", the separators of WORD_RE's numbers (".,:") -> ".", the rest -> " "
_NUMBER_SHAPE = bytes(48 if 48 <= c <= 57 else 46 if c in b".,:" else 32 for c in range(256))
_WORD_CHAR_RE = re.compile(f"[^\\W_{_CJK}]")
WORD, CUT, DIGIT = 0, 1, 2     # what a non-ASCII character is to WORD_RE
CUT_CHARACTERS = 24      # distinct non-ASCII non-word characters past which WORD_RE cuts
_CUTS: dict = {}         # frozenset of a text's non-ASCII characters -> _cuts
CUT_SETS = 1024          # sets _CUTS keeps (then it starts again),
CUT_SET_SIZE = 128       # each of at most this many characters
_CUT_BYTES: dict = {}    # a text's non-ASCII bytes, as they are -> _cuts of their characters
CUT_KEY_BYTES = 256      # kept for at most this many bytes (CUT_SETS of them, then emptied)


def _kind(c: str) -> int:
    return DIGIT if c.isdigit() else WORD if _WORD_CHAR_RE.match(c) else CUT


def _cuts(others: frozenset):
    """The non-word characters among the non-ASCII ``others`` of a text, or None when
    WORD_RE must cut it (CJK text: many of them; a digit like ٣: its numbers). Kept per
    set of characters (the texts of one chat hold the same few): ``_CUTS``."""
    got = _CUTS.get(others, _CUTS)
    if got is _CUTS:
        cuts = []
        for c in others:        # stops at a digit or past CUT_CHARACTERS cuts (CJK text)
            kind = _kind(c)
            if kind == DIGIT or kind == CUT and len(cuts) == CUT_CHARACTERS:
                cuts = None
                break
            if kind == CUT:
                cuts.append(c)
        got = None if cuts is None else tuple(sorted(cuts))
        if len(others) <= CUT_SET_SIZE:
            if len(_CUTS) >= CUT_SETS:
                _CUTS.clear()
            _CUTS[others] = got
    return got


def word_bag(folded: str) -> list:
    """``words(folded)`` in another order (the same words, each as often): what counting
    needs, several times cheaper. ``WORD_RE``'s words are the runs of word characters
    unless a number like ``3.5`` is there (then ``words``); so every ASCII character
    that is not a letter or digit becomes a space (a bytes translation, in C), every
    other non-word character (``—``, ``’``, CJK: the few distinct ones the text holds)
    too, and the rest is split on whitespace."""
    spaced = _spaced(folded, _ASCII_SPACE)
    return WORD_RE.findall(folded) if spaced is None else spaced.split()


def counts(words) -> dict:
    """word -> how often ``words`` holds it: ``Counter(words)`` as a plain dict, counted
    by Counter's own C loop without its Python-level constructor (a steady cost per
    exchange and per line; ``collections`` falls back to Python where C is absent)."""
    out: dict = {}
    _count_elements(out, words)
    return out


def line_bags(folded: str) -> list:
    """``[word_bag(line) for line in folded.split("\\n")]``, cut in one pass."""
    spaced = _spaced(folded, _ASCII_SPACE_LINES)
    if spaced is None:
        return [WORD_RE.findall(line) for line in folded.split("\n")]
    return [line.split() for line in spaced.split("\n")]


def _spaced(folded: str, table: bytes) -> str | None:
    """``folded`` with every non-word character a space (``table``: which ASCII ones),
    or None where that does not cut it as WORD_RE does (a number, many distinct
    non-word characters, a non-ASCII digit)."""
    raw = folded.encode("utf-8", "surrogatepass")
    if b"0.0" in raw.translate(_NUMBER_SHAPE):      # a digit, [.,:], a digit
        return None
    spaced = raw.translate(table).decode("utf-8", "surrogatepass")
    if len(raw) == len(folded):       # ASCII
        return spaced
    others = raw.translate(None, _ASCII_BYTES)
    cuts = _CUT_BYTES.get(others, _CUT_BYTES)     # the same few bytes, text after text
    if cuts is _CUT_BYTES:
        cuts = _cuts(frozenset(others.decode("utf-8", "surrogatepass")))
        if len(others) <= CUT_KEY_BYTES:
            if len(_CUT_BYTES) >= CUT_SETS:
                _CUT_BYTES.clear()
            _CUT_BYTES[others] = cuts
    if cuts is None:
        return None
    for c in cuts:
        spaced = spaced.replace(c, " ")
    return spaced


def cjk_terms(folded: str) -> list:
    """Character bigrams of each CJK run (a lone character as itself), in order."""
    out = []
    for run in CJK_RE.findall(folded):
        if len(run) == 1:
            out.append(run)
        else:
            out.extend(run[i:i + 2] for i in range(len(run) - 1))
    return out


_VARIANTS: dict = {}     # stem of a verb -> its irregular forms; built on first use


def variants(stem: str, stems: "Stems") -> list:
    """The irregular forms whose stem is ``stem`` (the words a page may say it with).
    The table's verbs are stemmed once per isolate, not per search."""
    if not stems._irregular:
        return []
    if not _VARIANTS:
        for form, base in irregular.FORMS.items():
            _VARIANTS.setdefault(stems(base), []).append(form)
    return _VARIANTS.get(stem, [])


#: Distinct words whose stem an isolate keeps (per configuration): Snowball is pure
#: Python here, and a steady turn meets the same words again. Emptied when full. With
#: each stem's forms (a tuple), ~13 MB at worst (measured: 65,536 words of 4-10 letters).
STEM_CACHE_WORDS = 1 << 16
_EMPTY: tuple = ()


_VOWELS = frozenset("aeiouyаеиоуыэюя")        # Snowball's (English, Russian)
_IRREGULAR = frozenset(irregular.FORMS)
_YING_RE = re.compile("^.ying", re.M)      # a word of words joined by newlines: ``waits``


def waits(word: str) -> bool:
    """Whether a word can wait to be stemmed until a stem it may have is asked for:
    it starts with its stem's ``stem_prefix``. Snowball removes endings and rewrites at
    most the last letter of what it keeps (``cried`` -> ``cri``, ``hoping`` ->
    ``hope``, ``possibility`` -> ``possibl``). Not so: ё (Russian's stemmer folds it
    to е), Snowball's rule for a letter and ``ying`` (``dying`` -> ``die``): stemmed
    when met; irregular forms (``ran`` -> ``run``): they wait under their verb, which
    does. Property-tested over Latin and Cyrillic strings and the irregular table."""
    return "ё" not in word and word[1:5] != "ying" and word not in irregular.FORMS


IRREGULAR_MARK = "\x00"     # never in a word: "go\x00went" waits where go's words do


def stem_prefix(stem: str) -> str:
    """What every waiting word with this stem starts with: all of it but its last
    letter, and at least its first letter when it is a vowel, else its first two
    (Snowball's first region starts after a vowel and the letter after it)."""
    return stem[:max(len(stem) - 1, 1 if stem[:1] in _VOWELS else 2)]


class Vocabulary:
    """One configuration's words in this isolate: word -> stem (None while it waits),
    stem -> its words (``forms``), the words waiting to be stemmed (``waiting``, sorted
    when ``unsorted`` is False: the words of a prefix are a slice of it), and how many times
    it was emptied (``generation``): what an index of words registered before an
    emptying must register again."""
    __slots__ = ("stem_of", "forms", "waiting", "unsorted", "generation")

    def __init__(self):
        self.stem_of: dict = {}
        self.forms: dict = {}
        self.waiting: list = []
        self.unsorted = False
        self.generation = 0

    def clear(self) -> None:
        self.stem_of.clear()
        self.forms.clear()
        self.waiting.clear()
        self.generation += 1

    def settle(self, prefix: str) -> list:
        """The waiting words starting with ``prefix``, no longer waiting (in C: a sort
        when words were added since, two bisections, a slice)."""
        waiting = self.waiting
        if self.unsorted:
            waiting.sort()
            self.unsorted = False
        lo = bisect_left(waiting, prefix)
        hi = bisect_left(waiting, prefix + "\U0010ffff", lo)
        got = waiting[lo:hi]
        del waiting[lo:hi]
        return got


_VOCABULARIES: dict = {}


def forget() -> None:
    """Empty what this module keeps for the isolate (vocabularies, memos): as in a new
    isolate (benches, tests)."""
    _VOCABULARIES.clear()
    _VARIANTS.clear()
    _CUTS.clear()
    _CUT_BYTES.clear()
    _simple.clear()


class Stems:
    """word -> stem, each distinct word stemmed once per isolate (up to
    ``STEM_CACHE_WORDS`` words per configuration, then the vocabulary starts again);
    and back: ``forms(stem)``, the words met so far that have it. A word registered by
    ``known`` is stemmed when it is met or when a stem it may have is asked for
    (``waits``): a new isolate stems the words its queries can match, not all it
    indexes (Snowball is pure Python: ~20 µs a word)."""

    def __init__(self, stem: bool = True, irregular: bool = True):
        self._on = stem
        self._irregular = stem and irregular
        self._vocabulary = _VOCABULARIES.setdefault((stem, self._irregular), Vocabulary())
        self._cache: dict = self._vocabulary.stem_of
        self._pinned: dict | None = None
        self._en = snowballstemmer.stemmer("english") if stem else None
        self._ru = snowballstemmer.stemmer("russian") if stem else None

    @property
    def generation(self) -> int:
        return self._vocabulary.generation

    def forms(self, stem: str):
        """The words met in this isolate (since the vocabulary's last emptying) whose
        stem is ``stem``; once ``pin``-ned, the pinned ones."""
        if self._pinned is not None:
            return self._pinned.get(stem, _EMPTY)
        vocabulary = self._vocabulary
        if vocabulary.waiting and stem:     # the words that may have it: stemmed now (once)
            cache = self._cache
            for w in vocabulary.settle(stem_prefix(stem)):
                if IRREGULAR_MARK in w:     # an irregular form, waiting under its verb
                    w = w[w.index(IRREGULAR_MARK) + 1:]
                if cache.get(w, "") is None:
                    self._add(w)
        return vocabulary.forms.get(stem, _EMPTY)

    def pin(self, forms: dict) -> None:
        """Answer ``forms`` from ``forms`` (stem -> words) from now on: a ranking fixes
        its terms' forms once, whatever later stemming empties."""
        self._pinned = forms

    def known(self, words: dict) -> None:
        """Register every key of ``words`` (word counts): a new word is stemmed now, or
        waits (``waits``)."""
        cache = self._cache
        if words.keys() <= cache.keys():        # in C, no set made: a steady isolate
            return
        missing = set(words).difference(cache)      # O(its words), not the vocabulary's
        vocabulary = self._vocabulary
        if len(cache) + len(missing) > STEM_CACHE_WORDS:
            vocabulary.clear()
            missing = set(words)
        if not self._on:
            for w in missing:
                self._add(w)
            return
        # an irregular form waits under its verb (``went`` where ``go``'s words are);
        # what cannot wait (``waits``) is stemmed now: found in C, but where the words
        # hold ё or a letter and "ying"
        later = missing
        irregular_forms = missing & _IRREGULAR if self._irregular else None
        if irregular_forms:
            later = missing - irregular_forms
            cache.update(dict.fromkeys(irregular_forms))
            vocabulary.waiting.extend([f"{irregular.FORMS[w]}{IRREGULAR_MARK}{w}" for w in irregular_forms])
        joined = "\n".join(later)
        if "ё" in joined or _YING_RE.search(joined):
            now = {w for w in later if not waits(w)}
            later = later - now
            for w in now:
                self._add(w)
        cache.update(dict.fromkeys(later))      # None: waiting
        vocabulary.waiting.extend(later)
        vocabulary.unsorted = True

    def __call__(self, word: str) -> str:
        s = self._cache.get(word)
        if s is None:       # new, or waiting (then left in its list: ``forms`` skips it)
            if len(self._cache) >= STEM_CACHE_WORDS and word not in self._cache:
                self._vocabulary.clear()
            s = self._add(word)
        return s

    def _add(self, word: str) -> str:
        s = self._cache[word] = sys.intern(self._stem(word))
        forms = self._vocabulary.forms
        forms[s] = forms.get(s, ()) + (word,)      # a tuple: ~56 bytes for one form
        return s

    def _stem(self, word: str) -> str:
        if not self._on or _DIGIT_RE.search(word):
            return word
        if self._irregular:
            word = irregular.FORMS.get(word, word)  # found -> find, нашла -> найти
        if _CYRILLIC_RE.match(word):
            return self._ru.stemWord(word)
        if _LATIN_RE.match(word):
            return self._en.stemWord(word)
        return word


# Stop words: function words a question is worded with — a fixed small list per
# language (English, Russian), in the spirit of the NLTK/Snowball lists. Left out of
# every query: their idf is near zero anyway, scanning for them costs the most, and a
# query of stop words only has nothing to find.
STOPWORDS = frozenset("""a an the and or but of to in on at by for with from into about as is are
was were be been being am do does did done have has had i you he she it we they me him her us them
my your his its our their this that these those what which who whom whose when where why how
there here then so not no if can could would should will shall may might must s t re ll ve d
и в во не что он на я с со как а то все она так его но да ты к у же вы за бы по ее мне было вот от
меня еще нет о из ему теперь когда даже ну ли если уже или ни быть был него до вас нибудь опять
уж вам ведь там потом себя ничего ей может они тут где есть надо ней для мы тебя их чем была сам
чтоб без будто чего раз тоже себе под будет ж тогда кто этот того потому этого какой совсем ним
здесь этом один почти мой тем чтобы нее были куда зачем всех никогда можно при наконец два об
другой хоть после над больше тот через эти нас про всего них какая много разве три эту моя
впрочем хорошо свою этой перед иногда лучше чуть том нельзя такой им более всегда конечно всю
между""".split())


class Term(NamedTuple):
    kind: str            # "w" word stem, "c" CJK bigram (or lone character)
    value: str           # the stem or the CJK term
    surfaces: frozenset  # the query's folded words with this stem ("w" only)


def query_terms(query: str, stems: Stems) -> list:
    """The query's distinct terms in first-seen order. Stop words are left out (a query
    of stop words only has no term), lone letters too when longer words remain."""
    folded = fold(query)
    ws = [w for w in words(folded) if w not in STOPWORDS]
    longer = [w for w in ws if len(w) > 1 or w.isdigit()]
    by_stem: dict = {}
    for w in longer or ws:
        by_stem.setdefault(stems(w), set()).add(w)
    out = [Term("w", s, frozenset(v)) for s, v in by_stem.items()]
    seen = set()
    for b in cjk_terms(folded):
        if b not in seen:
            seen.add(b)
            out.append(Term("c", b, frozenset()))
    return out
