"""A turn resumed from the session's last one in this isolate (docs/design.md §5.13).

A roleplay client resends the whole chat every turn. When the new raw body starts with
the bytes of the last one (``core/last_turns.py``), up to a group boundary inside the
history, everything derived from those leading groups is taken as it was: the parsed
items, the field checks, the groups, their bytes and the pages made of them. The rest
is done as for any body:

- the request boundary runs on the body with the reused items cut out (``S``: the
  bytes before the history's first item, then everything after the last reused
  item's comma), with the same strict parse and the same checks. ``S`` is valid
  exactly when the whole body is: the cut is a run of complete values, each followed
  by a comma, that the edge parsed and checked before (§5.13 says why depth, UTF-8,
  the bracket count and the field checks carry over);
- grouping, group bytes and pages for the groups after the reused ones;
- the plan, pages, recall and upstream bytes as always, from ``core/prepared.py`` on.

Whenever anything is in doubt — no entry, too little in common, a body that does not
stand in its bytes exactly as the edge encodes it, a cut body that fails any check,
the history's key twice at the top — the turn takes the full path, which gives the
answer and the error. Reuse only ever saves work.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate, compress, repeat
from operator import add, and_, getitem, itemgetter, not_
from sys import getsizeof

from .. import formats as _formats
from ..base.jsonbytes import compact
from ..formats import breakpoints as _bp
from . import last_turns
from .last_turns import LastTurn, LastTurns
from .prepared import _PLUS_ONE, _group_bytes
from .validation import MAX_BRACKETS, bracket_count, check_body, parse_json_counted

_COMMA = ord(",")
_LAST = itemgetter(1)       # a block's (first, last) groups: its last


class Prior:
    """One request's link to its session's last turn: ``last`` (None: nothing reused),
    ``reused`` its leading groups this body shares (their items' parse taken),
    ``brackets`` this body's bracket bytes, exactly (§5.13); ``prep`` the request's
    Prepared once made (``adopt``), ``used`` whether it took the groups too."""
    __slots__ = ("last", "reused", "brackets", "prep", "used")

    def __init__(self, last: LastTurn | None, reused: int, brackets: int):
        self.last, self.reused, self.brackets = last, reused, brackets
        self.prep, self.used = None, False

    def adopt(self, prep) -> None:
        self.prep = prep

    def items_reused(self) -> int:
        """How many history items were taken parsed and checked from the last turn."""
        return self.last.groups[self.reused - 1].end if self.last is not None and self.reused else 0

    def measured(self, prep, items: list, classify):
        """``(groups, raw, inner)`` of ``items``: the reused groups as they were, then the
        rest grouped and encoded; None (group everything) when the reused part's last
        group may not end where it did (the next item does not open a group)."""
        last, j = self.last, self.reused
        if not j:
            return None
        start = last.groups[j - 1].end
        if (last.groups[j - 1].kind != _formats.STANDALONE
                and classify(items[start])[0] not in (_formats.USER, _formats.SYSTEM)):
            return None
        group = tuple.__new__
        tail = [group(_formats.Group, (g.start + start, g.end + start, g.kind, g.complete))
                for g in _formats.group_items(items[start:], classify)]
        raw = _group_bytes(items, tail)
        inner = [len(b) - 2 for b in raw]
        self._seed(prep)
        self.used = True
        prep.kept_turn = last       # the reused groups' bytes a block page holds: made from it
        if last.pageable is not None:
            prep.carried = (*last.pageable, j)
        # the grid ends (prep.ends) carried on: the shared groups' as they were, the rest's
        # added up from there, in C (no Python step per group, §5.13)
        prep.ends = last.ends[:j] + list(accumulate(map(_PLUS_ONE, inner), initial=last.ends[j - 1]))[1:]
        if last.marks is not None:      # the client's breakpoints, as the ends (§5.7)
            prep.marks = last.marks[:j] + list(accumulate(map(_bp.count, raw), initial=last.marks[j - 1]))[1:]
        return last.groups[:j] + tail, last.group_raw[:j] + raw, last.inner[:j] + inner

    def _seed(self, prep) -> None:
        """The last turn's pages of the reused groups, when this request's ids are the
        same (one id made again proves principal, session, revision and secret)."""
        j, last = self.reused, self.last
        # all of them when all are of reused groups (a steady turn's: checked in C)
        pages = last.pages if not last.pages or max(last.pages) < j else \
            {gi: p for gi, p in last.pages.items() if gi < j}
        blocks = last.blocks if not last.blocks or max(map(_LAST, last.blocks)) < j else \
            {k: p for k, p in last.blocks.items() if k[1] < j}
        probe = next(iter(pages.values()), None) or next(iter(blocks.values()), None)
        if probe is None or prep.page_id_for is None or prep.page_id_for(probe.sha256) != probe.page_id:
            return
        prep.seed(pages, blocks, self.last.walks, j)


def parse_request(memory: LastTurns, key, fmt: str, raw: bytes) -> tuple:
    """``validation.parse_request(fmt, raw)`` → (body, Prior): resumed from ``key``'s
    last turn when it can be, else the full path (which raises the error, if any)."""
    last = memory.get(key)
    if last is not None:
        resumed = _resume(last, fmt, raw)
        if resumed is not None:
            return resumed
    body, brackets = parse_json_counted(raw)
    return check_body(fmt, body), Prior(None, 0, brackets)


def _resume(last: LastTurn, fmt: str, raw: bytes):
    j = min(_shared(last, raw), last.verified)     # verified when it was kept
    if j < 1:
        return None
    cut = len(last.head) + last.ends[j - 1]
    top = []

    def pairs(p):       # the top-level object is the last one made
        top[:] = p
        return dict(p)

    try:
        body, brackets = parse_json_counted(raw[:len(last.head)] + raw[cut:], pairs)
        check_body(fmt, body)
    except MemoryError:     # no doubt about the body: the isolate's memory handling's
        raise
    except Exception:   # noqa: BLE001 — any doubt: the full path answers, or raises
        return None
    key = _formats.get(fmt).ITEMS_KEY
    rest = body.get(key)
    # exact (§5.13): the last body's count, less what it held besides the shared groups
    # (the same head, its own rest), is the shared groups' own
    brackets += last.brackets - bracket_count(last.head + _kept_from(last, cut))
    if (brackets > 2 * MAX_BRACKETS or type(rest) is not list or not rest
            or sum(k == key for k, _ in top) != 1):
        return None
    body[key] = last.items[:last.groups[j - 1].end] + rest
    return body, Prior(last, j, brackets)


def _shared(last: LastTurn, raw: bytes) -> int:
    """The most leading groups (the verified ones at most, all but the last) whose
    bytes, each with its comma, ``raw`` holds right after ``head``: the kept pieces
    compared in C (a block page's groups or one group each), then the groups of the
    first piece that differs, by binary search."""
    if not raw.startswith(last.head):
        return 0
    pieces, at, end = last.pieces, last.piece_at, last.piece_end
    same = list(map(and_, map(raw.startswith, pieces, at), map(raw.startswith, repeat(b","), last.piece_comma)))
    k = same.index(False) if False in same else len(same)
    done = end[k - 1] if k else 0
    if k == len(pieces) or end[k] - done < 2:
        return done
    piece, start, ends = pieces[k], at[k], last.ends
    base = ends[done - 1] if done else 0

    def holds(g: int) -> bool:      # the piece's groups up to g, each with its comma
        n = ends[g] - base - 1
        return raw.startswith(piece[:n], start) and raw.startswith(b",", start + n)

    lo, hi = done, end[k] - 1       # groups done..lo-1 held; hi is not
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(mid):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _kept_from(last: LastTurn, cut: int) -> bytes:
    """The kept body's bytes from byte ``cut`` on (``cut`` past ``head``)."""
    if cut >= last.tail_at:
        return last.raw[cut - last.tail_at:]
    k = bisect_right(last.piece_at, cut) - 1
    return (b",".join(last.pieces[k:]) + b"," + last.raw)[cut - last.piece_at[k]:]


def _verified(last: LastTurn, j: int) -> int:
    """The most of the first ``j`` groups the kept body holds exactly as ``head`` and
    their bytes, each with its comma: what proves the shared bytes parse to the kept
    items. Checked once per body, when it is kept (``last.verified`` grows from the
    groups a resumed turn reused), in C calls."""
    v = last.verified
    if v < 0 or v >= j:
        return 0 if v < 0 else j
    old, at = last.raw, len(last.head) + (last.ends[v - 1] if v else 0)
    if v == 0 and not old.startswith(last.head):
        last.verified = -1
        return 0
    group_raw = last.group_raw
    if old.startswith(b",".join([r[1:-1] for r in group_raw[v:j]]) + b",", at):
        last.verified = j
        return j
    while v < j:        # where it stops: a client encoding some value its own way
        r = group_raw[v]
        if not old.startswith(r[1:-1], at) or old[at + len(r) - 2] != _COMMA:
            break
        at += len(r) - 1
        v += 1
    last.verified = v
    return v


def keep(memory: LastTurns, key, raw: bytes, body: dict, prior: Prior) -> None:
    """Keep this turn for the session's next one (or forget the last: nothing to reuse)."""
    prep = prior.prep
    # a turn the cache would refuse (an entry holds its raw body and its groups' bytes
    # at least) is not counted at all: for a large body, that walk of its items would
    # be its peak (docs/design.md §7.2)
    if (prep is None or prep.items is None or len(prep.groups) < 2
            or len(raw) + prep.sum_inner > memory.max_bytes * last_turns.MAX_SHARE):
        memory.forget(key)
        return
    try:
        head = _head(body, prep.mod.ITEMS_KEY)
    except UnicodeEncodeError:      # a lone surrogate in a field the plan strips
        memory.forget(key)
        return
    last = prior.last
    verified = prior.reused if prior.used and last is not None and head == last.head else 0
    # its own dicts: pages a later candidate makes are not the entry's (counted now)
    pages, blocks, walks = (dict(d) for d in (*prep.made(), prep.walks))
    sizes = last_turns.group_sizes(prep.raw, last.sizes if prior.used else (), prior.reused)
    cost, walk_bytes = last_turns.held(raw, head, prep, sizes, pages, blocks, walks, last,
                                       prior.reused if prior.used else 0)
    # its grid ends (made now if no step made them: the verification below reads them)
    # and pageable groups: kept, so the next turn's resumption makes neither (§5.13)
    ends, pageable = prep.ends, getattr(prep, "all_pageable", None)
    marks = vars(prep).get("marks")
    cost += last_turns.carried_bytes(ends, pageable, marks)
    if None in prep.raw[verified:]:     # never as a rule: the groups to verify need their bytes
        prep.fill(range(verified, len(prep.raw)))
    # its own list: the request's (its upstream bytes are joined from it) stays whole
    entry = LastTurn(raw, head, prep.items, prep.groups, list(prep.raw), prep.inner, ends, pages,
                     blocks, walks, verified, prior.brackets, cost, sizes, walk_bytes, pageable, marks)
    if _verified(entry, len(prep.groups) - 1) < 1:     # all but the last: the most a turn shares
        memory.forget(key)      # no group stands in the body as the edge encodes it: nothing to reuse
        return
    entry.cost -= _slim(entry, prep)
    memory.put(key, entry)


#: What a group's bytes hold between their brackets
_INNER = slice(1, -1)


def _slim(entry: LastTurn, prep) -> int:
    """Hold the verified groups' bytes once (§5.13): as views of the block pages' bodies
    (a block's groups, comma-joined: the body between its brackets) and of the other
    groups' own bytes, in order (``LastTurn.pieces``); the body itself from the first
    group past them on; no bytes of their own for the groups inside a block page.
    Returns the bytes the entry no longer holds."""
    n_ok = min(entry.verified, len(entry.groups) - 1)
    group_raw, ends, inner = entry.group_raw, entry.ends, entry.inner
    pieces, end, spans = [], [], []
    g = 0

    def own(lo: int, hi: int) -> None:      # groups lo..hi-1, a piece each
        if None in group_raw[lo:hi]:        # inside a last turn's block no plan made again
            prep.fill(range(lo, hi))
            group_raw[lo:hi] = prep.raw[lo:hi]
        pieces.extend(map(getitem, map(memoryview, group_raw[lo:hi]), repeat(_INNER)))
        end.extend(range(lo + 1, hi + 1))

    for (a, b), page in sorted(entry.blocks.items()):
        if a < g or b >= n_ok:      # over a block taken (a fallback's), or past the verified groups
            continue
        own(g, a)
        pieces.append(memoryview(page.body)[_INNER])
        end.append(b + 1)
        spans.append((a, b))
        group_raw[a:b + 1] = repeat(None, b - a + 1)
        g = b + 1
    own(g, n_ok)
    at0 = len(entry.head)
    entry.pieces, entry.piece_end = pieces, end
    entry.piece_at = [at0] + [at0 + ends[e - 1] for e in end[:-1]]
    entry.piece_comma = list(map(add, entry.piece_at, map(len, pieces)))
    entry.tail_at = at0 + (ends[n_ok - 1] if n_ok else 0)
    raw, entry.raw = entry.raw, entry.raw[entry.tail_at:]
    # the groups inside a block hold nothing of their own, but those a single page holds
    inside = sum(ends[b] - (ends[a - 1] if a else 0) + (b - a + 1) * (1 + _BYTES) for a, b in spans)
    firsts = [a for a, _ in spans]
    for gi, p in entry.pages.items():
        k = bisect_right(firsts, gi) - 1
        if k >= 0 and gi <= spans[k][1]:
            inside -= len(p.body) + _BYTES
    return getsizeof(raw) - getsizeof(entry.raw) + inside - last_turns._PER_PIECE * len(pieces)


#: A bytes object's header
_BYTES = getsizeof(b"")


def _head(body: dict, key: str) -> bytes:
    """The compact bytes a body's history follows: the fields before it, its key, ``[``."""
    before = {}
    for k, v in body.items():
        if k == key:
            break
        before[k] = v
    lead = compact(before)[1:-1] + b"," if before else b""
    return b"{" + lead + compact(key) + b":["
