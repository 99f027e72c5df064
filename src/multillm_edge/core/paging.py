"""Reversible context paging: the plan (docs/design.md §5 steps 4-8).

Pure Python, stdlib only. Given a parsed request body in one of the three wire
formats and a byte budget, decide which complete, unprotected exchanges leave the
upstream body (oldest first, until it fits: each its own page, or a block of adjacent
ones in one page once the block is closed, docs/design.md §5.7), and build the upstream
body with one ``user`` marker per run of consecutive paged exchanges plus the
``multillm_context_retrieve`` tool schema.

Sizes are arithmetic over the prepared history (core/prepared.py explains how): paging
a group replaces its inner size by the marker's (whose text is a fixed prefix/suffix
plus the page ids joined by a fixed separator; JSON escaping is per character, so this
too is a sum; a group that closes a block of t groups replaces t handles by one, a
difference). ``Plan.size`` equals the byte length of ``Plan.body``'s compact
serialization exactly (tested).

Page bytes are ``pages.canonical_bytes(items)`` (produced here by the shared encoder,
tested equal; a block's are its groups' bytes joined, the same thing); ``sha256`` is over those bytes; the page id comes
from the caller's ``page_id_for(sha256_hex)`` (an HMAC in production, see pages.py).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Callable, NamedTuple
from operator import attrgetter, itemgetter
from zlib import crc32

from .. import formats as _formats
from . import anchors as _anchors, recall
from .config import MAX_PAGE_BYTES
from ..base.errors import EdgeError
from ..formats import breakpoints as _bp
from ..search.corpus import shared
from ..base.jsonbytes import compact, compact_with_list
from .prepared import (EDGE_FIELDS, HOLE, EncodedHistory, Page, Prepared, dumps,  # noqa: F401
                       strip_edge_fields, utf8_len)

@dataclass
class Plan:
    """What one candidate sends, from paging or compaction alike."""
    body: dict          # upstream body to send
    pages: list         # list[Page], in order of appearance (deduplicated by sha256)
    size: int           # bytes of the compact serialization of `body`
    budget: int
    dropped: int = 0    # exchanges compaction removed (never with pages)
    as_received: bool = False   # `body` is the request body itself: its bytes may go as sent
    # The body's history as bytes already made (the upstream bytes need no second
    # encoding of it); None: `encoded` encodes the whole body.
    history: EncodedHistory | None = None
    # ``superseded(byte_lengths)``: the one-exchange pages of the exchanges inside this
    # plan's blocks, of those lengths (what earlier turns stored before the block closed:
    # merging may rewrite them, docs/design.md §5.9); made only when called.
    superseded: Callable[[set], list] | None = None
    recall: list = field(default_factory=list)   # recall.Moment: quoted before the latest turn
    # where recall's message goes: (item, part) of the latest user turn (§6.2)
    recall_at: tuple | None = field(default=None, repr=False)
    fit: "Fit | None" = field(default=None, repr=False)    # what it pages (paged plans)

    def encoded(self, model: str | None = None) -> bytes:
        """``compact(body)``, naming ``model`` when given (the provider's name for it)."""
        body = self.body
        if model is not None and body.get("model") != model:
            body = {**body, "model": model}
        if self.history is None:
            return compact(body)
        return compact_with_list(body, self.history.key, self.history.joined())


def output_reservation(fmt: str, body: dict):
    """The request's max-tokens field for ``fmt``; None if absent."""
    return _formats.get(fmt).output_reservation(body)


def _id_len(page_id: str) -> int:
    """Serialized length of a page id inside the marker text (for a ``page_id_for``
    that does not declare one length for all its ids)."""
    return utf8_len(dumps(page_id)) - 2


def _window_error(budget: int, estimated: int, protected_bytes: int) -> EdgeError:
    return EdgeError(
        413, "context_window_exceeded",
        "This request exceeds the model's context window (maximum context length): "
        f"the estimated size is {estimated} bytes, the protected content plus page "
        f"handles need {protected_bytes} bytes, and the budget is {budget}. "
        "Shorten the conversation or its protected messages.",
        budget=budget, estimated_size=estimated, protected_bytes=protected_bytes)


def unpaged(prep: Prepared, budget: int) -> Plan:
    """The history as received; its bytes ready unless the body may go as sent."""
    if prep.base is prep.received:     # sent as received; encoded from its bytes if renamed
        return Plan(prep.base, [], prep.total, budget, as_received=True,
                    history=prep.kept_history() if prep.holey else None)
    return Plan(prep.base, [], prep.total, budget, history=prep.kept_history())


#: Blocks (docs/design.md §5.7): consecutive pageable exchanges stored as one page, named
#: by one handle. Boundaries are defined by content, so they stay put as the history
#: grows or an earlier exchange is edited: a block closes after an exchange whose bytes'
#: CRC-32 is a multiple of BLOCK_SPAN (one in 16 on average), after BLOCK_MAX_GROUPS
#: exchanges, or before an exchange that would take it over BLOCK_MAX_BYTES (half the
#: page limit: what one retrieval puts back into the model's window).
BLOCK_SPAN = 16
BLOCK_MAX_GROUPS = 64
BLOCK_MAX_BYTES = 32768
_UNPAGED = object()


class BlockRule(NamedTuple):
    """Where blocks close: a content boundary one exchange in ``span`` (1: no blocks),
    after ``max_groups`` exchanges, or before ``cap`` bytes."""
    span: int
    max_groups: int
    cap: int


def block_rule(max_page_bytes: int = MAX_PAGE_BYTES, span: int = BLOCK_SPAN,
               max_groups: int = BLOCK_MAX_GROUPS, max_bytes: int = BLOCK_MAX_BYTES) -> BlockRule:
    return BlockRule(span, max_groups, min(max_bytes, max_page_bytes))


#: Prompt cache (docs/design.md §5.7): with ``multillm_context_prompt_cache`` the paged
#: boundary stops only where a pageable exchange reaches a new grid line of the
#: history's bytes, one line every STEP_SHARE of the candidate's budget counted from
#: the conversation's start. Between two stops a turn sends the same marker and an
#: append-only window; a stop pages at most one step more than needed (bench_cache.py).
STEP_SHARE = 0.20


def step_bytes(budget: int) -> int:
    """The grid's spacing for a candidate of ``budget``."""
    return max(1, int(budget * STEP_SHARE))


class Fit(NamedTuple):
    """Paging the ``k`` oldest pageable groups is the first that fits (0: none does),
    at ``size`` bytes; ``blocks``: the closed blocks among them, ``(first, last)``
    positions in ``pageable``; ``least``: with the prompt cache's step, the first fit
    (what must be paged), when ``k`` is a later stop."""
    k: int
    size: int
    blocks: list
    least: "Fit | None" = None


def _fixed_id_len(prep: Prepared):
    """The one length of every page id in the marker text, when ``page_id_for``
    declares it (``prepared.PageIdFor``; base64url, nothing to escape): then no page is
    made before the plan knows which it needs, and none for a 413. None: each id is
    made and sized as the plan meets it."""
    return prep.id_length


_SIZE = itemgetter(1)      # a walk's fit's size less the base


class WalkState(NamedTuple):
    """What ``_fit``'s walk carries from one position to the next, as it was after a
    walk's ``k`` (§5.13): the sums as differences from paging nothing, the open run
    and block, and the prompt cache's last grid line."""
    d_units: int        # the history's inner bytes and handles, less paging nothing's
    d_groups: int       # its items (groups and markers), less paging nothing's
    prev: int | None    # the group paged last (its run goes on at prev + 1)
    seg: int | None     # position in ``pageable`` of the open block's first group
    seg_bytes: int      # the open block's bytes
    seg_ids: int        # its groups' handles' bytes
    synced: bool        # the run has passed a content boundary: blocks may open
    line: int           # the grid line the last paged group reached (§5.7)


class Walk(NamedTuple):
    """Where ``_fit`` returned, kept for the session's next turn (§5.13): at position
    ``k`` of ``pageable``, the body paging nothing then ``base`` bytes (its size with
    the tool and anchors: the fixed part, every group's bytes and a comma between
    each two), the walk's ``state`` after ``k`` (``WalkState``),
    its ``blocks`` and ``fits`` (``(k, size - base, blocks)``: each earlier fit that
    was no stop)."""
    k: int
    base: int
    state: tuple
    blocks: tuple
    fits: tuple
    pageable: list


def _resumable(prep: Prepared, key: tuple, base: int) -> Walk | None:
    """The last turn's walk for ``key``, when this one would walk the same way up to it:
    the same pageable groups through the one after ``k``, all reused from the last turn
    (their bytes, boundaries and grid lines), ids of one declared length, and a body no
    smaller (every earlier size grows alike: an earlier position that did not fit or
    stop still does not). The window's anchor is never among them: it is on the last
    pageable group or after it (anchors.window_group), and ``k`` has one after it."""
    walks, reused = prep.walked
    walk = walks.get(key)
    if walk is None or base < walk.base or prep.id_length is None:
        return None
    k, pageable = walk.k, prep.pageable
    if k + 1 >= len(walk.pageable) or k + 1 >= len(pageable) or pageable[k + 1] >= reused \
            or pageable[:k + 2] != walk.pageable[:k + 2]:
        return None
    return walk


#: A walk from the start: nothing paged
_FRESH = WalkState(0, 0, None, None, 0, 0, False, 0)


def _start(prep: Prepared, key: tuple, base: int, fixed: int, budget: int):
    """Where ``_fit``'s walk for ``key`` starts: ``(position, WalkState, blocks, fits,
    first fit, size)`` — from nothing, or on from where the last turn's walk returned
    (§5.13, ``_resumable``: its fits that still fit kept) — or that walk's ``Fit`` when
    its return fits again (a stop, with a step), kept for this turn."""
    walk = _resumable(prep, key, base) if prep.walked[0] else None
    if walk is None:
        return 0, _FRESH, [], [], None, prep.total
    blocks, fits = list(walk.blocks), list(walk.fits)
    if fits and max(map(_SIZE, fits)) + base > budget:     # all of them, as a rule: in C
        fits = [f for f in fits if f[1] + base <= budget]
    first = Fit(fits[0][0] + 1, fits[0][1] + base, blocks[:fits[0][2]]) if fits else None
    n_units = len(prep.groups) + walk.state.d_groups
    size = fixed + prep.sum_inner + walk.state.d_units + (n_units - 1 if n_units else 0)
    if size <= budget:
        prep.walks[key] = walk._replace(base=base, fits=tuple(fits), pageable=prep.pageable)
        return Fit(walk.k + 1, size, blocks, first)
    return walk.k + 1, walk.state, blocks, fits, first, size


def _fit(prep: Prepared, budget: int, rule: BlockRule, step: int = 0,
         anch: _anchors.Anchors | None = None) -> Fit:
    """The first k that fits (``Fit``; with k == 0, ``size`` is with every pageable group
    paged). Each step is arithmetic: the group's handle joins its run's marker; when the
    group closes a block (two groups or more), the block's handles become one.
    ``step`` (prompt cache, §5.7): the first k from there that also ends on a stop
    (its last group reaches a grid line its predecessor did not); the first fit when no
    stop after it fits. ``anch``: the prompt cache's anchors, their bytes counted (§5.7).
    A turn resumed from the session's last one (§5.13) walks on from where the last
    walk returned (``Walk``): the same answer, in O(what is new)."""
    fixed = prep.fixed_with_tool + (anch.extra(False) if anch else 0)
    anchored = anch.group if anch else -1
    ends = prep.ends if step else None
    mbase, sep, inner, raw, pageable = (prep.marker_base, prep.marker_sep, prep.inner,
                                        prep.raw, prep.pageable)
    span, max_groups, cap = rule
    length = _fixed_id_len(prep)
    n = len(pageable)
    sum_inner, n_groups = prep.sum_inner, len(prep.groups)
    base = fixed + sum_inner + n_groups - 1
    key = (budget, step, rule, mbase, sep, length)
    started = _start(prep, key, base, fixed, budget)
    if type(started) is Fit:    # where the last walk returned fits again: nothing to walk
        return started
    start, state, blocks, fits, first, size = started
    # the walk's state in locals, read and written once per group (WalkState's fields)
    ds, dn, prev, seg, seg_bytes, seg_ids, synced, line = state
    sum_units, n_units = sum_inner + ds, n_groups + dn
    prep.fill(pageable[start:])     # the walk reads the bytes of each group it pages
    for k, gi in enumerate(pageable[start:] if start else pageable, start):
        il = length if length is not None else _id_len(prep.pages([gi])[0].page_id)
        if prev is not None and gi == prev + 1:   # extends the current run: same marker
            sum_units += sep + il - inner[gi]
            n_units -= 1
        else:                    # a new run: a new marker replaces the group
            sum_units += mbase + il - inner[gi]
            seg, synced = None, False
        prev = gi
        if gi == anchored:       # the window's anchor goes with its page
            fixed = prep.fixed_with_tool + anch.extra(True)
            key = None           # sizes from here on differ: no walk kept
        boundary = crc32(raw[gi]) % span == 0
        if not synced:
            # A run's head, up to its first boundary, is paged one exchange a page: where
            # a run starts moves when a client's window leaves out its oldest exchanges,
            # and a block cut from there would be new bytes at every turn.
            synced = boundary
        else:
            if seg is None:
                seg, seg_bytes, seg_ids = k, inner[gi] + 2, il
            else:
                seg_bytes += inner[gi] + 1
                seg_ids += il
            nxt = pageable[k + 1] if k + 1 < n else -1
            if (boundary or k - seg + 1 >= max_groups
                    or (nxt == gi + 1 and seg_bytes + inner[nxt] + 1 > cap)):
                if k > seg:          # a block of two groups or more: one handle for all
                    bl = length if length is not None else _id_len(
                        prep.block_page(pageable[seg], gi).page_id)
                    sum_units += bl - seg_ids - (k - seg) * sep
                    blocks.append((seg, k))
                seg = None
        size = fixed + sum_units + (n_units - 1 if n_units else 0)
        if step:
            stop, line = ends[gi] // step > line, ends[gi] // step
            if size <= budget and not stop:
                first = first or Fit(k + 1, size, list(blocks))
                fits.append((k, size - base, len(blocks)))
                continue
        if size <= budget:
            if key is not None:
                prep.walks[key] = Walk(k, base, WalkState(sum_units - sum_inner, n_units - n_groups, prev,
                                                          seg, seg_bytes, seg_ids, synced, line),
                                       tuple(blocks), tuple(fits), pageable)
            return Fit(k + 1, size, blocks, first)
    return first or Fit(0, size, blocks)


def _plan(prep: Prepared, budget: int, max_page_bytes: int, rule: BlockRule,
          fit: Fit | None = None, step: int = 0, anch: _anchors.Anchors | None = None) -> Plan:
    """The plan for ``budget`` (``fit``: its ``_fit``, when already made; ``step``: the
    prompt cache's grid, and ``anch`` its anchors, §5.7)."""
    if prep.total <= budget:
        return unpaged(prep, budget)
    if not prep.pageable:
        raise _window_error(budget, prep.total, prep.total)
    k, size, blocks, least = fit or _fit(prep, budget, rule, step, anch)
    if not k:
        raise _window_error(budget, prep.total, size)
    prefix = _prefix_kept(prep, k, blocks)
    if prefix is None:
        prefix = _paged_prefix(prep, k, blocks, least, budget, max_page_bytes)
        if isinstance(prefix, Fit):         # a page over the limit only the step needs
            return _plan(prep, budget, max_page_bytes, rule, prefix, anch=anch)
    plan = _build(prep, prefix, size, budget, anch)
    plan.fit = Fit(k, size, blocks)
    if prefix.inside:
        plan.superseded = _superseded(prep, prefix.inside)
    return plan


class _Prefix(NamedTuple):
    """The upstream history up to the last paged group (``end``: the group after it),
    as ``_build`` makes it: its items (None where a run's marker goes), their parts
    (a group's index, or None for a marker), the pages in order, each run's (item,
    part, page ids), and the groups inside blocks. The same for a session's next turn
    when it pages the same groups the same way, all reused (§5.13): kept with its walks."""
    end: int
    k: int
    items: list
    parts: list
    pages: list
    runs: list
    inside: list
    pageable: list


def _prefix_kept(prep: Prepared, k: int, blocks: list):
    """The last turn's ``_Prefix`` for this fit: the same pageable groups up to it, all
    reused (their items, bytes and pages are the last turn's), else None."""
    key = ("prefix", k, tuple(blocks))
    kept = prep.walked[0].get(key)
    pageable = prep.pageable
    if kept is None or pageable[k - 1] >= prep.walked[1] or pageable[:k] != kept.pageable[:k]:
        return None
    prep.walks[key] = kept
    return kept


def _paged_prefix(prep: Prepared, k: int, blocks: list, least, budget: int, max_page_bytes: int):
    """The ``_Prefix`` of paging ``pageable[:k]`` with ``blocks``; ``least`` (a Fit)
    when a page is over the limit and there is a fit without the step to take."""
    pageable = prep.pageable
    chosen = pageable[:k]
    inner = prep.inner      # a page of one group: its bytes and their brackets
    if max(map(inner.__getitem__, chosen)) + 2 > max_page_bytes:
        oversize = next(inner[gi] + 2 for gi in chosen if inner[gi] + 2 > max_page_bytes)
        if least is not None:       # only the step needs it: no step
            return least
        raise EdgeError(
            413, "context_page_too_large",
            "This request exceeds the model's context window (maximum context length) "
            f"and fitting it would need a stored page of {oversize} bytes, "
            f"over the {max_page_bytes}-byte page limit.",
            budget=budget, estimated_size=prep.total, page_bytes=oversize,
            max_page_bytes=max_page_bytes)
    covered: dict = {}           # group -> its block's page (first group) or None (the rest)
    for a, b in blocks:
        covered[pageable[a]] = prep.block_page(pageable[a], pageable[b])
        covered.update(dict.fromkeys(pageable[a + 1:b + 1]))
    singles = [gi for gi in chosen if gi not in covered] if covered else chosen
    by_group = dict(zip(singles, prep.pages(singles)))
    by_group.update(covered)
    end = chosen[-1] + 1
    items, parts, pages, runs = [], [], [], []
    _walk(prep, by_group, 0, end, items, parts, pages, runs)
    prefix = _Prefix(end, k, items, parts, pages, runs, list(covered), pageable)
    prep.walks[("prefix", k, tuple(blocks))] = prefix
    return prefix


def _superseded(prep: Prepared, inside: list) -> Callable[[set], list]:
    def pages(lengths: set) -> list:
        inner = prep.inner
        return prep.pages([gi for gi in inside if inner[gi] + 2 in lengths])
    return pages


def _walk(prep: Prepared, chosen: dict, lo: int, hi: int, out_items: list, parts: list,
          pages: list, runs: list) -> None:
    """Groups ``lo:hi`` of the history into ``out_items`` and ``parts``: a paged
    group's page id joins its run (a new run leaves None where its marker goes), an
    unpaged group's items and index go as they are (``chosen``: group -> its page, or
    None inside a block: its handle is already in the run)."""
    groups, items = prep.groups, prep.items
    seen = set()
    run_ids = None
    for gi in range(lo, hi):
        p = chosen.get(gi, _UNPAGED)
        if p is None:
            continue
        if p is not _UNPAGED:
            if p.sha256 not in seen:
                seen.add(p.sha256)
                pages.append(p)
            if run_ids is None:
                run_ids = []
                runs.append((len(out_items), len(parts), run_ids))
                out_items.append(None)
                parts.append(None)
            run_ids.append(p.page_id)
        else:
            run_ids = None
            g = groups[gi]
            if items[g.start] is HOLE:      # held as bytes only by the kept turn (§5.13)
                prep.fill_items((gi,))
            out_items.extend(items[g.start:g.end])
            parts.append(gi)


def _paged(prefix: _Prefix, gi: int) -> bool:
    """Whether group ``gi`` is one of those ``prefix`` pages (alone or in a block)."""
    at = bisect_left(prefix.pageable, gi, 0, prefix.k)
    return at < prefix.k and prefix.pageable[at] == gi


def _build(prep: Prepared, prefix: _Prefix, size: int, budget: int,
           anch: _anchors.Anchors | None = None) -> Plan:
    """The plan: ``prefix`` (the history up to the last paged group), then every group
    after it as it is — recall's place before the latest user turn, the window's anchor
    (§5.7) — and each run's marker."""
    mod = prep.mod
    items = prep.items
    groups = prep.groups
    out_items, parts = prefix.items[:], prefix.parts[:]      # in C: the prefix is kept
    latest, recall_at = prep.latest, None
    window_paged = anch is not None and _paged(prefix, anch.group)
    anchored = anch.group if anch and anch.on_window(window_paged) else -1
    lo, n_groups = prefix.end, len(groups)
    if lo < n_groups and prep.holey and HOLE in items[groups[lo].start:]:
        prep.fill_items(range(lo, n_groups))    # held as bytes only by the kept turn (§5.13)
    # the groups after the prefix as they are, in runs of C slices (groups are
    # consecutive): cut only at recall's place and at the window's anchor
    for gi in sorted({gi for gi in (latest, anchored) if gi is not None and lo <= gi < n_groups}):
        out_items.extend(items[groups[lo].start:groups[gi].start])
        parts += range(lo, gi)
        g, lo = groups[gi], gi + 1
        if gi == latest:
            recall_at = (len(out_items), len(parts))
        if gi == anchored:   # the window's anchor: upstream only, its page is unchanged
            out_items.extend(items[g.start:g.end - 1])
            out_items.append(anch.item)
            parts.append(anch.tail)
        else:
            out_items.extend(items[g.start:g.end])
            parts.append(gi)
    if lo < n_groups:
        out_items.extend(items[groups[lo].start:groups[-1].end])
        parts += range(lo, n_groups)
    runs = prefix.runs
    on_marker = anch is not None and anch.on_marker(window_paged)
    for n, (at, part, ids) in enumerate(runs, 1):
        text = _formats.marker_text(ids, prep.search)
        m = _bp.marker(text) if on_marker and n == len(runs) else _formats.marker(text)
        out_items[at] = m
        parts[part] = dumps(m).encode("utf-8")
    out = dict(prep.base)
    out[mod.ITEMS_KEY] = out_items
    mod.add_tool(out, prep.search)
    return Plan(out, list(prefix.pages), size, budget, history=prep.history(parts), recall_at=recall_at)


# -- recall (docs/design.md §6.2) ----------------------------------------------------

def _plan_recalling(prep: Prepared, budget: int, max_page_bytes: int, rule: BlockRule,
                    query: str) -> Plan:
    """A paged plan that quotes the moments recall chooses before the latest user turn:
    fitted to the budget less the recall room (more of the history paged), the moments
    chosen among the exchanges that fit pages, within the room. When that cannot fit, or
    nothing is recalled, the plan without recall: recall never causes a 413 nor spends
    the room for nothing. One plan is built either way (the fits are arithmetic)."""
    if prep.total <= budget or not query or not prep.pageable:
        return _plan(prep, budget, max_page_bytes, rule)
    reserve = _recall_room(budget)
    fit = _fit(prep, budget - reserve, rule)
    if not fit.k:
        return _plan(prep, budget, max_page_bytes, rule)
    moments = recall.choose(query, *_paged_kept(prep, fit), min(reserve, budget - fit.size),
                            _recall_size)
    if not moments:
        return _plan(prep, budget, max_page_bytes, rule)
    try:
        plan = _plan(prep, budget - reserve, max_page_bytes, rule, fit)
    except EdgeError as e:      # a page over the limit only this fit needs
        if e.status != 413:
            raise
        e.__traceback__ = plan = None    # no frame kept; a 413 is raised below, never chained
    if plan is None:
        return _plan(prep, budget, max_page_bytes, rule)
    _quote(prep, plan, moments)
    plan.budget = budget
    return plan


def _plan_recalling_cached(prep: Prepared, budget: int, max_page_bytes: int, rule: BlockRule,
                           query: str, anch: _anchors.Anchors | None = None) -> Plan:
    """Recall with the prompt cache (§5.7, §6.2): the boundary is the stepped one,
    whatever is recalled (a pure function of the body), and the moments take the room
    the step leaves, up to recall's share."""
    plan = _plan(prep, budget, max_page_bytes, rule, step=step_bytes(budget), anch=anch)
    if plan.fit is None or not query:
        return plan
    room = min(_recall_room(budget), budget - plan.size)
    moments = recall.choose(query, *_paged_kept(prep, plan.fit), room, _recall_size)
    if moments:
        _quote(prep, plan, moments)
    return plan


def _paged_kept(prep: Prepared, fit: Fit) -> tuple:
    """(``_paged_exchanges(prep, fit)``, their keys), taken from the session's last turn
    when it paged the same way (§5.13): the same positions and blocks, the same pageable
    groups up to them, all reused (their items, bytes and pages are the last turn's; the
    keys' list too, never changed: a steady turn makes none); else those of the pages it
    shares with the last turn's (``_paged_before``) and the rest made."""
    key = ("paged", fit.k, tuple(fit.blocks))
    kept = prep.walked[0].get(key)
    pageable = prep.pageable
    if kept is not None and fit.k and pageable[fit.k - 1] < prep.walked[1] \
            and pageable[:fit.k] == kept[0][:fit.k]:
        prep.walks[key] = kept
        return list(kept[1]), kept[2]
    spans = _spans(fit.k, fit.blocks)
    kept_out, kept_keys, m = _paged_before(prep, spans)
    out = kept_out + _paged_of(prep, spans[m:])
    keys = kept_keys + list(map(recall.KEY, out[len(kept_out):]))
    prep.walks[key] = (pageable, out, keys)
    return list(out), keys


def _spans(k: int, blocks) -> list:
    """The ``(first, last)`` positions in ``pageable`` of each page a fit paging its
    first ``k`` with ``blocks`` makes, in order: its blocks, and a single between them."""
    spans, at = [], 0
    for a, b in blocks:
        spans.extend([(i, i) for i in range(at, a)])
        spans.append((a, b))
        at = b + 1
    spans.extend([(i, i) for i in range(at, k)])
    return spans


def _paged_before(prep: Prepared, spans: list) -> tuple:
    """(the ``Paged`` and keys the last turn made of this fit's first ``m`` pages, ``m``):
    a turn that crosses a step pages what the last one did and more (§5.7: blocks stay
    put), so the exchanges of the pages both make — the same groups, all reused, each
    page the same — are the last turn's (§5.13); the rest are made (O(what the step
    adds), not one ``Paged`` per paged exchange again). ``([], [], 0)`` when none."""
    walks, reused = prep.walked
    pageable, best = prep.pageable, ([], [], 0)
    for key, kept in walks.items():
        if key[0] != "paged" or type(kept) is not tuple:
            continue
        m = shared(_spans(key[1], key[2]), spans)
        p = spans[m - 1][1] + 1 if m else 0
        if m > best[2] and pageable[p - 1] < reused and pageable[:p] == kept[0][:p]:
            groups = prep.groups
            cut = list(map(_KIND, map(groups.__getitem__, pageable[:p]))).count(_formats.EXCHANGE)
            best = (kept[1][:cut], kept[2][:cut], m)
    return best


_KIND = attrgetter("kind")


def _paged_exchanges(prep: Prepared, fit: Fit) -> list:
    """The genuine exchanges ``fit`` pages, oldest first, as recall ranks them
    (``_paged_of`` its pages)."""
    return _paged_of(prep, _spans(fit.k, fit.blocks))


def _paged_of(prep: Prepared, spans: list) -> list:
    """The genuine exchanges of the pages at ``spans`` (``_spans``), oldest first, as recall ranks them: each
    with its page (its own or its block's: the pages this fit's plan is made of, so
    no digest is computed twice) and its item offset there; its analysis is cached
    under (the page's SHA-256, that offset) — or, the turn a block page closes over it,
    found under the key it had alone (its bytes: ``Paged.alone``, a view of the block
    page's body: the group holds no bytes of its own once kept, §5.13). Made page by
    page, each ``Paged`` with no Python frame (a steady turn makes one per paged exchange)."""
    groups, items, pageable = prep.groups, prep.items, prep.pageable
    singles = [pageable[a] for a, b in spans if a == b]
    own = dict(zip(singles, prep.pages(singles)))
    out, paged, exchange, ends, inner = [], tuple.__new__, _formats.EXCHANGE, prep.ends, prep.inner
    for a, b in spans:
        page = own[pageable[a]] if a == b else prep.block_page(pageable[a], pageable[b])
        sha, base = page.sha256, groups[pageable[a]].start
        alone = None
        if a != b:      # a group's bytes in the body: after its "[" and the groups before it
            body, first = memoryview(page.body), pageable[a]
            at = 1 - (ends[first - 1] if first else 0)
        for gi in pageable[a:b + 1]:
            g = groups[gi]
            if g.kind == exchange:
                offset = g.start - base
                if a != b:
                    s = at + (ends[gi - 1] if gi else 0)
                    alone = body[s:s + inner[gi]]
                # no items where the kept turn holds them as bytes only (§5.13): recall
                # parses them again when it reads them (an analysis not cached)
                its = None if items[g.start] is HOLE else items[g.start:g.end]
                out.append(paged(recall.Paged, (its, recall.doc_key(sha, offset), page, offset, alone)))
    return out


def _recall_size(text: str) -> int:
    """The bytes recall's message of ``text`` adds to a history (with its comma)."""
    return utf8_len(dumps(_formats.marker(text))) + 1


#: What recall's message costs around its text: the share is the moments' (§6.2).
_RECALL_ENVELOPE = _recall_size("") - 2


def _recall_room(budget: int) -> int:
    """The bytes recall may add for a candidate of ``budget``: its text's room and the
    message around it."""
    return recall.room(budget) + _RECALL_ENVELOPE


def _quote(prep: Prepared, plan: Plan, moments: list) -> None:
    """Insert recall's message before the latest user turn, after the window's history:
    what changes every turn stands after the stable prefix (§6.2)."""
    at, part = plan.recall_at
    m = _formats.marker(recall.text(moments))
    plan.body[prep.mod.ITEMS_KEY].insert(at, m)
    plan.history.parts.insert(part, dumps(m).encode("utf-8"))
    plan.size += _recall_size(m["content"])
    plan.recall = moments


def latest_user_text(prep: Prepared) -> str:
    """The request's latest genuine user text: what the player just said (a trailing
    tool result is no user turn, docs/design.md §5.6)."""
    groups = prep.groups
    last = next((g for g in reversed(groups) if g.kind == _formats.EXCHANGE), None)
    return recall.query_text(prep.items, None if last is None else last.start)



def plan_candidates(fmt: str, body: dict, budgets: list, page_id_for: Callable[[str], str],
                    *, max_page_bytes: int = MAX_PAGE_BYTES, strip: tuple = EDGE_FIELDS,
                    rule: tuple | None = None, search: bool = False,
                    recalling: bool = False, prompt_cache: bool = False,
                    breakpoints: list | None = None, prior=None) -> list:
    """One Plan or EdgeError per budget. Grouping and sizing are done once; a page with
    the same content is the same Page object across the plans. A 400 (invalid
    ``context_protected_indices``) concerns the request, not a candidate: raised.
    ``strip`` names the top-level fields the upstream body goes without; ``rule`` where
    blocks close (``block_rule(max_page_bytes)`` by default); ``search``: the search
    tool is declared too (docs/design.md §6.1: its schema and the marker's words);
    ``recalling``: each candidate quotes the moments recall chooses (§6.2);
    ``prompt_cache``: the boundary moves in steps, and the plans of candidates taking
    breakpoints carry the anchors (§5.7); ``breakpoints``: per budget, whether that
    candidate's provider declares ``cache_breakpoints`` (Messages takes them anyway);
    ``prior``: the session's last turn in this isolate (core/resume.py, §5.13)."""
    prep = Prepared(fmt, body, page_id_for, strip=strip, search=search, prior=prior)
    rule = rule or block_rule(max_page_bytes)
    query = latest_user_text(prep) if recalling else ""
    if not prompt_cache:
        if recalling:
            return per_budget(lambda b: _plan_recalling(prep, b, max_page_bytes, rule, query),
                              budgets)
        return per_budget(lambda b: _plan(prep, b, max_page_bytes, rule), budgets)
    takes = [_anchors.takes_breakpoints(prep.mod, d)
             for d in (breakpoints or [False] * len(budgets))]
    anch = _anchors.of(prep, _anchors.window_group(prep, recalling)) if any(takes) else None

    def cached(b: int, a: _anchors.Anchors | None) -> Plan:
        if recalling:
            return _plan_recalling_cached(prep, b, max_page_bytes, rule, query, a)
        return _plan(prep, b, max_page_bytes, rule, step=step_bytes(b), anch=a)

    def anchored(budget_takes: tuple) -> Plan:
        b, take = budget_takes
        if take:
            try:
                return cached(b, anch)
            except EdgeError as e:     # never a 413 for the anchors: planned without them
                if e.status != 413:
                    raise
                e.__traceback__ = None
        return cached(b, None)
    return per_budget(anchored, list(zip(budgets, takes)))


def per_budget(plan_one: Callable[[int], object], budgets: list) -> list:
    """``plan_one(budget)`` for each budget (or what stands for one). A 413 is that
    candidate's result (it does not fit there); any other error concerns the request
    itself and is raised."""
    out = []
    for b in budgets:
        try:
            out.append(plan_one(b))
        except EdgeError as e:
            if e.status != 413:
                raise
            # kept without its traceback: its frames hold `out`, which holds it (a cycle
            # that would pin the whole request body until the next cycle collection)
            out.append(e.with_traceback(None))
    return out

