"""Text -> terms, identically for pages and queries (docs/design.md §6.1).

- Unicode NFKC, then ``str.casefold`` (fullwidth letters, ligatures, ß, Σ fold alike).
- Words: one compiled regex, run once per text in C (``findall``). A word is a run of
  letters and digits (``_`` and punctuation split words; an apostrophe splits too, so
  ``Ilsabeth's`` yields ``ilsabeth`` and ``s``).
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
import unicodedata

import snowballstemmer

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


def fold(text: str) -> str:
    """NFKC + casefold: the form every term is cut from."""
    return unicodedata.normalize("NFKC", text).casefold()


def words(folded: str) -> list:
    """The words (non-CJK terms before stemming) of folded text."""
    return WORD_RE.findall(folded)


def cjk_terms(folded: str) -> list:
    """Character bigrams of each CJK run (a lone character as itself), in order."""
    out = []
    for run in CJK_RE.findall(folded):
        if len(run) == 1:
            out.append(run)
        else:
            out.extend(run[i:i + 2] for i in range(len(run) - 1))
    return out


def cjk_length(folded: str) -> int:
    """How many CJK terms ``folded`` holds (its CJK characters: bigrams ≈ characters)."""
    return len("".join(CJK_RE.findall(folded)))


class Stems:
    """word -> stem, each distinct word stemmed once (one instance per search)."""

    def __init__(self, stem: bool = True):
        self._on = stem
        self._cache: dict = {}
        self._en = snowballstemmer.stemmer("english") if stem else None
        self._ru = snowballstemmer.stemmer("russian") if stem else None

    def __call__(self, word: str) -> str:
        s = self._cache.get(word)
        if s is None:
            s = self._cache[word] = self._stem(word)
        return s

    def _stem(self, word: str) -> str:
        if not self._on or _DIGIT_RE.search(word):
            return word
        if _CYRILLIC_RE.match(word):
            return self._ru.stemWord(word)
        if _LATIN_RE.match(word):
            return self._en.stemWord(word)
        return word


def query_terms(query: str, stems: Stems) -> list:
    """The query's distinct terms in first-seen order: ("w", stem) for words and
    ("c", bigram) for CJK."""
    folded = fold(query)
    seen: dict = {}
    for w in words(folded):
        seen.setdefault(("w", stems(w)), None)
    for b in cjk_terms(folded):
        seen.setdefault(("c", b), None)
    return list(seen)
