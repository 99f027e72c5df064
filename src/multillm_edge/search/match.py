"""One query's terms matched in documents (docs/design.md §6.1): a ``Matcher`` counts
them in folded text (one regex scan, in C) or in an index's word counts (their forms,
looked up), the same counts either way (property-tested); it gives an exchange's
counts, its lines' counts and, for quoting, the spans of its matches."""

from __future__ import annotations

import re

from . import docs
from .analysis import CJK, CJK_RE, NUMBER_RE, WORD_CHAR, counts
from .stems import starts

#: The character before a scanned word: not one of a word's (CJK may be: WORD_RE cuts
#: there). A number like ``3.5`` is one word, matched whole, and what follows it glued
#: (``3.5abc``) is split off: each of these alternatives starts with a literal, so the
#: regex engine skips ahead in C between candidates.
_NUMBERS = [f"{d}(?<!{WORD_CHAR}.)\\d*(?:[.,:]\\d+)+" for d in "0123456789"]
_PLAIN_NUMBERS = [n.replace(WORD_CHAR, "[^\\W_]") for n in _NUMBERS]
_WORDS = re.compile(f"{WORD_CHAR}+")
MAX_SPANS = 256     # matches a message is searched for, for quoting


#: A word character where no CJK character is: compiled in ~0.1 ms where WORD_CHAR's
#: ranges take ~1.5 ms each time they appear (the scanner's lookbehinds: ~30 ms for a
#: query of a few words, every new query: issue 45).
PLAIN_WORD_CHAR = r"[^\W_]"
# The high bytes (UTF-16) of the characters that are no CJK: a text whose characters
# all have one holds none (a high surrogate, 0xd8-0xdb, is checked by CJK_RE).
_NO_CJK_HIGH = bytes(b for b in range(256) if not (b == 0x11 or 0x30 <= b <= 0x9f or 0xac <= b <= 0xd7
                                                  or 0xf9 <= b <= 0xfa or 0xd8 <= b <= 0xdb))
_SURROGATE_HIGH = bytes(range(0xd8, 0xdc))


def holds_cjk(text: str) -> bool:
    """Whether ``text`` may hold a CJK character (``analysis.CJK``): in C, a few passes
    over its UTF-16 high bytes; true for some other characters of their blocks too."""
    if text.isascii():
        return False
    high = text.encode("utf-16-le", "surrogatepass")[1::2].translate(None, _NO_CJK_HIGH)
    if not high:
        return False
    return bool(high.translate(None, _SURROGATE_HIGH)) or CJK_RE.search(text) is not None


def scannable(text: str) -> str:
    """``text`` with each CJK character a space, where it holds one: the same words at
    the same places (a CJK character is neither a word's nor a number's, as a space),
    for the plain scanner."""
    return _CJK_CHAR_RE.sub(" ", text) if holds_cjk(text) else text


_CJK_CHAR_RE = re.compile(f"[{CJK}]")


def _alternative(literal: str, word: str = WORD_CHAR) -> str:
    """``literal`` as a whole word's start, ё read as е (Snowball's Russian folds it);
    each alternative starts with a literal character (one for е, one for ё)."""
    behind = f"(?<!{word}.{{{len(literal)}}})"
    rest = re.escape(literal[1:]).replace("е", "[её]") + behind
    first = "её" if literal[0] == "е" else re.escape(literal[0])
    return "|".join(c + rest for c in first)


def scanner(literals, plain: bool = False) -> re.Pattern:
    """Finds, in folded text, every number and every whole word starting with one of
    ``literals`` (a literal that is another followed by word characters finds no other
    word: left out). ``plain``: for text holding no CJK character (``scannable``),
    the same matches, compiled ~40× faster (a Matcher's)."""
    word = PLAIN_WORD_CHAR if plain else WORD_CHAR
    literals = {p.replace("ё", "е") for p in literals}
    literals = {p for p in literals if not any(
        p != q and p.startswith(q) and _WORDS.fullmatch(p, len(q)) for q in literals)}
    numbers = _PLAIN_NUMBERS if plain else _NUMBERS
    alts = numbers + [_alternative(p, word) for p in sorted(literals, key=lambda p: (-len(p), p))]
    return re.compile(f"(?:{'|'.join(alts)}){word}*", re.S)


def _split(w: str) -> tuple:
    """A scanned word as WORD_RE's words: a number and what is glued after it apart."""
    m = NUMBER_RE.match(w) if "0" <= w[0] <= "9" else None
    return (w,) if m is None or m.end() == len(w) else (w[:m.end()], w[m.end():])


class Matcher:
    """The query's kept ``terms`` (word stems, CJK bigrams) in documents."""

    def __init__(self, terms: list, stems):
        self.terms = terms
        self.words = [t for t in terms if t.kind == "w"]
        self.cjk = [t for t in terms if t.kind == "c"]
        self._stems = stems
        self._by_stem = {t.value: t for t in self.words}
        self._rx = None
        self._of: dict = {}         # a scanned word -> its terms
        self._forms: list | None = None     # [(term, its form or forms)], once pinned
        self.every: frozenset = frozenset()    # every word term's forms, once pinned

    # -- the scan --------------------------------------------------------------

    def _scan(self) -> re.Pattern:
        """The plain scanner (read ``scannable`` text with it)."""
        if self._rx is None:
            self._rx = scanner(self._literals(), plain=True)
        return self._rx

    def _literals(self) -> list:
        return [p for t in self.words for p in starts(t.value, self._stems)]

    def _terms_of(self, w: str) -> tuple:
        got = self._of.get(w)
        if got is None:
            by_stem, stems = self._by_stem, self._stems
            got = self._of[w] = tuple(t for p in _split(w) if (t := by_stem.get(stems(p))) is not None)
        return got

    def counts(self, text: str) -> dict:
        """{term: count} in folded ``text``, in the terms' order."""
        got: dict = {}
        if self.words and (hits := self._scan().findall(scannable(text))):
            for w, c in counts(hits).items():
                for t in self._terms_of(w):
                    got[t] = got.get(t, 0) + c
        for t in self.cjk:
            if c := text.count(t.value):
                got[t] = c
        return {t: got[t] for t in self.terms if t in got} if len(got) > 1 else got

    def spans(self, text: str, limit: int | None = None) -> list:
        """[(start, end, term)] of the matches in folded ``text``, in order."""
        out = []
        if self.words:
            for m in self._scan().finditer(scannable(text)):
                at = m.start()
                for p in _split(m.group()):
                    for t in self._terms_of(p):
                        out.append((at, at + len(p), t))
                    at += len(p)
                if limit is not None and len(out) >= limit:
                    break
        for t in self.cjk:
            i, step = text.find(t.value), len(t.value)
            while i >= 0:
                out.append((i, i + step, t))
                i = text.find(t.value, i + step)
        out.sort(key=lambda m: m[0])
        return out if limit is None else out[:limit]

    def line_counts(self, text: str) -> dict:
        """{line: {term: count}} of the lines of folded ``text`` holding a term."""
        out: dict = {}
        for at, _, t in self.spans(text):
            d = out.setdefault(text.count("\n", 0, at), {})
            d[t] = d.get(t, 0) + 1
        order = self.terms
        return {k: {t: d[t] for t in order if t in d} if len(d) > 1 else d for k, d in out.items()}

    # -- the index ---------------------------------------------------------------

    def pin(self, corpus) -> None:
        """Fix each word term's forms for this ranking, once the words of ``corpus``'s
        exchanges are registered in the vocabulary (docs/design.md §6.2): the forms the
        exchanges hold (the others count 0 in each of their lines)."""
        held = corpus.posting
        forms = {v: frozenset([f for f in fs if held(f)]) for v, fs in
                 _pinned_forms([t.value for t in self.words], corpus, self._stems).items()}
        self._stems.pin(forms)
        self._forms = [(t, _one(forms.get(t.value, ()))) for t in self.words]
        self.every = frozenset(f for fs in forms.values() for f in fs)

    def word_counts(self, words: dict) -> dict:
        """{term: count} of the word terms in ``words`` (word counts), in order."""
        if words.keys().isdisjoint(self.every):      # in C: most lines hold none
            return {}
        return self._held(words)

    def _held(self, words: dict) -> dict:
        got = {}
        for t, f in self._forms:
            c = words.get(f, 0) if type(f) is str else sum([words.get(x, 0) for x in f])
            if c:
                got[t] = c
        return got

    def columns(self, corpus) -> dict:
        """{term: {exchange: count}} of the word terms, from ``corpus``'s postings."""
        return {t: corpus.tf(f) if f else {} for t, f in self._forms}

    def indexed_counts(self, a, which: str) -> dict:
        """``counts`` of one line of an indexed ``a`` (``docs.line_text``), its words
        from the index."""
        got = self.word_counts(docs.one_line_words(a, which))
        if self.cjk:
            got.update(self.counts_cjk(docs.line_text(a, which)))
        return got

    def indexed_line_counts(self, a) -> dict:
        """``line_counts`` of an indexed ``a``: its words from its lines' word counts."""
        every, held = self.every, self._held      # the lines holding a form found in C
        out = {k: held(words) for k, words in enumerate(docs.line_words(a)) if not words.keys().isdisjoint(every)}
        if self.cjk:
            for k, d in self._cjk_lines(a.text).items():
                out[k] = {**out.get(k, {}), **d}
        return out

    def counts_cjk(self, text: str) -> dict:
        return {t: c for t in self.cjk if (c := text.count(t.value))}

    def _cjk_lines(self, text: str) -> dict:
        out: dict = {}
        for t in self.cjk:
            i, step = text.find(t.value), len(t.value)
            while i >= 0:
                d = out.setdefault(text.count("\n", 0, i), {})
                d[t] = d.get(t, 0) + 1
                i = text.find(t.value, i + step)
        return out


def _one(forms) -> str | tuple:
    fs = tuple(forms)
    return fs[0] if len(fs) == 1 else fs


def _pinned_forms(values: list, corpus, stems) -> dict:
    """stem -> the words having it, among them every word of ``corpus``'s exchanges
    that has it: from the vocabulary once they are registered there (none is looked at
    when the corpus knows they all are: its ``mark``; else each exchange's words
    registered again, a C check where known); when this call's words alone overflow the
    vocabulary, from the exchanges' own words."""
    stems.pin(None)
    for _ in range(2):
        vocabulary = stems.vocabulary
        if corpus.mark is not vocabulary.mark:
            for words in corpus.words:
                stems.known(words)
        if stems.vocabulary is vocabulary:
            corpus.mark = vocabulary.mark
            return {v: frozenset(stems.forms(v)) for v in values}
    wanted, own = set(values), {v: set() for v in values}
    for words in corpus.words:
        for w in words:
            if (v := stems(w)) in wanted:
                own[v].add(w)
    return {v: frozenset(ws) for v, ws in own.items()}
