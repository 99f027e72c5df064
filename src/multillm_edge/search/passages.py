"""The best passage of an exchange (docs/design.md §6.1): two consecutive lines of the
conversation (a turn and what answers it, across neighbouring exchanges too), scored by
BM25 against the mean line pair; the lines' counts read from the index or a scan."""

from __future__ import annotations

from . import bm25, docs


def passages(top: list, an: list, matcher, weights: dict, avg: float, indexed: bool) -> dict:
    """{exchange: BM25 of its best passage} for the ``top`` exchanges (``weights``:
    each term's idf; ``avg``: the mean line pair's length). Only the lines holding a
    term and their partners are looked at; a neighbour not in ``top`` lends only its
    edge line; the conversation's last line may stand alone."""
    lines = _Lines(an, matcher, indexed, top)
    best = {}
    for d in top:
        held, lengths = lines.around(d)
        got = _best_pair(held, lengths, weights, avg)
        if d + 1 == len(an) and (last := held.get(len(lengths) - 1)):
            got = max(got, bm25.score(last, lengths[-1], weights, avg))
        if got > 0.0:
            best[d] = got
    return best


class _Lines:
    """The per-line term counts of a ranking's exchanges: from their indexes or by a
    scan of their text (the same figures); a ``top`` exchange's all made once, another's
    edge line alone."""

    def __init__(self, an: list, matcher, indexed: bool, top: list):
        self._an, self._matcher, self._indexed = an, matcher, indexed
        self._made: dict = dict.fromkeys(top)

    def of(self, e: int) -> dict:
        """{line: {term: count}} of exchange ``e``'s lines holding a term."""
        got = self._made[e]
        if got is None:
            a, m = self._an[e], self._matcher
            got = self._made[e] = m.indexed_line_counts(a) if self._indexed else m.line_counts(a.text)
        return got

    def edge(self, e: int, which: str) -> tuple:
        """(counts, code points) of exchange ``e``'s "first" or "last" line."""
        a = self._an[e]
        if e in self._made:
            k = 0 if which == "first" else a.lines - 1
            return self.of(e).get(k), docs.line_lengths(a)[k]
        text = docs.line_text(a, which)
        got = self._matcher.indexed_counts(a, which) if self._indexed else self._matcher.counts(text)
        return got, len(text)

    def around(self, d: int) -> tuple:
        """({line: counts}, every line's length) of ``d``'s lines with the previous
        exchange's last line before them and the next one's first after them."""
        held, lengths = self.of(d), docs.line_lengths(self._an[d])
        if d > 0:
            tf, length = self.edge(d - 1, "last")
            held = {k + 1: v for k, v in held.items()}
            if tf:
                held[0] = tf
            lengths = (length,) + lengths
        else:
            held = dict(held)       # its own: kept for its neighbours
        if d + 1 < len(self._an):
            tf, length = self.edge(d + 1, "first")
            if tf:
                held[len(lengths)] = tf
            lengths = lengths + (length,)
        return held, lengths


def _best_pair(lines: dict, lengths: tuple, weights: dict, avg: float) -> float:
    """The best BM25 of two consecutive lines (``lines``: {line: counts} of those holding
    a term): two holding lines together, or one with the shorter of its neighbours
    holding none (the longer scores less: BM25 falls with length)."""
    best, last, get = 0.0, len(lengths) - 1, lines.get
    for h, tf in lines.items():
        if (nxt := get(h + 1)) is not None:         # h and h + 1 together
            merged = dict(tf)
            for t, c in nxt.items():
                merged[t] = merged.get(t, 0) + c
            best = max(best, bm25.score(merged, lengths[h] + lengths[h + 1], weights, avg))
            partner = lengths[h - 1] if h and h - 1 not in lines else -1
        else:
            partner = lengths[h + 1] if h < last else -1
            if h and h - 1 not in lines and (partner < 0 or lengths[h - 1] < partner):
                partner = lengths[h - 1]
        if partner >= 0:                            # h with a neighbour holding none
            best = max(best, bm25.score(tf, lengths[h] + partner, weights, avg))
    return best
