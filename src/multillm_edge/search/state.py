"""What the search keeps in an isolate: one ``State`` (``STATE``) registers every memo
and the analyses cache, each bounded; ``STATE.reset()`` empties them all, as in a new
isolate (docs/design.md §6.2)."""

from __future__ import annotations


class Memo(dict):
    """A dict of at most ``bound`` entries, emptied when full: a turn meets the same few
    keys again, so starting over costs little and bounds the memory."""
    __slots__ = ("bound",)

    def __init__(self, bound: int):
        super().__init__()
        self.bound = bound

    def keep(self, key, value):
        if len(self) >= self.bound and key not in self:
            self.clear()
        self[key] = value
        return value


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
        """name -> its bound (entries, or the cache's units)."""
        return {name: p.bound for name, p in self._parts.items()}

    def reset(self) -> None:
        for p in self._parts.values():
            p.clear()


STATE = State()
