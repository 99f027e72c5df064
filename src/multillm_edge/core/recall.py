"""Recall (docs/design.md §6.2): the exchanges a paged request stores that best match
what the player just said, quoted verbatim in a message before the latest user turn,
with no tool call.

Pure and deterministic: the query is the request's latest genuine user text, the
documents are the exchanges this plan pages (nothing else: no storage read, no model),
ranked by the search's ranker (search.rank, the query analysed once: search.prepare). A moment is recalled only when

- the query has at least ``MIN_TERMS`` distinct content terms (stop words left out), so
  a turn like "*I nod.*" (one content word) recalls nothing;
- its exchange holds at least an average query term's share of the query's weight
  (``1 / terms``; the rarer a word, the more it weighs: search.ranker's relevance), so
  an exchange sharing only a word most exchanges hold is not one;
- it fits the candidate's recall room: at most ``SHARE`` of its budget and
  ``MAX_BYTES`` (the plan pages that much more of the history to make it). A moment
  that does not fit is left out; recall never causes a 413.

At most ``MAX_MOMENTS``. Each shows its page_id and exchange (retrieval's
``exchange=N``) and its messages' texts, role-labelled, each cut to ``EXCERPT_MAX``
code points with an ellipsis where cut (the search's excerpt length, from the start:
a moment is read in order, as it was said).
"""

from __future__ import annotations

import json
from functools import partial
from hashlib import sha256
from operator import itemgetter
from sys import getsizeof
from typing import Callable, NamedTuple, Sequence

from .. import formats
from ..search import ELLIPSIS, EXCERPT_MAX, STATE, Scoring, doc_key, page_texts, prepare, rank  # noqa: F401
from ..search.state import SLOT, Memo

SHARE = 0.15            # of the candidate's budget, at most
MAX_BYTES = 8192        # and never more than this
MAX_MOMENTS = 3
RANKED = 2 * MAX_MOMENTS   # hits looked at: a moment may not pass the floor or fit the room
#: The search's scoring, its passages scored for the best exchanges only: a steady turn
#: ranks every paged exchange again, and only the few best are quoted.
SCORING = Scoring(rerank=4 * MAX_MOMENTS)
MIN_TERMS = 2           # distinct content terms a query needs to recall anything
INTRO = ("Earlier moments that may be relevant, quoted verbatim (retrieve the exchange "
         "to read it whole):")


#: Where each exchange of a recalled moment's page starts, by the page's SHA-256 (the
#: same pages are quoted turn after turn); at most this many pages, then emptied.
STARTS_PAGES = 1024
STARTS_BYTES = 2 << 20       # and in at most this many bytes


def _starts_size(sha: str, starts) -> int:
    """A page's SHA-256 and its starts: the list and each offset past 256 (an int)."""
    return getsizeof(sha) + getsizeof(starts) + _INT * sum(map((256).__lt__, starts)) + SLOT


_INT = getsizeof(1 << 20) + 4


_STARTS = STATE.part("exchange starts", lambda: Memo(STARTS_PAGES, STARTS_BYTES, _starts_size))


KEY = itemgetter(1)       # a Paged's key, in C


class Moment(NamedTuple):
    page_id: str
    exchange: int       # 1-based: the page's exchange as retrieval's `exchange=N` reads it
    score: float
    lines: tuple        # ((role, text cut to EXCERPT_MAX), ...)


class Paged(NamedTuple):
    """An exchange the plan pages: its items (None where the kept turn holds them as
    bytes only: ``items_of``), ``key`` caching its analysis (its page's
    SHA-256 and its offset there), the page holding it and its item offset there;
    ``alone``: in a block page, its bytes there (a view of the page's body; between
    brackets, its bytes as a page of its own: the key of its analysis before the block
    closed is ``(SHA-256 of them, 0)``), else None."""
    items: list | None
    key: tuple
    page: object        # prepared.Page
    offset: int
    alone: memoryview | None = None


def room(budget: int) -> int:
    """The most bytes a candidate of ``budget`` gives to recalled moments."""
    return max(0, min(int(budget * SHARE), MAX_BYTES))


def query_text(items: list, start: int | None) -> str:
    """The latest genuine user message's text (``start``: its index), '' without one."""
    if start is None:
        return ""
    return "\n".join(t for _, t in page_texts([items[start]]))


class _Texts(Sequence):
    """The exchanges' texts, made only for those the ranker reads (a cached analysis
    needs none)."""
    def __init__(self, paged: list):
        self._paged, self._made = paged, {}

    def __len__(self) -> int:
        return len(self._paged)

    def __getitem__(self, i):
        got = self._made.get(i)
        if got is None:
            got = self._made[i] = page_texts(items_of(self._paged[i]))
        return got


def items_of(p: Paged) -> list:
    """An exchange's items: as the request holds them, or parsed again from its bytes
    where the session's kept turn holds them as bytes only (docs/design.md §5.13)."""
    if p.items is not None:
        return p.items
    if p.alone is not None:
        return json.loads(b"[%b]" % p.alone)
    return p.page.items


def choose(query: str, paged: list, keys: list | None, room_bytes: int, size_of: Callable[[str], int]) -> list:
    """The moments to recall (best first), ``size_of(text(moments))`` ≤ ``room_bytes``;
    ``keys``: the ``paged`` exchanges' keys when kept with them (else made)."""
    q = prepare(query, SCORING) if query else None     # analysed once: counted, then ranked
    terms = len(q.terms) if q else 0
    if terms < MIN_TERMS or not paged or room_bytes <= 0:
        return []
    floor = 1 / terms           # the share of the query's weight an average term carries
    texts = _Texts(paged)
    if keys is None:
        keys = list(map(KEY, paged))
    hits = rank(q, texts, RANKED, keys=keys, indexed=True, scoring=SCORING,
                excerpts=False, former=partial(_former_key, paged))
    out: list = []
    for hit in hits:
        if len(out) == MAX_MOMENTS:
            break
        if hit.relevance < floor:
            continue
        moment = _moment(paged[hit.doc], hit, texts[hit.doc])
        if moment is None or any(m.lines == moment.lines for m in out):
            continue        # not nameable, or the same words as a moment already quoted
        if size_of(text(out + [moment])) <= room_bytes:
            out.append(moment)
    return out


def _former_key(paged: list, i: int):
    """The key exchange ``i``'s analysis had while it was paged alone (a block page
    closed over it since): None when it is paged alone."""
    alone = paged[i].alone
    return None if alone is None else doc_key(sha256(b"[" + alone + b"]").hexdigest(), 0)


def _moment(p: Paged, hit, texts: list) -> Moment | None:
    """The moment of ``hit``; None when its exchange is not one retrieval can name."""
    page, offset = p.page, p.offset
    starts = _STARTS.get(page.sha256)
    if starts is None:
        starts = _STARTS.keep(page.sha256, formats.exchange_starts(page.items))
    if offset not in starts:
        return None
    lines = tuple((role, t if len(t) <= EXCERPT_MAX else t[:EXCERPT_MAX - 1] + ELLIPSIS)
                  for role, t in texts)
    return Moment(page.page_id, starts.index(offset) + 1, hit.score, lines)


def text(moments: list) -> str:
    """The text of recall's message ('' for none)."""
    if not moments:
        return ""
    out = [INTRO]
    for m in moments:
        out.append(f"[page_id {m.page_id}, exchange {m.exchange}]")
        out.extend(f"{role}: {t}" for role, t in m.lines)
    return "\n".join(out)
