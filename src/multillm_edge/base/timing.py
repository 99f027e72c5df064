"""One request's log record: counts, wall times of awaited steps and CPU of pure steps
(docs/design.md §8: timings and counts, never content)."""

from __future__ import annotations

import time
from contextlib import contextmanager


@contextmanager
def timed(into: dict, name: str):
    """Add the milliseconds the block takes to `into[name]`: summed, so a fallback's
    store adds to the first candidate's."""
    started = time.monotonic()
    try:
        yield
    finally:
        spent = (time.monotonic() - started) * 1000
        into[name] = round(into.get(name, 0) + spent, 1)


def cpu_spent(into: dict, phase: str, since: float) -> None:
    """Add the CPU since `since` (a perf_counter) to `cpu_<phase>_ms` in `into`. Only
    measured across pure-CPU sections: an await's wait is not the Worker's CPU."""
    key = f"cpu_{phase}_ms"
    into[key] = round(into.get(key, 0) + (time.perf_counter() - since) * 1000, 2)


class LogRecord:
    """What one request tells its log line, passed down instead of the request: the
    services write counts and timings here, app.handle logs ``notes`` once."""
    __slots__ = ("notes",)

    def __init__(self, notes: dict | None = None):
        self.notes = {} if notes is None else notes

    def note(self, **fields) -> None:
        self.notes.update(fields)

    def count(self, name: str, n: int = 1) -> None:
        if n:
            self.notes[name] = self.notes.get(name, 0) + n

    def wall(self, name: str):
        """``with record.wall("r2_ms"):`` an awaited step's milliseconds, summed."""
        return timed(self.notes, name)

    def cpu(self, phase: str) -> "_Cpu":
        """``with record.cpu("plan"):`` a pure step's CPU into ``cpu_<phase>_ms``."""
        return _Cpu(self.notes, phase)


class _Cpu:
    """A plain context manager: a generator-based one would keep the frame of an error
    raised inside it (and the request it references) in a reference cycle."""
    __slots__ = ("notes", "phase", "started")

    def __init__(self, notes: dict, phase: str):
        self.notes, self.phase = notes, phase

    def __enter__(self):
        self.started = time.perf_counter()

    def __exit__(self, *exc) -> None:
        cpu_spent(self.notes, self.phase, self.started)
