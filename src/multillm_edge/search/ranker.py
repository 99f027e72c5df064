"""Rank a session's pages for a query and quote each hit (docs/design.md §6.1).

Pure and deterministic: the same query and pages give the same hits. Pages come oldest
first, each as its ``texts.page_texts`` list. Scoring is Okapi BM25 (k1 1.2, b 0.75,
the always-positive idf ``ln(1 + (N - df + .5) / (df + .5))``) over stems and CJK
bigrams, a page being the document; ties break newest first.

Cost (a search reads every page of the session): each page is folded and cut into
words once, in C (``unicodedata.normalize``, ``casefold``, one ``findall``, ``Counter``);
only the distinct page words that could stem to a query term (those sharing its first
3-4 characters, found by bisection in the sorted vocabulary) are ever stemmed; a CJK
term is counted with ``str.count`` over the folded page. Excerpts are cut only for the
returned hits.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from typing import NamedTuple, Sequence

from . import analyzer

K1, B = 1.2, 0.75
EXCERPT_MAX = 400   # code points of ``Hit.text``, the ellipses included
ELLIPSIS = "\u2026"


class Hit(NamedTuple):
    """One ranked page. ``text`` is ``("…" if start > 0) + message[start:end] +
    ("…" if end < len(message))``, at most EXCERPT_MAX code points in all, where
    ``message`` is ``pages[page][message_index][1]``."""
    page: int           # index into the ``pages`` given (0 = oldest)
    score: float        # rounded to 4 decimals
    role: str
    text: str
    message_index: int
    start: int
    end: int


class _Page(NamedTuple):
    folded: str
    counts: dict
    length: int


def _prepare(texts) -> _Page:
    folded = analyzer.fold("\n".join([t for _, t in texts]))
    ws = analyzer.words(folded)
    return _Page(folded, Counter(ws), len(ws) + analyzer.cjk_length(folded))


def _prefix(stem: str) -> str:
    # Snowball changes only a word's ending: a word stemming to `stem` shares its start
    return stem[:3] if len(stem) <= 5 else stem[:4]


def _matching_words(stem: str, vocab: list, stems) -> list:
    p = _prefix(stem)
    lo = bisect.bisect_left(vocab, p)
    hi = bisect.bisect_left(vocab, p + "\U0010ffff", lo)
    return [w for w in vocab[lo:hi] if stems(w) == stem]


def _tfs(term, docs, vocab, stems) -> tuple:
    """Per page term frequencies of one query term, and the folded words it matched."""
    kind, value = term
    if kind == "c":
        return [d.folded.count(value) for d in docs], (value,)
    words = _matching_words(value, vocab, stems)
    if not words:
        return None, ()
    if len(words) == 1:
        w = words[0]
        return [d.counts.get(w, 0) for d in docs], words
    return [sum([d.counts.get(w, 0) for w in words]) for d in docs], words


def search(query: str, pages: Sequence, limit: int = 5, *, stem: bool = True,
           extras: bool = True) -> list:
    """The ``limit`` best pages for ``query`` (best first, newest first on ties),
    pages with no query term left out. ``stem=False, extras=False`` is plain BM25 on
    folded words and CJK bigrams (the benchmark's baseline)."""
    stems = analyzer.Stems(stem)
    terms = analyzer.query_terms(query, stems)
    if not terms or not pages or limit < 1:
        return []
    docs = [_prepare(t) for t in pages]
    vocab = sorted(set().union(*[d.counts for d in docs]))
    n = len(docs)
    avg = (sum([d.length for d in docs]) / n) or 1.0
    norms = [K1 * (1 - B + B * d.length / avg) for d in docs]
    scores = [0.0] * n
    matched = [0] * n
    weights, surfaces = {}, []
    for term in terms:
        tfs, found = _tfs(term, docs, vocab, stems)
        if tfs is None:
            continue
        df = n - tfs.count(0)
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        weights[term] = idf
        surfaces.append((term, found))
        for i, tf in enumerate(tfs):
            if tf:
                scores[i] += idf * tf * (K1 + 1) / (tf + norms[i])
                matched[i] += 1
    if extras:
        scores = _extras(scores, matched, len(terms))
    ranked = sorted((i for i in range(n) if scores[i] > 0), key=lambda i: (-scores[i], -i))
    finder = _finder(surfaces)
    return [_hit(i, round(scores[i], 4), pages[i], finder, weights) for i in ranked[:limit]]


def _extras(scores: list, matched: list, nterms: int) -> list:
    """Coordination: a page holding more of the query's distinct terms is preferred."""
    return [s * (1 + m / nterms) if s else 0.0 for s, m in zip(scores, matched)]


# -- excerpts ------------------------------------------------------------------------

def _finder(surfaces: list):
    """One regex finding every matched folded word (whole) and CJK term; group name
    per term index."""
    alts = []
    for k, (term, found) in enumerate(surfaces):
        body = "|".join(re.escape(w) for w in sorted(found, key=len, reverse=True))
        if term[0] == "w":
            body = rf"(?<![^\W_])(?:{body})(?![^\W_])"
        alts.append(f"(?P<t{k}>{body})")
    return (re.compile("|".join(alts)), [t for t, _ in surfaces]) if alts else None


def _folded_map(text: str) -> tuple:
    """The folded text and, when folding changed lengths, a folded -> original index map."""
    folded = analyzer.fold(text)
    if len(folded) == len(text):
        return folded, None
    parts = [analyzer.fold(c) for c in text]
    index = []
    for i, p in enumerate(parts):
        index.extend([i] * len(p))
    index.append(len(text))
    return "".join(parts), index


def _matches(text: str, finder) -> list:
    """[(start, end, term), ...] in ``text``'s own indices."""
    if finder is None:
        return []
    rx, terms = finder
    folded, index = _folded_map(text)
    out = []
    for m in rx.finditer(folded):
        s, e = m.span()
        if index is not None:
            s, e = index[s], index[e - 1] + 1
        out.append((s, e, terms[int(m.lastgroup[1:])]))
        if len(out) >= 256:
            break
    return out


def _hit(i: int, score: float, texts, finder, weights: dict) -> Hit:
    best, best_w, best_m = 0, -1.0, []
    for j, (_, t) in enumerate(texts):
        ms = _matches(t, finder)
        w = sum(weights[term] for term in {m[2] for m in ms})
        if w > best_w:
            best, best_w, best_m = j, w, ms
    role, text = texts[best]
    start, end = excerpt_span(text, best_m)
    cut = (ELLIPSIS if start > 0 else "") + text[start:end] + (ELLIPSIS if end < len(text) else "")
    return Hit(i, score, role, cut, best, start, end)


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
