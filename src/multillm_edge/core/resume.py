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

from bisect import bisect_left, bisect_right
from itertools import accumulate, repeat
from operator import add, and_, getitem, itemgetter, sub
from sys import getsizeof

from .. import formats as _formats
from ..base.jsonbytes import compact
from ..formats import breakpoints as _bp
from . import last_turns
from .last_turns import LastTurn, LastTurns
from .prepared import HOLE, _PLUS_ONE, _group_bytes, parse_holes
from .validation import MAX_BRACKETS, bracket_count, check_body, parse_json_counted

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
            _unholed(items, last, j)        # grouped anew: every item parsed
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


def _unholed(items: list, last: LastTurn, j: int) -> None:
    """The items of ``last``'s first ``j`` groups that it held as bytes only (``HOLE``,
    §5.13) parsed again from those bytes, in place."""
    if last.holed:
        parse_holes(items, last.groups, range(j), last.group_bytes)


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
    """The most leading groups (all but the last at most) whose bytes, each with its
    comma, ``raw`` holds right after ``head``: the kept pieces compared in C (a block
    page's groups or one group each), then the groups of the first piece that differs,
    or those past the pieces in the kept body, by binary search."""
    if not raw.startswith(last.head):
        return 0
    pieces, end = last.pieces, last.piece_end
    if pieces:
        k = _pieces_held(last, raw)
        if k < len(pieces):
            done = end[k - 1] if k else 0
            return _most(raw, memoryview(pieces[k])[_INNER], last.piece_at[k], last.ends, done, end[k] - 1)
    done = end[-1] if pieces else 0
    at = _tail_group_at(last)
    return _most(raw, memoryview(last.raw), at, last.ends, done, len(last.groups) - 1, at - last.tail_at)


def _pieces_held(last: LastTurn, raw: bytes) -> int:
    """How many of the kept pieces, from the first, ``raw`` holds: each one's bytes
    after its "[" at ``piece_at``, then a comma where its "]" is. Each piece's bytes in
    raw are copied after a "[" into one buffer, then compared with the piece in C: wasm
    compares two 4-aligned buffers a word at a time and others byte by byte, ~3.5x
    slower; one buffer for all keeps the copy in cache (a new bytes object each cost
    3,000 exchanges' turn 0.15 ms more in Pyodide). A raw too short for a piece holds
    none from it on."""
    at, comma = last.piece_at, last.piece_comma
    n = bisect_left(comma, len(raw))
    if not n:
        return 0
    mv = memoryview(raw)
    buf = memoryview(bytearray(1 + max(map(sub, comma[:n], at))))
    buf[0] = _OPEN
    for k, piece, a, c in zip(range(n), last.pieces, at, comma):
        buf[1:c - a + 1] = mv[a:c]
        if raw[c] != _COMMA or not piece.startswith(buf[:c - a + 1]):
            return k
    return n


def _tail_group_at(last: LastTurn) -> int:
    """Where the first group past the pieces starts in the kept body."""
    done = last.piece_end[-1] if last.pieces else 0
    return len(last.head) + (last.ends[done - 1] if done else 0)


def _most(raw: bytes, kept, at: int, ends: list, done: int, most: int, lead: int = 0) -> int:
    """The most groups, from ``done`` up to ``most``, whose bytes with their commas
    ``raw`` holds at ``at`` as ``kept`` does from there (group ``done`` on, after
    ``lead`` bytes compared too: a compare from a 4-aligned place is a word compare in
    wasm): one compare for all of them, else a binary search."""
    base = ends[done - 1] if done else 0

    def holds(j: int) -> bool:      # groups done..j-1, each with its comma
        n = ends[j - 1] - base
        return raw.startswith(kept[:lead + n - 1], at - lead) and raw.startswith(b",", at + n - 1)

    if most <= done or holds(most):
        return max(most, done)
    lo, hi = done, most             # groups up to lo held; up to hi not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if holds(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _kept_from(last: LastTurn, cut: int) -> bytes:
    """The kept body's bytes from byte ``cut`` on (``cut`` past ``head``)."""
    if cut >= last.tail_at:
        return last.raw[cut - last.tail_at:]
    k = bisect_right(last.piece_at, cut) - 1
    inner = map(getitem, map(memoryview, last.pieces[k:]), repeat(_INNER))
    tail = memoryview(last.raw)[_tail_group_at(last) - last.tail_at:]
    return (b",".join(inner) + b"," + tail)[cut - last.piece_at[k]:]


def _verified(last: LastTurn, j: int) -> int:
    """The most of the first ``j`` groups the kept body holds exactly as ``head`` and
    their bytes, each with its comma: what proves the shared bytes parse to the kept
    items. Checked once per body, when it is kept (``last.verified`` grows from the
    groups a resumed turn reused), each group compared in place, in C: no copy of the
    history at the turn's peak."""
    v = last.verified
    if v < 0 or v >= j:
        return 0 if v < 0 else j
    old, ends = last.raw, last.ends
    if v == 0 and not old.startswith(last.head):
        last.verified = -1
        return 0
    groups = last.group_raw[v:j]
    at0 = len(last.head)        # where group g starts: after head and the groups before it
    starts = [at0 + (ends[v - 1] if v else 0)] + list(map(add, repeat(at0), ends[v:j - 1]))
    commas = list(map(add, starts, map(sub, map(len, groups), repeat(2))))
    held = list(map(and_, map(old.startswith, map(getitem, map(memoryview, groups), repeat(_INNER)), starts),
                    map(old.startswith, repeat(b","), commas)))
    last.verified = v + (held.index(False) if False in held else len(held))
    return last.verified


def keep(memory: LastTurns, key, raw: bytes, body: dict, prior: Prior) -> None:
    """Keep this turn for the session's next one (or forget the last: nothing to reuse)."""
    prep = prior.prep
    # a turn the cache would refuse is not counted at all (docs/design.md §5.13, §7.2)
    if (prep is None or prep.items is None or len(prep.groups) < 2
            or _least(raw, prep) > memory.max_bytes * last_turns.MAX_SHARE
            or memory.refuses(key, len(raw))):
        memory.forget(key)
        return
    try:
        head = _head(body, prep.mod.ITEMS_KEY)
    except UnicodeEncodeError:      # a lone surrogate in a field the plan strips
        memory.forget(key)
        return
    last = prior.last
    reused = prior.reused if prior.used else 0      # the groups taken from ``last`` as they were
    verified = reused if last is not None and head == last.head else 0
    # its own dicts: pages a later candidate makes are not the entry's (counted now)
    pages, blocks, walks = (dict(d) for d in (*prep.made(), prep.walks))
    sizes = last_turns.group_sizes(prep.raw, last.sizes if reused else (), reused)
    cost, walk_bytes = last_turns.held(raw, head, prep, sizes, pages, blocks, walks, last, reused)
    # its grid ends (made now if no step made them: the verification below reads them)
    # and pageable groups: kept, so the next turn's resumption makes neither (§5.13)
    ends, pageable = prep.ends, getattr(prep, "all_pageable", None)
    marks = vars(prep).get("marks")
    cost += last_turns.carried_bytes(ends, pageable, marks)
    if None in prep.raw[verified:]:     # never as a rule: the groups to verify need their bytes
        prep.fill(range(verified, len(prep.raw)))
    entry = LastTurn(raw, head, prep.items, prep.groups, prep.raw, prep.inner, ends, pages,
                     blocks, walks, verified, prior.brackets, cost, sizes, walk_bytes, pageable, marks)
    if _verified(entry, len(prep.groups) - 1) < 1:     # all but the last: the most a turn shares
        memory.forget(key)      # no group stands in the body as the edge encodes it: nothing to reuse
        return
    if _holds_once(memory, key, entry):
        entry.cost -= _slim(entry, prep, last, reused)
    elif prep.kept_turn is not None and prep.kept_turn.pieces:     # the last held them once
        prep.fill(range(len(prep.raw)))         # this one holds them all
        prep.fill_items(range(len(prep.groups)))
    memory.put(key, entry, len(raw))


def _least(raw: bytes, prep) -> int:
    """The fewest bytes an entry of this turn holds: its raw body, and its groups' own
    bytes unless it has block pages — then it may hold its history once (``_slim``: the
    pieces and the body past them are the body's bytes, §5.13)."""
    return len(raw) + (0 if prep.made()[1] else prep.sum_inner)


def _holds_once(memory: LastTurns, key, entry: LastTurn) -> bool:
    """Whether the entry holds its history once (§5.13): when whole it would be more
    than one session may hold (not kept) or evict another session's. Else it stays
    whole: its next turn compares the body in one aligned pass, where the pieces cost
    a steady turn ~0.4 ms more at 800 exchanges in Pyodide (bench/README.md)."""
    return (entry.cost > memory.max_bytes * last_turns.MAX_SHARE
            or memory.total - memory.cost_of(key) + entry.cost > memory.max_bytes)


#: What a group's bytes hold between their brackets
_INNER = slice(1, -1)
_OPEN, _COMMA = ord("["), ord(",")


def _slim(entry: LastTurn, prep, last: LastTurn | None, reused: int) -> int:
    """Hold the verified groups' bytes once (§5.13): up to the last block page over
    them, as the block pages' bodies (a block's groups, comma-joined, bracketed) and the
    other groups' own bytes, in order (``LastTurn.pieces``); the body itself from there
    on; no bytes of their own for the groups inside a block page. The last turn's
    pieces are taken as they stand when its blocks are this turn's and its groups all
    reused: a steady turn adds its new blocks only. Returns the bytes the entry no
    longer holds."""
    n_ok = min(entry.verified, len(entry.groups) - 1)
    # its own list: the request's (its upstream bytes are joined from it) stays whole
    entry.group_raw = group_raw = list(entry.group_raw)
    ends, blocks, at0 = entry.ends, entry.blocks, len(entry.head)
    sizes = entry.sizes
    kept = (last is not None and last.pieces and prep.walked[0] is last.walks
            and last.piece_end[-1] <= min(reused, n_ok))
    if kept:
        pieces, end, at, inside = list(last.pieces), list(last.piece_end), list(last.piece_at), last.inside
        new, holed = sorted(blocks.keys() - last.blocks.keys()), last.holed
    else:
        pieces, end, at, inside = [], [], [], 0
        new, holed = sorted(blocks), 0
    g, carried, spans = (end[-1] if end else 0), len(pieces), []
    for a, b in new:
        if a < g or b >= n_ok:      # over a block taken (a fallback's), or past the verified groups
            continue
        if g < a:       # the groups between: a piece each
            _own(group_raw, prep, g, a)
            pieces += group_raw[g:a]
            end += range(g + 1, a + 1)
        pieces.append(blocks[(a, b)].body)
        end.append(b + 1)
        inside += ends[b] - (ends[a - 1] if a else 0) + (b - a + 1) * (1 + _BYTES)
        holed += sizes[b] - (sizes[a - 1] if a else 0)
        group_raw[a:b + 1] = repeat(None, b - a + 1)
        spans.append((a, b))
        g = b + 1
    _own(group_raw, prep, g, len(group_raw))
    for k in range(carried, len(pieces)):
        first = end[k - 1] if k else 0
        at.append(at0 + (ends[first - 1] if first else 0))
    entry.pieces, entry.piece_end, entry.piece_at, entry.inside = pieces, end, at, inside
    # where each piece's comma is: the last turn's pieces' as they were (a steady turn's
    # pieces are all carried), the new ones' added
    entry.piece_comma = (last.piece_comma[:carried] if carried else []) + list(
        map(sub, map(add, at[carried:], map(len, pieces[carried:])), repeat(2)))
    held, pages = inside, entry.pages
    for gi in pages.keys() | set(prep.filled):     # a page's own, or made again this turn
        k = bisect_right(end, gi)
        if k < len(end) and end[k] - (end[k - 1] if k else 0) > 1:     # inside a block page
            group_raw[gi] = None
            if gi in pages:         # its single page holds its bytes
                held -= len(pages[gi].body) + _BYTES
    # the body from the first group past the pieces, less up to 3 bytes before it: a
    # 4-aligned start, which the next turn's compare keeps (Pyodide compares words then)
    at = at0 + (ends[g - 1] if g else 0)
    entry.tail_at = at - at % 4
    raw, entry.raw = entry.raw, entry.raw[entry.tail_at:]
    entry.holed = holed
    if kept:        # this turn's new block pages, and the groups it parsed again (all inside)
        _hole_items(entry, prep, spans + [(gi, gi) for gi in prep.filled_items], 0)
    else:
        _hole_items(entry, prep, _block_spans(end), reused)
    freed = held + holed + _paged_without_items(entry, last)
    return int(getsizeof(raw) - getsizeof(entry.raw) + freed - last_turns._PER_PIECE * len(pieces))


def _block_spans(end: list) -> list:
    """The ``(first, last)`` groups of each block page among the pieces."""
    return [(a, b - 1) for a, b in zip([0, *end[:-1]], end) if b - a > 1]


def _hole_items(entry: LastTurn, prep, spans: list, reused: int) -> None:
    """The parsed items of the groups inside the pieces' block pages let go (§5.13):
    ``HOLE`` in the entry's own copy of the list (the request's stays as it is) for the
    groups of ``spans``. ``reused``: the pieces were made anew over the groups a resumed
    turn shares with a kept one: its holes no block page covers now are parsed again
    first."""
    groups, items = entry.groups, prep.items
    if reused and prep.holey:
        covered = bytearray(len(groups))
        for a, b in _block_spans(entry.piece_end):
            covered[a:b + 1] = b"\x01" * (b - a + 1)
        prep.fill_items([gi for gi in range(reused) if not covered[gi]])
    entry.items = items = list(items)
    for a, b in spans:
        s, e = groups[a].start, groups[b].end
        items[s:e] = repeat(HOLE, e - s)


def _paged_without_items(entry: LastTurn, last: LastTurn | None) -> int:
    """Recall's walks (``(pageable, [recall.Paged], their keys)``) without the items of the exchanges
    inside block pages (their bytes are there: ``recall.items_of``), unless the last
    turn, held once, let them go already → the bytes that frees."""
    freed, counted = 0, entry.walk_bytes
    for key, w in entry.walks.items():
        if type(w) is not tuple or (last is not None and last.pieces and last.walks.get(key) is w):
            continue
        slim = (w[0], [p if p.alone is None or p.items is None else p._replace(items=None) for p in w[1]], w[2])
        entry.walks[key] = slim
        now = last_turns._walk_bytes(slim)
        freed += counted[key] - now
        counted[key] = now
    return freed


def _own(group_raw: list, prep, lo: int, hi: int) -> None:
    """Groups ``lo..hi-1`` with their own bytes (one inside a last turn's block page
    this turn made no block of: made again)."""
    if None in group_raw[lo:hi]:
        prep.fill(range(lo, hi))
        group_raw[lo:hi] = prep.raw[lo:hi]


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
