"""An indexed ranking's exchanges as one corpus, kept between turns (docs/design.md
§6.2): the exchanges' word counts, code points and lines, their sums, and each word's
postings ({exchange: count}) once a query asked for it, so that a recalling turn
looks up its query's words instead of reading every exchange again.

A session's next turn pages the same exchanges, or those and a few more: its corpus is
found by the exchanges' word counts (the cached analyses' own dicts: compared in C,
by identity first, else by content), extended by what was appended (the postings made
so far with it), cut back where it changed otherwise (their entries dropped).
Everything in it is a function of those counts alone, so a ranking from it is the
ranking from scratch; it holds nothing a principal or session could tell apart."""

from __future__ import annotations

from bisect import bisect_left
from operator import attrgetter

from .state import STATE

#: Corpora kept, the least recently used dropped first, and the units they hold
#: together: an exchange, an entry of its word counts (its cached analysis's own, while
#: cached), of a posting or of a memo; ~80 bytes a unit (measured): ~20 MiB at worst.
CORPORA_KEPT = 8
CORPUS_UNITS = 1 << 18
#: What a corpus keeps of its rankings (``Corpus.kept``), in entries, then emptied.
MEMO_ENTRIES = 1 << 15
_WORDS = attrgetter("index.words")     # an indexed analysis's word counts, in C


class Corpus:
    """The corpus of indexed analyses (oldest first), built as they come."""
    __slots__ = ("words", "counted", "sizes", "lines_of", "asking", "size", "lines", "postings",
                 "posted", "mark", "memo", "memo_entries")

    def __init__(self, docs: list = ()):
        self.words: list = []       # each exchange's word counts (its index's)
        self.counted = 0            # their entries
        self.sizes: list = []       # code points of each
        self.lines_of: list = []    # lines of each
        self.asking: list = []      # those whose last line asks ("?"), ascending
        self.size = self.lines = 0  # their sums
        self.postings: dict = {}    # word -> {exchange: count}, exchanges ascending: made when asked
        self.posted = 0             # their entries
        self.mark = None    # the vocabulary every exchange is registered in, when known
        self.memo: dict = {}    # what a ranking derived from it alone (``kept``), until it changes
        self.memo_entries = 0
        self.extend(docs)

    @property
    def units(self) -> int:
        return len(self.words) + self.counted + self.posted + self.memo_entries

    def extend(self, docs: list) -> None:
        """Append the analyses ``docs``: their counts, sizes and lines, and their words'
        postings made so far."""
        if not docs:
            return
        self.forget()
        words = list(map(_WORDS, docs))
        postings, d = self.postings, len(self.words)
        if postings:
            for counts in words:
                for w in postings.keys() & counts.keys():
                    postings[w][d] = counts[w]
                    self.posted += 1
                d += 1
        sizes, lines = [a.length for a in docs], [a.lines for a in docs]
        self.asking += [d for d, a in enumerate(docs, len(self.words)) if a.question]
        self.words += words
        self.counted += sum(map(len, words))
        self.sizes += sizes
        self.lines_of += lines
        self.size += sum(sizes)
        self.lines += sum(lines)
        mark = self.mark
        if any([a.index.vocabulary is not mark for a in docs]):
            self.mark = None

    def cut(self, keep: int) -> None:
        """Drop the exchanges from ``keep`` on, and their postings' entries (O(their
        words))."""
        if keep >= len(self.words):
            return
        self.forget()
        postings = self.postings
        if postings:
            for d in range(keep, len(self.words)):
                for w in postings.keys() & self.words[d].keys():
                    del postings[w][d]
                    self.posted -= 1
        self.size -= sum(self.sizes[keep:])
        self.lines -= sum(self.lines_of[keep:])
        self.counted -= sum(map(len, self.words[keep:]))
        del self.words[keep:], self.sizes[keep:], self.lines_of[keep:]
        del self.asking[bisect_left(self.asking, keep):]

    def posting(self, word: str) -> dict:
        """{exchange: count} of ``word``, exchanges ascending (made once: never to be
        changed by the caller)."""
        got = self.postings.get(word)
        if got is None:
            got = self.postings[word] = {d: c for d, counts in enumerate(self.words) if (c := counts.get(word))}
            self.posted += len(got) + 1
        return got

    def tf(self, forms) -> dict:
        """{exchange: count} of a term's ``forms`` (one word, or a tuple of them),
        exchanges ascending; the same dict while the corpus is (never to be changed)."""
        key = ("tf", forms if type(forms) is str else frozenset(forms))
        got = self.memo.get(key)
        if got is None:
            got = self._keep(key, self._tf(forms))
            self.memo[id(got)] = got
        return got

    def _tf(self, forms) -> dict:
        if type(forms) is str:
            return dict(self.posting(forms))
        got: dict = {}
        for f in forms:
            for d, c in self.posting(f).items():
                got[d] = got.get(d, 0) + c
        return dict(sorted(got.items()))

    def kept(self, kind: str, tf: dict, make):
        """``make()``, kept under (``kind``, ``tf``) while the corpus is, when ``tf`` is
        one of its own (``tf``) or None: what depends on a term's counts (if any) and
        the corpus alone."""
        if tf is not None and self.memo.get(id(tf)) is not tf:
            return make()
        key = (kind, id(tf))
        got = self.memo.get(key)
        if got is None:
            got = self._keep(key, make())
        return got

    def _keep(self, key, value):
        size = len(value) if type(value) in (dict, list) else 1
        if self.memo_entries + size > MEMO_ENTRIES:
            self.forget()       # its own counts with it: what a ranking holds is made anew
        self.memo[key] = value
        self.memo_entries += size
        return value

    def forget(self) -> None:
        """Empty the memo (the corpus changed, or it is no longer the one in use)."""
        self.memo.clear()
        self.memo_entries = 0


def shared(old: list, new: list) -> int:
    """How many leading items ``old`` and ``new`` have in common (compared in C)."""
    n = min(len(old), len(new))
    if old[:n] == new[:n]:
        return n
    lo, hi = 0, n       # old[:lo] == new[:lo], old[:hi] != new[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if old[lo:mid] == new[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class Corpora:
    """The kept corpora, least recently used first: at most ``CORPORA_KEPT``, their
    units together at most ``CORPUS_UNITS``; only the last used keeps a memo."""

    def __init__(self):
        self.kept: list = []

    @property
    def bound(self) -> int:
        return CORPUS_UNITS

    def of(self, an: list) -> Corpus:
        """The corpus of the analyses ``an``: the kept one sharing most of its start
        with them, cut where they part and extended by the rest; else a new one."""
        words = list(map(_WORDS, an))
        best, common = None, 0
        for c in reversed(self.kept):
            got = shared(c.words, words)
            if got > common:
                best, common = c, got
                if got == len(c.words) == len(words):
                    break
        if best is None:
            best = Corpus()
        else:
            self.kept.remove(best)
        if self.kept:
            self.kept[-1].forget()
        best.cut(common)
        best.extend(an[common:])
        self.kept.append(best)
        return best

    def trim(self) -> None:
        """Drop the least recently used corpora over the bounds (after a ranking: the
        postings it made count)."""
        kept = self.kept
        while len(kept) > CORPORA_KEPT or (len(kept) > 1 and sum(c.units for c in kept) > CORPUS_UNITS):
            kept.pop(0)
        if kept and kept[-1].units > CORPUS_UNITS:
            kept.pop()      # alone over the bound: used once, not kept

    def clear(self) -> None:
        self.kept.clear()

    def __len__(self) -> int:
        return len(self.kept)


CORPORA = STATE.part("corpora", Corpora)
