"""Anthropic Messages (`messages`, top-level `system`).

The top-level ``system`` is not in ``messages`` and is never paged. Tool calls are
``tool_use`` blocks (``id``) in assistant content, answered by ``tool_result`` blocks
(``tool_use_id``) in the next user message. A user message holding tool results
continues the exchange; this includes a message that carries text blocks *after*
its tool results (clients append notes there): Anthropic requires tool results in the
message right after the ``tool_use``, so splitting there would only leave two
incomplete, unpageable halves. Every other user message is a genuine turn.

Anthropic expects alternating roles: a ``user`` marker next to a user message makes
two consecutive user turns, which the API merges. A marker only ever replaces whole
complete exchanges, so it never lands between a ``tool_use`` and its ``tool_result``.
"""

from __future__ import annotations

from . import OTHER, RETRIEVE, SEARCH, Tool, add_context_tools, int_field
from .roles import NONE, PLAIN, by_role
from ..base.errors import Envelope
from ..base.jsonbytes import compact
from .fields import STR, STR_LIST, content, expect, history_items, objects

NAME = "messages"
CLIENT_PATH = "/v1/messages"
UPSTREAM_PATH = "/messages"
MAX_TOKEN_FIELDS = ("max_tokens",)
#: The client's API version header, passed upstream (else DEFAULT_VERSION).
VERSION_HEADER = "anthropic-version"
DEFAULT_VERSION = "2023-06-01"
#: Anthropic's error shape: `{"type": "error", "error": {...}}` and its own type names.
ERROR_ENVELOPE = Envelope({
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
}, tagged=True)
ITEMS_KEY = "messages"


def _block_ids(content, kind: str, key: str):
    """Pairing keys of the `kind` blocks of a content list (none for a string)."""
    if type(content) is not list:
        return NONE
    return [("t", b.get(key)) for b in content if type(b) is dict and b.get("type") == kind] or NONE


def classify(m):
    if type(m) is not dict:
        return PLAIN
    role = m.get("role")
    c = m.get("content")
    if role == "user":
        results = _block_ids(c, "tool_result", "tool_use_id")
        return (OTHER, NONE, results) if results else by_role(role)
    if role == "assistant":
        calls = _block_ids(c, "tool_use", "id")
        return (OTHER, calls, NONE) if calls else PLAIN
    return by_role(role)


def schema(tool: Tool) -> dict:
    return {"name": tool.name, "description": tool.description,
            "input_schema": tool.parameters()}


def tool_schema() -> dict:
    return schema(RETRIEVE)


def search_tool_schema() -> dict:
    return schema(SEARCH)


def add_tool(body: dict, search: bool = False) -> bool:
    return add_context_tools(body, "tools", schema, search)



def output_reservation(body: dict):
    return int_field(body, "max_tokens")


# --- prompt cache breakpoints (docs/design.md §5.7; formats/breakpoints.py) ------

NATIVE_BREAKPOINTS = True   # Anthropic's own API: every provider takes them
#: The blocks Anthropic caches (not thinking blocks): the edge's anchor goes on one.
ANCHOR_BLOCKS = ("text", "image", "document", "tool_use", "tool_result", "search_result")


def auth_headers(key: str, version) -> dict:
    """x-api-key + anthropic-version (the client's value passed through, else DEFAULT_VERSION)."""
    version = version if (isinstance(version, str) and version
                          and not any(c in version for c in "\r\n\x00")) \
        else DEFAULT_VERSION
    return {"x-api-key": key, "anthropic-version": version}


def idle_event(message: str) -> bytes:
    """Anthropic's SDK raises on an `event: error`."""
    doc = {"type": "error", "error": {"type": "timeout_error", "message": message}}
    return b"event: error\ndata: " + compact(doc) + b"\n\n"


# --- the request boundary (docs/design.md §5.1) ----------------------------------

def _check_message(m: dict, where: str) -> None:
    expect(m.get("role"), STR, f"{where}.role")
    content(m, where, STR_LIST)
    c = m.get("content")
    if type(c) is list:
        for j, block in enumerate(c):
            kind = block.get("type")
            if kind == "tool_use":
                expect(block.get("id"), STR, f"{where}.content[{j}].id")
            elif kind == "tool_result":
                expect(block.get("tool_use_id"), STR, f"{where}.content[{j}].tool_use_id")


def check(body: dict) -> None:
    history_items(body, ITEMS_KEY, _check_message, required=True, allow_string=False)
    if "system" in body:
        expect(body["system"], STR_LIST, "system")
        if type(body["system"]) is list:
            objects(body["system"], "system")


# --- usage as the provider reports it (docs/design.md §4.1; formats/usage.py) -----

#: `input_tokens` excludes what the prompt cache read and wrote: the input is the sum.
USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens",
                "cache_creation_input_tokens")


def usage_of(doc):
    """A whole answer's `usage`."""
    return doc.get("usage") if type(doc) is dict else None


def event_usage(doc):
    """`message_start` carries the message's usage (input); `message_delta` the running
    totals (output, and on newer versions input again): later figures replace earlier."""
    if type(doc) is not dict:
        return None
    message = doc.get("message")
    if doc.get("type") == "message_start" and type(message) is dict:
        return message.get("usage")
    return doc.get("usage")


def usage_counts(f: dict) -> tuple:
    read = f.get("cache_read_input_tokens", 0)
    written = f.get("cache_creation_input_tokens", 0)
    fresh = f.get("input_tokens")
    return (None if fresh is None else fresh + read + written, read, written,
            f.get("output_tokens"))
