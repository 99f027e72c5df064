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
#: What the corpus in use keeps of its rankings (``Corpus.kept``), in exchange entries
#: (~100 bytes each), then emptied: ~3 MiB. Only the corpus last used keeps any.
MEMO_ENTRIES = 1 << 15


class Corpus:
    """The postings of ``docs`` (indexed analyses, oldest first), built as they come."""
    __slots__ = ("docs", "sizes", "postings", "size", "lines", "entries", "mark", "memo", "memo_entries")

    def __init__(self, docs: list = ()):
        self.docs: list = []
        self.sizes: list = []           # code points of each
        self.postings: dict = {}        # word -> {exchange: count}, exchanges ascending
        self.size = self.lines = self.entries = 0   # code points, lines, postings entries
        self.mark = None    # the vocabulary every one of ``docs`` is registered in, when known
        self.memo: dict = {}    # what a ranking derived from it alone (``kept``), until it changes
        self.memo_entries = 0
        self.extend(docs)

    def extend(self, docs: list) -> None:
        """Append ``docs`` (their words, sizes and lines)."""
        if not docs:
            return
        self.forget()
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
        self.sizes.extend([a.length for a in docs])

    def cut(self, keep: int) -> None:
        """Drop the exchanges from ``keep`` on (their postings with them)."""
        if keep >= len(self.docs):
            return
        self.forget()
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
        del self.sizes[keep:]

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
        postings = self.postings
        if type(forms) is str:
            return dict(postings.get(forms, ()))
        got: dict = {}
        for f in forms:
            for d, c in postings.get(f, {}).items():
                got[d] = got.get(d, 0) + c
        return dict(sorted(got.items()))

    def kept(self, kind: str, tf: dict, make):
        """``make()``, kept under (``kind``, ``tf``) while the corpus is when ``tf`` is
        one of its own (``tf``): what depends on a term's counts and the corpus alone."""
        if self.memo.get(id(tf)) is not tf:
            return make()
        key = (kind, id(tf))
        got = self.memo.get(key)
        if got is None:
            got = self._keep(key, make())
        return got

    def _keep(self, key, value):
        size = len(value) if type(value) is dict else 1
        if self.memo_entries + size > MEMO_ENTRIES:
            self.forget()       # its owned counts with it: what a ranking holds is made anew
        self.memo[key] = value
        self.memo_entries += size
        return value

    def forget(self) -> None:
        self.memo.clear()
        self.memo_entries = 0


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
        if self.kept and self.kept[-1] is not best:
            self.kept[-1].forget()      # the memo of the corpus last used only
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
