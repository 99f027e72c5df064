"""Wall time of an awaited storage or provider step, for the request's log line
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
