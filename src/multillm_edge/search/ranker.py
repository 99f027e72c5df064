"""Rank exchanges for a query and quote each hit (docs/design.md §6.1, §6.2).

A document is one exchange, given as its ``(role, text)`` list (``texts.page_texts``
of the exchange's items); documents come in conversation order, oldest first. ``rank``
answers the best ``limit`` documents, each with a verbatim excerpt. Pure and
deterministic: ties break newest first.

Scoring (``Scoring``; each part is ablated in bench/bench_recall.py, on real
conversations and on the synthetic corpus; weights are 1, none is tuned):

- Okapi BM25 over exchanges (k1 1.2, b 0.75, idf ``ln(1 + (N - df + .5) / (df + .5))``)
  on stems and CJK bigrams — the fair baseline;
- window: plus the BM25 of the exchange's window (it and the exchange on each side,
  as one document among all such windows): a conversation asks in one turn and
  answers in the next, so the words of a moment are spread over neighbours;
- asked: an exchange whose last line asks (ends with "?") and holds a query term is
  answered by the next exchange: that line's terms and length count for the next
  exchange, not its own (in the exchange BM25 and the window; they stay in its own
  when they are all it holds of the query, so it is still found). Document expansion by
  the question a text answers, as FAQ / community-QA retrieval matches a question to
  return its answer; only the last line of the exchanges holding a term is looked at;
- passage: plus the BM25 of its best passage — two consecutive lines (a turn and what
  answers it) — for the best ``RERANK`` exchanges only (cost), terms at their idf
  over lines (``lidf``: a line as the document, as in sentence retrieval; its line
  frequency taken as ``min(tf, lines)`` per exchange), length against the mean line
  pair. Over lines, a speaker's name (a ``Name:`` label on half the lines) still
  weighs, where over exchanges it is in every one;
- options measured and left off: neighbour smoothing (the window does it better),
  one-line passages, RM3 pseudo-relevance feedback, a best line added or instead of
  the passage, the window's idf over lines, a pair counted for its reply's exchange
  only or for its matching lines' only, BM25TP proximity, the asked line copied rather
  than moved (all lower recall on real text or on the synthetic corpus; their figures
  are in bench/README.md, their code is not kept in the Worker).

Relevance (``ExchangeHit.relevance``, for a recall threshold): the share of the query's
idf weight (its kept terms, idf over these documents) that the exchange itself holds,
in [0, 1]: 1.0 = every query term is in it; a term found in every exchange weighs ~0.
``MIN_RELEVANCE`` 0.5 = it holds at least half the query's information.

Cost is bounded by the query, not its length: stop words (a fixed small English and
Russian list) are left out — a query of stop words only has no terms and no hits — and
at most ``MAX_TERMS`` distinct words and ``MAX_CJK_TERMS`` CJK bigrams are kept, the
rarest in the documents first (their
frequency counted with ``str.count`` in a fixed ~64 K code-point sample of them). Documents are never cut
into all their words: one regex built from the kept terms finds, in C, the whole words
that share a query stem's first 3-4 characters (Snowball only rewrites endings) or that
equal a query word as written (so ``dying`` finds ``dying`` though its stem is ``die``);
only those distinct words are stemmed. A term found nowhere that way is looked up once
more word by word in the exchanges holding its text (any word, queried alone, finds an
exchange holding it). A term holding a digit (``3``, ``3.5``, ``d20``: never stemmed) is
not scanned for but counted as a whole word in the exchanges holding its text: ``3`` is
not the 3 of ``3.5``. CJK terms are counted with ``str.count``. Passages place the
matches of the top exchanges only, each by counting the newlines before it; an exchange
next to one of them lends only its edge line.

Indexed ranking (``indexed=True``: auto-recall, which ranks mostly the same exchanges
turn after turn): each exchange's words are counted once, in C (``analyzer.word_bag``:
a bytes translation and a split, the same words as ``WORD_RE``; ``analyzer.counts``),
each word registered in the isolate's vocabulary (``analyzer.Stems``: word -> stem,
stem -> its forms; a word is stemmed when a stem it may have is asked for); a term's
frequency is the sum of its forms' counts, looked up (a term in most exchanges as a
column, in list passes). Its lines' word counts are made the first time its passages
are scored; an edge or question line's, the first time it is needed. A ranking pins
its terms' forms once its indexes are registered (one registered before the vocabulary
was last emptied registers again), so later stemming cannot change them.

Caching: each document's analysis (its texts joined and folded: NFKC + casefold; its
index) can be kept across calls in a module-level LRU keyed by a caller-supplied key (a
SHA-256), bounded by ``CACHE_CODE_POINTS`` units: a folded code point (≤ 4 bytes), or
1/``STEM_WEIGHT`` of an entry of its word counts (the exchange's, then its lines' and
edge lines' as they are made) — ~16 MiB at worst. A caller may name a ``former`` key
for a document (recall: the key an exchange had before a block page closed over it):
found there, the analysis moves.
"""

from __future__ import annotations

import math
import re
from collections import Counter, OrderedDict, deque
from typing import NamedTuple, Sequence

from . import analyzer

K1, B = 1.2, 0.75
WINDOW = 1.0        # weight of the window's BM25 against the exchange's own
PASSAGE = 1.0       # weight of the best passage's BM25 (equal weights: none is tuned)
MAX_TERMS = 8       # distinct query words kept (the rarest): each costs a regex scan
MAX_CJK_TERMS = 32  # distinct CJK bigrams kept (the rarest): each costs a str.count
EXCERPT_MAX = 400   # code points of ``ExchangeHit.text``, the ellipses included
ELLIPSIS = "\u2026"
#: Suggested minimum ``relevance`` for auto-recall (docs/design.md §6.2).
MIN_RELEVANCE = 0.5


ASK_COPY, ASK_MOVE = 1, 2


class Scoring(NamedTuple):
    """What the score is made of (bench/bench_recall.py ablates each part)."""
    stem: bool = True           # Snowball stems (else folded words as they are)
    irregular: bool = True      # irregular verb forms join their verb (irregular.py)
    window: float = WINDOW      # + this × the BM25 of the exchange's window
    before: int = 1             # a window: the exchange, ``before`` exchanges before it
    after: int = 1              # and ``after`` after it
    neighbour: float = 0.0      # + this × the better neighbour's BM25 (off: the window does it)
    passage: float = PASSAGE    # + this × the BM25 of the best passage touching it
    prf: int = 0                # RM3 expansion terms (off: hurts the real set)
    pairs: bool = True          # a passage: two consecutive lines (a turn and its reply), else one line
    rerank: int = 50            # the best exchanges whose passages are scored (bounds the cost)
    asked: int = ASK_MOVE       # an exchange ending in a question: its last line counts for the next
                                # exchange (the answer), moved (ASK_MOVE: copied when it is all the
                                # asking exchange holds of the query) or copied (ASK_COPY)
    lidf: bool = True           # passages weigh terms by their idf over lines, not exchanges


# stemmed and plain BM25 over exchanges
BASELINE = Scoring(irregular=False, window=0.0, passage=0.0, asked=0, lidf=False)
PLAIN = Scoring(stem=False, irregular=False, window=0.0, passage=0.0, asked=0, lidf=False)


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

class Index:
    """An exchange's words, counted once, for ranking it again and again (``indexed``):
    a term's frequency is the count of its forms (the words of this isolate having its
    stem: analyzer.Stems.forms), looked up, not scanned for."""
    __slots__ = ("words", "generation", "lines", "line_lengths", "edges", "extra", "cached")

    def __init__(self, words: dict, generation: int):
        self.words = words              # word -> count
        self.generation = generation    # of the vocabulary its words are registered in
        self.lines: tuple | None = None         # word counts per line, made the
        self.line_lengths: tuple | None = None  # first time its passages are scored
        self.edges: dict = {}   # first line (True), last (False), question ("?") -> its
                                # word counts, made the first time it is needed
        self.extra = 0          # cache units of those lines' counts (``_grow``)
        self.cached = False     # in the cache (what it grows counts against the bound)


class Analysis(NamedTuple):
    """What a document's scoring needs that does not depend on the query."""
    text: str           # its messages' texts, NFKC + casefold, joined with "\n"
    length: int         # code points of ``text``
    lines: int          # lines of ``text``
    question: str       # its last line when it asks (ends with "?", trailing space aside)
    index: Index | None = None      # ``indexed`` ranking only

    @property
    def weight(self) -> int:
        """What it counts against the cache's bound: a code point of text, or
        ``STEM_WEIGHT`` for each entry of its word counts (a dict slot, ~50 bytes; its
        lines' as they are made, ``_grow``)."""
        index = self.index
        return self.length + (STEM_WEIGHT * len(index.words) + index.extra if index else 0)


def analyze(texts: Sequence, indexed: bool = False, stems=None) -> Analysis:
    text = analyzer.fold("\n".join([t for _, t in texts]))   # = the folds joined: "\n" is stable
    return _analysis(Analysis, (text, len(text), text.count("\n") + 1, _question(text),
                                _index(text, stems) if indexed else None))


_analysis = tuple.__new__     # _analysis(Analysis, (...)): a NamedTuple with no Python frame


def _question(text: str) -> str:
    """The last line of ``text`` when it asks (ends with "?", trailing space aside)."""
    text = text.rstrip()
    return text[text.rfind("\n") + 1:] if text.endswith("?") else ""


def _indexed(a: Analysis, stems) -> Analysis:
    return a._replace(index=_index(a.text, stems))


def _index(text: str, stems) -> Index:
    """The words of ``text`` counted (in C: ``word_bag``, ``analyzer.counts``), each registered
    in the isolate's vocabulary (stemmed once per isolate: analyzer.Stems)."""
    words = analyzer.counts(analyzer.word_bag(text))
    stems.known(words)
    return Index(words, stems.generation)


def _line_words(a: Analysis) -> tuple:
    """Each line's word counts (made once, in C, kept with the index)."""
    index = a.index
    if index.lines is None:
        index.lines = tuple(map(analyzer.counts, analyzer.line_bags(a.text)))
        _grow(index, index.lines)
    return index.lines


def _line_terms(lines: tuple, counted) -> dict:
    """{line: {term: tf}} of the ``lines`` (word counts) holding a term (one of
    ``counted.every``, the terms' forms: checked in C), in order."""
    every, count = counted.every, counted.holding
    return {k: count(words) for k, words in enumerate(lines) if not words.keys().isdisjoint(every)}


#: The cache's bound, in code points of folded text (≤ 4 bytes each) plus
#: ``STEM_WEIGHT`` per entry of an index's word counts: ~16 MiB at worst.
CACHE_CODE_POINTS = 4 << 20
STEM_WEIGHT = 16
_cache: OrderedDict = OrderedDict()
_cached = [0]


def _keep(key, fresh: Analysis) -> None:
    """Keep ``fresh`` under ``key``, the most recently used, counted against the bound
    in place of what was there; the caller keeps the bound (``_evict``)."""
    old = _cache.pop(key, None)
    if old is not None:
        _uncount(old)
    _cache[key] = fresh
    _cached[0] += fresh.weight
    if fresh.index is not None:
        fresh.index.cached = True


def _uncount(gone: Analysis) -> None:
    """Stop counting ``gone``, just taken out of the cache, against the bound."""
    _cached[0] -= gone.weight
    if gone.index is not None:
        gone.index.cached = False


def _grow(index: Index, counts) -> None:
    """Count the word counts just made for ``index`` (its lines', an edge's) against
    the cache's bound, if it is cached."""
    units = STEM_WEIGHT * sum(map(len, counts))
    index.extra += units
    if index.cached:
        _cached[0] += units
        _evict()


def _evict() -> None:
    while _cached[0] > CACHE_CODE_POINTS and _cache:
        _uncount(_cache.popitem(last=False)[1])


def clear_cache() -> None:
    for a in _cache.values():
        if a.index is not None:
            a.index.cached = False
    _cache.clear()
    _cached[0] = 0


# -- query terms -------------------------------------------------------------------

def _rarest(terms: list, units: list, cap: int) -> list:
    """At most ``cap`` terms, the least frequent first (query order on ties): the cost
    of scanning grows with the terms, their weight with rarity. Frequencies are counted
    (``str.count``) in a fixed sample of the documents, of SAMPLE × cap code points
    shared by the terms (so a 1,000-character query costs what a short one does)."""
    if len(terms) <= cap:
        return terms
    total = sum(len(f) for _, f in units)
    size = max(SAMPLE_MIN, SAMPLE * cap // len(terms))
    sample = "\n".join(f for _, f in units[::max(1, -(-total // size))])

    def cf(t):
        probe = t.value if t.kind == "c" else min(t.surfaces | {_prefix(t.value)}, key=len)
        return sample.count(probe)
    order = sorted(range(len(terms)), key=lambda i: (cf(terms[i]), i))[:cap]
    return [terms[i] for i in sorted(order)]


SAMPLE = 1 << 13     # code points of sample per kept term
SAMPLE_MIN = 1 << 12


# -- term frequencies ----------------------------------------------------------------

_WORDCHAR = f"[^\\W_{analyzer._CJK}]"      # what WORD_RE's words are made of
# The character before a scanned word: any letter or digit (CJK too: a word right after
# CJK is found by the exact pass, ``_exact``) — a class compiled fast, once per literal.
_BEFORE = "[^\\W_]"
_WORDCHARS = re.compile(f"{_WORDCHAR}+")


def _prefix(stem: str) -> str:
    # Snowball changes only a word's ending: a word stemming to `stem` shares its start
    return stem[:3] if len(stem) <= 5 else stem[:4]


def _scanner(literals) -> "re.Pattern | None":
    """Finds, in folded text, every whole word starting with one of ``literals``. Each
    alternative starts with its literal and checks the character before it with a
    fixed-width lookbehind, so the regex engine skips ahead in C between candidates."""
    # a literal that is another one followed by word characters finds no other word (the
    # other's match runs on over them): left out; not one like "3.5" after "3"
    literals = set(literals)
    literals = {p for p in literals if not any(
        p != q and p.startswith(q) and _WORDCHARS.fullmatch(p, len(q)) for q in literals)}
    alts = [f"{re.escape(p)}(?<!{_BEFORE}.{{{len(p)}}})"
            for p in sorted(literals, key=lambda p: (-len(p), p))]
    return re.compile(f"(?:{'|'.join(alts)}){_WORDCHAR}*", re.S) if alts else None


def _numeric(t: Term) -> bool:
    """A word term holding a digit (``3``, ``3.5``, ``d20``): never stemmed, so counted
    as whole words (``_numbers``), not scanned — a scan for ``3`` would stop inside
    ``3.5``, one word."""
    return t.kind == "w" and analyzer._DIGIT_RE.search(t.value) is not None


def _matcher(terms: list, stems):
    """(scanner, word -> its term or None) for the word terms but numeric ones; (None,
    None) without."""
    words = [t for t in terms if t.kind == "w" and not _numeric(t)]
    if not words:
        return None, None
    by_surface = {w: t for t in words for w in t.surfaces}
    by_stem = {t.value: t for t in words}
    literals = [w for t in words for w in t.surfaces] + [
        _prefix(p) for t in words for p in (t.value, *analyzer.variants(t.value, stems))]
    return _scanner(literals), (lambda w: by_surface.get(w) or by_stem.get(stems(w)))


def _word_tfs(terms: list, units: list, stems) -> dict:
    """{term: {doc: tf}} for the word terms (``units``: (doc, its text))."""
    out = {t: {} for t in terms if t.kind == "w"}
    _numbers([t for t in out if _numeric(t)], units, out)
    scan, term_of = _matcher(terms, stems)
    if scan is None:
        return out
    for at, f in units:
        hits = scan.findall(f)
        if hits:
            for w, c in Counter(hits).items():
                t = term_of(w)
                if t is not None:
                    d = out[t]
                    d[at] = d.get(at, 0) + c
    for t, tf in out.items():
        if not _numeric(t):
            _exact(t, units, tf)
    return out


def _numbers(terms: list, units: list, out: dict) -> None:
    """The numeric ``terms``' frequencies: in the units holding one's text, its words
    counted whole (each such unit cut into words once)."""
    if not terms:
        return
    surfaces = {w for t in terms for w in t.surfaces}
    for at, f in units:
        if any(w in f for w in surfaces):
            words = Counter(analyzer.word_bag(f))
            for t in terms:
                if c := sum([words[w] for w in t.surfaces]):
                    out[t][at] = c


def _exact(term: Term, messages: list, tf: dict) -> None:
    """The term's query words, word by word, in the messages the scan found nothing of
    it in but that hold their text: the words a prefix scan cannot see (after a number
    like ``3.5``, right after CJK)."""
    surfaces = term.surfaces
    if len(surfaces) == 1:
        (w,) = surfaces
        holding = [(at, f) for at, f in messages if at not in tf and w in f]
    else:
        holding = [(at, f) for at, f in messages if at not in tf and any(w in f for w in surfaces)]
    for at, f in holding:
        words = Counter(analyzer.word_bag(f))
        if c := sum([words[w] for w in surfaces]):
            tf[at] = c


def _cjk_tfs(terms: list, messages: list) -> dict:
    out = {}
    for t in terms:
        if t.kind == "c":
            out[t] = {at: n for at, f in messages if (n := f.count(t.value))}
    return out


# -- scoring -------------------------------------------------------------------------

def rank(query: str, docs: Sequence, limit: int = 5, *, keys: Sequence | None = None,
         scoring: Scoring = Scoring(), indexed: bool = False, excerpts: bool = True,
         former=None) -> list:
    """The ``limit`` best exchanges of ``docs`` for ``query`` (best first, newest first
    on ties); exchanges holding no query term are left out. ``keys[i]`` (optional, e.g.
    the SHA-256 of the page and the exchange's number) caches ``docs[i]``'s analysis
    (``docs[i]`` is then read only when it is not cached). ``indexed``: each exchange's
    words are counted once (cached with its analysis) and a term's frequency is the
    count of its forms, looked up, not scanned for: for callers that rank mostly the
    same exchanges again and again (recall, docs/design.md §6.2). The index counts
    every word with the term's stem; the scan, those sharing the stem's first 3-4
    characters or written as in the query — the same words but where a stem rewrites
    its word's start (``cry`` → ``cri``) or a word is glued to CJK. Each way is
    deterministic; recall always ranks indexed, the search route by the scan.
    ``excerpts=False``: hits without an excerpt (``message_index`` -1, empty texts),
    for a caller that quotes them its own way; their documents are never read.
    ``former(i)``: another key ``docs[i]``'s analysis may be cached under (None: none),
    looked up when ``keys[i]`` is not and others are (an exchange whose page changed
    since the last ranking); found, it moves to ``keys[i]``."""
    stems = analyzer.Stems(scoring.stem, scoring.irregular)
    terms = analyzer.query_terms(query, stems)
    if not terms or not docs or limit < 1:
        return []
    an = _analyses(docs, keys, indexed, stems, former)
    cjk = any(t.kind == "c" for t in terms)
    # (exchange, its text): what a scan, a CJK count or a cap on terms reads
    units = ([(d, a.text) for d, a in enumerate(an)]
             if not indexed or cjk or scoring.prf or len(terms) > MAX_TERMS else None)
    terms = _rarest([t for t in terms if t.kind == "w"], units, MAX_TERMS) + \
        _rarest([t for t in terms if t.kind == "c"], units, MAX_CJK_TERMS)
    if indexed:
        _pin_forms(terms, an, stems)
    tfs = _indexed_tfs(terms, an, units, stems.forms) if indexed else _tfs(terms, units, stems)
    scores, weights = _scores(terms, tfs, an, scoring, stems)
    relevance, total = dict(weights), sum(weights.values())
    if scoring.prf and total:
        qw = _feedback(terms, scores, an, stems, scoring.prf)
        if indexed:
            _pin_forms(list(qw), an, stems)
        tfs.update(_tfs([t for t in qw if t not in tfs], units, stems))
        scores, weights = _scores(list(qw), tfs, an, scoring, stems, qw)
    ranked = _best(scores, limit)
    if not excerpts:
        return [ExchangeHit(d, round(scores[d], 4), _relevance(d, tfs, relevance, total),
                            "", "", -1, 0, 0) for d in ranked[:limit]]
    finder = _finder([t for t in terms if relevance.get(t)])
    return [_hit(d, scores[d], _relevance(d, tfs, relevance, total), docs[d], finder, relevance)
            for d in ranked[:limit]]


def _best(scores: list, k: int) -> list:
    """The ``k`` best documents scoring above 0, best first, newest first on ties: sorted
    in C (a stable sort of the documents newest first, by score, reversed)."""
    n = len(scores)
    order = sorted(range(n - 1, -1, -1), key=scores.__getitem__, reverse=True)
    return order[:min(k, n - scores.count(0.0))]


def _analyses(docs: Sequence, keys: Sequence | None, indexed: bool, stems, former=None) -> list:
    """Each document's analysis: from the cache when it holds what is needed (a steady
    turn: one lookup each, no call), else under its ``former`` key (when others were
    found: not a first ranking), else made and kept under its key (least recently used
    evicted first, once for all)."""
    if keys is None:
        return [analyze(docs[i], indexed, stems) for i in range(len(docs))]
    out = list(map(_cache.get, keys))       # in C: a steady turn finds them all
    missing = [i for i, got in enumerate(out) if got is None or (indexed and got.index is None)]
    if len(missing) < len(out):
        skip = set(missing)
        deque(map(_cache.move_to_end, [k for i, k in enumerate(keys) if i not in skip]), 0)
        if former is not None:
            missing = [i for i in missing if not _moved(former(i), keys[i], out, i, indexed)]
    for i in missing:
        key = keys[i]
        got = _cache.get(key)       # an exchange said twice: made once
        if got is None or (indexed and got.index is None):
            got = _indexed(got, stems) if got is not None else analyze(docs[i], indexed, stems)
            _keep(key, got)
        out[i] = got
    if missing:
        _evict()
    return out


def _moved(old, key, out: list, i: int, indexed: bool) -> bool:
    """Move the analysis cached under ``old`` to ``key`` (``out[i]``), if it is there
    with what is needed."""
    got = _cache.get(old) if old is not None else None
    if got is None or (indexed and got.index is None):
        return False
    _uncount(_cache.pop(old))
    _keep(key, got)
    out[i] = got
    return True


def _pin_forms(terms: list, an: list, stems) -> None:
    """Fix, for the rest of this ranking, each word term's forms: the words having its
    stem, among them every word of the indexes ``an`` that has it. They come from the
    isolate's vocabulary once each index is registered there (one registered before the
    vocabulary was last emptied registers again); when the words of this call alone
    overflow the vocabulary, from the indexes' own words."""
    values = [t.value for t in terms if t.kind == "w"]
    stems.pin(None)
    for _ in range(2):
        generation = stems.generation
        for a in an:
            if a.index.generation != generation:
                stems.known(a.index.words)
                a.index.generation = stems.generation
        if stems.generation == generation:
            stems.pin({v: frozenset(stems.forms(v)) for v in values})
            return
    wanted = set(values)
    own: dict = {v: set() for v in values}
    for a in an:
        for w in a.index.words:
            if (v := stems(w)) in wanted:
                own[v].add(w)
    stems.pin({v: frozenset(ws) for v, ws in own.items()})


def _indexed_tfs(terms: list, an: list, units: list, forms) -> dict:
    """``_tfs`` from the exchanges' word counts: a term's frequency is the count of its
    forms (the words whose stem is the term's: what the scan finds, without scanning);
    CJK terms are counted as ``_tfs`` counts them."""
    words = [a.index.words for a in an]
    out = {}
    for t in terms:
        if t.kind != "w":
            continue
        got = forms(t.value)
        if not got:         # no word of these exchanges has its stem
            out[t] = {}
            continue
        first, *others = got
        col = [w.get(first, 0) for w in words]
        for f in others:
            col = [c + w.get(f, 0) for c, w in zip(col, words)]
        out[t] = {d: c for d, c in enumerate(col) if c}
    if units is not None:
        out.update(_cjk_tfs(terms, units))
    return out


def _tfs(terms: list, units: list, stems) -> dict:
    """{term: {doc: tf}}."""
    return {**_word_tfs(terms, units, stems), **_cjk_tfs(terms, units)}


PRF_DOCS = 10       # RM3 (Lavrenko & Croft; Anserini's defaults): feedback documents,
PRF_WEIGHT = 0.5    # and the original query's weight


def _feedback(terms: list, scores: list, an: list, stems, n_terms: int) -> dict:
    """RM3: the query's terms and the ``n_terms`` words most likely in the best
    ``PRF_DOCS`` documents (each weighted by its score), interpolated → {term: weight}."""
    top = sorted((d for d, s in enumerate(scores) if s > 0), key=lambda d: (-scores[d], -d))[:PRF_DOCS]
    mass = sum(scores[d] for d in top)
    model: dict = {}
    surfaces: dict = {}
    for d in top:
        ws = [w for w in analyzer.words(an[d].text)
              if w not in analyzer.STOPWORDS and len(w) > 1 and not analyzer._DIGIT_RE.search(w)]
        for w, c in Counter(ws).items():
            st = stems(w)
            model[st] = model.get(st, 0.0) + scores[d] / mass * c / len(ws)
            surfaces.setdefault(st, set()).add(w)
    best = sorted(model, key=lambda st: (-model[st], st))[:n_terms]
    norm = sum(model[st] for st in best) or 1.0
    qw = {t: PRF_WEIGHT / len(terms) for t in terms}
    by_stem = {t.value: t for t in terms if t.kind == "w"}
    for st in best:
        t = by_stem.get(st) or analyzer.Term("w", st, frozenset(surfaces[st]))
        qw[t] = qw.get(t, 0.0) + (1 - PRF_WEIGHT) * model[st] / norm
    return qw


def _scores(terms: list, tfs: dict, an: list, scoring: Scoring, stems, qw: dict | None = None) -> tuple:
    """(each document's score, each found term's idf); ``qw``: the terms' weights."""
    n = len(an)
    base = [0.0] * n
    weights, per_doc, cols = {}, {}, {}
    sizes, per_line = [a.length for a in an], [a.lines for a in an]
    lengths = list(sizes)
    asked = _asked(terms, tfs, an, stems) if scoring.asked else {}
    movers = set()      # answers whose question leaves its own exchange (moved, not copied)
    if scoring.asked == ASK_MOVE and asked:
        # an exchange holding nothing of the query but its question keeps it (copied):
        # every exchange holding a query term stays ranked
        held = Counter()
        for t in terms:
            for d, c in tfs[t].items():
                if d + 1 in asked:
                    held[d] += c
        movers = {d for d, (_, got) in asked.items() if held[d - 1] > sum(got.values())}
    for d, (size, _) in asked.items():
        lengths[d] += size
        if d in movers:
            lengths[d - 1] -= size
    avg = sum(lengths) / n or 1.0
    k1, norms = K1 + 1, [K1 * (1 - B + B * length / avg) for length in lengths]
    for t in terms:
        tf = dict(tfs[t])
        for d, (_, got) in asked.items():
            if t in got:
                tf[d] = tf.get(d, 0) + got[t]
                if d in movers:
                    if tf.get(d - 1, 0) > got[t]:
                        tf[d - 1] -= got[t]
                    else:
                        tf.pop(d - 1, None)
        if not tf:
            continue
        weights[t] = math.log(1 + (n - len(tf) + 0.5) / (len(tf) + 0.5))
        per_doc[t] = tf
        idf = weights[t] * (qw[t] if qw else 1.0)
        if _dense(tf, n):     # in most exchanges: as a column, in list passes
            get = tf.get
            cols[t] = col = [get(d, 0) for d in range(n)]
            base = [b + idf * (c * k1 / (c + m)) if c else b for b, c, m in zip(base, col, norms)]
            continue
        for d, c in tf.items():
            base[d] += idf * (c * k1 / (c + norms[d]))      # BM25's tf part, k1 = K1 + 1
    qidf = {t: w * (qw[t] if qw else 1.0) for t, w in weights.items()}
    scores = list(base)
    lidf = _line_idf(per_doc, per_line, qw, cols) if scoring.lidf else {}
    if scoring.window:
        scale = {t: qw[t] if qw else 1.0 for t in per_doc}
        wins = _windows(per_doc, sizes, scoring.before, scoring.after, scale, cols)
        scores = [s + scoring.window * w if b else s for s, w, b in zip(scores, wins, base)]
    if scoring.neighbour:
        for d in range(n):
            if base[d]:
                scores[d] += scoring.neighbour * max(base[d - 1] if d else 0.0, base[d + 1] if d + 1 < n else 0.0)
    if scoring.passage:
        top = _best(scores, scoring.rerank)     # an exchange scores iff its base does
        pidf = lidf if scoring.lidf else qidf
        avg = sum(sizes) / (sum(per_line) or 1) * (2 if scoring.pairs else 1)   # a line's, a pair's
        got = _passages(top, an, list(pidf), pidf, scoring.pairs, stems, avg)
        for d, p in got.items():
            scores[d] += scoring.passage * p
    return scores, weights


def _asked(terms: list, tfs: dict, an: list, stems) -> dict:
    """{exchange: (code points, {term: tf}) of the question it answers}: an exchange whose
    last line asks (ends with "?") and holds a query term is answered by the next one,
    which is expanded with that line — document expansion by the question a text
    answers, as FAQ and community-QA retrieval match the question to return its answer.
    Only exchanges holding a query term are looked at, and only their last line."""
    held = set().union(*(tfs[t] for t in terms))
    asking = [d for d, a in enumerate(an[:-1]) if a.question and d in held]
    out, last = {}, []
    counted = _counted(terms, stems) if all(t.kind == "w" for t in terms) else None
    for d in asking:
        line, index = an[d].question, an[d].index
        if index is None:
            last.append((d, Analysis(line, len(line), 1, "")))
            continue
        words = index.edges.get("?")      # indexed: the line's words counted once, kept
        if words is None:
            words = index.edges["?"] = analyzer.counts(analyzer.word_bag(line))
            _grow(index, (words,))
        if counted is None:             # CJK terms too: counted in its text
            one = Index(words, index.generation)
            one.lines = (words,)
            last.append((d, Analysis(line, len(line), 1, "", one)))
        elif got := counted(words):
            out[d + 1] = (len(line), got)
    got = _line_tfs(terms, range(len(last)), [a for _, a in last], stems)
    out.update({last[i][0] + 1: (last[i][1].length, tf) for (i, _), tf in got.items()})
    return out


def _line_idf(per_doc: dict, per_line: list, qw: dict | None, cols: dict) -> dict:
    """Each term's idf with the line as the document (sentence retrieval): its line
    frequency is taken as ``min(tf, lines)`` per exchange (a line seldom says a word
    twice), so no line is cut out for it. ``per_line``: each exchange's lines; ``cols``:
    a dense term's frequencies as a column."""
    lines = sum(per_line)
    out = {}
    for t, tf in per_doc.items():
        col = cols.get(t)
        held = sum(map(min, col, per_line)) if col is not None else sum(
            map(min, tf.values(), map(per_line.__getitem__, tf)))
        df = min(lines, held)
        out[t] = math.log(1 + (lines - df + 0.5) / (df + 0.5)) * (qw[t] if qw else 1.0)
    return out


def _dense(tf: dict, n: int) -> bool:
    """A term in most of the ``n`` exchanges: scored in list passes over all of them
    (cheaper than a loop over the exchanges holding it; the same figures)."""
    return 3 * len(tf) > n


def _windows(per_doc: dict, lens: list, before: int, after: int, scale: dict, cols: dict) -> list:
    """BM25 of each exchange's window (it, ``before`` exchanges before and ``after``
    after it, cut at the ends) among all windows: terms said across turns of one moment
    count together. ``lens``: each exchange's code points; ``cols``: a dense term's
    frequencies as a column."""
    n = len(lens)
    shifted = before == after == 1 and n > 1      # the default window: shifted lists, in C
    if shifted:
        wl = [a + b + c for a, b, c in zip([0] + lens[:-1], lens, lens[1:] + [0])]
    else:
        wl = [sum(lens[max(0, d - before):d + after + 1]) for d in range(n)]
    avg = sum(wl) / n or 1.0
    norms = [K1 * (1 - B + B * w / avg) for w in wl]      # each window's, once
    out = [0.0] * n
    k1 = K1 + 1
    for t, tf in per_doc.items():
        if shifted and (at := cols.get(t)) is not None:    # in most windows: every one, as lists
            win = [a + b + c for a, b, c in zip([0] + at[:-1], at, at[1:] + [0])]
            held = n - win.count(0)
            idf = math.log(1 + (n - held + 0.5) / (held + 0.5)) * scale[t]
            out = [o + (idf * (c * k1 / (c + m)) if c else 0.0) for o, c, m in zip(out, win, norms)]
            continue
        win: dict = {}      # else the windows holding it, the same figures
        for d, c in tf.items():
            for e in range(max(0, d - after), min(n, d + before + 1)):
                win[e] = win.get(e, 0) + c
        idf = math.log(1 + (n - len(win) + 0.5) / (len(win) + 0.5)) * scale[t]
        for e, c in win.items():
            out[e] += idf * (c * k1 / (c + norms[e]))     # BM25's tf part, k1 = K1 + 1
    return out


RERANK = Scoring().rerank    # exchanges whose passages are scored (bounds the cost)


def _passages(top: list, an: list, terms: list, qidf: dict, pairs: bool, stems, avg: float) -> dict:
    """{exchange: BM25 of its best passage} for the ``top`` exchanges. A passage is two
    consecutive lines of the conversation (a turn and what answers it: the pair may
    start in the exchange before) or one line; the terms weigh their exchange idf, the
    length is normalized by the mean line (pair) length of all the documents. A pair
    counts for both its exchanges. Only the lines holding a term and their partners are
    looked at. ``avg``: the mean line (pair) length."""
    n, wanted = len(an), set(top)
    if pairs and all(t.kind == "w" for t in terms) and all(
            an[e].index is not None for d in top for e in (d - 1, d, d + 1) if 0 <= e < n):
        return _indexed_passages(top, an, terms, qidf, avg, stems)
    at = _line_tfs(terms, sorted(wanted), an, stems)
    best, empty = {}, {}
    # the line of an exchange that is not scored next to one that is: that line alone
    edges = sorted({(e, first) for d in (top if pairs else ())
                    for e, first in ((d - 1, False), (d + 1, True)) if 0 <= e < n and e not in wanted})
    edges = dict(zip(edges, _edge_lines(terms, [an[e] for e, _ in edges], [f for _, f in edges], stems)))

    def line(e: int, first: bool) -> tuple | None:      # (tf, length) of e's first/last
        if not 0 <= e < n:
            return None
        if e not in wanted:
            return edges[(e, first)]
        k = 0 if first else an[e].lines - 1
        return at.get((e, k), empty), _line_lengths(an[e])[k]

    for d in top:
        own = _line_lengths(an[d])
        lines = [at.get((d, k), empty) for k in range(len(own))]
        got = 0.0
        if not pairs:
            got = max([_pair_value(tf, own[k], qidf, avg) for k, tf in enumerate(lines) if tf], default=0.0)
        else:
            # a pair is two consecutive lines, across neighbouring exchanges too, scored
            # when one holds a term; a line holding one with no line after it, alone
            if (before := line(d - 1, False)) is not None:
                lines.insert(0, before[0])
                own = (before[1],) + own
            if (after := line(d + 1, True)) is not None:
                lines.append(after[0])
                own = own + (after[1],)
            elif lines[-1]:
                got = _pair_value(lines[-1], own[-1], qidf, avg)
            got = max(got, _best_pair({k: tf for k, tf in enumerate(lines) if tf}, own, qidf, avg))
        if got > 0.0:
            best[d] = got
    return best


def _indexed_passages(top: list, an: list, terms: list, qidf: dict, avg: float, stems) -> dict:
    """``_passages`` of line pairs when every exchange involved is indexed and every
    term is a word: the lines holding a term found in C in their word counts (a scored
    neighbour's too; an edge line's alone), their terms looked up; the same figures."""
    n, best = len(an), {}
    counted = _counted(terms, stems)
    lines_of: dict = {d: None for d in top}     # a scored exchange's {line: tf}, once

    def own(e: int) -> dict:
        got = lines_of[e]
        if got is None:
            got = lines_of[e] = _line_terms(_line_words(an[e]), counted)
        return got

    for d in top:
        lines, lengths = own(d), _line_lengths(an[d])
        if d > 0:       # the line before first (its own lines one on): the previous exchange's last
            prev = an[d - 1]
            if d - 1 in lines_of:
                tf, length = own(d - 1).get(prev.lines - 1), _line_lengths(prev)[-1]
            else:
                tf, length = counted(_edge_words(prev, False)), len(_edge_text(prev.text, False))
            lines = {k + 1: v for k, v in lines.items()}
            if tf:
                lines[0] = tf
            lengths = (length,) + lengths
        else:
            lines = dict(lines)     # its own: the kept one is read by its neighbours
        single = d + 1 >= n      # the last line of the conversation may stand alone
        if not single:
            nxt = an[d + 1]
            if d + 1 in lines_of:
                tf, length = own(d + 1).get(0), _line_lengths(nxt)[0]
            else:
                tf, length = counted(_edge_words(nxt, True)), len(_edge_text(nxt.text, True))
            if tf:
                lines[len(lengths)] = tf
            lengths = lengths + (length,)
        got = _best_pair(lines, lengths, qidf, avg)
        if single and (last := lines.get(len(lengths) - 1)):
            got = max(got, _pair_value(last, lengths[-1], qidf, avg))
        if got > 0.0:
            best[d] = got
    return best


def _edge_text(text: str, first: bool) -> str:
    if first:
        i = text.find("\n")
        return text if i < 0 else text[:i]
    return text[text.rfind("\n") + 1:]


def _edge_words(a: Analysis, first: bool) -> dict:
    """The word counts of the first or last line of an indexed ``a`` (kept with it)."""
    counts = a.index.edges.get(first)
    if counts is None:
        counts = a.index.edges[first] = analyzer.counts(analyzer.word_bag(_edge_text(a.text, first)))
        _grow(a.index, (counts,))
    return counts


def _pair_value(tf: dict, length: int, qidf: dict, avg: float) -> float:
    """The BM25 of a passage (its terms' frequencies and length)."""
    norm = K1 * (1 - B + B * length / avg)
    return sum([qidf[t] * (c * (K1 + 1) / (c + norm)) for t, c in tf.items()])


def _best_pair(lines: dict, lengths: tuple, qidf: dict, avg: float) -> float:
    """The best BM25 of two consecutive lines (``lines``: {line: term frequencies} of
    those holding a term, ``lengths``: every line's): two holding lines together, or one
    with the shorter of its neighbours holding none (the longer scores less: BM25 falls
    with length)."""
    best, last, get = 0.0, len(lengths) - 1, lines.get
    for h, tf in lines.items():
        if (nxt := get(h + 1)) is not None:         # h and h + 1 together
            merged = dict(tf)
            for t, c in nxt.items():
                merged[t] = merged.get(t, 0) + c
            best = max(best, _pair_value(merged, lengths[h] + lengths[h + 1], qidf, avg))
            partner = lengths[h - 1] if h and h - 1 not in lines else -1
        else:
            partner = lengths[h + 1] if h < last else -1
            if h and h - 1 not in lines and (partner < 0 or lengths[h - 1] < partner):
                partner = lengths[h - 1]
        if partner >= 0:                            # h with a neighbour holding none
            best = max(best, _pair_value(tf, lengths[h] + partner, qidf, avg))
    return best


def _edge_lines(terms: list, an: list, firsts: list, stems) -> list:
    """[(term frequencies, length)] of the first (``firsts[i]``) or last line of each
    ``an[i]``, counted as ``_line_tfs`` counts a line of it, alone (its other lines are
    not needed); an indexed one keeps that line's words."""
    ones = []
    for a, first in zip(an, firsts):
        one = _edge_text(a.text, first)
        index = None
        if a.index is not None:
            index = Index(_edge_words(a, first), a.index.generation)
            index.lines = (index.words,)
        ones.append(Analysis(one, len(one), 1, "", index))
    got = _line_tfs(terms, range(len(ones)), ones, stems)
    return [(got.get((i, 0), {}), a.length) for i, a in enumerate(ones)]


def _line_lengths(a: Analysis) -> tuple:
    """The code points of each line of ``a`` (kept with an indexed analysis)."""
    if a.index is not None:
        if a.index.line_lengths is None:
            a.index.line_lengths = tuple(map(len, a.text.split("\n")))
        return a.index.line_lengths
    return tuple(map(len, a.text.split("\n")))


def _line_tfs(terms: list, docs: list, an: list, stems) -> dict:
    """{(doc, line): {term: tf}} of the ``docs``: each match's line is the count of
    newlines before it (in C), so lines are never cut out."""
    matcher = counted = numbers = None      # made for the first analysis that needs them
    out: dict = {}
    for e in docs:
        text = an[e].text
        if an[e].index is None and matcher is None:
            matcher = _matcher(terms, stems)
            scan, term_of = matcher
        if an[e].index is not None:      # indexed: words looked up, CJK counted below
            counted = counted or _counted(terms, stems)
            for k, got in _line_terms(_line_words(an[e]), counted).items():
                out[(e, k)] = got
            found = []
        else:
            found = [(m.start(), term_of(m.group())) for m in scan.finditer(text)] if scan else []
            numbers = numbers if numbers is not None else [t for t in terms if _numeric(t)]
            if numbers:         # counted whole, line by line (``_numbers``)
                per_line: dict = {t: {} for t in numbers}
                _numbers(numbers, list(enumerate(text.split("\n"))), per_line)
                for t, tf in per_line.items():
                    for k, c in tf.items():
                        out.setdefault((e, k), {})[t] = c
        for t in terms:
            if t.kind == "c":
                i = text.find(t.value)
                while i >= 0:
                    found.append((i, t))
                    i = text.find(t.value, i + 1)
        for pos, t in found:
            if t is not None:
                d = out.setdefault((e, text.count("\n", 0, pos)), {})
                d[t] = d.get(t, 0) + 1
    return out


def _counted(terms: list, stems):
    """word counts of a line -> its word terms' frequencies (the counts of their forms,
    pinned by the ranking), in the terms' order; {} when it holds none."""
    forms = [(t, tuple(stems.forms(t.value))) for t in terms if t.kind == "w"]
    every = frozenset(f for _, fs in forms for f in fs)
    one = [(t, fs[0] if len(fs) == 1 else fs) for t, fs in forms]     # a word, or several
    empty: dict = {}

    def holding(words: dict) -> dict:      # words known to hold one of ``every``
        got = {}
        for t, f in one:
            c = words.get(f, 0) if type(f) is str else sum([words.get(x, 0) for x in f])
            if c:
                got[t] = c
        return got

    def tfs(words: dict) -> dict:
        if words.keys().isdisjoint(every):      # in C: most lines hold no term
            return empty
        return holding(words)
    tfs.every, tfs.holding = every, holding
    return tfs


def _relevance(d: int, tfs: dict, weights: dict, total: float) -> float:
    if not total:
        return 0.0
    held = sum(w for t, w in weights.items() if d in tfs[t])
    return round(held / total, 4)


# -- excerpts ------------------------------------------------------------------------

def _finder(query_terms: list):
    """(regex of the query terms' literals, per-group term) for locating matches when
    quoting: a word term by its stem prefix or query words, checked by stem after."""
    alts, terms = [], []
    for term in query_terms:
        if term.kind == "w":
            lits = sorted({_prefix(term.value), *term.surfaces}, key=lambda p: (-len(p), p))
            body = "|".join(f"{re.escape(w)}(?<!{_BEFORE}.{{{len(w)}}})" for w in lits)
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
