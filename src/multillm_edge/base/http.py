"""The edge's view of HTTP, independent of the runtime.

Handlers receive an `Incoming` and return an `Outgoing`; the platform layer
(`bindings.py`) converts both to and from the runtime's Request/Response. Bodies the
edge does not read (forwarded requests, streamed upstream responses) stay opaque
`stream` objects owned by the platform, so they are never buffered whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .errors import EDGE_ENVELOPE, EdgeError, Envelope
from .jsonbytes import compact
from .timing import LogRecord
from .weighted import Ticket

# RFC 9110 §7.6.1 connection-specific headers (plus every proxy-* one): never forwarded.
# Content-Length is end to end — a WSGI origin may need it to read the body — and stays;
# Host names the edge, and the runtime sets the origin's own.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "host",
})


@dataclass
class Incoming:
    method: str
    url: str
    headers: list[tuple[str, str]]       # lower-case names, in arrival order
    stream: Any = None                   # the runtime's body stream, for forwarding
    notes: dict = field(default_factory=dict)   # counts and timings for the log line
    params: dict = field(default_factory=dict)  # path parameters and route constants
    ticket: Ticket = field(default_factory=Ticket)  # its share of the isolate's memory (§7.2)

    def __post_init__(self):
        parts = urlsplit(self.url)
        self.path = parts.path
        self.raw_query = parts.query
        self.query = parse_qs(parts.query, keep_blank_values=True)
        self.record = LogRecord(self.notes)     # what the services tell the log line

    def header(self, name: str) -> str | None:
        name = name.lower()
        for k, v in self.headers:
            if k == name:
                return v
        return None


@dataclass
class Outgoing:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    stream: Any = None                   # an upstream body to pass through chunk by chunk


class Handoff:
    """Bytes handed to the platform's ``fetch`` once: it ``take``s them (converting them to
    the runtime's own buffer) and nothing of the request references them any more — a
    request waiting for its provider holds its upstream body at most in the runtime, not
    in the Python heap (docs/design.md §7.2)."""
    __slots__ = ("_data", "size")

    def __init__(self, data: bytes):
        self._data, self.size = data, len(data)

    def take(self) -> bytes:
        data, self._data = self._data, None
        if data is None:
            raise RuntimeError("the bytes were handed over already")
        return data


#: Answers about one caller's pages: never stored by anything between (docs/design.md §6).
NO_CACHE = [("cache-control", "private, no-store")]


def json_response(status: int, doc: Any, headers: list[tuple[str, str]] | None = None) -> Outgoing:
    body = compact(doc)
    return Outgoing(status, [("content-type", "application/json")] + (headers or []), body)


def error_response(err: EdgeError, envelope: Envelope = EDGE_ENVELOPE) -> Outgoing:
    # Errors are about this caller and this moment: never cached by anything between.
    return Outgoing(err.status, [("content-type", "application/json"), ("cache-control", "no-store"),
                                 *err.headers], err.body(envelope))


def forwardable(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Headers minus hop-by-hop ones, including any named by `Connection`."""
    named = {t.strip().lower() for k, v in headers if k == "connection" for t in v.split(",")}
    return [(k, v) for k, v in headers
            if k not in HOP_BY_HOP and k not in named and not k.startswith("proxy-")]
