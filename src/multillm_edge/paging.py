"""Reversible context paging: the plan (docs/design.md §5 steps 4-8).

Pure Python, stdlib only. Given a parsed request body in one of the three wire
formats and a byte budget, decide which complete, unprotected exchanges leave the
upstream body (oldest first, one page per exchange, until it fits), and build the
upstream body with one ``user`` marker per run of consecutive paged exchanges plus the
``multillm_context_retrieve`` tool schema.

Sizes. The size of a body is the UTF-8 byte length of
``json.dumps(body, ensure_ascii=False, separators=(",", ":"))``. It is computed once,
arithmetically: the body with an empty history list (the "skeleton") is serialized
once, and each group of items is serialized once as a list (those bytes are also the
page body when the group is paged). Size of a body = skeleton + sum of the groups'
inner sizes + one comma between groups; paging a group replaces its inner size by the
marker's (whose text is a fixed prefix/suffix plus the page ids joined by a fixed
separator; JSON escaping is per character, so this too is a sum). Nothing is
re-serialized per paging step: the cost is linear in the history size. ``Plan.size``
equals ``body_size(Plan.body)`` exactly (tested).

Page bytes are ``pages.canonical_bytes(items)`` (produced here by the shared encoder,
tested equal); ``sha256`` is over those bytes; the page id comes
from the caller's ``page_id_for(sha256_hex)`` (an HMAC in production, see pages.py).
"""

from __future__ import annotations

import bisect
import hashlib
import json
from dataclasses import dataclass
from typing import Callable

from . import formats as _formats
from .config import MAX_PAGE_BYTES
from .errors import EdgeError, invalid_field

EDGE_FIELDS = ("capabilities", "context_protected_indices")



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
        return enc.encode
    join = "".join

    def encode(o):
        if isinstance(o, str):
            return encode_basestring(o)
        return join(c(o, 0))

    encode("probe")
    if encode([{"a": ["é", 1.5, None, True]}]) != enc.encode([{"a": ["é", 1.5, None, True]}]):
        return enc.encode
    return encode


_encode = _make_encode()


def _blen(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-8"))


def _dumps(obj) -> str:
    try:
        return _encode(obj)
    except (TypeError, ValueError) as e:  # not JSON data (never from json.loads)
        raise EdgeError(400, "invalid_request", "Request body is not JSON data.") from e


def body_size(body) -> int:
    """UTF-8 byte length of the compact serialization of ``body``."""
    try:
        return _blen(_dumps(body))
    except UnicodeEncodeError as e:
        raise _surrogate_error() from e


def _surrogate_error() -> EdgeError:
    return EdgeError(400, "invalid_request", "Request body contains a lone surrogate.")


@dataclass(frozen=True)
class Page:
    page_id: str
    sha256: str
    body: bytes
    items: list  # the original items, in order


_object_new = object.__new__


def _new_page(page_id: str, sha256: str, body: bytes, items: list) -> Page:
    # Same object as Page(...), without the frozen dataclass's four
    # object.__setattr__ calls (thousands of pages per request in Pyodide).
    p = _object_new(Page)
    p.__dict__.update(page_id=page_id, sha256=sha256, body=body, items=items)
    return p


@dataclass
class Plan:
    body: dict          # upstream body to send
    pages: list         # list[Page], in order of appearance (deduplicated by sha256)
    size: int           # bytes of the compact serialization of `body`
    budget: int


def output_reservation(fmt: str, body: dict):
    """The request's max-tokens field for ``fmt``; None if absent."""
    return _formats.get(fmt).output_reservation(body)


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


class _Prepared:
    """Everything budget-independent: grouping, protection, sizes. Built once."""

    def __init__(self, fmt: str, body: dict, page_id_for, *, strip: tuple = EDGE_FIELDS):
        if not isinstance(body, dict):
            raise EdgeError(400, "invalid_request", "Request body must be a JSON object.")
        self.mod = mod = _formats.get(fmt)
        protected = protected_indices(body)
        self.base = base = strip_edge_fields(body, strip)
        self.page_id_for = page_id_for
        items = mod.items(base)
        self.items = items
        self._pages: dict = {}     # group index -> Page
        self._by_sha: dict = {}    # sha256 -> Page (dedupe: one object per content)
        self._fixed_tool = None
        self._marker_base = None
        self._sep = 0
        try:
            if items is None:
                # No history list (a string or absent Responses `input`): one
                # unpageable whole. It fits, or it is a 413; never paged.
                self.skel = base
                self.fixed = _blen(_dumps(base))
                groups, raw, inner = [], [], []
            else:
                skel = dict(base)
                skel[mod.ITEMS_KEY] = []
                self.skel = skel
                self.fixed = _blen(_dumps(skel))
                groups = _formats.group_items(items, mod.classify)
                # each group serialized once, as a list: those bytes are its page body
                raw = [_encode(items[g.start:g.end]).encode("utf-8") for g in groups]
                inner = [len(b) - 2 for b in raw]
        except UnicodeEncodeError as e:
            raise _surrogate_error() from e
        self.groups = groups
        self.raw = raw
        self.inner = inner
        self.sum_inner = sum(inner)
        self.total = self.fixed + self.sum_inner + (len(groups) - 1 if groups else 0)
        # Protection: the latest group starting at a genuine user turn, and all after it.
        last_user = len(groups)
        for gi in range(len(groups) - 1, -1, -1):
            if groups[gi].kind == _formats.EXCHANGE:
                last_user = gi
                break
        else:
            last_user = 0  # no user turn at all: nothing is an older exchange
        prot_groups = set()
        if protected and groups:
            n = len(items)
            starts = [g.start for g in groups]
            for i in protected:
                if i < n:
                    prot_groups.add(bisect.bisect_right(starts, i) - 1)
        self.pageable = [gi for gi in range(last_user)
                         if groups[gi].kind != _formats.STANDALONE
                         and groups[gi].complete and gi not in prot_groups]

    # -- paging-only helpers (lazy: only needed when something is paged) ---------
    def page(self, gi: int) -> Page:
        p = self._pages.get(gi)
        if p is None:
            b = self.raw[gi]
            sha = hashlib.sha256(b).hexdigest()
            p = self._by_sha.get(sha)
            if p is None:
                g = self.groups[gi]
                p = _new_page(self.page_id_for(sha), sha, b, self.items[g.start:g.end])
                self._by_sha[sha] = p
            self._pages[gi] = p
        return p

    def fixed_with_tool(self) -> int:
        if self._fixed_tool is None:
            skel = dict(self.skel)
            self.mod.add_tool(skel)
            self._fixed_tool = _blen(_dumps(skel))
        return self._fixed_tool

    def marker_base(self) -> int:
        if self._marker_base is None:
            self._marker_base = _blen(_dumps(self.mod.marker(
                _formats.MARKER_PREFIX + _formats.MARKER_SUFFIX)))
            self._sep = _blen(_dumps(_formats.MARKER_SEP)) - 2
        return self._marker_base


def _id_len(page_id: str) -> int:
    return _blen(_dumps(page_id)) - 2


def _window_error(budget: int, estimated: int, protected_bytes: int) -> EdgeError:
    return EdgeError(
        413, "context_window_exceeded",
        "This request exceeds the model's context window (maximum context length): "
        f"the estimated size is {estimated} bytes, the protected content plus page "
        f"handles need {protected_bytes} bytes, and the budget is {budget}. "
        "Shorten the conversation or its protected messages.",
        budget=budget, estimated_size=estimated, protected_bytes=protected_bytes)


def _plan(prep: _Prepared, budget: int, max_page_bytes: int) -> Plan:
    if prep.total <= budget:
        return Plan(prep.base, [], prep.total, budget)
    if not prep.pageable:
        raise _window_error(budget, prep.total, prep.total)
    fixed = prep.fixed_with_tool()
    mbase = prep.marker_base()
    sep = prep._sep
    inner = prep.inner
    sum_units = prep.sum_inner
    n_units = len(prep.groups)
    prev = -2
    chosen = []
    oversize = None
    size = None
    for gi in prep.pageable:
        p = prep.page(gi)
        if oversize is None and len(p.body) > max_page_bytes:
            oversize = p
        sum_units -= inner[gi]
        if gi == prev + 1:       # extends the current run: same marker
            sum_units += sep + _id_len(p.page_id)
            n_units -= 1
        else:                    # a new run: a new marker replaces the group
            sum_units += mbase + _id_len(p.page_id)
        prev = gi
        chosen.append(gi)
        size = fixed + sum_units + (n_units - 1 if n_units else 0)
        if size <= budget:
            break
    else:
        raise _window_error(budget, prep.total, size)
    if oversize is not None:
        raise EdgeError(
            413, "context_page_too_large",
            "This request exceeds the model's context window (maximum context length) "
            f"and fitting it would need a stored page of {len(oversize.body)} bytes, "
            f"over the {max_page_bytes}-byte page limit.",
            budget=budget, estimated_size=prep.total, page_bytes=len(oversize.body),
            max_page_bytes=max_page_bytes)
    return _build(prep, chosen, size, budget)


def _build(prep: _Prepared, chosen: list, size: int, budget: int) -> Plan:
    mod = prep.mod
    items = prep.items
    groups = prep.groups
    chosen_set = set(chosen)
    out_items: list = []
    pages: list = []
    seen = set()
    run_ids = None
    run_at = -1

    def close_run():
        out_items[run_at] = mod.marker(_formats.marker_text(run_ids))

    for gi, g in enumerate(groups):
        if gi in chosen_set:
            p = prep.page(gi)
            if p.sha256 not in seen:
                seen.add(p.sha256)
                pages.append(p)
            if run_ids is None:
                run_ids = []
                run_at = len(out_items)
                out_items.append(None)
            run_ids.append(p.page_id)
        else:
            if run_ids is not None:
                close_run()
                run_ids = None
            out_items.extend(items[g.start:g.end])
    if run_ids is not None:
        close_run()
    out = dict(prep.base)
    out[mod.ITEMS_KEY] = out_items
    mod.add_tool(out)
    return Plan(out, pages, size, budget)


def plan_paging(fmt: str, body: dict, budget: int, page_id_for: Callable[[str], str],
                *, max_page_bytes: int = MAX_PAGE_BYTES) -> Plan:
    """Plan the upstream body for one budget. Raises EdgeError (400/413)."""
    return _plan(_Prepared(fmt, body, page_id_for), budget, max_page_bytes)


def plan_candidates(fmt: str, body: dict, budgets: list, page_id_for: Callable[[str], str],
                    *, max_page_bytes: int = MAX_PAGE_BYTES, strip: tuple = EDGE_FIELDS) -> list:
    """One Plan or EdgeError per budget. Grouping and sizing are done once; a page with
    the same content is the same Page object across the plans. A 400 (invalid
    ``context_protected_indices``) concerns the request, not a candidate: raised.
    ``strip`` names the top-level fields the upstream body goes without."""
    prep = _Prepared(fmt, body, page_id_for, strip=strip)
    return per_budget(lambda b: _plan(prep, b, max_page_bytes), budgets)


def per_budget(plan_one: Callable[[int], object], budgets: list) -> list:
    """``plan_one(budget)`` for each budget. A 413 is that candidate's result (it does
    not fit there); any other error concerns the request itself and is raised."""
    out = []
    for b in budgets:
        try:
            out.append(plan_one(b))
        except EdgeError as e:
            if e.status != 413:
                raise
            out.append(e)
    return out

