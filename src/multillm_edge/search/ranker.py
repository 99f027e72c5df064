"""Rank exchanges for a query and quote each hit (docs/design.md §6.1, §6.2).

A document is one exchange, given as its ``(role, text)`` list (``texts.page_texts``
of the exchange's items); documents come in conversation order, oldest first. ``rank``
answers the best ``limit`` documents, each with a verbatim excerpt. Pure and
deterministic: ties break newest first.

Scoring (``Scoring``; each part is ablated in bench/bench_recall.py):

- Okapi BM25 over exchanges (k1 1.2, b 0.75, idf ``ln(1 + (N - df + .5) / (df + .5))``)
  on stems and CJK bigrams — the fair baseline;
- neighbour smoothing: an exchange gains ``NEIGHBOUR`` × the better BM25 of the
  exchange before and after it (a conversation answers across turns);
- max-passage: plus ``PASSAGE`` × the BM25 of the exchange's best message, scored
  against the mean message length (the answer is usually said in one message).

Relevance (``ExchangeHit.relevance``, for a recall threshold): the share of the query's
idf weight (its kept terms) that the exchange contains, in [0, 1]. 1.0 = every query
term is in the exchange; a term found in every exchange weighs ~0.

Cost is bounded by the query, not its length: stop words (a fixed small English and
Russian list) are left out — a query of stop words only has no terms and no hits — and
at most ``MAX_TERMS`` distinct terms are kept, the rarest in the documents first (their
collection frequency, one ``str.count`` over the folded text). Documents are never cut
into all their words: one regex built from the kept terms finds, in C, the whole words
that share a query stem's first 3-4 characters (Snowball only rewrites endings) or that
equal a query word as written (so ``dying`` finds ``dying`` though its stem is ``die``);
only those distinct words are stemmed. A term found nowhere that way is looked up once
more word by word in the messages holding its text (any word, queried alone, finds an
exchange holding it). CJK terms are counted with ``str.count``.

Caching (auto-recall on a steady turn ranks mostly the same exchanges): each
document's analysis (its messages folded: NFKC + casefold) can be kept across calls in
a module-level LRU keyed by a caller-supplied key (a SHA-256), bounded by
``CACHE_CODE_POINTS`` folded code points in all (≤ 4 bytes each, ~16 MiB at worst).
"""

from __future__ import annotations

import math
import re
from collections import Counter, OrderedDict
from typing import NamedTuple, Sequence

from . import analyzer

K1, B = 1.2, 0.75
NEIGHBOUR = 0.5     # weight of the better neighbour's BM25
PASSAGE = 1.0       # weight of the best message's BM25
MAX_TERMS = 12      # distinct query terms kept (the rarest)
EXCERPT_MAX = 400   # code points of ``ExchangeHit.text``, the ellipses included
ELLIPSIS = "\u2026"
#: Suggested minimum ``relevance`` for auto-recall (docs/design.md §6.2).
MIN_RELEVANCE = 0.5


class Scoring(NamedTuple):
    """Which parts of the score are on (the benchmark's ablations)."""
    stem: bool = True
    neighbour: float = NEIGHBOUR
    passage: float = PASSAGE
    lines: bool = True      # a passage is a line (else a whole message)
    prf: int = 0            # pseudo-relevance feedback: expansion terms (0 = off)


BASELINE = Scoring(stem=True, neighbour=0.0, passage=0.0)     # stemmed BM25 over exchanges
PLAIN = Scoring(stem=False, neighbour=0.0, passage=0.0)       # plain BM25 over exchanges


class ExchangeHit(NamedTuple):
    """One ranked exchange. ``text`` is ``("…" if start > 0) + message[start:end] +
    ("…" if end < len(message))``, at most EXCERPT_MAX code points, where ``message``
    is ``docs[doc][message_index][1]``."""
    doc: int            # index into the ``docs`` given (0 = oldest)
    score: float        # rounded to 4 decimals
    relevance: float    # share of the query's idf weight the exchange holds, 4 decimals
    role: str
    text: str
    message_index: int
    start: int
    end: int


# -- per-document analysis, cached ---------------------------------------------------

class Analysis(NamedTuple):
    """What a document's scoring needs that does not depend on the query."""
    folded: tuple       # each message's text, NFKC + casefold
    length: int         # code points of the folded messages


def analyze(texts: Sequence) -> Analysis:
    folded = tuple(analyzer.fold(t) for _, t in texts)
    return Analysis(folded, sum(map(len, folded)))


CACHE_CODE_POINTS = 4 << 20
_cache: OrderedDict = OrderedDict()
_cached = [0]


def analysis(texts: Sequence, key=None) -> Analysis:
    """``analyze(texts)``, kept under ``key`` (least recently used evicted first)."""
    if key is None:
        return analyze(texts)
    got = _cache.get(key)
    if got is not None:
        _cache.move_to_end(key)
        return got
    got = analyze(texts)
    _cache[key] = got
    _cached[0] += got.length
    while _cached[0] > CACHE_CODE_POINTS and _cache:
        _cached[0] -= _cache.popitem(last=False)[1].length
    return got


def clear_cache() -> None:
    _cache.clear()
    _cached[0] = 0


# -- query terms -------------------------------------------------------------------

def _rarest(terms: list, joined: str, cap: int) -> list:
    """At most ``cap`` terms, the least frequent in ``joined`` first (query order on
    ties): the cost of scanning grows with the terms, their weight with rarity."""
    if len(terms) <= cap:
        return terms
    def cf(t):
        probe = t.value if t.kind == "c" else min(t.surfaces | {_prefix(t.value)}, key=len)
        return joined.count(probe)
    order = sorted(range(len(terms)), key=lambda i: (cf(terms[i]), i))[:cap]
    return [terms[i] for i in sorted(order)]


# -- term frequencies ----------------------------------------------------------------

_WORDCHAR = f"[^\\W_{analyzer._CJK}]"      # what WORD_RE's words are made of


def _prefix(stem: str) -> str:
    # Snowball changes only a word's ending: a word stemming to `stem` shares its start
    return stem[:3] if len(stem) <= 5 else stem[:4]


def _scanner(literals) -> "re.Pattern | None":
    """Finds, in folded text, every whole word starting with one of ``literals``. Each
    alternative starts with its literal and checks the character before it with a
    fixed-width lookbehind, so the regex engine skips ahead in C between candidates."""
    alts = [f"{re.escape(p)}(?<!{_WORDCHAR}.{{{len(p)}}})"
            for p in sorted(set(literals), key=lambda p: (-len(p), p))]
    return re.compile(f"(?:{'|'.join(alts)}){_WORDCHAR}*", re.S) if alts else None


def _word_tfs(terms: list, messages: list, stems) -> dict:
    """{term: {(doc, message): tf}} for the word terms."""
    words = [t for t in terms if t.kind == "w"]
    out = {t: {} for t in words}
    if not words:
        return out
    by_surface = {w: t for t in words for w in t.surfaces}
    by_stem = {t.value: t for t in words}
    literals = [w for t in words for w in t.surfaces] + [
        _prefix(p) for t in words if not analyzer._DIGIT_RE.search(t.value)
        for p in (t.value, *analyzer.variants(t.value, stems))]
    scan = _scanner(literals)
    for at, f in messages:
        hits = scan.findall(f)
        if hits:
            for w, c in Counter(hits).items():
                t = by_surface.get(w) or by_stem.get(stems(w))
                if t is not None:
                    d = out[t]
                    d[at] = d.get(at, 0) + c
    for t in words:
        if not out[t]:
            _exact(t, messages, out[t])
    return out


def _exact(term: Term, messages: list, tf: dict) -> None:
    """The term's query words, word by word, in the messages holding their text: the
    words a prefix scan cannot see (after a number like ``3.5``, next to CJK)."""
    for at, f in messages:
        if any(w in f for w in term.surfaces):
            c = sum(n for w, n in Counter(analyzer.words(f)).items() if w in term.surfaces)
            if c:
                tf[at] = c


def _cjk_tfs(terms: list, messages: list) -> dict:
    out = {}
    for t in terms:
        if t.kind == "c":
            out[t] = {at: n for at, f in messages if (n := f.count(t.value))}
    return out


# -- scoring -------------------------------------------------------------------------

def _units(an: list, lines: bool) -> list:
    """[((doc, passage), folded text)]: each message, or each line of each message."""
    if not lines:
        return [((d, m), f) for d, a in enumerate(an) for m, f in enumerate(a.folded)]
    return [((d, k), f) for d, a in enumerate(an) for k, f in enumerate("\n".join(a.folded).split("\n"))]


def _bm25(tf: int, norm: float) -> float:
    return tf * (K1 + 1) / (tf + norm)


def rank(query: str, docs: Sequence, limit: int = 5, *, keys: Sequence | None = None,
         scoring: Scoring = Scoring()) -> list:
    """The ``limit`` best exchanges of ``docs`` for ``query`` (best first, newest first
    on ties); exchanges holding no query term are left out. ``keys[i]`` (optional, e.g.
    the SHA-256 of the page and the exchange's number) caches ``docs[i]``'s analysis."""
    stems = analyzer.Stems(scoring.stem)
    terms = analyzer.query_terms(query, stems)
    if not terms or not docs or limit < 1:
        return []
    an = [analysis(t, keys[i] if keys is not None else None) for i, t in enumerate(docs)]
    messages = _units(an, scoring.lines)
    terms = _rarest(terms, "\n".join(f for _, f in messages), MAX_TERMS)
    tfs = {**_word_tfs(terms, messages, stems), **_cjk_tfs(terms, messages)}
    scores, weights, found = _scores(terms, tfs, an, scoring, messages)
    total = sum(weights.values())
    ranked = sorted((d for d, s in enumerate(scores) if s > 0), key=lambda d: (-scores[d], -d))
    finder = _finder([(t, found[t]) for t in terms if weights.get(t)])
    return [_hit(d, scores[d], _relevance(d, tfs, weights, total), docs[d], finder, weights)
            for d in ranked[:limit]]


def _scores(terms: list, tfs: dict, an: list, scoring: Scoring, units: list) -> tuple:
    """Each document's score, each term's idf, each term's matched words."""
    n = len(an)
    avg = sum(a.length for a in an) / n or 1.0
    lengths = {at: len(f) for at, f in units}
    avg_msg = sum(lengths.values()) / len(lengths) or 1.0
    doc_norm = [K1 * (1 - B + B * a.length / avg) for a in an]
    base = [0.0] * n
    passages: dict = {}
    weights, found = {}, {}
    for t in terms:
        per_doc: dict = {}
        for (d, m), c in tfs[t].items():
            per_doc[d] = per_doc.get(d, 0) + c
        if not per_doc:
            continue
        idf = math.log(1 + (n - len(per_doc) + 0.5) / (len(per_doc) + 0.5))
        weights[t] = idf
        for d, c in per_doc.items():
            base[d] += idf * _bm25(c, doc_norm[d])
        if scoring.passage:
            # the passages' own statistics: a name said in every exchange is said in
            # only some of their lines
            pidf = math.log(1 + (len(units) - len(tfs[t]) + 0.5) / (len(tfs[t]) + 0.5))
            for (d, m), c in tfs[t].items():
                norm = K1 * (1 - B + B * lengths[(d, m)] / avg_msg)
                passages[(d, m)] = passages.get((d, m), 0.0) + pidf * _bm25(c, norm)
        found[t] = None
    scores = list(base)
    if scoring.neighbour:
        for d in range(n):
            near = max(base[d - 1] if d else 0.0, base[d + 1] if d + 1 < n else 0.0)
            if base[d]:
                scores[d] += scoring.neighbour * near
    if scoring.passage:
        best: dict = {}
        for (d, _), s in passages.items():
            best[d] = max(best.get(d, 0.0), s)
        for d, s in best.items():
            scores[d] += scoring.passage * s
    return scores, weights, {t: _surfaces(t, tfs[t], an) for t in found}


def _surfaces(term: Term, tf: dict, an: list) -> set:
    """The folded words (or CJK term) that matched ``term``, for quoting."""
    if term.kind == "c":
        return {term.value}
    return set(term.surfaces) | {"\0" + term.value}


def _relevance(d: int, tfs: dict, weights: dict, total: float) -> float:
    if not total:
        return 0.0
    held = sum(w for t, w in weights.items() if any(k[0] == d for k in tfs[t]))
    return round(held / total, 4)


# -- excerpts ------------------------------------------------------------------------

def _finder(surfaces: list):
    """(regex of the query terms' literals, per-group term) for locating matches when
    quoting: a word term by its stem prefix or query words, checked by stem after."""
    alts, terms = [], []
    for term, found in surfaces:
        if term.kind == "w":
            lits = sorted({_prefix(term.value), *term.surfaces}, key=lambda p: (-len(p), p))
            body = "|".join(f"{re.escape(w)}(?<!{_WORDCHAR}.{{{len(w)}}})" for w in lits)
            body = f"(?:{body}){_WORDCHAR}*"
        else:
            body = re.escape(term.value)
        alts.append(f"(?P<t{len(terms)}>{body})")
        terms.append(term)
    return (re.compile("|".join(alts)), terms) if alts else None


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


def _matches(text: str, finder, stems) -> list:
    """[(start, end, term), ...] in ``text``'s own indices."""
    if finder is None:
        return []
    rx, terms = finder
    folded, index = _folded_map(text)
    out = []
    for m in rx.finditer(folded):
        t = terms[int(m.lastgroup[1:])]
        if t.kind == "w" and m.group() not in t.surfaces and stems(m.group()) != t.value:
            continue
        s, e = m.span()
        if index is not None:
            s, e = index[s], index[e - 1] + 1
        out.append((s, e, t))
        if len(out) >= 256:
            break
    return out


def _hit(d: int, score: float, relevance: float, doc, finder, weights: dict) -> ExchangeHit:
    """Document ``d``'s hit, quoted from its message holding the most query weight."""
    stems = analyzer.Stems()
    best, best_w, best_m = 0, -1.0, []
    for j, (_, t) in enumerate(doc):
        ms = _matches(t, finder, stems)
        w = sum(weights[term] for term in {m[2] for m in ms})
        if w > best_w:
            best, best_w, best_m = j, w, ms
    role, text = doc[best]
    start, end = excerpt_span(text, best_m)
    cut = (ELLIPSIS if start > 0 else "") + text[start:end] + (ELLIPSIS if end < len(text) else "")
    return ExchangeHit(d, round(score, 4), relevance, role, cut, best, start, end)


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
