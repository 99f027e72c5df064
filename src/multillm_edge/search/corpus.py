"""An indexed ranking's exchanges as one corpus, kept between turns (docs/design.md
§6.2): each word's postings ({exchange: count}) and the code points and lines of them
all, so that a recalling turn looks up its query's words instead of reading every
exchange. A session's next turn pages the same exchanges, or those and a few more:
its corpus is found by the exchanges' cached analyses (the same objects, compared in
C), extended by what was appended, cut back to where it changed otherwise. Nothing in
it depends on who asked: it is the analyses' content, which is shared already."""

from __future__ import annotations

from .state import STATE

#: Corpora kept, the least recently used dropped first, and the postings entries (one
#: per distinct word of an exchange, ~100 bytes with its share of the dicts) they hold
#: together: ~24 MiB at worst (measured: bench/README.md).
CORPORA_KEPT = 8
CORPUS_ENTRIES = 1 << 18


class Corpus:
    """The postings of ``docs`` (indexed analyses, oldest first), built as they come."""
    __slots__ = ("docs", "postings", "size", "lines", "entries", "mark")

    def __init__(self, docs: list = ()):
        self.docs: list = []
        self.postings: dict = {}        # word -> {exchange: count}, exchanges ascending
        self.size = self.lines = self.entries = 0   # code points, lines, postings entries
        self.mark = None    # the vocabulary every one of ``docs`` is registered in, when known
        self.extend(docs)

    def extend(self, docs: list) -> None:
        """Append ``docs`` (their words, sizes and lines)."""
        postings, d, mark = self.postings, len(self.docs), self.mark
        for a in docs:
            words = a.index.words
            for w, c in words.items():
                p = postings.get(w)
                if p is None:
                    postings[w] = {d: c}
                else:
                    p[d] = c
            self.size += a.length
            self.lines += a.lines
            self.entries += len(words)
            if a.index.vocabulary is not mark:
                self.mark = None
            d += 1
        self.docs.extend(docs)

    def cut(self, keep: int) -> None:
        """Drop the exchanges from ``keep`` on (their postings with them)."""
        postings = self.postings
        for d in range(keep, len(self.docs)):
            a = self.docs[d]
            for w in a.index.words:
                p = postings[w]
                del p[d]
                if not p:
                    del postings[w]
            self.size -= a.length
            self.lines -= a.lines
            self.entries -= len(a.index.words)
        del self.docs[keep:]

    def tf(self, forms) -> dict:
        """{exchange: count} of a term's ``forms`` (one word, or a tuple of them),
        exchanges ascending."""
        postings = self.postings
        if type(forms) is str:
            return dict(postings.get(forms, ()))
        got: dict = {}
        for f in forms:
            for d, c in postings.get(f, {}).items():
                got[d] = got.get(d, 0) + c
        return dict(sorted(got.items()))


def shared(old: list, new: list) -> int:
    """How many leading items ``old`` and ``new`` have in common (compared in C: the
    same analysis objects, or equal ones)."""
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
    """The kept corpora, least recently used first; their entries together at most
    ``CORPUS_ENTRIES``, at most ``CORPORA_KEPT`` of them."""

    def __init__(self):
        self.kept: list = []

    @property
    def bound(self) -> int:
        return CORPUS_ENTRIES

    def of(self, docs: list) -> Corpus:
        """The corpus of ``docs``: the kept one sharing most of its start with them,
        cut where they part and extended by the rest; else a new one."""
        best, common = None, 0
        for c in reversed(self.kept):
            got = shared(c.docs, docs)
            if got > common:
                best, common = c, got
                if got == len(c.docs) == len(docs):
                    break
        if best is None:
            best = Corpus()
        else:
            self.kept.remove(best)
        best.cut(common)
        best.extend(docs[common:])
        self.kept.append(best)
        self._evict()
        return best

    def _evict(self) -> None:
        kept = self.kept
        while kept and (len(kept) > CORPORA_KEPT or sum(c.entries for c in kept) > CORPUS_ENTRIES):
            kept.pop(0)

    def clear(self) -> None:
        self.kept.clear()

    def __len__(self) -> int:
        return len(self.kept)


CORPORA = STATE.part("corpora", Corpora)
