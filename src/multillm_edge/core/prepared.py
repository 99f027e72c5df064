"""The prepared history: grouping, protection and sizes, built once per request and
shared by paging and compaction (docs/design.md §5.5–5.7).

Sizes. The size of a body is the UTF-8 byte length of its compact serialization
(``jsonbytes.compact``). It is computed once, arithmetically: the body with an empty
history list (the "skeleton") is serialized once, and each group of items is serialized
once as a list (those bytes are also the page body when the group is paged). Size of a
body = skeleton + sum of the groups' inner sizes + one comma between groups. Nothing is
re-serialized per planning step: the cost is linear in the history size.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate, compress, repeat
from operator import and_ as _both, itemgetter, ne as _ne
from hashlib import sha256 as _sha256
from typing import NamedTuple, Protocol

from .. import formats as _formats
from ..base.errors import EdgeError, invalid_field
from ..formats import breakpoints as _bp

#: Request fields the edge reads itself and providers reject.
EDGE_FIELDS = ("capabilities", "context_protected_indices")

_KIND, _COMPLETE = itemgetter(2), itemgetter(3)       # a Group's, in C
_PLUS_ONE = (1).__add__
_SHA = itemgetter(1)      # Page.sha256


def _make_encode():
    """``json.dumps(o, ensure_ascii=False, separators=(",", ":"))`` without the per-call
    set-up: one C encoder (``_json.make_encoder``, what ``json.dumps`` builds on every
    call) reused for every group. Circular checks are off: parsed JSON has no cycles.
    Falls back to the stdlib encoder if the C accelerator is missing."""
    enc = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
    try:
        from json.encoder import c_make_encoder, encode_basestring
        if c_make_encoder is None:
            raise ImportError
        c = c_make_encoder(None, enc.default, encode_basestring, None, ":", ",",
                           False, False, True)
    except (ImportError, TypeError):
        return enc.encode, None
    join = "".join

    def encode(o):
        if isinstance(o, str):
            return encode_basestring(o)
        return join(c(o, 0))

    encode("probe")
    if encode([{"a": ["é", 1.5, None, True]}]) != enc.encode([{"a": ["é", 1.5, None, True]}]):
        return enc.encode, None
    return encode, c


_encode, _c_encoder = _make_encode()


def _group_bytes(items: list, groups: list) -> list:
    """Each group's items serialized as a list, in UTF-8 (its page body when paged).
    The C encoder is called inline: no Python frame per group."""
    c, join = _c_encoder, "".join
    if c is None:
        return [_encode(items[g[0]:g[1]]).encode("utf-8") for g in groups]
    return [join(c(items[g[0]:g[1]], 0)).encode("utf-8") for g in groups]


def utf8_len(s: str) -> int:
    """UTF-8 byte length of ``s`` (no encoding for ASCII text)."""
    return len(s) if s.isascii() else len(s.encode("utf-8"))


def dumps(obj) -> str:
    """The compact JSON text of ``obj`` (the page encoding); 400 if it is not JSON data."""
    try:
        return _encode(obj)
    except (TypeError, ValueError) as e:  # not JSON data (never from json.loads)
        raise EdgeError(400, "invalid_request", "Request body is not JSON data.") from e




def _surrogate_error() -> EdgeError:
    return EdgeError(400, "invalid_request", "Request body contains a lone surrogate.")


class Page(NamedTuple):
    """One stored page: an exchange's items (or a block's: several adjacent exchanges')
    as the bytes they are stored as. A tuple: made in C, no Python frame. It holds no
    parsed items: those are the request's, and a kept turn may hold a block's groups as
    bytes only (docs/design.md §5.13); ``items`` parses them again, for the few that
    read them (recall's quote of a moment)."""
    page_id: str
    sha256: str
    body: bytes

    @property
    def items(self) -> list:
        """The page's items, in order (parsed from its body: equal to the originals)."""
        return json.loads(self.body)


class _Hole:
    """What stands for each item of a group a kept turn holds as bytes only (§5.13):
    ``Prepared.fill_items`` parses them again; JSON cannot encode it (never sent)."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "HOLE"


HOLE = _Hole()


def parse_holes(items: list, groups: list, gis, group_bytes) -> list:
    """Groups ``gis`` whose items are holes given them again, in place, parsed from
    ``group_bytes(gi)`` (§5.13) → those groups."""
    done = []
    for gi in gis:
        g = groups[gi]
        if items[g.start] is HOLE:
            items[g.start:g.end] = json.loads(group_bytes(gi))
            done.append(gi)
    return done


_new_page = tuple.__new__   # _new_page(Page, (page_id, sha256, body)): no Python frame


@dataclass(frozen=True)
class EncodedHistory:
    """An upstream history list as bytes the request already holds: each part is a
    group's index into ``raw`` (its serialized bytes) or a marker's serialized bytes.
    Joined only for the candidate being sent: a plan per fallback model keeps a list of
    indices, not a copy of the history."""
    key: str        # the body's history field
    raw: list       # Prepared.raw, shared by every plan of the request
    parts: list
    fill: object = None     # Prepared.fill: the bytes of groups a kept block page holds

    def joined(self) -> bytes:
        """The list's items, comma-joined (what goes between its brackets)."""
        raw = self.raw
        try:
            return b",".join([raw[p][1:-1] if type(p) is int else p for p in self.parts])
        except TypeError:       # a group inside a kept block page, sent as it is (§5.13)
            self.fill([p for p in self.parts if type(p) is int])
            return b",".join([raw[p][1:-1] if type(p) is int else p for p in self.parts])


def protected_indices(body: dict) -> frozenset:
    """Validated ``context_protected_indices`` (absent or null -> empty)."""
    v = body.get("context_protected_indices")
    if v is None:
        return frozenset()
    if not isinstance(v, list) or not all(
            type(i) is int and i >= 0 for i in v):
        raise invalid_field("context_protected_indices",
                            "must be an array of non-negative integers")
    return frozenset(v)


def strip_edge_fields(body: dict, fields: tuple = EDGE_FIELDS) -> dict:
    """``body`` without ``fields`` (the same object if it has none of them)."""
    if any(k in body for k in fields):
        return {k: v for k, v in body.items() if k not in fields}
    return body


class PageIdFor(Protocol):
    """``sha256 hex -> page id`` for one request's pages (``PageSigner.page_ids``). A
    maker whose ids all have one length, in characters JSON never escapes, declares it
    as ``length``: the plan then sizes its markers before making any id."""
    def __call__(self, sha256: str) -> str: ...


def declared_id_length(page_id_for) -> int | None:
    """The ``length`` ``page_id_for`` declares (an int), else None."""
    length = getattr(page_id_for, "length", None)
    return length if isinstance(length, int) and not isinstance(length, bool) else None


class Prepared:
    """Everything budget-independent about one request body, fully built at once:
    ``base`` (the body without the stripped fields), ``items``, ``groups``, each group's
    serialized ``raw`` bytes and ``inner`` size, ``fixed`` (the skeleton's size),
    ``total``, ``pageable`` (group indices, oldest first) and the marker and tool sizes.
    Pages are made on demand (``pages``): only for the groups a plan sends."""

    def __init__(self, fmt: str, body: dict, page_id_for, *, strip: tuple = EDGE_FIELDS,
                 search: bool = False, prior=None):
        if not isinstance(body, dict):
            raise EdgeError(400, "invalid_request", "Request body must be a JSON object.")
        self.mod = _formats.get(fmt)
        self.received = body
        self.base = strip_edge_fields(body, strip)
        self.page_id_for = page_id_for
        self.id_length = declared_id_length(page_id_for)
        self.search = search       # the search tool is declared too (docs/design.md §6.1)
        # the session's kept turn whose groups this one reused: a group inside one of its
        # block pages has no bytes of its own there (None in ``raw``) until ``fill`` (§5.13)
        self.kept_turn = None
        self.filled: list = []     # the groups ``fill`` gave bytes
        self.filled_items: list = []       # the groups ``fill_items`` gave their items
        self.items = _formats.history(self.base, self.mod.ITEMS_KEY)
        self._pages: dict = {}     # group index -> Page
        self._blocks: dict = {}    # (first, last) group indices -> Page
        self._by_sha: dict = {}    # sha256 -> Page (dedupe: one object per content)
        # paging's walks to a fit (paging.Walk, by budget and rule), and the last turn's
        # with the count of its groups this one reused (§5.13)
        self.walks: dict = {}
        self.walked: tuple = ({}, 0)
        # (pageable groups protected or not, latest user turn, groups reused) of the last
        # turn, when this one resumes from it (§5.13)
        self.carried = None
        try:
            # ``prior`` (core/resume.Prior): what the session's last turn in this isolate
            # derived from the same leading groups, and where this one is kept (§5.13)
            self._measure(prior)
        except UnicodeEncodeError as e:
            raise _surrogate_error() from e
        self.sum_inner = sum(self.inner)
        self.total = self.fixed + self.sum_inner + max(len(self.groups) - 1, 0)
        self.pageable = self._pageable(protected_indices(body))
        self.marker_base = utf8_len(dumps(_formats.marker(_formats.marker_text((), search))))
        self.marker_sep = utf8_len(dumps(_formats.MARKER_SEP)) - 2
        if prior is not None:
            prior.adopt(self)

    def seed(self, pages: dict, blocks: dict, walks: dict, reused: int) -> None:
        """Pages the session's last turn made of the same ``reused`` leading groups, and
        its walks to a fit (§5.13)."""
        self.walked = (walks, reused)
        self._pages.update(pages)
        self._blocks.update(blocks)
        for made in (pages, blocks):        # in C: a steady turn seeds every page it sends
            ps = list(made.values())
            self._by_sha.update(zip(map(_SHA, ps), ps))

    def made(self) -> tuple:
        """(group -> Page, (first, last) -> block Page): the pages made so far."""
        return self._pages, self._blocks

    def _measure(self, prior) -> None:
        mod, items = self.mod, self.items
        if items is None:
            # No history list (a string or absent Responses `input`): one unpageable
            # whole. It fits, or it is a 413; never paged.
            self.skel, self.groups, self.raw, self.inner = self.base, [], [], []
        else:
            self.skel = {**self.base, mod.ITEMS_KEY: []}
            known = prior and prior.measured(self, items, mod.classify)
            if known:       # the leading groups as the last turn made them (§5.13)
                self.groups, self.raw, self.inner = known
                return self._fixed()
            self.groups = _formats.group_items(items, mod.classify)
            # each group serialized once, as a list: those bytes are its page body
            self.raw = _group_bytes(items, self.groups)
            self.inner = [len(b) - 2 for b in self.raw]
        self._fixed()

    def _fixed(self) -> None:
        self.fixed = utf8_len(dumps(self.skel))

    def _pageable(self, protected: frozenset) -> list:
        """Complete, unprotected groups before the latest genuine user turn, oldest first."""
        groups = self.groups
        last_user = next((gi for gi in range(len(groups) - 1, -1, -1)
                          if groups[gi].kind == _formats.EXCHANGE), 0)
        prot_groups = set()
        if protected and groups:
            starts = [g.start for g in groups]
            prot_groups = {bisect.bisect_right(starts, i) - 1 for i in protected if i < len(self.items)}
        # the latest genuine user turn: recall's message goes before it (§6.2)
        self.latest = last_user if groups and groups[last_user].kind == _formats.EXCHANGE else None
        # the groups a resumed turn shares with the last one are as they were (§5.13):
        # the last turn's list taken up to where either's latest user turn or the shared
        # groups end, only the rest checked
        start, head = 0, []
        if self.carried is not None:
            old, old_user, reused = self.carried
            start = min(reused, old_user, last_user)
            head = old[:bisect.bisect_left(old, start)]
        # in C (a steady turn's groups are many): kind not standalone, and complete
        rest = groups[start:last_user]
        ok = map(_both, map(_ne, map(_KIND, rest), repeat(_formats.STANDALONE)), map(_COMPLETE, rest))
        out = head + list(compress(range(start, last_user), ok))
        self.all_pageable = (out, last_user)      # protected or not: kept with the turn
        return [gi for gi in out if gi not in prot_groups] if prot_groups else out

    def history(self, parts: list):
        """The upstream history made of these groups (indices) and markers (bytes)."""
        return EncodedHistory(self.mod.ITEMS_KEY, self.raw, parts, self.fill)

    def fill(self, gis) -> None:
        """Give groups ``gis`` their bytes where the kept turn holds them only inside a
        block page (§5.13): made again from it, for what needs them (a page of their
        own, a plan sending them as they are, a walk from the start)."""
        raw, kept = self.raw, self.kept_turn
        if kept is None:
            return
        for gi in gis:
            if raw[gi] is None:
                raw[gi] = kept.group_bytes(gi)
                self.filled.append(gi)

    @property
    def holey(self) -> bool:
        """Whether some of the history's items are holes (``HOLE``): groups the kept
        turn held as bytes only, not parsed again yet (§5.13)."""
        return self.kept_turn is not None and self.kept_turn.holed > 0

    def fill_items(self, gis) -> None:
        """Give groups ``gis`` their parsed items where the kept turn held them as bytes
        only (§5.13): parsed again from their bytes (the edge's encoding of the items
        the body held, checked when that turn was kept), for what reads them."""
        if self.holey:
            self.filled_items += parse_holes(self.items, self.groups, gis, self._bytes_of)

    def _bytes_of(self, gi: int) -> bytes:
        """Group ``gi``'s bytes, given them first if the kept turn held them in a block."""
        self.fill((gi,))
        return self.raw[gi]

    def kept_history(self, skip=frozenset()):
        """The history but the groups in ``skip``; None when the body has no history list."""
        if self.items is None:
            return None
        return self.history([gi for gi in range(len(self.raw)) if gi not in skip])

    def pages(self, gis: list) -> list:
        """The pages of groups ``gis``, in order, each made once (its SHA-256, its id from
        ``page_id_for``); groups with equal bytes share one Page."""
        made = self._pages
        todo = [gi for gi in gis if gi not in made]
        if todo:
            self.fill(todo)
            raw, by_sha, page_id_for = self.raw, self._by_sha, self.page_id_for
            for gi, sha in zip(todo, [_sha256(raw[gi]).hexdigest() for gi in todo]):
                p = by_sha.get(sha)
                if p is None:
                    p = by_sha[sha] = _new_page(Page, (page_id_for(sha), sha, raw[gi]))
                made[gi] = p
        return [made[gi] for gi in gis]

    def block_page(self, first: int, last: int) -> Page:
        """The page of adjacent groups ``first..last`` (a block, docs/design.md §5.7): its
        body is the groups' bytes joined, which is exactly the compact serialization of
        their concatenated items (a list's bytes are its items' bytes, comma-joined)."""
        if first == last:
            return self.pages([first])[0]
        made = self._blocks
        p = made.get((first, last))
        if p is None:
            self.fill(range(first, last + 1))
            raw = self.raw
            body = b"[" + b",".join([raw[gi][1:-1] for gi in range(first, last + 1)]) + b"]"
            sha = _sha256(body).hexdigest()
            p = self._by_sha.get(sha)
            if p is None:
                p = self._by_sha[sha] = _new_page(Page, (self.page_id_for(sha), sha, body))
            made[(first, last)] = p
        return p

    @cached_property
    def ends(self) -> list:
        """Bytes of the history up to the end of each group (with its comma): where the
        prompt cache's grid lines fall (§5.7), fixed as the history grows."""
        return list(accumulate(map(_PLUS_ONE, self.inner)))       # in C

    @cached_property
    def marks(self) -> list:
        """The client's own breakpoints (``cache_control`` keys) in the history up to the
        end of each group, cumulative: what the anchors count first (§5.7). Made when
        the anchors first need them, then carried on as the history grows, as ``ends``
        (§5.13): a steady turn counts its new groups' only (in C)."""
        if None in self.raw:        # counted anew (once a session's anchors appear)
            self.fill(range(len(self.raw)))
        return list(accumulate(map(_bp.count, self.raw)))

    @cached_property
    def fixed_with_tool(self) -> int:
        """The skeleton's size once the context tools are added (paging only; once per
        request, whatever the number of fallback candidates)."""
        skel = dict(self.skel)
        self.mod.add_tool(skel, self.search)
        return utf8_len(dumps(skel))
