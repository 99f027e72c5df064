"""The scheduled cleanup (docs/design.md §5.12), run by the Cron Trigger in wrangler.toml.

Deletes roleplay rows of `context_pages` that expired more than
EXPIRED_ROW_RETENTION_SECONDS ago (default 7 days), in bounded batches; managed rows
belong to the Flask side. R2 bodies are left to the bucket's lifecycle rule on
`context-pages/` (README). Then the `principal_requests` rows that left the request
window, and `principal_usage` rows of days before the last USAGE_RETENTION_DAYS UTC days
(default 90, today included), in bounded batches too (docs/design.md §4.1). One log
line, counts only.
"""

from __future__ import annotations

import time

from ..core import config
from . import store


async def scheduled_cleanup(platform) -> dict:
    """Run one cleanup; returns (and logs) its record."""
    started = time.monotonic()
    record: dict = {"route": "scheduled"}
    retention = config.expired_row_retention(platform.var("EXPIRED_ROW_RETENTION_SECONDS"))
    db = platform.db
    try:
        if db is None:
            record["error"] = "d1_unbound"
        else:
            purged = await store.purge_expired_pages(db, platform.now() - retention,
                                                     config.CLEANUP_BATCH_ROWS,
                                                     config.CLEANUP_MAX_BATCHES)
            record.update(deleted=purged.deleted, batches=purged.batches, more=purged.more)
            old = await store.purge_old_requests(db, platform.now(), config.CLEANUP_BATCH_ROWS,
                                                 config.CLEANUP_MAX_BATCHES)
            record.update(requests_deleted=old.deleted, requests_more=old.more)
            days = config.usage_retention_days(platform.var("USAGE_RETENTION_DAYS"))
            now = platform.now()
            oldest = store.utc_day(now - now % 86400 - (days - 1) * 86400)
            usage = await store.purge_usage(db, oldest, config.CLEANUP_BATCH_ROWS,
                                            config.CLEANUP_MAX_BATCHES)
            record.update(usage_deleted=usage.deleted, usage_batches=usage.batches,
                          usage_more=usage.more)
    except Exception as e:  # the type only: a cron run must log, never leak or crash silently
        record["error"] = type(e).__name__
    record["ms"] = round((time.monotonic() - started) * 1000, 1)
    platform.log(record)
    return record
