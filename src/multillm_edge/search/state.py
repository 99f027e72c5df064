"""What the search keeps in an isolate: one ``State`` (``STATE``) registers every memo
and the analyses cache, each bounded in the bytes it holds; ``STATE.reset()`` empties
them all, as in a new isolate (docs/design.md §6.2). Every part with ``held_bytes`` is
one of the isolate's caches (``State.caches``): the memory budget (service/budget.py,
§7.2) adds them up and shrinks them when requests need the room."""

from __future__ import annotations

from struct import calcsize
from sys import getsizeof

#: What a dict or list slot costs on top of the objects it holds (a hash, a key and a
#: value pointer, with the table's spare room: 40 bytes in 64-bit CPython).
SLOT = 5 * calcsize("P")


def sized(key, value) -> int:
    """The bytes an entry of a small key and value holds (their objects and a slot)."""
    return getsizeof(key) + getsizeof(value) + SLOT


class Memo(dict):
    """A dict of at most ``bound`` entries and ``max_bytes`` bytes (each entry's cost
    from ``size(key, value)``), emptied when full: a turn meets the same few keys
    again, so starting over costs little and bounds the memory."""
    __slots__ = ("bound", "max_bytes", "held", "size")

    def __init__(self, bound: int, max_bytes: int, size=sized):
        super().__init__()
        self.bound, self.max_bytes, self.size, self.held = bound, max_bytes, size, 0

    def keep(self, key, value):
        cost = self.size(key, value)
        if key in self:
            self.held -= self.size(key, self[key])
        elif len(self) >= self.bound or self.held + cost > self.max_bytes:
            self.clear()
        if cost <= self.max_bytes:
            self[key] = value
            self.held += cost
        return value

    def held_bytes(self) -> int:
        return getsizeof(self) + self.held if self else 0

    def shrink(self, to_bytes: int) -> None:
        """Forget the oldest entries until ``held_bytes() <= to_bytes``."""
        while self and self.held_bytes() > to_bytes:
            key = next(iter(self))
            self.held -= self.size(key, self.pop(key))
        if not self:
            self.clear()

    def clear(self) -> None:
        super().clear()
        self.held = 0


class State:
    """The isolate's memos by name; each has ``clear()``."""

    def __init__(self):
        self._parts: dict = {}

    def part(self, name: str, make):
        """The part named ``name``, made by ``make()`` the first time."""
        got = self._parts.get(name)
        if got is None:
            got = self._parts[name] = make()
        return got

    def bounds(self) -> dict:
        """name -> its bound in bytes (``max_bytes``, else its own ``bound``)."""
        return {name: getattr(p, "max_bytes", None) or p.bound for name, p in self._parts.items()}

    def caches(self) -> dict:
        """name -> every part that counts what it holds (``held_bytes``/``shrink``/
        ``max_bytes``, docs/design.md §7.2): the parts a budget governs."""
        return {name: p for name, p in self._parts.items() if hasattr(p, "held_bytes")}

    def reset(self) -> None:
        for p in self._parts.values():
            p.clear()


STATE = State()
