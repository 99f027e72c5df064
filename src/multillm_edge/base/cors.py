"""CORS for the edge's own roleplay routes (docs/design.md §3, CORS_ALLOWED_ORIGINS).

A browser frontend (the SillyTavern extension) may call sessions, pages and search
directly. Only origins listed in CORS_ALLOWED_ORIGINS get CORS headers or a preflight
answer, and only on routes marked `cors` in app.ROUTES; everything else — other
origins, forwarded paths, generation — behaves exactly as without the setting (an
OPTIONS is forwarded to the origin, as any unrouted method is).
"""

from __future__ import annotations

import re
from typing import Callable, Optional

from ..base.http import Incoming, Outgoing

SETTING = "CORS_ALLOWED_ORIGINS"
#: What the extension sends; the browser checks a request's headers against this.
ALLOW_HEADERS = "authorization, content-type, x-api-key, x-roleplay-session-id"
#: Seconds a browser may reuse a preflight (Chromium caps it at 7200).
MAX_AGE = "600"
#: An origin as browsers serialize it: scheme://host[:port], lower case, no path.
_ORIGIN = re.compile(
    r"(?P<scheme>https?)://(?P<host>[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
    r"(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*|\[[0-9a-f:.]{2,45}\])"
    r"(?::(?P<port>[0-9]{1,5}))?\Z")
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: Longer is no origin: bounds the work a hostile setting or header can cause.
MAX_ORIGIN = 300


def parse_origin(entry: str) -> Optional[str]:
    """One configured entry as the browser's Origin would read, else None (a path,
    a query, `*`, `null`, userinfo, another scheme, a port out of range)."""
    entry = entry.strip()
    if len(entry) > MAX_ORIGIN:
        return None
    m = _ORIGIN.match(entry.lower())
    if m is None:
        return None
    scheme, host, port = m.group("scheme", "host", "port")
    if port is not None:
        n = int(port)
        if not 0 < n < 65536 or port != str(n):
            return None
        if n != _DEFAULT_PORTS[scheme]:     # browsers leave a default port out
            host = f"{host}:{n}"
    return f"{scheme}://{host}"


def parse_origins(text: Optional[str]) -> tuple[frozenset, bool]:
    """(allowed origins, whether any entry was invalid). Comma-separated; blank
    entries are nothing, not errors (a trailing comma)."""
    if not isinstance(text, str):
        return frozenset(), False
    entries = [e for e in text.split(",") if e.strip()]
    parsed = [parse_origin(e) for e in entries]
    return frozenset(p for p in parsed if p), None in parsed


_parsed: tuple = (None, frozenset())   # (the variable's text, its origins): once per isolate
_warned = False


def allowed_origins(text: Optional[str], warn: Callable[[str], None]) -> frozenset:
    """The setting's origins, parsed again only when its text changes; one warning per
    isolate for invalid entries, naming the setting and never a value."""
    global _parsed, _warned
    if _parsed[0] != text:
        origins, invalid = parse_origins(text)
        _parsed = (text, origins)
        if invalid and not _warned:
            _warned = True
            warn(f"{SETTING} has an invalid entry (each must be scheme://host[:port], "
                 "no path, no *); it is ignored.")
    return _parsed[1]


def _origins(platform) -> frozenset:
    return allowed_origins(platform.var(SETTING),
                           lambda msg: platform.log({"level": "warning", "message": msg}))


def request_origin(req: Incoming, platform) -> Optional[str]:
    """The request's Origin when it is listed (exactly as sent), else None."""
    origin = req.header("origin")
    if not origin or len(origin) > MAX_ORIGIN:
        return None
    origins = _origins(platform)
    return origin if origin in origins else None


def _as_actual(req: Incoming, method: str) -> Incoming:
    """The request a preflight announces: its method, the same URL (the query routes
    pages), its headers plus those it will send (a name is all routing reads)."""
    announced = req.header("access-control-request-headers") or ""
    names = [n.strip().lower() for n in announced.split(",") if n.strip()]
    return Incoming(method, req.url, req.headers + [(n, "") for n in names])


def preflight(req: Incoming, platform, route: Callable) -> Optional[Outgoing]:
    """The answer to a CORS preflight for a listed origin and a `cors` route (`route`
    is app.route), else None: the request goes on as it would without CORS."""
    method = req.header("access-control-request-method")
    if req.method != "OPTIONS" or not method:
        return None
    origin = request_origin(req, platform)
    if origin is None:
        return None
    target = route(_as_actual(req, method.strip()))
    if not getattr(target, "cors", False):
        return None
    req.notes["preflight"] = True
    return Outgoing(204, [
        ("access-control-allow-origin", origin),
        ("access-control-allow-methods", ", ".join(target.methods)),
        ("access-control-allow-headers", ALLOW_HEADERS),
        ("access-control-max-age", MAX_AGE),
        ("vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),
        ("cache-control", "no-store"),
    ])


def decorate(out: Outgoing, req: Incoming, platform) -> None:
    """CORS headers on a `cors` route's answer (errors included, so a page can read the
    JSON error) for a listed origin; `Vary: Origin` whenever any origin is listed."""
    if not _origins(platform):
        return
    out.headers.append(("vary", "Origin"))
    origin = request_origin(req, platform)
    if origin is None:
        return
    out.headers.append(("access-control-allow-origin", origin))
    # a 429's Retry-After too (docs/design.md §4.1): not a CORS-safelisted header
    exposed = sorted({k for k, _ in out.headers if k.startswith("x-multillm-") or k == "retry-after"})
    if exposed:
        out.headers.append(("access-control-expose-headers", ", ".join(exposed)))
