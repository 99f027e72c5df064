"""A document's analysis and the isolate's cache of them (docs/design.md §6.1, §6.2):
``analyze`` (folded text, lines, a trailing question, an optional word index),
``analyses`` (cached under ``doc_key``, bounded LRU; ``Held``: those a kept corpus
holds, read only where a ranking reads one), the lines' counts kept with an index as
they are made."""

from __future__ import annotations

from collections import OrderedDict, deque
from itertools import chain
from operator import itemgetter
from sys import getsizeof
from typing import NamedTuple, Sequence

from .analysis import counts, fold_utf8, line_bags, word_bag
from .state import SLOT, STATE

#: The cache's bound in bytes: each analysis counted by what it holds (its text, each
#: dict of word counts with its words' strings, line lengths, edges: docs/design.md §6.2).
CACHE_BYTES = 14 << 20
#: What every entry holds besides its text and index: the Analysis tuple, the key (a
#: tuple, a SHA-256's hex string) and its OrderedDict node and slot.
ENTRY_BYTES = getsizeof((0,) * 5) + getsizeof((0, 0)) + getsizeof("0" * 64) + 2 * SLOT + getsizeof(1 << 20)
#: An int no cache of CPython's shares (a line length or a count past 256).
INT_BYTES = getsizeof(1 << 20) + 4


def doc_key(page_sha256: str, offset: int) -> tuple:
    """The key an exchange's analysis is cached under, for search and recall alike:
    its page's SHA-256 and its first item's offset there (a key never names two)."""
    return (page_sha256, offset)


class Index:
    """An exchange's words, counted once, for ranking it again and again; the
    vocabulary its words are registered in (its ``mark``), and its lines' counts."""
    __slots__ = ("words", "vocabulary", "lines", "line_lengths", "edges", "extra", "cached", "held")

    def __init__(self, words: dict, vocabulary):
        self.words = words              # word -> count
        self.vocabulary = vocabulary    # Vocabulary.mark of the one it is registered in
        self.lines: tuple | None = None         # word counts per line, made the
        self.line_lengths: tuple | None = None  # first time its passages are scored
        self.edges: dict = {}   # "first", "last", "?" (its question) line -> word counts
        self.extra = 0          # bytes of those lines' counts and lengths (``Cache.grow``)
        self.cached = False     # in the cache (what it grows counts against the bound)
        self.held = INDEX_BYTES + counts_bytes(words)   # its own and its words' bytes


def counts_bytes(counted: dict) -> int:
    """The bytes a dict of word counts holds: the dict and its words' strings (counts
    past 256 aside: rare, and a word's string is ~50 bytes more than its count). An
    ASCII word's string is an empty one's size and a byte a character: those are added
    up from their joined length, the others sized one by one (``getsizeof`` per word
    was a new isolate's largest analysis step in Pyodide: issue 45)."""
    return getsizeof(counted) + words_bytes(counted)


def words_bytes(words) -> int:
    """``sum(map(getsizeof, words))`` (a list or dict of str), in fewer C calls: ASCII
    ones from their joined length, else each one's ``str.__sizeof__`` (what getsizeof
    gives a str, ~4x cheaper in Pyodide than getsizeof's own lookup of it)."""
    joined = "".join(words)
    if joined.isascii():
        return _EMPTY_STR * len(words) + len(joined)
    return sum(map(_SIZEOF, words))


_EMPTY_STR = getsizeof("")
_SIZEOF = str.__sizeof__


#: An Index object (its slots) and its empty edges dict.
INDEX_BYTES = getsizeof(Index.__new__(Index)) + getsizeof({})


class Analysis(NamedTuple):
    """What a document's scoring needs that does not depend on the query."""
    text: str           # its messages' texts, NFKC + casefold, joined with "\n"
    length: int         # code points of ``text``
    lines: int          # lines of ``text``
    question: str       # its last line when it asks (ends with "?", trailing space aside)
    index: Index | None = None      # ``indexed`` ranking only

    @property
    def weight(self) -> int:
        """The bytes it holds, against the cache's bound (``CACHE_BYTES``)."""
        index, question = self.index, self.question
        return (ENTRY_BYTES + getsizeof(self.text) + (getsizeof(question) if question else 0)
                + (index.held + index.extra if index else 0))


_analysis = tuple.__new__     # _analysis(Analysis, (...)): a NamedTuple with no Python frame
_INDEX = itemgetter(4)        # an Analysis's index (an Index is true)


def analyze(texts: Sequence, stems=None, later: bool = False) -> Analysis:
    """The analysis of a document's ``(role, text)`` list; indexed with ``stems``
    (``later``: its words registered by the caller, ``register``)."""
    # = the folds joined: "\n" is stable
    text, raw, others = fold_utf8("\n".join([t for _, t in texts]))
    return _analysis(Analysis, (text, len(text), text.count("\n") + 1, _question(text),
                                _index(text, stems, raw, others, later) if stems is not None else None))


def _question(text: str) -> str:
    text = text.rstrip()
    return text[text.rfind("\n") + 1:] if text.endswith("?") else ""


def _index(text: str, stems, raw: bytes | None = None, others: bytes | None = None,
           later: bool = False) -> Index:
    """The words of ``text`` counted in C, each registered in the vocabulary (``raw``,
    ``others``: its UTF-8 bytes and their non-ASCII ones, when its fold made them;
    ``later``: not yet, ``register`` does)."""
    words = counts(word_bag(text, raw, others))
    if later:
        return Index(words, None)
    stems.known(words)
    return Index(words, stems.vocabulary.mark)


#: Indexes made at once past which their words are registered together (``register``).
TOGETHER = 16


def register(indexes: list, stems) -> None:
    """Register the words of ``indexes`` (made with ``later``): all their distinct words
    in one call when the vocabulary holds them without being replaced (a new isolate's
    first recall: one set of them, not a check and a difference per exchange), else
    index by index, as ``_index`` does."""
    distinct = set().union(*[ix.words for ix in indexes])
    if stems.holds(len(distinct)):
        stems.known(dict.fromkeys(distinct))
        mark = stems.vocabulary.mark
        for ix in indexes:
            ix.vocabulary = mark
        return
    for ix in indexes:
        stems.known(ix.words)
        ix.vocabulary = stems.vocabulary.mark


class Cache:
    """key -> Analysis, least recently used first, holding at most ``max_bytes`` (each
    entry's ``weight``); ``units``: the bytes its entries hold now."""

    def __init__(self, max_bytes: int = CACHE_BYTES):
        self.entries: OrderedDict = OrderedDict()
        self.units = 0
        self.max_bytes = max_bytes

    @property
    def bound(self) -> int:
        return self.max_bytes

    def held_bytes(self) -> int:
        """Its entries' bytes."""
        return self.units

    def shrink(self, to_bytes: int) -> None:
        """Evict the least recently used until ``held_bytes() <= to_bytes``."""
        while self.units > to_bytes and self.entries:
            self.uncount(self.entries.popitem(last=False)[1])

    def keep(self, key, fresh: Analysis) -> None:
        """Keep ``fresh`` under ``key``, most recently used, counted in place of what
        was there; the caller keeps the bound (``evict``)."""
        old = self.entries.pop(key, None)
        if old is not None:
            self.uncount(old)
        self.entries[key] = fresh
        self.units += fresh.weight
        if fresh.index is not None:
            fresh.index.cached = True

    def uncount(self, gone: Analysis) -> None:
        self.units -= gone.weight
        if gone.index is not None:
            gone.index.cached = False

    def grow(self, index: Index, added: int) -> None:
        """Count the ``added`` bytes just made for ``index`` (lines, an edge line)."""
        index.extra += added
        if index.cached:
            self.units += added
            self.evict()

    def evict(self) -> None:
        self.shrink(self.max_bytes)

    def clear(self) -> None:
        for a in self.entries.values():
            if a.index is not None:
                a.index.cached = False
        self.entries.clear()
        self.units = 0


CACHE = STATE.part("analyses", Cache)


def _usable(got, stems) -> bool:
    return got is not None and (stems is None or got.index is not None)


def analyses(docs: Sequence, keys: Sequence | None, stems=None, former=None, start: int = 0) -> list:
    """Each document's analysis (indexed with ``stems``), from ``start`` on: from the
    cache (a steady turn: one lookup each), else under its ``former(i)`` key (when
    others were found, or a kept corpus holds the first ``start``: no new isolate's
    first turn, whose exchanges have no former key to find), else made and kept under
    its key. The caller never changes the list."""
    found = start > 0
    if start:
        docs, keys = _From(docs, start), keys[start:]
        former = None if former is None else _shifted(former, start)
    if keys is None:
        return [analyze(docs[i], stems) for i in range(len(docs))]
    entries = CACHE.entries
    out = list(map(entries.get, keys))       # in C: a steady turn finds them all
    if None not in out and (stems is None or all(map(_INDEX, out))):
        deque(map(entries.move_to_end, keys), 0)
        return out
    missing = [i for i, got in enumerate(out) if not _usable(got, stems)]
    if len(missing) < len(out) or found:
        skip = set(missing)
        deque(map(entries.move_to_end, [k for i, k in enumerate(keys) if i not in skip]), 0)
        if former is not None:
            missing = [i for i in missing if not _moved(former(i), keys[i], out, i, stems)]
    later = stems is not None and len(missing) > TOGETHER
    made = []
    for i in missing:
        got = entries.get(keys[i])       # an exchange said twice: made once
        if not _usable(got, stems):
            got = (got._replace(index=_index(got.text, stems, later=later)) if got is not None
                   else analyze(docs[i], stems, later))
            CACHE.keep(keys[i], got)
            made.append(got.index)
        out[i] = got
    if later and made:
        register(made, stems)
    if missing:
        CACHE.evict()
    return out


class _From(Sequence):
    """``docs[start:]``, read in place."""
    def __init__(self, docs: Sequence, start: int):
        self._docs, self._start = docs, start

    def __len__(self) -> int:
        return len(self._docs) - self._start

    def __getitem__(self, i):
        return self._docs[self._start + i]


def _shifted(former, start: int):
    return lambda i: former(start + i)


class Held(Sequence):
    """A ranking's analyses when a kept corpus holds the first ``head`` exchanges' word
    counts (docs/design.md §6.2: found by their keys): each of those is looked up, or
    made and kept, only when the ranking reads it (a passage, a question), not every
    turn — made from its text, its word counts the ``corpus``'s own (not counted again:
    a long chat's analyses pass their cache's bound, and a ranking reads ones it let
    go); the others are ``tail``, found or made as ``analyses`` does."""

    def __init__(self, docs: Sequence, keys: list, stems, head: int, tail: list, corpus=None):
        self._docs, self._keys, self._stems, self._head, self._tail = docs, keys, stems, head, tail
        self._corpus = corpus
        self._read: dict = {}

    def __len__(self) -> int:
        return self._head + len(self._tail)

    def __getitem__(self, i):
        got = self._read.get(i)     # a passage reads its exchange's analysis a few times
        return got if got is not None else self._find(i)

    def _find(self, i):
        if type(i) is not int:
            raise TypeError("Held takes an exchange's index")
        if i < 0:
            i += len(self)
        if i >= self._head:
            return self._tail[i - self._head]
        if i < 0:
            raise IndexError(i)
        key = self._keys[i]
        got = CACHE.entries.get(key)
        if got is not None and got.index is not None:
            CACHE.entries.move_to_end(key)
        elif self._corpus is not None:
            got = (got or analyze(self._docs[i]))._replace(
                index=Index(self._corpus.words[i], self._corpus.mark))
            CACHE.keep(key, got)
            CACHE.evict()
        else:
            got = analyses(_From(self._docs, i), [key], self._stems)[0]
        self._read[i] = got
        return got

    def every(self) -> list:
        """All of them, the held ones looked up at once (in C), else made: for a
        ranking that reads every exchange's text (a CJK term's counts)."""
        return analyses(self._docs, self._keys[:self._head], self._stems) + self._tail


def _moved(old, key, out: list, i: int, stems) -> bool:
    """Move the analysis cached under ``old`` to ``key`` (``out[i]``), if usable."""
    got = CACHE.entries.get(old) if old is not None else None
    if not _usable(got, stems):
        return False
    CACHE.uncount(CACHE.entries.pop(old))
    CACHE.keep(key, got)
    out[i] = got
    return True


def line_words(a: Analysis) -> tuple:
    """Each line's word counts (made once, in C, kept with the index)."""
    index = a.index
    if index.lines is None:
        lines = index.lines = tuple(map(counts, line_bags(a.text)))
        # each line's dict (an empty one too) and its words' strings, and the tuple
        CACHE.grow(index, getsizeof(lines) + sum(map(getsizeof, lines))
                   + words_bytes(list(chain.from_iterable(lines))))
    return index.lines


def line_lengths(a: Analysis) -> tuple:
    """The code points of each line of ``a`` (kept with an index)."""
    if a.index is None:
        return tuple(map(len, a.text.split("\n")))
    index = a.index
    if index.line_lengths is None:
        lengths = index.line_lengths = tuple(map(len, a.text.split("\n")))
        CACHE.grow(index, getsizeof(lengths) + INT_BYTES * sum(map((256).__lt__, lengths)))
    return index.line_lengths


def line_text(a: Analysis, which: str) -> str:
    """Its "first" or "last" line, or its question ("?")."""
    if which == "?":
        return a.question
    if which == "first":
        i = a.text.find("\n")
        return a.text if i < 0 else a.text[:i]
    return a.text[a.text.rfind("\n") + 1:]


def one_line_words(a: Analysis, which: str) -> dict:
    """The word counts of ``line_text(a, which)`` of an indexed ``a`` (kept with it)."""
    got = a.index.edges.get(which)
    if got is None:
        got = a.index.edges[which] = counts(word_bag(line_text(a, which)))
        CACHE.grow(a.index, counts_bytes(got) + SLOT)
    return got
