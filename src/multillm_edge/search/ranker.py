"""Rank exchanges for a query (docs/design.md §6.1, §6.2): BM25 over exchanges, plus
their window's BM25, the question an exchange answers, and the BM25 of the best passage
of the best ones (``Scoring``); ties newest first; each hit quoted (``excerpt``)."""

from __future__ import annotations

from array import array
from itertools import repeat
from operator import add as _plus, mul as _times
from typing import NamedTuple, Sequence

from . import bm25
from .analysis import Term, query_terms
from .corpus import CORPORA, Corpus
from .docs import Held, analyses
from .excerpt import quote
from .match import Matcher
from .passages import passages
from .stems import Stems

MAX_TERMS = 8       # distinct query words kept (the rarest)
MAX_CJK_TERMS = 32  # distinct CJK bigrams kept (the rarest)
SAMPLE = 1 << 13    # code points of the rarity sample per kept term,
SAMPLE_MIN = 1 << 12    # at least this many
#: Suggested minimum ``relevance`` for auto-recall (docs/design.md §6.2).
MIN_RELEVANCE = 0.5


class Scoring(NamedTuple):
    """What the score is made of (bench/bench_recall.py ablates each part)."""
    stem: bool = True           # Snowball stems (else folded words as they are)
    irregular: bool = True      # irregular verb forms join their verb (irregular.py)
    window: float = 1.0         # + this × the BM25 of the exchange's window (it and one each side)
    passage: float = 1.0        # + this × the BM25 of its best passage (two consecutive lines)
    rerank: int = 50            # the best exchanges whose passages are scored (bounds the cost)
    asked: bool = True          # an exchange's last line asking counts for the next exchange
    lidf: bool = True           # passages weigh terms by their idf over lines, not exchanges


BASELINE = Scoring(irregular=False, window=0.0, passage=0.0, asked=False, lidf=False)  # stemmed BM25
PLAIN = Scoring(stem=False, irregular=False, window=0.0, passage=0.0, asked=False, lidf=False)
RERANK = Scoring().rerank


class ExchangeHit(NamedTuple):
    """One ranked exchange, quoted from ``docs[doc][message_index]``: ``text`` is its
    ``[start:end]`` with "…" where cut (``excerpt.quote``)."""
    doc: int            # index into the ``docs`` given (0 = oldest)
    score: float        # rounded to 4 decimals
    relevance: float    # share of the query's idf weight the exchange holds, 4 decimals
    role: str
    text: str
    message_index: int
    start: int
    end: int


class Query(NamedTuple):
    """A query analysed once (``prepare``) for one ``Scoring``'s stems."""
    terms: list         # analysis.Term, stop words left out
    stems: Stems


def prepare(query: str, scoring: Scoring = Scoring()) -> Query:
    stems = Stems(scoring.stem, scoring.irregular)
    return Query(query_terms(query, stems), stems)


def rank(query, docs: Sequence, limit: int = 5, *, keys: Sequence | None = None,
         scoring: Scoring = Scoring(), indexed: bool = False, excerpts: bool = True,
         former=None) -> list:
    """The ``limit`` best exchanges of ``docs`` (``(role, text)`` lists, oldest first)
    for ``query`` (a str, or a ``Query`` prepared for ``scoring``), best first; those
    holding no query term left out. ``keys[i]`` caches ``docs[i]``'s analysis (read
    only when not cached; ``former(i)``: another key it may be under, moved from there).
    ``indexed``: terms counted in each exchange's cached word counts, not scanned for
    (the same counts; for recall). ``excerpts=False``: hits unquoted, docs unread."""
    q = query if isinstance(query, Query) else prepare(query, scoring)
    if not q.terms or not docs or limit < 1:
        return []
    if indexed and keys is not None:
        an, corpus = _kept_corpus(docs, keys, q.stems, former)
    else:
        an = analyses(docs, keys, q.stems if indexed else None, former)
        corpus = Corpus(an) if indexed else None
    matcher = Matcher(_kept(q.terms, an, corpus), q.stems)
    tfs = _tfs(matcher, an, corpus)
    scores, weights, held = _scores(matcher, tfs, an, scoring, corpus, limit)
    if keys is not None and indexed:
        CORPORA.trim()
    total = sum(weights.values())
    out = []
    for d in _best(scores, held, limit):
        quoted = quote(docs[d], matcher, weights) if excerpts else (-1, "", "", 0, 0)
        j, role, text, start, end = quoted
        out.append(ExchangeHit(d, round(scores[d], 4), _relevance(d, tfs, weights, total),
                               role, text, j, start, end))
    return out


def _kept_corpus(docs: Sequence, keys: list, stems, former) -> tuple:
    """(the analyses, the corpus) of an indexed ranking with keys: the kept corpus whose
    exchanges' keys start as ``keys`` do holds those exchanges (a key names an
    exchange's bytes), so only the rest are analysed (looked up, or made) to extend it;
    the ones it holds are read only where the ranking reads them (``docs.Held``)."""
    held, common = CORPORA.holding(keys)
    tail = analyses(docs, keys, stems, former, start=common)
    corpus = CORPORA.of(tail, keys, held, common)
    return Held(docs, keys, stems, common, tail, corpus), corpus


def _kept(terms: list, an: Sequence, corpus: Corpus | None) -> list:
    """The terms a ranking keeps: the rarest ``MAX_TERMS`` words and ``MAX_CJK_TERMS``
    bigrams (counted in a sample of the documents only when there are more: only those
    read)."""
    words = [t for t in terms if t.kind == "w"]
    cjk = [t for t in terms if t.kind == "c"]
    if len(words) <= MAX_TERMS and len(cjk) <= MAX_CJK_TERMS:
        return words + cjk
    units, total = _Folded(an), corpus.size if corpus is not None else None
    return _rarest(words, units, MAX_TERMS, total) + _rarest(cjk, units, MAX_CJK_TERMS, total)


class _Folded(Sequence):
    """The analyses' folded texts, each read where asked."""
    def __init__(self, an: Sequence):
        self._an = an

    def __len__(self) -> int:
        return len(self._an)

    def __getitem__(self, i):
        return self._an[i].text


def _rarest(terms: list, texts: Sequence, cap: int, total: int | None = None) -> list:
    """At most ``cap`` terms, the least frequent first (query order on ties), counted
    with ``str.count`` in a sample of ``SAMPLE`` × ``cap`` code points of ``texts``
    (``total``: their code points, when known)."""
    if len(terms) <= cap:
        return terms
    if total is None:
        total = sum(map(len, texts))
    size = max(SAMPLE_MIN, SAMPLE * cap // len(terms))
    sample = "\n".join([texts[i] for i in range(0, len(texts), max(1, -(-total // size)))])

    def cf(t: Term) -> int:     # an estimate, not a match: a word term by its first 3-4 letters
        probe = t.value if t.kind == "c" else min(t.surfaces | {t.value[:3 if len(t.value) <= 5 else 4]},
                                                  key=lambda p: (len(p), p))       # not by set order
        return sample.count(probe)
    order = sorted(range(len(terms)), key=lambda i: (cf(terms[i]), i))[:cap]
    return [terms[i] for i in sorted(order)]


def _tfs(matcher: Matcher, an: list, corpus: Corpus | None) -> dict:
    """{term: {exchange: count}}: from the corpus's postings (forms pinned first) or by
    a scan."""
    if corpus is not None:
        matcher.pin(corpus)
        out = matcher.columns(corpus)
        if matcher.cjk:     # every exchange's text read only for the corpus's first CJK term
            def texts() -> list:
                return [a.text for a in (an.every() if type(an) is Held else an)]
            for t in matcher.cjk:
                out[t] = corpus.cjk_tf(t.value, texts)
        return out
    out = {t: {} for t in matcher.terms}
    for d, a in enumerate(an):
        for t, c in matcher.counts(a.text).items():
            out[t][d] = c
    return out


def _best(scores: list, held, k: int) -> list:
    """The ``k`` best documents scoring above 0 (``held``: those holding a term, the
    only ones that do), best first, newest first on ties."""
    newest = held[::-1] if type(held) is range else sorted(held, reverse=True)
    return sorted(newest, key=scores.__getitem__, reverse=True)[:k]


def _holding(tfs, n: int):
    """The documents holding a term of ``tfs`` ({document: count} each): all ``n`` as a
    range when one term is in every document (no set made), else a set."""
    if any([len(tf) == n for tf in tfs]):
        return range(n)
    return set().union(*tfs)


def _scores(matcher: Matcher, tfs: dict, an: list, scoring: Scoring, corpus: Corpus | None,
            limit: int) -> tuple:
    """(each exchange's score, each found term's idf over exchanges, the exchanges the
    ``limit`` best are among: those holding a term — the others score 0 (docs/design.md
    §6.2) — or, when passages are scored for at least ``limit``, those). A term's part
    that depends on its counts and the corpus alone is the corpus's (``_Parts``), kept
    while the corpus is."""
    n, terms = len(an), matcher.terms
    parts = _Parts(an, corpus)
    found = {t: tfs[t] for t in terms if tfs[t]}
    held = _holding(found.values(), n)
    weights = {t: bm25.idf(n, len(tf)) for t, tf in found.items()}
    bases = [parts.base(tf, weights[t]) for t, tf in found.items()]
    wins = [parts.window(tf) for tf in found.values()] if scoring.window else []
    scores = kept = None
    if wins and len(held) == n and corpus is not None and KEPT_SUMS:
        got = _kept_sums(list(found.values()), bases, wins, n, scoring.window, corpus)
        if got is not None:
            scores, kept = got      # kept: (the sums' order, the documents summed anew)
    if scores is None:
        scores = _sum(bases, n)      # the terms' parts added in their order, from 0.0
        if wins:
            summed = _sum(wins, n)
            if len(held) == n:      # every exchange: in C (x × 1.0 is x: not multiplied)
                scores = list(map(_plus, scores, summed if scoring.window == 1.0
                                  else map(_times, repeat(scoring.window), summed)))
            else:
                for d in held:
                    scores[d] += scoring.window * summed[d]
    asked = _asked(matcher, found, an, parts, corpus is not None) if scoring.asked else {}
    if asked:
        answered = _answered(terms, tfs, asked)
        _rescored(scores, answered, weights, wins, scoring.window, parts, n)
        if kept is not None:
            kept[1].update(answered)       # (both sets this ranking's own)
        if type(held) is not range:
            held.update(answered)
    if scoring.passage:
        # an exchange scores iff it holds a term
        top = _best(scores, held, scoring.rerank) if kept is None else _best_kept(scores, *kept, scoring.rerank)
        pidf = _line_idf(found, parts) if scoring.lidf else weights
        avg = parts.size / (parts.lines or 1) * 2     # a line pair's mean length
        for d, p in passages(top, an, matcher, pidf, avg, corpus is not None).items():
            scores[d] += scoring.passage * p
        if FROM_TOP and scoring.passage > 0 and limit <= scoring.rerank:
            return scores, weights, top
    return scores, weights, held


def _sum(parts: list, n: int) -> list:
    """Each document's sum of ``parts`` (``bm25.part``s) in their order, from 0.0."""
    out = None
    for p in parts:
        out = bm25.added(out, p, n)
    return out if out is not None else [0.0] * n


#: The sums of the list parts kept by the corpus (``_kept_sums``), when at most one
#: document in ``TOUCHED`` holds a sparse part.
KEPT_SUMS = True
TOUCHED = 8


def _kept_sums(tfs: list, bases: list, wins: list, n: int, window: float, corpus: Corpus):
    """(``base + window × wins`` of every document (each the sum of its parts in their
    order, from 0.0), (the kept sums' order, the documents summed anew)), or None: the
    sum of the terms' list parts (those most documents hold) kept by the corpus while it
    is — a later query asking the same common words between other ones gets it back —
    and the few documents a dict part holds summed one by one, every part in order. The
    same floats: a document no dict part holds adds nothing but the list parts, in the
    same order (a dict part skips it; 0.0 + x is x). Only when every term's counts are
    the corpus's own (their ids are then kept as long as the sums are: one memo). The
    order (every document, best first, newest first on ties) is kept with the sums: the
    best of a later query are found among its first few and the documents summed anew
    (``_best_kept``), not by sorting every document again."""
    touched: set = set()
    for p in bases + wins:
        if type(p) is dict:
            touched.update(p)
    if TOUCHED * len(touched) > n:
        return None
    key = ("list sums", tuple([id(tf) for tf, p in zip(tfs, bases) if type(p) is not dict]),
           tuple([id(tf) for tf, p in zip(tfs, wins) if type(p) is not dict]), window)

    def make() -> list:
        b = _sum([p for p in bases if type(p) is not dict], n)
        w = _sum([p for p in wins if type(p) is not dict], n)
        return list(map(_plus, b, w if window == 1.0 else map(_times, repeat(window), w)))
    sums = corpus.kept(key, None, make, tuple(tfs))
    out = list(sums)
    for d in touched:
        b = w = 0.0
        for p in bases:
            b += p.get(d, 0.0) if type(p) is dict else p[d]
        for p in wins:
            w += p.get(d, 0.0) if type(p) is dict else p[d]
        out[d] = b + (w if window == 1.0 else window * w)
    order = corpus.kept(("list order",) + key[1:], None, lambda: _best(sums, range(n), n), tuple(tfs))
    return out, (order, touched)


def _best_kept(scores: list, order: list, touched: set, k: int) -> list:
    """``_best(scores, range(n), k)`` when every document but the ``touched`` scores what
    it does in ``order`` (all of them, best first, newest first on ties): any other
    document ranks after the first ``k`` of them that are not touched, so the best are
    among those and the touched."""
    if not touched:
        return order[:k]
    some, enough = list(touched), len(touched) + k
    for d in order:
        if d not in touched:
            some.append(d)
            if len(some) == enough:
                break
    return _best(scores, some, k)


#: The ``limit`` best found among the exchanges whose passages were scored, when they
#: are at least ``limit`` (docs/design.md §6.2): a passage only adds to a score, so each
#: of them still ranks before every other exchange — the same hits as sorting them all.
FROM_TOP = True


def _packed(value):
    """A list of floats (every exchange's part or norm) as the corpus keeps it: an
    ``array("d")`` of the same doubles, 8 bytes each where a list holds a float object
    and a slot (~4x that): a query's common terms' parts then fit its memo (a Japanese
    question's six bigrams of particles, held by every exchange, emptied it every turn
    at 3,000 exchanges: issue 45, fourteenth pass). Anything else as it is."""
    return array("d", value) if type(value) is list else value


class _Parts:
    """What a ranking's scores are made of that depends on the exchanges alone (their
    norms) or on a term's counts (``tf``) and them: kept by the corpus while it is
    (``Corpus.kept``), made each time for a scan."""

    def __init__(self, an: list, corpus: Corpus | None):
        self.corpus = corpus
        self.sizes = corpus.sizes if corpus is not None else [a.length for a in an]
        self.size = corpus.size if corpus is not None else sum(self.sizes)
        self.lines_of = corpus.lines_of if corpus is not None else [a.lines for a in an]
        self.lines = corpus.lines if corpus is not None else sum(self.lines_of)
        # the exchanges whose last line asks, ascending
        self.asking = corpus.asking if corpus is not None else [d for d, a in enumerate(an) if a.question]

    def _kept(self, kind: str, tf, make):
        return make() if self.corpus is None else self.corpus.kept(kind, tf, lambda: _packed(make()))

    def norms(self) -> list:
        """Each exchange's length normalization, their mean length the average."""
        n = len(self.sizes)
        return self._kept("norms", None, lambda: bm25.norms(self.sizes, self.size / n or 1.0))

    def window_norms(self) -> list:
        """Each window's (an exchange and one each side), among all windows."""
        def make():
            s, n = self.sizes, len(self.sizes)
            lengths = [a + b + c for a, b, c in zip([0] + s[:-1], s, s[1:] + [0])]
            return bm25.norms(lengths, sum(lengths) / n or 1.0)
        return self._kept("window norms", None, make)

    def base(self, tf: dict, weight: float) -> dict:
        """Its BM25 part over exchanges (``weight``: its idf)."""
        return self._kept("base", tf, lambda: bm25.part(weight, self.norms(), tf, len(self.sizes)))

    def window(self, tf: dict) -> dict:
        """Its BM25 part over windows among all windows, for the windows holding it
        (their counts summed: each exchange's in up to three windows)."""
        return self._kept("window", tf, lambda: self._window(tf))

    def _window(self, tf: dict):
        n = len(self.sizes)
        if bm25.dense(len(tf), n):      # in list passes, in C
            col = [0] * n
            for d, c in tf.items():
                col[d] = c
            counts = list(map(_plus, map(_plus, [0] + col[:-1], col), col[1:] + [0]))
            return bm25.column_part(bm25.idf(n, n - counts.count(0)), self.window_norms(), counts)
        get = tf.get
        near = set(tf)
        near.update([d - 1 for d in tf if d])
        near.update([d + 1 for d in tf if d + 1 < n])
        counts = {e: get(e - 1, 0) + get(e, 0) + get(e + 1, 0) for e in near}
        return bm25.part(bm25.idf(n, len(counts)), self.window_norms(), counts, n)

    def questions(self, found: dict, count) -> dict:
        """{term: {exchange: (count, code points)}} of each ``found`` term's questions
        (``count(terms)``: those of several terms in one pass), each kept with its
        counts while the corpus is: only the terms not kept are counted."""
        if self.corpus is None:
            return count(found)
        memo = self.corpus.memo
        missing = {t: tf for t, tf in found.items() if ("questions", id(tf)) not in memo}
        made = count(missing) if missing else {}
        return {t: self._kept("questions", tf, lambda t=t, tf=tf: made[t] if t in made else count({t: tf})[t])
                for t, tf in found.items()}

    def lines_held(self, tf: dict) -> int:
        """Its line frequency taken as ``min(count, lines)`` per exchange (a line seldom
        says a word twice)."""
        lines = self.lines_of
        return self._kept("lines", tf, lambda: sum(map(min, tf.values(), [lines[d] for d in tf])))


def _asked(matcher: Matcher, found: dict, an: list, parts: _Parts, indexed: bool) -> dict:
    """{exchange: (code points, {term: count}) of the question it answers}: the last
    line of the exchange before it, when that asks ("?") and holds a query term. Each
    term's questions are the corpus's, kept with its counts (``_Parts.questions``): a
    later query asking it again reads no exchange for it."""
    out: dict = {}
    for t, held in parts.questions(found, lambda terms: _questions(matcher, terms, an, parts, indexed)).items():
        for d, (c, size) in held.items():
            got = out.get(d + 1)
            if got is None:
                got = out[d + 1] = (size, {})
            got[1][t] = c
    return out


def _questions(matcher: Matcher, terms: dict, an: list, parts: _Parts, indexed: bool) -> dict:
    """{term: {exchange: (its question's count of the term, the question's code
    points)}} of ``terms`` ({term: its counts}): the exchanges (all but the last) whose
    last line asks and holds it — looked for among those holding one of them (in C)."""
    out: dict = {t: {} for t in terms}
    last = len(an) - 1
    holding = set().union(*terms.values())
    for d in filter(holding.__contains__, parts.asking):
        if d < last:
            a = an[d]
            got = matcher.indexed_counts(a, "?") if indexed else matcher.counts(a.question)
            for t, questions in out.items():
                c = got.get(t)
                if c:
                    questions[d] = (c, len(a.question))
    return out


def _answered(terms: list, tfs: dict, asked: dict) -> dict:
    """{exchange: (code points it gains or loses, {term: count})} of the exchanges a
    question moved changes (docs/design.md §6.1, *asked*): each exchange answering one
    gains its line's terms and length; the one asking loses them too when it holds more
    of the query than that line (so it is still found), else keeps them. O(those
    exchanges × the terms): the others' counts are the corpus's. In any order of the
    questions: an exchange's count of a term is at least its question's, so one that
    answers and asks ends with its own less its question's plus the one it answers."""
    cols = [(t, tfs[t]) for t in terms if tfs[t]]      # (a term no exchange holds: none)
    moved = {d: size for d, (size, _) in asked.items()}
    movers = set()
    for d, (size, got) in asked.items():
        if sum([tf.get(d - 1, 0) for _, tf in cols]) > sum(got.values()):
            movers.add(d)
            moved[d - 1] = moved.get(d - 1, 0) - size
    counts = {e: {t: tf.get(e, 0) for t, tf in cols} for e in moved}
    for d, (_, got) in asked.items():
        here = counts[d]
        for t, c in got.items():
            here[t] = here.get(t, 0) + c
            if d in movers:
                before = counts[d - 1]
                had = before.get(t, 0)
                before[t] = had - c if had > c else 0
    return {e: (moved[e], counts[e]) for e in moved}


def _rescored(scores: list, answered: dict, weights: dict, wins: list, window: float, parts: _Parts,
              n: int) -> None:
    """The exchanges a question moved changes (``_answered``) scored with their own
    counts and length, against the corpus's statistics (its exchanges' df, mean length
    and windows: a moved line changes only those exchanges): every term's part in
    order from 0.0, then the window's parts as ``_sum`` adds them."""
    avg = parts.size / n or 1.0
    for d, (gained, counts) in answered.items():
        b = bm25.score_in_order(weights, counts, bm25.norm(parts.sizes[d] + gained, avg))
        w = 0.0
        for p in wins:
            w += p.get(d, 0.0) if type(p) is dict else p[d]
        scores[d] = b + (w if window == 1.0 else window * w)


def _line_idf(per_doc: dict, parts: _Parts) -> dict:
    """Each term's idf with the line as the document (``parts.lines`` of them)."""
    lines = parts.lines
    return {t: bm25.idf(lines, min(lines, parts.lines_held(tf))) for t, tf in per_doc.items()}


def _relevance(d: int, tfs: dict, weights: dict, total: float) -> float:
    """The share of the query's idf weight exchange ``d`` holds, in [0, 1]."""
    if not total:
        return 0.0
    held = sum(w for t, w in weights.items() if d in tfs[t])
    return round(held / total, 4)
