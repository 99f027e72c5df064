"""What an isolate keeps of each session's last turn (docs/design.md §5.13): the raw
body and what the edge derived from it — the parsed history, its groups, each group's
bytes and the pages made of them — so that the session's next turn redoes only what
follows the bytes the two bodies share (core/resume.py).

Keyed by (principal key digest, session id, wire format): another principal, session
or format never meets an entry. Bounded in bytes (``MAX_BYTES``, an estimate from the
raw body's length, ``COST_PER_BYTE``), least recently used evicted first. Nothing here
is written anywhere: it lives and dies with the isolate.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

#: The bound of all entries together, well inside a Worker's 128 MB (§5.13).
MAX_BYTES = 24 * 1024 * 1024
#: Memory an entry holds per byte of its raw body: the body itself, each group's bytes
#: (as long again) and the parsed history's objects (measured in CPython: 5.5–5.7 with
#: the body; tests/unit/test_resume.py checks this covers it).
COST_PER_BYTE = 8
#: A body whose estimate exceeds this share of the bound is not kept (it would evict
#: every other session for one turn).
MAX_SHARE = 0.5


@dataclass
class LastTurn:
    """One session's last turn: its ``raw`` body, the ``head`` its history follows (the
    compact encoding of the fields before it, then the history's key and ``[``), the
    parsed ``items``, their ``groups``, each group's bytes ``group_raw`` (a compact
    list), ``inner`` sizes and ``ends`` (cumulative, with a comma each; None until the
    first turn resumed from it needs them), the pages made
    (``pages``: group -> Page, ``blocks``: (first, last) -> Page), the plan's ``walks``
    to a fit (core/paging.Walk, by budget and rule), ``verified``: how many
    leading groups are known to stand in ``raw`` exactly as ``head`` and their bytes
    (−1: ``raw`` does not start with ``head``), ``brackets``: the body's bracket bytes,
    exactly (core/validation.py), ``cost``: its estimated memory; ``pageable``: its
    groups a plan may page (protected or not) and its latest user turn, for the next
    turn's groups it shares (core/prepared.py)."""
    raw: bytes
    head: bytes
    items: list
    groups: list
    group_raw: list
    inner: list
    ends: list | None
    pages: dict
    blocks: dict
    walks: dict
    verified: int
    brackets: int
    cost: int
    pageable: tuple | None = None   # (its pageable groups, protected or not; its latest user turn)


class LastTurns:
    """The isolate's last turns, least recently used first."""

    def __init__(self, max_bytes: int = MAX_BYTES):
        self.max_bytes = max_bytes
        self.total = 0
        self._entries: OrderedDict = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key) -> LastTurn | None:
        last = self._entries.get(key)
        if last is not None:
            self._entries.move_to_end(key)
        return last

    def put(self, key, last: LastTurn) -> None:
        self.forget(key)
        if last.cost > self.max_bytes * MAX_SHARE:
            return
        self._entries[key] = last
        self.total += last.cost
        while self.total > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self.total -= old.cost

    def forget(self, key) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self.total -= old.cost

    def clear(self) -> None:
        self._entries.clear()
        self.total = 0


def cost(raw: bytes) -> int:
    return len(raw) * COST_PER_BYTE


#: The isolate's one memory of last turns.
LAST_TURNS = LastTurns()
