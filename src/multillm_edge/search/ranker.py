"""Rank a session's pages for a query and quote each hit (docs/design.md §6.1).

Pure and deterministic: the same query and pages give the same hits. Pages come oldest
first, each as its ``texts.page_texts`` list. Scoring is Okapi BM25 (k1 1.2, b 0.75,
the always-positive idf ``ln(1 + (N - df + .5) / (df + .5))``) over stems and CJK
bigrams. The documents are exchanges (a page's texts cut where a user text starts: a
page may hold a block of many, docs/design.md §5.7), a page ranked by its best one;
plain BM25 (the benchmark's baseline) takes each page whole. Ties break newest first.

Cost (a search reads every page of the session, docs/design.md §6.1): pages are never
cut into all their words. Each page is folded once (NFKC only when its quick check
fails, then ``casefold``); one regex built from the query finds, in C, the page's whole
words that share a query stem's first 3-4 characters (Snowball only rewrites endings);
only those distinct words are stemmed (once per search) and counted. A CJK term is
counted with ``str.count`` over the folded exchange. Document length is its folded
length in code points. Excerpts are cut only for the returned hits.
"""

from __future__ import annotations

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
    exchange: int = 0   # which exchange of the page said it (0 = its oldest)


def _prefix(stem: str) -> str:
    # Snowball changes only a word's ending: a word stemming to `stem` shares its start
    return stem[:3] if len(stem) <= 5 else stem[:4]


def _scanner(prefixes) -> "re.Pattern | None":
    """Finds, in folded text, every whole word starting with one of ``prefixes``. Each
    alternative starts with its literal and checks the character before it with a
    fixed-width lookbehind, so the regex engine skips ahead in C between candidates
    (a leading lookbehind or ``\\b`` would try every position)."""
    alts = [f"{re.escape(p)}(?<![^\\W_].{{{len(p)}}})" for p in sorted(set(prefixes), key=len, reverse=True)]
    return re.compile(f"(?:{'|'.join(alts)})[^\\W_{analyzer._CJK}]*", re.S) if alts else None


def _term_frequencies(terms, folded, stems) -> tuple:
    """{term: per-page tf list} and {term: folded page words that matched it}."""
    n = len(folded)
    tfs, found = {}, {}
    word_terms = {value: ("w", value) for kind, value in terms if kind == "w"}
    # a query verb's irregular forms are scanned for too: they share no prefix with it
    scan = _scanner([_prefix(p) for v in word_terms for p in (v, *analyzer.variants(v, stems))])
    if scan is not None:
        for t in word_terms.values():
            tfs[t], found[t] = [0] * n, set()
        for i, f in enumerate(folded):
            hits = scan.findall(f)
            if not hits:
                continue
            for w, c in Counter(hits).items():
                t = word_terms.get(stems(w))
                if t is not None:
                    tfs[t][i] += c
                    found[t].add(w)
    for kind, value in terms:
        if kind == "c":
            t = (kind, value)
            tfs[t], found[t] = [f.count(value) for f in folded], {value}
    return tfs, found


def search(query: str, pages: Sequence, limit: int = 5, *, stem: bool = True,
           extras: bool = True, starts: Sequence | None = None) -> list:
    """The ``limit`` best pages for ``query`` (best first, newest first on ties),
    pages with no query term left out. ``stem=False, extras=False`` is plain BM25 on
    folded words and CJK bigrams (the benchmark's baseline)."""
    stems = analyzer.Stems(stem)
    terms = analyzer.query_terms(query, stems)
    if not terms or not pages or limit < 1:
        return []
    # The documents: each page whole (plain BM25), or each exchange of a page — a page
    # may hold a block of many (docs/design.md §5.7), and an answer is said in one.
    docs = _exchanges(pages, starts) if extras else [(i, 0, texts, 0) for i, texts in enumerate(pages)]
    if not docs:
        return []
    scores, finder, weights = _scores(terms, [d[2] for d in docs], stems, extras)
    best: dict = {}                  # page -> its best document (the newest on ties)
    for d, sc in enumerate(scores):
        if sc > 0 and sc >= scores[best.get(docs[d][0], d)]:
            best[docs[d][0]] = d
    ranked = sorted(best.items(), key=lambda pd: (-scores[pd[1]], -pd[0]))
    return [_hit(p, round(scores[d], 4), pages[p], docs[d], finder, weights)
            for p, d in ranked[:limit]]


def _exchanges(pages: Sequence, starts: Sequence | None = None) -> list:
    """``(page, first text index, texts, exchange)`` per exchange with a text: a page's
    texts cut at ``starts[page]`` (the text index where each exchange begins), else
    where a user text starts (tool results carry the role ``tool``: they never do)."""
    out = []
    for i, texts in enumerate(pages):
        if starts is not None:
            cuts = list(starts[i])
        else:
            cuts = [0] + [j for j in range(1, len(texts)) if texts[j][0] == "user"]
        for k, a in enumerate(cuts):
            b = cuts[k + 1] if k + 1 < len(cuts) else len(texts)
            if a < b:
                out.append((i, a, texts[a:b], k))
    return out


def _scores(terms, pages, stems, extras: bool) -> tuple:
    """BM25 (plus the extras) of each document → (scores, finder, weights)."""
    folded = [analyzer.fold("\n".join([t for _, t in texts])) for texts in pages]
    tfs, found = _term_frequencies(terms, folded, stems)
    n = len(folded)
    # document length in code points: proportional to its terms in every script
    avg = (sum(map(len, folded)) / n) or 1.0
    norms = [K1 * (1 - B + B * len(f) / avg) for f in folded]
    scores = [0.0] * n
    matched = [0] * n
    weights, surfaces = {}, []
    for term in terms:
        per_page = tfs[term]
        df = n - per_page.count(0)
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        weights[term] = idf
        surfaces.append((term, found[term]))
        for i, tf in enumerate(per_page):
            if tf:
                scores[i] += idf * tf * (K1 + 1) / (tf + norms[i])
                matched[i] += 1
    finder = _finder(surfaces)
    if extras:
        scores = _extras(scores, matched, len(terms))
        _proximity(scores, folded, finder, weights)
    return scores, finder, weights


def _extras(scores: list, matched: list, nterms: int) -> list:
    """Coordination: a page holding more of the query's distinct terms is preferred."""
    return [s * (1 + m / nterms) if s else 0.0 for s, m in zip(scores, matched)]


RERANK = 100        # pages whose proximity is looked at (bounds the cost)
WINDOW = 80         # code points: terms this close count as said together
PROXIMITY = 2.0     # weight of terms said together against BM25 alone


def _proximity(scores: list, folded: list, finder, weights: dict) -> None:
    """Terms said together: each of the best RERANK pages gains the share of the
    query's idf found within WINDOW code points of its folded text (the page already
    folded for BM25: positions are compared, never quoted)."""
    total = sum(weights.values())
    if finder is None or not total:
        return
    rx, names = finder
    top = sorted(range(len(scores)), key=lambda i: (-scores[i], -i))[:RERANK]
    for i in top:
        if not scores[i]:
            break
        ms = [(m.start(), m.end(), names[int(m.lastgroup[1:])]) for m in rx.finditer(folded[i])]
        if ms:
            scores[i] *= 1 + PROXIMITY * _window_weight(ms, WINDOW, weights) / total


def _window_weight(matches: list, span: int, weights: dict) -> float:
    best = 0.0
    for a, (s, _, _) in enumerate(matches):
        seen = set()
        for _, e2, t in matches[a:]:
            if e2 - s > span:
                break
            seen.add(t)
        best = max(best, sum(weights[t] for t in seen))
    return best


# -- excerpts ------------------------------------------------------------------------

def _finder(surfaces: list):
    """One regex finding every matched folded word (whole) and CJK term; group name
    per term index."""
    alts = []
    for k, (term, found) in enumerate(surfaces):
        ws = sorted(found, key=len, reverse=True)
        if term[0] == "w":
            body = "|".join(f"{re.escape(w)}(?<![^\\W_].{{{len(w)}}})" for w in ws)
            body = f"(?:{body})(?![^\\W_])"
        else:
            body = "|".join(map(re.escape, ws))
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


def _hit(i: int, score: float, texts, document: tuple, finder, weights: dict) -> Hit:
    """Page ``i``'s hit, quoted from the message of its best ``document`` (the page's
    ``texts`` from index ``first``, exchange ``exchange``) holding the most query weight."""
    _, first, doc, exchange = document
    best, best_w, best_m = 0, -1.0, []
    for j, (_, t) in enumerate(doc):
        ms = _matches(t, finder)
        w = sum(weights[term] for term in {m[2] for m in ms})
        if w > best_w:
            best, best_w, best_m = j, w, ms
    role, text = doc[best]
    start, end = excerpt_span(text, best_m)
    cut = (ELLIPSIS if start > 0 else "") + text[start:end] + (ELLIPSIS if end < len(text) else "")
    return Hit(i, score, role, cut, first + best, start, end, exchange)


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
