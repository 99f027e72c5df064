"""Forwarding to the Flask origin (docs/design.md §7): unchanged, streamed both ways;
never a request carrying a roleplay-format key (§2, `reserved_keys`)."""

from __future__ import annotations

from ..base.errors import EdgeError
from ..base.http import Incoming, Outgoing, forwardable
from ..base.platform import Platform
from .reserved_keys import carries_roleplay_key, refuse


def origin_url(origin: str, req: Incoming) -> str:
    url = origin.rstrip("/") + req.path
    return url + "?" + req.raw_query if req.raw_query else url


async def forward(req: Incoming, platform: Platform, headers=None, body=None) -> Outgoing:
    """`req` to the origin; a route that read the body passes it (bytes or a stream)
    and may pass the headers it keeps (docs/design.md §7.1). Every forward passes here,
    so this is where a roleplay-format key is stopped: judged on the request as it
    arrived, whatever headers a route keeps (§2)."""
    if carries_roleplay_key(req):
        raise await refuse(req, platform)
    origin = (platform.var("FLASK_ORIGIN") or "").strip()
    if not origin:
        raise EdgeError(503, "origin_not_configured", "FLASK_ORIGIN is not configured.")
    try:
        upstream = await platform.fetch(origin_url(origin, req), req.method,
                                        forwardable(req.headers if headers is None else headers),
                                        req.stream if body is None else body)
    except OSError:
        raise EdgeError(502, "origin_unreachable", "The origin could not be reached.") from None
    return Outgoing(upstream.status, forwardable(upstream.headers), stream=upstream.stream)
