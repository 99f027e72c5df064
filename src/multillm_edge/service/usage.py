"""A turn's usage, recorded after the answer (docs/design.md §4.1).

`meter` watches the answer as it is relayed (formats/usage.py reads the provider's own
figures from it) and, once it has ended, hands ONE upsert to the platform's `wait_until`:
the response never waits for it, and a failed write costs the figures of that turn,
never the answer. Only a 2xx answer is metered (`meters`): a provider's error is not
billed, and an estimate would charge the player for the provider's failure.
"""

from __future__ import annotations

from ..base.errors import StorageError
from ..base.platform import Database, Platform
from ..formats import get as format_module
from ..formats.usage import Meter, Usage
from ..storage import store


def meters(status: int) -> bool:
    return 200 <= status < 300


def meter(platform: Platform, db: Database, fmt: str, sse: bool, sent_bytes: int,
          principal: str, model: str, now: int) -> Meter:
    """A Meter whose end schedules the turn's one upsert (principal, UTC day of `now`, model)."""
    day = store.utc_day(now)

    def done(usage: Usage) -> None:
        platform.wait_until(record(platform, db, principal, day, model, usage))

    return Meter(format_module(fmt), sse, sent_bytes, done)


async def record(platform: Platform, db: Database, principal: str, day: str, model: str,
                 usage: Usage) -> None:
    """The upsert; a storage failure is one log line (its kind only) and loses the turn's
    figures. Anything else escapes to the runtime, which logs the rejected waitUntil."""
    try:
        await store.record_usage(db, principal, day, model, usage)
    except StorageError:
        platform.log({"route": "usage", "level": "warning", "error": "usage_not_recorded"})
