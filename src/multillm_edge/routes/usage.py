"""`GET /v1/roleplay/usage` (docs/design.md §2, §4.1): the key's principal's token usage
per UTC day as the providers reported it, its limits and what is left of each.

401 without a key, then 400 for a bad `?days=N` (1 to USAGE_RETENTION_DAYS, default 7):
nothing is read for either; 503 without D1 or when its one read fails; 401 for an
unknown or revoked key, 403 without the chat grant. Dates are UTC, today first, every day of the window listed (a day
without a turn is zeros). A limit not set is null, and so is what remains of it.
`Cache-Control: private, no-store`: the figures are the key's, and of this moment.
"""

from __future__ import annotations

from ..base.errors import EdgeError, StorageError, StorageFailed, Unauthorized
from ..base.http import NO_CACHE, Incoming, Outgoing, json_response
from ..base.platform import Platform
from ..core import config
from ..service.access import check_principal, database, key_digest
from ..storage import store

DEFAULT_DAYS = 7
DAY = 86400


def requested_days(req: Incoming, most: int) -> int:
    values = req.query.get("days")
    if values is None:
        return min(DEFAULT_DAYS, most)
    text = values[0] if len(values) == 1 else ""
    if not (text.isascii() and text.isdigit() and len(text) <= 5 and 1 <= int(text) <= most):
        raise EdgeError(400, "invalid_request",
                        f"`days` must be a whole number from 1 to {most}.", param="days")
    return int(text)


async def usage_report(req: Incoming, platform: Platform) -> Outgoing:
    digest = key_digest(req)                                               # 401
    days = requested_days(req, config.usage_retention_days(platform.var("USAGE_RETENTION_DAYS")))
    db = database(platform)                                                # 503
    now = platform.now()
    today = now - now % DAY
    try:
        found = await store.load_usage(db, digest, store.utc_day(today - (days - 1) * DAY), now, today)
    except StorageError:
        raise StorageFailed("Usage could not be read.") from None
    if found is None:
        raise Unauthorized()
    check_principal(found)                                                 # 401 / 403
    req.record.note(days=days)
    return json_response(200, report(found, today, days), NO_CACHE)


def report(found: store.PrincipalUsage, today: int, days: int) -> dict:
    listed = []
    for i in range(days):
        date = store.utc_day(today - i * DAY)
        d = found.days.get(date)
        listed.append({"date": date,
                       "input_tokens": d.input_tokens if d else 0,
                       "cached_input_tokens": d.cached_input_tokens if d else 0,
                       "cache_write_tokens": d.cache_write_tokens if d else 0,
                       "output_tokens": d.output_tokens if d else 0,
                       "requests": d.requests if d else 0,
                       "estimated": bool(d and d.estimated)})
    counts = found.counts
    return {"days": listed, "limits": counts.limits.as_dict(),
            "remaining": counts.remaining(found.tokens_on(store.utc_day(today)))}
