"""An indexed ranking's exchanges as one corpus, kept between turns (docs/design.md
§6.2): the exchanges' word counts, code points and lines, their sums, and each word's
postings ({exchange: count}), so that a recalling turn looks up its query's words
instead of reading every exchange again.

Postings are kept for every word as exchanges are appended (O(the new exchanges'
words)) and cut back on an edit (O(the dropped exchanges' words)). The exchanges a
corpus is made with at once (a session's first recalling turn in this isolate) are
posted per word when it is first asked, in C (``dict.get`` mapped over their counts):
posting all their words at once would cost the cold turn a Python step per word, and
the corpus of a long chat its bound. They are kept in blocks of ``BLOCK``, each with
the set of its words (made in C), so a word is looked for only in the blocks holding
it: a later turn's new word costs the blocks' count and its own blocks, not the chat.

A session's next turn pages the same exchanges, or those and a few more: its corpus is
found by the exchanges' keys (their analyses' cache keys, which name their bytes:
compared in C), so the exchanges it holds are neither analysed nor looked up again;
where the keys part, by the word counts of the rest (a block page closed over
exchanges paged alone names them anew); extended by what was appended, cut back where
it changed otherwise. Everything in it is a function of those counts (and of the
exchanges' CJK runs, below) alone, so a ranking
from it is the ranking from scratch; it holds nothing a principal or session could
tell apart.

A query's CJK terms (bigrams and lone characters, counted as ``str.count`` counts them
in an exchange's text) are counted in the exchanges' CJK runs, kept per block of
``BLOCK`` exchanges as one string (made when a ranking first asks one: ``cjk_tf``); each
term asked keeps its posting, extended as exchanges are appended, so a CJK question's
terms cost what is new, not a count in every exchange's text every turn. A word term
of several forms (a stem's, an irregular verb's) has its forms' postings merged once
and kept the same way (``merged``): extended as exchanges are appended and cut back,
so a turn crossing a step (the prompt cache's, more exchanges paged) does not merge
them again over the chat.

Its memory is counted in bytes (``held_bytes``, docs/design.md §6.2), estimated from
what it holds: exchanges, word-count entries and their words' code points (sized when
first asked), postings, the memo's entries (CPython 3.11, 64-bit; checked against
tracemalloc by tests/unit/test_corpus_bytes.py); the isolate's budget reads it and may
lower ``CORPORA.max_bytes`` (the cache protocol: ``held_bytes``, ``shrink``)."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from itertools import compress, repeat
from operator import attrgetter, gt as _past, itemgetter, ne
from sys import getsizeof

from .analysis import CJK_RE
from .state import STATE

#: Corpora kept at most, the least recently used dropped first.
CORPORA_KEPT = 8
#: The corpora's bytes together (``Corpora.max_bytes``; the isolate's budget may lower it).
MAX_BYTES = 16 << 20
#: What a corpus keeps of its rankings (``Corpus.kept``), in entries, then emptied: at
#: least this many, and ``MEMO_PER_EXCHANGE`` an exchange (a ranking's norms and its
#: common words' parts over exchanges and windows are an array of doubles each, an
#: item 8 bytes of an entry's ``MEMO_ENTRY_BYTES``; their sums and order a list each).
MEMO_ENTRIES = 1 << 15
MEMO_PER_EXCHANGE = 16
#: Exchanges appended at once to a corpus holding none posted one by one (its first
#: ranking, or a long jump) past which they are posted per word when asked instead.
EAGER = 64
#: Exchanges per block of those posted per word when asked (``Corpus.blocks``).
BLOCK = 128
#: Merged postings of word terms of several forms a corpus keeps (``Corpus.merged``).
MERGED_KEPT = 64
_WORDS = attrgetter("index.words")     # an indexed analysis's word counts, in C
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_KEYS, _OWN_WORDS = attrgetter("keys"), attrgetter("words")     # a corpus's
_NONE: dict = {}                       # the posting of a word no exchange holds (never changed)

# Bytes, estimated as CPython 3.11 (64-bit) allocates them, checked against tracemalloc
# (tests/unit/test_corpus_bytes.py): an exchange's list slots and numbers; a posting
# dict and each of its entries (a slot, the load factor averaged); a memo entry (a
# float or a count and its slot); a word asked of the exchanges posted per word; the
# corpus's own object, lists, dicts and set.
CORPUS_BYTES = 1000
EXCHANGE_BYTES = 32
POSTING_BYTES = 180
POSTING_ENTRY_BYTES = 42
#: A merged posting's dict and its key (a frozenset of a few words, theirs the corpus's)
MERGED_BYTES = POSTING_BYTES + 250
MEMO_ENTRY_BYTES = 48
FILLED_BYTES = 60
#: A block's own objects: its tuple and two ints, a list slot, the set's object
BLOCK_BYTES = 200


def dict_bytes(n: int, entry: int) -> int:
    """A dict of ``n`` entries made by insertion (``entry``: 16 bytes with str keys
    only, else 24): the object, its keys table (2/3 usable) and index."""
    if not n:
        return 64
    size = 8
    while size * 2 // 3 < n:
        size *= 2
    return 96 + size * (1 if size <= 128 else 2 if size <= 1 << 15 else 4) + size * 2 // 3 * entry


_DICT_STR_BYTES = [dict_bytes(n, 16) for n in range(1024)]


def word_counts_bytes(words: dict) -> int:
    """An exchange's word counts: the dict (``table_bytes``) and its words' strings
    (``strings_bytes``)."""
    return table_bytes(len(words)) + strings_bytes(words)


def table_bytes(n: int) -> int:
    """A word-count dict of ``n`` entries, its words aside."""
    return _DICT_STR_BYTES[n] if n < 1024 else dict_bytes(n, 16)


def strings_bytes(words) -> int:
    """Words' strings (an ASCII str is 41 bytes and one a code point; another ~34 more
    and its code points' UTF-8 bytes past one), counted in C."""
    n = len(words)
    joined = "".join(words)
    out = 41 * n + len(joined)
    if joined.isascii():
        return out
    return out + 34 * (n - sum(map(str.isascii, words))) + len(joined.encode("utf-8", "surrogatepass")) - len(joined)


def keys_bytes(keys: list, before: tuple | None = None) -> int:
    """Exchanges' keys (``docs.doc_key``: a page's SHA-256 and an offset): each one's
    list slot, tuple and offset (an int past 256), and each page's string once, where
    the key before it names another page (a page's exchanges are consecutive;
    ``before``: the key before ``keys``, so that slices add up to the whole)."""
    if not keys:
        return 0
    pages = list(map(_FIRST, keys))
    previous = [before[0] if before is not None else None] + pages[:-1]
    return ((8 + getsizeof(keys[0])) * len(keys) + numbers_bytes(list(map(_SECOND, keys)))
            + getsizeof(pages[0]) * sum(map(ne, pages, previous)))


def numbers_bytes(numbers: list) -> int:
    """The int objects of ``numbers`` (those past 256: CPython shares the others)."""
    return 28 * sum(map(_past, numbers, repeat(256)))


class Corpus:
    """The corpus of indexed analyses (oldest first), built as they come."""
    __slots__ = ("words", "keys", "keys_bytes", "ids", "counted", "words_bytes", "sized", "sized_counted", "sized_size", "sizes", "lines_of", "asking", "size", "lines",
                 "postings", "posted", "lazy", "filled", "blocks", "blocks_bytes", "mark", "memo", "memo_entries",
                 "canon", "canon_bytes", "cjk", "cjk_bytes", "cjk_postings", "cjk_posted",
                 "merged", "merged_posted")

    def __init__(self, docs: list = ()):
        self.words: list = []       # each exchange's word counts (its index's)
        self.keys: list = []        # each exchange's key, when kept by ``Corpora``
        self.keys_bytes = 0
        self.ids: list = []         # 0..n-1: one int object per exchange, shared by the postings
        self.counted = 0            # their entries
        self.words_bytes = 0        # the bytes of the first ``sized`` ones and their numbers
        self.sized = 0              # (``word_counts_bytes``: counted when first asked)
        self.sized_counted = self.sized_size = 0    # their entries and code points
        self.sizes: list = []       # code points of each
        self.lines_of: list = []    # lines of each
        self.asking: list = []      # those whose last line asks ("?"), ascending
        self.size = self.lines = 0  # their sums
        self.postings: dict = {}    # word -> {exchange: count}, exchanges ascending
        self.posted = 0             # their entries
        self.lazy = 0               # exchanges 0..lazy-1 are posted per word when asked:
        self.filled: set = set()    # the words they are posted for
        self.blocks: list = []      # (first, end, their words' set): 0..lazy-1 in order
        self.blocks_bytes = 0       # the sets' table bytes (their words are the counts')
        self.mark = None    # the vocabulary every exchange is registered in, when known
        self.memo: dict = {}    # what a ranking derived from it alone (``kept``), until it changes
        self.memo_entries = 0
        # word -> its one string, once compacted (``compact``): then every exchange's
        # word counts hold their words from it
        self.canon: dict | None = None
        self.canon_bytes = 0    # those strings' bytes
        # the exchanges' CJK runs, once a CJK term is asked: per block of BLOCK exchanges
        # (first, their runs, "\n"-joined, each exchange's start and end there), else None
        self.cjk: list | None = None
        self.cjk_bytes = 0
        self.cjk_postings: dict = {}    # CJK term -> {exchange: count}, exchanges ascending
        self.cjk_posted = 0             # their entries
        # a word term's forms (a frozenset of words) -> {exchange: their counts summed},
        # exchanges ascending (``tf``); at most MERGED_KEPT, the oldest dropped first
        self.merged: dict = {}
        self.merged_posted = 0          # their entries
        self.extend(docs)

    def held_bytes(self) -> int:
        """The bytes it holds, estimated from its counts (docs/design.md §6.2): its word
        counts included (the analyses' own: shared with docs.CACHE while cached there).
        The exchanges not sized yet are sized now (once: C calls per exchange)."""
        n = len(self.words)
        if self.sized < n:
            self.words_bytes += self._exchanges_bytes(self.sized, n)
            self.sized_counted += sum(map(len, self.words[self.sized:]))
            self.sized_size += sum(self.sizes[self.sized:])
            self.sized = n
        return self._own_bytes() + self.words_bytes

    def bound_bytes(self) -> int:
        """At least ``held_bytes()``, the exchanges not sized yet taken at their most
        (a word's str at most 80 bytes and 4 a code point, its dict slot 48, its dict
        184): what ``Corpora.trim`` checks first, so a cold turn sizes nothing under the
        bound."""
        k = len(self.words) - self.sized
        if not k:
            return self._own_bytes() + self.words_bytes
        # the unsized ones' entries and code points: what is not the sized ones' (no
        # pass over them: a corpus never sized is read every ranking)
        return (self._own_bytes() + self.words_bytes + 268 * k + 128 * (self.counted - self.sized_counted)
                + 4 * (self.size - self.sized_size))

    def _own_bytes(self) -> int:
        return (CORPUS_BYTES + EXCHANGE_BYTES * len(self.words) + self.keys_bytes
                + POSTING_BYTES * len(self.postings)
                + POSTING_ENTRY_BYTES * self.posted + FILLED_BYTES * len(self.filled)
                + MEMO_ENTRY_BYTES * self.memo_entries + self.blocks_bytes
                + (dict_bytes(len(self.canon), 16) + self.canon_bytes if self.canon is not None else 0)
                + self.cjk_bytes + POSTING_BYTES * len(self.cjk_postings) + POSTING_ENTRY_BYTES * self.cjk_posted
                + MERGED_BYTES * len(self.merged) + POSTING_ENTRY_BYTES * self.merged_posted)

    def _exchanges_bytes(self, a: int, b: int) -> int:
        """Exchanges ``a:b``'s word counts (compacted, their tables alone: their words
        are ``canon``'s) and numbers."""
        words = self.words[a:b]
        counts = (sum(map(table_bytes, map(len, words))) if self.canon is not None
                  else sum(map(word_counts_bytes, words)))
        return (counts + numbers_bytes(self.sizes[a:b]) + numbers_bytes(self.lines_of[a:b])
                + numbers_bytes(self.ids[a:b]))

    def compact(self) -> None:
        """Hold every exchange's word counts with one string per distinct word, the
        corpus's own (``canon``), not the analyses' split's (one per exchange and word:
        half a long chat's corpus, docs/design.md §6.2); the blocks' sets and the
        postings' words with them. Once compacted, a corpus compacts what it is extended
        by (O(the new words)). The same counts: nothing a ranking reads changes."""
        if self.canon is not None:
            return
        loose = self._exchanges_bytes(0, self.sized)
        self.canon = {}
        self.words[:] = list(map(self._canonical, self.words))
        self.words_bytes += self._exchanges_bytes(0, self.sized) - loose
        canon, words = self.canon, self.words
        self.postings = {canon.get(w, w): p for w, p in self.postings.items()}
        self.blocks = [(f, e, set().union(*words[f:e])) for f, e, _ in self.blocks]
        self.blocks_bytes = sum([getsizeof(held) + BLOCK_BYTES for _, _, held in self.blocks])

    def _canonical(self, counts: dict) -> dict:
        """``counts`` keyed by the corpus's own string of each word (new ones kept)."""
        canon = self.canon
        new = counts.keys() - canon.keys()
        if new:
            canon.update(zip(new, new))
            self.canon_bytes += strings_bytes(new)
        return dict(zip(map(canon.__getitem__, counts), counts.values()))

    def extend(self, docs: list, keys: list = ()) -> None:
        """Append the analyses ``docs`` (``keys``: theirs): their counts, sizes and
        lines, and their words' postings."""
        if not docs:
            return
        self.forget()
        if keys:
            self.keys_bytes += keys_bytes(keys, self.keys[-1] if self.keys else None)
            self.keys += keys
        words = list(map(_WORDS, docs))
        if self.canon is not None:
            words = list(map(self._canonical, words))
        d0 = len(self.words)
        self.ids += range(d0, d0 + len(words))
        if self.lazy == d0 and len(words) > EAGER:     # none posted one by one: all per word
            self.lazy = d0 + len(words)
            self.postings.clear()
            self.filled.clear()
            self.posted = 0
            self._block(words, d0)
        else:
            self._post(words, d0)
        if self.cjk is not None:
            self._cjk_extend([a.text for a in docs], d0)
        if self.merged:
            self._merged_extend(words, d0)
        sizes, lines = [a.length for a in docs], [a.lines for a in docs]
        self.asking += [d for d, a in enumerate(docs, d0) if a.question]
        self.words += words
        self.counted += sum(map(len, words))
        self.sizes += sizes
        self.lines_of += lines
        self.size += sum(sizes)
        self.lines += sum(lines)
        # the vocabulary all are registered in: theirs, when it is this one's (or none yet)
        mark = docs[0].index.vocabulary
        if (d0 and self.mark is not mark) or any([a.index.vocabulary is not mark for a in docs]):
            mark = None
        self.mark = mark

    def prefix(self, k: int) -> "Corpus":
        """A new corpus of this one's first ``k`` exchanges, this one unchanged: its
        lists' starts (their word counts the same dicts, which no corpus changes), every
        exchange posted per word when asked, in this one's blocks (a block across ``k``
        keeps the set of its words: looked in for nothing at most) and new ones over
        those it posted one by one. Its bytes are counted as its own."""
        c = Corpus()
        c.words, c.keys, c.ids = self.words[:k], self.keys[:k], self.ids[:k]
        c.keys_bytes = keys_bytes(c.keys)
        c.sizes, c.lines_of = self.sizes[:k], self.lines_of[:k]
        c.asking = self.asking[:bisect_left(self.asking, k)]
        c.counted, c.size, c.lines = sum(map(len, c.words)), sum(c.sizes), sum(c.lines_of)
        c.blocks, c.blocks_bytes = list(self.blocks), self.blocks_bytes
        c._cut_blocks(k)
        if k > self.lazy:
            c._block(c.words[self.lazy:], self.lazy)
        c.lazy, c.mark = k, self.mark
        return c

    def _block(self, words: list, d0: int) -> None:
        """Keep ``words`` (exchanges ``d0``… of those posted per word) in blocks, each
        with the set of its words (in C)."""
        for i in range(0, len(words), BLOCK):
            held = set().union(*words[i:i + BLOCK])
            self.blocks.append((d0 + i, d0 + min(i + BLOCK, len(words)), held))
            self.blocks_bytes += getsizeof(held) + BLOCK_BYTES

    def _post(self, words: list, d0: int) -> None:
        postings = self.postings
        get = postings.get
        for d, counts in zip(self.ids[d0:], words):
            for w, c in counts.items():
                p = get(w)
                if p is None:
                    postings[w] = {d: c}
                else:
                    p[d] = c
        self.posted += sum(map(len, words))

    def cut(self, keep: int) -> None:
        """Drop the exchanges from ``keep`` on, and their postings' entries (O(their
        words))."""
        n = len(self.words)
        if keep >= n:
            return
        self.forget()
        postings, words = self.postings, self.words
        if postings:
            for d in range(keep, n):
                for w in postings.keys() & words[d].keys():
                    p = postings[w]
                    if p.pop(d, None) is not None:
                        self.posted -= 1
                        if not p:
                            del postings[w]
        if self.cjk is not None:
            self._cjk_cut(keep)
        for merged in self.merged.values():
            self.merged_posted -= _cut_posting(merged, keep)
        if keep < self.lazy:
            self.lazy = keep
            self._cut_blocks(keep)
        if not self.lazy:
            self.filled.clear()
        self.size -= sum(self.sizes[keep:])
        self.lines -= sum(self.lines_of[keep:])
        self.counted -= sum(map(len, words[keep:]))
        if keep < self.sized:
            self.words_bytes -= self._exchanges_bytes(keep, self.sized)
            self.sized_counted -= sum(map(len, words[keep:self.sized]))
            self.sized_size -= sum(self.sizes[keep:self.sized])
            self.sized = keep
        self.keys_bytes -= keys_bytes(self.keys[keep:], self.keys[keep - 1] if keep else None)
        del words[keep:], self.keys[keep:], self.ids[keep:], self.sizes[keep:], self.lines_of[keep:]
        del self.asking[bisect_left(self.asking, keep):]

    def _cut_blocks(self, keep: int) -> None:
        """Blocks end at ``keep``: those past it dropped, the one across it shortened
        (its set keeps words the dropped exchanges held: looked in for nothing at most)."""
        blocks = self.blocks
        while blocks and blocks[-1][0] >= keep:
            self.blocks_bytes -= getsizeof(blocks.pop()[2]) + BLOCK_BYTES
        if blocks and blocks[-1][1] > keep:
            blocks[-1] = (blocks[-1][0], keep, blocks[-1][2])

    def posting(self, word: str) -> dict:
        """{exchange: count} of ``word``, exchanges ascending (never to be changed by the
        caller)."""
        got = self.postings.get(word)
        if self.lazy and word not in self.filled:
            got = self._fill(word, got)
        return _NONE if got is None else got

    def _fill(self, word: str, later: dict | None) -> dict | None:
        """``word``'s posting over the exchanges posted per word, in C, looked for in the
        blocks holding it only, and ``later`` (its entries after them) appended."""
        got: dict = {}
        words, ids = self.words, self.ids
        for a, b, held_words in self.blocks:
            if word in held_words:
                held = list(map(dict.get, words[a:b], repeat(word)))
                got.update(zip(compress(ids[a:b], held), filter(None, held)))
        self.filled.add(word)
        if not got:
            return later
        self.posted += len(got)
        if later:
            got.update(later)
        self.postings[word] = got
        return got

    def tf(self, forms) -> dict:
        """{exchange: count} of a term's ``forms`` (one word, or a tuple of them),
        exchanges ascending; the same dict while the corpus is (never to be changed by
        the caller): one word's is its posting, several words' their merged posting
        (``merged``), each changed only with the corpus, which empties the memo."""
        key = ("tf", forms if type(forms) is str else frozenset(forms))
        got = self.memo.get(key)
        if got is None:
            got = self.posting(forms) if type(forms) is str else self._merged(key[1])
            self._keep(key, got, 1)
            self.memo[id(got)] = got
        return got

    def _merged(self, forms: frozenset) -> dict:
        """The kept merged posting of ``forms``, made when first asked: the oldest
        dropped past ``MERGED_KEPT``."""
        got = self.merged.get(forms)
        if got is None:
            got = {}
            for f in forms:
                for d, c in self.posting(f).items():
                    got[d] = got.get(d, 0) + c
            got = self.merged[forms] = dict(sorted(got.items()))
            self.merged_posted += len(got)
            if len(self.merged) > MERGED_KEPT:
                self.merged_posted -= len(self.merged.pop(next(iter(self.merged))))
        return got

    def _merged_extend(self, words: list, d0: int) -> None:
        """The kept merged postings with exchanges ``d0``… (their word counts ``words``)
        appended: O(the new exchanges' words) each."""
        for forms, got in self.merged.items():
            for d, counts in enumerate(words, d0):
                if not counts.keys().isdisjoint(forms):
                    got[d] = sum([counts.get(f, 0) for f in forms])
                    self.merged_posted += 1

    def cjk_tf(self, value: str, texts) -> dict:
        """{exchange: ``text.count(value)``} of a CJK term (a bigram or a lone
        character: CJK characters only), exchanges ascending, the same dict while the
        corpus is (never to be changed); ``texts()``: every exchange's folded text, read
        only when no CJK term was asked of this corpus yet."""
        key = ("cjk", value)
        got = self.memo.get(key)
        if got is None:
            got = self.cjk_postings.get(value)
            if got is None:
                if self.cjk is None:
                    self._cjk_extend(texts(), 0)
                got = self.cjk_postings[value] = self._cjk_fill(value)
                self.cjk_posted += len(got)
            got = self._keep(key, got, 1)
            self.memo[id(got)] = got
        return got

    def _cjk_fill(self, value: str, since: int = 0) -> dict:
        """``value``'s posting over exchanges ``since``…, counted in C: a CJK term's
        count in an exchange's text is its count in that exchange's CJK runs joined by
        newlines (no CJK character: no occurrence spans two runs or two exchanges); a
        whole block looked in only when it holds the term. The blocks start at multiples
        of ``BLOCK``: those before ``since``'s are not looked at (an append's count costs
        the new exchanges, not one step a block of the chat)."""
        got: dict = {}
        for b0, text, starts, ends in self.cjk[since // BLOCK:]:
            skip = since - b0
            if skip >= len(starts) or (skip <= 0 and value not in text):
                continue
            skip = max(skip, 0)
            got.update(filter(_SECOND, zip(range(b0 + skip, b0 + len(starts)),
                                           map(text.count, repeat(value), starts[skip:], ends[skip:]))))
        return got

    def _cjk_extend(self, texts: list, d0: int) -> None:
        """Append the CJK runs of exchanges ``d0``… (their folded ``texts``): into the
        last block while it has room, then in new ones; each kept posting counted in
        them (in their spans only: O(the new exchanges) a term)."""
        if self.cjk is None:
            self.cjk = []
        cjk, runs, i = self.cjk, ["\n".join(CJK_RE.findall(t)) for t in texts], 0
        if cjk and len(cjk[-1][2]) < BLOCK:
            last = cjk.pop()
            self.cjk_bytes -= _cjk_block_bytes(last)
            i = BLOCK - len(last[2])
            cjk.append(_cjk_block(last[0], runs[:i], last))
            self.cjk_bytes += _cjk_block_bytes(cjk[-1])
        for k in range(i, len(runs), BLOCK):
            cjk.append(_cjk_block(d0 + k, runs[k:k + BLOCK]))
            self.cjk_bytes += _cjk_block_bytes(cjk[-1])
        for value, posting in self.cjk_postings.items():
            added = self._cjk_fill(value, d0)
            self.cjk_posted += len(added)
            posting.update(added)

    def _cjk_cut(self, keep: int) -> None:
        """Drop the CJK runs of exchanges ``keep``… and their postings' entries (the
        last ones of each: exchanges ascending)."""
        cjk = self.cjk
        while cjk and cjk[-1][0] >= keep:
            self.cjk_bytes -= _cjk_block_bytes(cjk.pop())
        if cjk and cjk[-1][0] + len(cjk[-1][2]) > keep:
            b0, text, starts, ends = last = cjk.pop()
            self.cjk_bytes -= _cjk_block_bytes(last)
            j = keep - b0
            cjk.append((b0, text[:ends[j - 1]], starts[:j], ends[:j]))
            self.cjk_bytes += _cjk_block_bytes(cjk[-1])
        for posting in self.cjk_postings.values():
            self.cjk_posted -= _cut_posting(posting, keep)

    def kept(self, kind, tf: dict, make, named: tuple = ()):
        """``make()``, kept under (``kind``, ``tf``) while the corpus is, when ``tf`` is
        one of its own (``tf``) or None: what depends on a term's counts (if any) and
        the corpus alone. ``named``: the counts ``kind`` names by id, its own too."""
        if tf is not None:
            named += (tf,)
        if not all([self.memo.get(id(t)) is t for t in named]):
            return make()
        key = (kind, id(tf))
        got = self.memo.get(key)
        if got is None:
            got = self._keep(key, make(), named=named)
        return got

    def _keep(self, key, value, size: int | None = None, named: tuple = ()):
        """``value`` kept under ``key`` (``size``: the entries it adds, else its own). A
        key naming counts by id (``named``) is kept only with them: once the memo is
        emptied they may be freed and their ids reused by other counts, which the key
        would then name."""
        if size is None:
            kind = type(value)
            size = (len(value) if kind is dict or kind is list
                    else -(-len(value) * value.itemsize // MEMO_ENTRY_BYTES) if kind is array else 1)
            if kind is dict and value and type(next(iter(value.values()))) is tuple:
                size *= 2       # a term's questions: a (count, code points) tuple an item too
        if self.memo_entries + size > max(MEMO_ENTRIES, MEMO_PER_EXCHANGE * len(self.words)):
            self.forget()       # its own counts with it: what a ranking holds is made anew
            if named:
                return value
        self.memo[key] = value
        self.memo_entries += size + 1
        return value

    def forget(self) -> None:
        """Empty the memo (the corpus changed, or it is no longer the one in use)."""
        self.memo.clear()
        self.memo_entries = 0


def _cjk_block(first: int, runs: list, block: tuple | None = None) -> tuple:
    """(first exchange, the CJK runs of its exchanges "\\n"-joined, each one's start and
    end there): ``block``'s with ``runs`` (exchanges' runs, each "\\n"-joined) appended."""
    text, starts, ends = (block[1], list(block[2]), list(block[3])) if block else ("", [], [])
    at = len(text) + 1 if starts else 0
    for r in runs:
        starts.append(at)
        ends.append(at + len(r))
        at += len(r) + 1
    joined = "\n".join(runs)
    return first, (text + "\n" + joined if block and block[2] else joined), starts, ends


def _cjk_block_bytes(block: tuple) -> int:
    """A block of CJK runs: its string, its lists and their numbers, its tuple."""
    _, text, starts, ends = block
    return (BLOCK_BYTES + getsizeof(text) + getsizeof(starts) + getsizeof(ends)
            + numbers_bytes(starts) + numbers_bytes(ends))


def _cut_posting(posting: dict, keep: int) -> int:
    """Drop ``posting``'s entries from exchange ``keep`` on (the last ones: exchanges
    ascending); how many."""
    n = len(posting)
    while posting and next(reversed(posting)) >= keep:
        posting.popitem()
    return n - len(posting)


def shared(old: list, new: list) -> int:
    """How many leading items ``old`` and ``new`` have in common (compared in C; the
    shorter whole, not a copy: a steady turn's keys are all in common)."""
    n = min(len(old), len(new))
    if (old == new[:n]) if len(old) == n else (old[:n] == new):
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
    """The kept corpora, least recently used first: at most ``CORPORA_KEPT``, their
    bytes together at most ``max_bytes`` (the isolate's budget may lower it: the cache
    protocol, ``held_bytes`` / ``shrink``); each keeps its memo while it is not changed
    (sessions' turns interleave in an isolate), those not in use emptied first."""

    def __init__(self):
        self.kept: list = []
        self.max_bytes = MAX_BYTES

    @property
    def bound(self) -> int:
        return self.max_bytes

    def held_bytes(self) -> int:
        """The bytes the kept corpora hold (``Corpus.held_bytes``), and their list's
        slots (none kept: 0, as every cache's fixed part is the isolate's baseline)."""
        kept = self.kept
        return 56 + 8 * len(kept) + sum([c.held_bytes() for c in kept]) if kept else 0

    def shrink(self, to_bytes: int) -> None:
        """Drop corpora, the least recently used first, until ``held_bytes() <=
        to_bytes`` — first the memos of those not in use emptied, the least recently
        used first (what rankings derived: made again in C passes), then each compacted
        (``Corpus.compact``: the same counts in about half the bytes), then the last
        one's memo emptied (a corpus dropped is every exchange analysed again)."""
        kept = self.kept
        for c in kept[:-1]:     # the memos of those not in use, least recently used first
            if self.held_bytes() <= to_bytes:
                return
            c.forget()
        if kept and self.held_bytes() > to_bytes:
            for c in kept:
                c.compact()
        if kept and self.held_bytes() > to_bytes:
            kept[-1].forget()
        while kept and self.held_bytes() > to_bytes:
            kept.pop(0)

    def holding(self, keys: list) -> tuple:
        """(the kept corpus whose exchanges' keys share the longest start with ``keys``,
        that length), or (None, 0): those exchanges are the same (a key names an
        exchange's bytes), so a ranking need not analyse them to find its corpus."""
        return self._sharing(_KEYS, keys)

    def _sharing(self, of, items: list) -> tuple:
        """(the kept corpus whose list ``of(corpus)`` shares the longest start with
        ``items``, the most recently used first, that length), or (None, 0)."""
        best, common = None, 0
        for c in reversed(self.kept):
            mine = of(c)
            got = shared(mine, items)
            if got > common:
                best, common = c, got
                if got == len(mine) == len(items):
                    break
        return best, common

    def of(self, tail: list, keys: list, held: Corpus | None = None, common: int = 0) -> Corpus:
        """The corpus of the exchanges of ``keys``: ``held``'s first ``common`` ones
        (``holding``), then as many of the analyses ``tail`` (the rest's) as ``held``
        has next (the same word counts, compared in C), it cut there and extended by
        the others. Without ``held``: the kept corpus sharing most of its start with
        ``tail`` by word counts, else a new one."""
        words = list(map(_WORDS, tail))
        best, same = held, common
        if held is None:
            best, same = self._sharing(_OWN_WORDS, words)
        elif common < len(held.words):
            same += shared(held.words[common:], words)
        if best is None:
            best = Corpus()
        elif len(best.words) - same > same:
            # it would drop more than it keeps: another ranking's, most likely (a branch
            # of a long chat shares its start, its keys too): left as it is for it, and
            # its start taken (in C; a cut is a Python step per dropped word)
            best = best.prefix(same)
        else:
            self.kept.remove(best)
        best.cut(same)
        if common and best.keys[common - 1] is not keys[common - 1]:
            # equal keys, other objects (made again by a step's walk, or by a session
            # whose kept turn was lost): the ranking's are taken, so that its next
            # turns' compare (``holding``) is by identity — 3,000 keys: 0.4 ms in
            # Pyodide as strings, 9 µs by identity
            best.keys[:common] = keys[:common]
        if same > common:       # the same exchanges under new keys (none after them: cut)
            before = keys[common - 1] if common else None
            best.keys_bytes += keys_bytes(keys[common:same], before) - keys_bytes(best.keys[common:same], before)
            best.keys[common:same] = keys[common:same]
        best.extend(tail[same - common:], keys[same:])
        self.kept.append(best)
        return best

    def trim(self) -> None:
        """Drop the least recently used corpora over the bounds (after a ranking: the
        postings and memo it made count)."""
        kept = self.kept
        while len(kept) > CORPORA_KEPT:
            kept.pop(0)
        if sum([c.bound_bytes() for c in kept]) > self.max_bytes:
            self.shrink(self.max_bytes)     # alone over the bound: used once, not kept

    def clear(self) -> None:
        self.kept.clear()

    def __len__(self) -> int:
        return len(self.kept)


CORPORA = STATE.part("corpora", Corpora)
