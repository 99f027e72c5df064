"""What the two OpenAI formats (chat, responses) share: Bearer auth, the stream's
error event, the edge's own error envelope. Not a format: the registry lists neither."""

from __future__ import annotations

from ..base.errors import EDGE_ENVELOPE
from ..base.jsonbytes import compact

ERROR_ENVELOPE = EDGE_ENVELOPE
VERSION_HEADER = None            # no API version header to pass through


def auth_headers(key: str, version) -> dict:
    return {"Authorization": f"Bearer {key}"}


def idle_event(message: str) -> bytes:
    """The OpenAI SDKs raise on a `data: {"error": …}` line."""
    doc = {"error": {"type": "server_error", "code": "upstream_idle_timeout", "message": message}}
    return b"data: " + compact(doc) + b"\n\n"
