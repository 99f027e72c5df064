"""Quoting a hit (docs/design.md §6.1): the message of the exchange holding the most
query weight, cut verbatim around its densest matches to ``EXCERPT_MAX`` code points."""

from __future__ import annotations

from .analysis import fold
from .match import MAX_SPANS

EXCERPT_MAX = 400   # code points of a quote, the ellipses included
ELLIPSIS = "\u2026"


def quote(doc, matcher, weights: dict) -> tuple:
    """(message index, role, text, start, end) of ``doc``'s ``(role, text)`` messages:
    the one whose matches (``matcher``) weigh most, cut around them."""
    best, best_w, best_m = 0, -1.0, []
    for j, (_, t) in enumerate(doc):
        ms = _spans(t, matcher)
        w = sum(weights.get(term, 0.0) for term in dict.fromkeys(m[2] for m in ms))    # in order, not by hash
        if w > best_w:
            best, best_w, best_m = j, w, ms
    role, text = doc[best]
    start, end = excerpt_span(text, best_m)
    cut = (ELLIPSIS if start > 0 else "") + text[start:end] + (ELLIPSIS if end < len(text) else "")
    return best, role, cut, start, end


def _spans(text: str, matcher) -> list:
    """The matches in ``text``'s own indices (folding may change lengths)."""
    folded, index = _folded_map(text)
    out = matcher.spans(folded, MAX_SPANS)
    if index is not None:
        out = [(index[s], index[e - 1] + 1, t) for s, e, t in out]
    return out


def _folded_map(text: str) -> tuple:
    """The folded text and, when folding changed lengths, a folded -> original index map."""
    folded = fold(text)
    if len(folded) == len(text):
        return folded, None
    parts = [fold(c) for c in text]
    index = []
    for i, p in enumerate(parts):
        index.extend([i] * len(p))
    index.append(len(text))
    return "".join(parts), index


def excerpt_span(text: str, matches: list, limit: int = EXCERPT_MAX) -> tuple:
    """[start, end) of ``text`` to quote: the window holding the most distinct matched
    terms, centered on them, sized so that it plus its ellipses is ≤ ``limit``."""
    n = len(text)
    if n <= limit:
        return 0, n
    span = limit - 2
    lo, hi = _densest(matches, span)
    mid = (lo + hi) // 2
    start = max(0, min(mid - span // 2, n - span))
    if start == 0:
        return 0, limit - 1
    if start + span >= n:
        return n - (limit - 1), n
    return start, start + span


def _densest(matches: list, span: int) -> tuple:
    """(first start, last end) of the run of matches within ``span`` characters that
    holds the most distinct terms (earliest on ties); (0, 0) with no match."""
    best, bounds = 0, (0, 0)
    for a, (s, _, _) in enumerate(matches):
        seen, last = set(), s
        for s2, e2, t in matches[a:]:
            if e2 - s > span:
                break
            seen.add(t)
            last = e2
        if len(seen) > best:
            best, bounds = len(seen), (s, last)
    return bounds
