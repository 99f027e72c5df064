"""One error tree for the edge and its JSON mapping (DESIGN §8).

Every failure the edge answers itself is an `EdgeError`; handlers raise it and the
app turns it into `{"error": {"type", "code", "message", ...}}` (Anthropic-shaped on
/v1/messages). Extra figures (budgets, sizes) go in `details` and are merged into the
error object: they are numbers, never content.
"""

from __future__ import annotations

import json

# HTTP status -> error type (OpenAI-style names; Anthropic names differ, see below).
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    500: "server_error",
    502: "server_error",
    503: "service_unavailable",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
}


class EdgeError(Exception):
    """An error the edge answers with a JSON body."""

    def __init__(self, status: int, code: str, message: str, **details):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details

    def body(self, anthropic: bool = False) -> bytes:
        types = _ANTHROPIC_TYPES if anthropic else _OPENAI_TYPES
        err = {"type": types.get(self.status, "api_error"), "code": self.code,
               "message": self.message}
        err.update(self.details)
        doc = {"type": "error", "error": err} if anthropic else {"error": err}
        return json.dumps(doc, separators=(",", ":")).encode()


class StorageError(Exception):
    """A D1 or R2 call failed. The edge answers 503 and dispatches nothing."""


def bad_request(code: str, message: str, **details) -> EdgeError:
    return EdgeError(400, code, message, **details)


def unavailable(code: str, message: str) -> EdgeError:
    return EdgeError(503, code, message)


# A single 404 for every retrieval miss: identical bytes whatever the cause (DESIGN §6).
PAGE_NOT_FOUND = EdgeError(404, "context_page_not_found", "Context page not found.")
