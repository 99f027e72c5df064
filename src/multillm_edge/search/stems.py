"""Words -> stems and back (docs/design.md §6.1, §6.2): ``Stems`` (Snowball English and
Russian, irregular forms joined to their verb), the isolate's ``Vocabulary`` (stem ->
its forms), and the one prefix rule every way of matching reads (``starts``)."""

from __future__ import annotations

import re
import sys
from bisect import bisect_left
from sys import getsizeof

import snowballstemmer

from . import irregular
from .analysis import DIGIT_RE
from .state import SLOT, STATE, Memo, sized

_CYRILLIC_RE = re.compile("[\u0400-\u04ff]")
_LATIN_RE = re.compile("[a-z\u00df-\u024f]")
_VOWELS = frozenset("aeiouyаеиоуыэюя")        # Snowball's (English, Russian)
_IRREGULAR = frozenset(irregular.FORMS)
_YING_RE = re.compile("^.ying", re.M)      # a word of words joined by newlines: ``waits``
_EMPTY: tuple = ()
IRREGULAR_MARK = "\x00"     # never in a word: "go\x00went" waits where go's words do

#: Distinct words a vocabulary keeps, and the bytes it holds (then a new one starts;
#: each counted as its words are added: docs/design.md §6.2). One per configuration.
STEM_CACHE_WORDS = 1 << 16
VOCABULARY_BYTES = 3 << 20
#: A longer word is its own stem and no vocabulary keeps it (a word of this many
#: characters is no word Snowball knows; its bytes are the text's own).
MAX_WORD_CHARS = 64
#: What a word's stem costs its vocabulary besides the word: the stem's string and its
#: forms' tuple (a new stem), and a slot there.
_STEM_COST = 2 * SLOT + 8


class Vocabularies(Memo):
    """The vocabularies by configuration: their bytes are those they hold now."""
    __slots__ = ()

    def held_bytes(self) -> int:
        return getsizeof(self) + sum(v.held for v in self.values()) if self else 0

    def shrink(self, to_bytes: int) -> None:
        while self and self.held_bytes() > to_bytes:
            self.pop(next(iter(self)))


_VOCABULARIES = STATE.part("vocabularies", lambda: Vocabularies(4, 2 * VOCABULARY_BYTES))


def stem_prefix(stem: str) -> str:
    """What every word that waits (``waits``) with this stem starts with: all of it but
    its last letter, and at least its first letter when it is a vowel, else its first
    two (Snowball's first region starts after a vowel and the letter after it)."""
    return stem[:max(len(stem) - 1, 1 if stem[:1] in _VOWELS else 2)]


def waits(word: str) -> bool:
    """Whether a word starts with its stem's ``stem_prefix`` (Snowball removes endings
    and rewrites at most the last letter it keeps); not so: ё (folded to е), a letter
    and ``ying`` (``dying`` -> ``die``), irregular forms. Property-tested."""
    return "ё" not in word and word[1:5] != "ying" and word not in irregular.FORMS


def variants(stem: str, stems: "Stems") -> list:
    """The irregular forms whose stem is ``stem``, in the table's order: only the verbs
    that may have it are stemmed (those starting with its ``stem_prefix``, ``waits``'s
    rule, and the few it does not hold for), not the whole table (~120 Snowball calls,
    a new isolate's first scan: issue 45). Kept per stem."""
    if not stems.irregular:
        return []
    got = _VARIANTS.get(stem)
    if got is None:
        prefix = stem_prefix(stem)
        lo = bisect_left(_BASES, prefix)
        hi = bisect_left(_BASES, prefix + "\U0010ffff", lo)
        verbs = {b for b in _BASES[lo:hi] + _ODD_BASES if stems(b) == stem}
        got = _VARIANTS.keep(stem, [f for f, b in irregular.FORMS.items() if b in verbs])
    return got


def _variants_size(stem: str, forms: list) -> int:
    """A stem's entry: its string, the list and its slots (the forms are the table's)."""
    return sized(stem, forms) + SLOT * len(forms)


#: The verbs of the irregular table, sorted (a prefix's verbs are a slice), and those
#: that do not start with their stem's ``stem_prefix`` (``waits``: none today).
_BASES = sorted(set(irregular.FORMS.values()))
_ODD_BASES = [b for b in _BASES if not waits(b)]
_VARIANTS = STATE.part("irregular forms by stem", lambda: Memo(len(irregular.FORMS), 1 << 20, _variants_size))


def starts(stem: str, stems: "Stems") -> list:
    """What every word whose stem is ``stem`` starts with, ё read as е: its
    ``stem_prefix``, each irregular form whole, and for a stem ``Xie`` the ``Xy`` of
    Snowball's ``Xying``; a stem holding a digit is a word as it is. Property-tested."""
    if DIGIT_RE.search(stem) or not stems.on:
        return [stem]
    out = [stem_prefix(stem), *variants(stem, stems)]
    if len(stem) == 3 and stem.endswith("ie"):
        out.append(stem[0] + "y")
    return out


class Vocabulary:
    """One configuration's words in this isolate: word -> stem (None while it waits),
    stem -> its words (``forms``), the words waiting to be stemmed (``waiting``, sorted
    unless ``unsorted``: a prefix's words are a slice). An index is tied to the
    vocabulary it registered in by its ``mark``; a full vocabulary is replaced. ``held``:
    the bytes its words, stems and slots hold, counted as they are added."""
    __slots__ = ("stem_of", "forms", "waiting", "unsorted", "mark", "en", "ru", "held")

    def __init__(self, on: bool):
        self.held = 1024
        self.stem_of: dict = {}
        self.forms: dict = {}
        self.waiting: list = []
        self.unsorted = False
        self.mark = object()
        self.en = snowballstemmer.stemmer("english") if on else None
        self.ru = snowballstemmer.stemmer("russian") if on else None

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


def _short(words: set) -> set:
    """The words a vocabulary keeps (at most MAX_WORD_CHARS characters)."""
    if words and max(map(len, words)) > MAX_WORD_CHARS:
        return {w for w in words if len(w) <= MAX_WORD_CHARS}
    return words


class Stems:
    """word -> stem, each distinct word stemmed once per vocabulary; ``forms(stem)``,
    the words met that have it. A word registered by ``known`` is stemmed when it is met
    or when a stem it may have is asked for (``waits``): Snowball is pure Python."""

    def __init__(self, stem: bool = True, irregular: bool = True):
        self.on = stem
        self.irregular = stem and irregular
        self._config = (stem, self.irregular)
        self._pinned: dict | None = None
        got = _VOCABULARIES.get(self._config)
        self._use(got if got is not None else self._renew())

    def _renew(self) -> Vocabulary:
        return _VOCABULARIES.keep(self._config, Vocabulary(self.on))

    def _use(self, vocabulary: Vocabulary) -> None:
        self.vocabulary = vocabulary
        self._cache = vocabulary.stem_of

    def forms(self, stem: str):
        """The words met (in this vocabulary) whose stem is ``stem``; once ``pin``-ned,
        the pinned ones."""
        if self._pinned is not None:
            return self._pinned.get(stem, _EMPTY)
        if len(stem) > MAX_WORD_CHARS:      # a long word: its own stem, kept nowhere
            return (stem,)
        vocabulary = self.vocabulary
        if vocabulary.waiting and stem:     # the words that may have it: stemmed now (once)
            cache = self._cache
            for w in vocabulary.settle(stem_prefix(stem)):
                if IRREGULAR_MARK in w:     # an irregular form, waiting under its verb
                    w = w[w.index(IRREGULAR_MARK) + 1:]
                if cache.get(w, "") is None:
                    self._add(w)
        return vocabulary.forms.get(stem, _EMPTY)

    def pin(self, forms: dict | None) -> None:
        """Answer ``forms`` from ``forms`` (stem -> words) from now on (None: unpin)."""
        self._pinned = forms

    def holds(self, words: int) -> bool:
        """Whether this many new words fit the vocabulary (``known`` keeps it)."""
        return (len(self._cache) + words <= STEM_CACHE_WORDS
                and self.vocabulary.held + 2 * SLOT * words <= VOCABULARY_BYTES)

    def known(self, words: dict) -> None:
        """Register every key of ``words``: a new word is stemmed now, or waits."""
        cache = self._cache
        if words.keys() <= cache.keys():        # in C, no set made: a steady isolate
            return
        missing = _short(set(words).difference(cache))  # O(its words), not the vocabulary's
        # their slots: the words' strings are the index's, counted with its analysis
        if not self.holds(len(missing)):
            self._use(self._renew())
            cache, missing = self._cache, _short(set(words))
        self.vocabulary.held += 2 * SLOT * len(missing)
        if not self.on:
            for w in missing:
                self._add(w)
            return
        self._wait(missing)

    def _wait(self, missing: set) -> None:
        """Register new words: an irregular form waits under its verb, what cannot wait
        is stemmed now (found in C, but where the words hold ё or a letter and "ying")."""
        vocabulary, cache, later = self.vocabulary, self._cache, missing
        irregular_forms = missing & _IRREGULAR if self.irregular else None
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
            if len(word) > MAX_WORD_CHARS:
                return word
            if word not in self._cache:
                vocabulary = self.vocabulary
                if len(self._cache) >= STEM_CACHE_WORDS or vocabulary.held > VOCABULARY_BYTES:
                    vocabulary = self._renew()
                    self._use(vocabulary)
                vocabulary.held += getsizeof(word) + 2 * SLOT
            s = self._add(word)
        return s

    def _add(self, word: str) -> str:
        s = self._cache[word] = sys.intern(self.stem(word))
        vocabulary = self.vocabulary
        forms = vocabulary.forms
        old = forms.get(s, ())
        forms[s] = old + (word,)      # a tuple: ~56 bytes for one form
        vocabulary.held += 8 if old else _STEM_COST + getsizeof(s)
        return s

    def stem(self, word: str) -> str:
        """Snowball's stem of ``word`` (its verb's for an irregular form), uncached."""
        if not self.on or len(word) > MAX_WORD_CHARS or DIGIT_RE.search(word):
            return word
        if self.irregular:
            word = irregular.FORMS.get(word, word)  # found -> find, нашла -> найти
        if _CYRILLIC_RE.match(word):
            return self.vocabulary.ru.stemWord(word)
        if _LATIN_RE.match(word):
            return self.vocabulary.en.stemWord(word)
        return word
