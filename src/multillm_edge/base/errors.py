"""One error tree for the edge and its JSON mapping (docs/design.md §8).

Every failure the edge answers itself is an `EdgeError`; handlers raise it and the
app turns it into `{"error": {"type", "code", "message", ...}}`, or the envelope its
route's wire format declares (formats/). Extra figures (budgets, sizes) go in `details` and are merged into the
error object: they are numbers, never content.
"""

from __future__ import annotations

from dataclasses import dataclass

from .jsonbytes import compact

# HTTP status -> error type (OpenAI-style names: the edge's own routes).
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "server_error",
    503: "service_unavailable",
}


@dataclass(frozen=True)
class Envelope:
    """How an error body is shaped: the HTTP status -> `type` map, and whether the error
    object is wrapped as `{"type": "error", "error": …}` rather than `{"error": …}`."""
    types: dict
    tagged: bool = False


EDGE_ENVELOPE = Envelope(_OPENAI_TYPES)    # the edge's own routes (a format may declare another)


class EdgeError(Exception):
    """An error the edge answers with a JSON body.

    Either constructed with its status, code and message, or subclassed with them as
    class attributes (``raise Unauthorized()``). Raise a new instance every time: a
    module-level instance raised again and again accumulates tracebacks, and with them
    the frames (and request bodies) of every request that raised it.
    """

    status = 500
    code = "internal_error"
    message = "The edge could not handle this request."
    headers: tuple = ()     # extra response headers (a 429's Retry-After)

    def __init__(self, status: int | None = None, code: str | None = None,
                 message: str | None = None, **details):
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code
        if message is not None:
            self.message = message
        super().__init__(self.message)
        self.details = details

    def body(self, envelope: Envelope = EDGE_ENVELOPE) -> bytes:
        err = {"type": envelope.types.get(self.status, "api_error"), "code": self.code,
               "message": self.message}
        err.update(self.details)
        doc = {"type": "error", "error": err} if envelope.tagged else {"error": err}
        return compact(doc, ascii=True)


class StorageError(Exception):
    """A D1 or R2 call failed. The edge answers 503 and dispatches nothing."""


class StorageFailed(EdgeError):
    """The 503 a StorageError becomes (docs/design.md §8); the message says what could
    not be read or written, never a key or a value."""
    status, code = 503, "storage_failed"

    def __init__(self, message: str):
        super().__init__(message=message)


class StorageUnavailable(EdgeError):
    """A binding the route needs is not configured."""
    status, code = 503, "storage_unavailable"

    def __init__(self, binding: str):
        super().__init__(message=f"The {binding} binding is not configured.")


class ZeroRetention(EdgeError):
    status, code = 403, "retention_zero"
    message = "This key's policy has zero retention: no context pages are served."


class Corrupted(EdgeError):
    status, code = 503, "context_page_corrupted"
    message = "The stored context page failed its integrity check."


def invalid_field(param: str, message: str) -> EdgeError:
    """400 for a field of the wrong type; ``param`` is its path (``messages[3].role``),
    as OpenAI's ``param``."""
    return EdgeError(400, "invalid_request", f"`{param}` {message}.", param=param)


class Unauthorized(EdgeError):
    status, code, message = 401, "invalid_api_key", "A valid roleplay API key is required."


class ChatNotGranted(EdgeError):
    status, code, message = 403, "chat_not_granted", "This key's policy does not grant chat."


class SessionNotFound(EdgeError):
    status, code, message = 404, "session_not_found", "Roleplay session not found."


class PageNotFound(EdgeError):
    """Every retrieval miss: identical bytes whatever the cause (docs/design.md §6)."""
    status, code, message = 404, "context_page_not_found", "Context page not found."


class EdgeBusy(EdgeError):
    """The isolate has no memory free for this request now (docs/design.md §7.2): nothing
    was stored or dispatched; ``Retry-After`` says when to try again."""
    status, code = 503, "edge_busy"

    def __init__(self, retry_after: int):
        super().__init__(message=f"The edge is busy; retry after {retry_after} seconds.")
        self.retry_after = retry_after
        self.headers = (("retry-after", str(retry_after)),)


class InternalError(EdgeError):
    """An unexpected exception: the route's envelope, never its details."""
    status, code, message = 500, "internal_error", "The edge could not handle this request."
