"""A principal's limits (docs/design.md §4.1): their names, the UTC day and the windows
they count in, and the errors a request past one gets.

Pure: the counting is SQL (storage/store.py: check and count in one statement); this
module only names the limits, says when a window frees, and builds the 429 / 413.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

from ..base.errors import EdgeError

#: The sliding window of `requests_per_minute`, in seconds.
WINDOW_SECONDS = 60
DAY_SECONDS = 86400


@dataclass(frozen=True)
class Limits:
    """The operator's limits of one principal; None = unlimited (no row, or a cleared one)."""
    requests_per_minute: Optional[int] = None
    tokens_per_day: Optional[int] = None
    sessions_per_day: Optional[int] = None
    active_bytes: Optional[int] = None

    def as_dict(self) -> dict:
        return {n: getattr(self, n) for n in NAMES}


#: The limit names, in the order the CLI, the table and `GET /v1/roleplay/usage` list them.
NAMES = tuple(f.name for f in fields(Limits))
NO_LIMITS = Limits()


def limits_of(row: dict, prefix: str = "") -> Limits:
    """The limits a row carries as ``<prefix><name>`` columns (absent or NULL = unlimited)."""
    out = {}
    for name in NAMES:
        v = row.get(prefix + name)
        out[name] = None if v is None else int(v)
    return Limits(**out)


def utc_day(now: int) -> str:
    """The UTC date of Unix second ``now``, 'YYYY-MM-DD' (principal_usage.day)."""
    days = int(now) // DAY_SECONDS
    # civil date from days since 1970-01-01 (no datetime: same answer on every runtime)
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    y = yoe + era * 400 + (1 if m <= 2 else 0)
    return f"{y:04d}-{m:02d}-{d:02d}"


def day_start(now: int) -> int:
    """The Unix second the UTC day of ``now`` began."""
    return int(now) - int(now) % DAY_SECONDS


def until_tomorrow(now: int) -> int:
    """Whole seconds until the next UTC day begins (a day limit's Retry-After), ≥ 1."""
    return DAY_SECONDS - int(now) % DAY_SECONDS


def window_frees_in(frees_from: Optional[int], now: int) -> int:
    """Whole seconds until the request window admits one more: the row at ``frees_from``
    leaves it WINDOW_SECONDS after it was counted. None (a limit of 0: nothing is ever
    counted) waits a whole window."""
    if frees_from is None:
        return WINDOW_SECONDS
    return max(1, int(frees_from) + WINDOW_SECONDS - int(now))


class LimitReached(EdgeError):
    """429 with `Retry-After`: the limit, its value and when it frees are in the body.

    `x-should-retry` (which the `openai` and `anthropic` SDKs obey before their own rules)
    says whether waiting is worth it: yes for the request window (seconds), no for a day
    limit (hours: the `anthropic` SDK would otherwise sleep until UTC midnight)."""
    status = 429

    def __init__(self, code: str, message: str, limit: str, value: int, retry_after: int):
        super().__init__(code=code, message=message, limit=limit, limit_value=value,
                         retry_after_seconds=retry_after)
        retry = "true" if limit == "requests_per_minute" else "false"
        self.headers = (("retry-after", str(retry_after)), ("x-should-retry", retry))


def rate_limited(value: int, retry_after: int) -> LimitReached:
    return LimitReached("rate_limit_exceeded", f"Rate limit reached: this key allows {value} "
                        f"requests per minute. Retry after {retry_after} s.",
                        "requests_per_minute", value, retry_after)


def token_budget_exceeded(value: int, retry_after: int) -> LimitReached:
    return LimitReached("token_budget_exceeded", f"Token budget exceeded: this key allows {value} "
                        f"tokens per UTC day. Retry after {retry_after} s.",
                        "tokens_per_day", value, retry_after)


def session_limit_reached(value: int, retry_after: int) -> LimitReached:
    return LimitReached("session_limit_reached", f"Session limit reached: this key may create "
                        f"{value} sessions per UTC day. Retry after {retry_after} s.",
                        "sessions_per_day", value, retry_after)


def principal_limit(active: int, limit: int, needed: int) -> EdgeError:
    """The 413 of `active_bytes` (across the principal's sessions), shaped like the
    session's (storing.session_limit)."""
    return EdgeError(413, "context_principal_limit_exceeded",
                     "The context window was exceeded and this key's stored context pages, "
                     "across its sessions, would exceed their allowance.",
                     active_bytes=active, limit_bytes=limit, needed_bytes=needed)
