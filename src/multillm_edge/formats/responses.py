"""OpenAI Responses (`input`).

``input`` may be a string (nothing to page) or a list of items. Messages come as
``{"type": "message", "role", "content"}`` or the short ``{"role", "content"}`` form;
a ``user`` message is a genuine turn, ``system``/``developer`` stand alone. Tool
calls: any ``*_call`` item with a ``call_id`` (``function_call``, ``custom_tool_call``,
``computer_call``, ``local_shell_call``, ...) is answered by the ``*_call_output`` item
with the same ``call_id``; ``mcp_approval_request`` by ``mcp_approval_response``. A call
output is never a new turn. ``reasoning`` and every other item type stay with their
exchange. Top-level ``instructions`` is not in ``input`` and is never paged.
"""

from __future__ import annotations

from . import OTHER, RETRIEVE, SEARCH, Tool, add_context_tools, int_field
from .roles import NONE, PLAIN, by_role
from .fields import STR, STR_LIST_NULL, content, expect, history_items, optional
from .openai import ERROR_ENVELOPE, VERSION_HEADER, auth_headers, idle_event  # noqa: F401

NAME = "responses"
CLIENT_PATH = "/v1/responses"
UPSTREAM_PATH = "/responses"
MAX_TOKEN_FIELDS = ("max_output_tokens",)
ITEMS_KEY = "input"


def classify(it):
    if type(it) is not dict:
        return PLAIN
    t = it.get("type")
    if t is None or t == "message":
        return by_role(it.get("role"))
    if type(t) is str:
        if t.endswith("_call_output"):
            return OTHER, NONE, (("c", it.get("call_id")),)
        if t.endswith("_call") and "call_id" in it:
            return OTHER, (("c", it.get("call_id")),), NONE
        if t == "mcp_approval_request":
            return OTHER, (("a", it.get("id")),), NONE
        if t == "mcp_approval_response":
            return OTHER, NONE, (("a", it.get("approval_request_id")),)
    return PLAIN



def schema(tool: Tool) -> dict:
    return {"type": "function", "name": tool.name, "description": tool.description,
            "parameters": tool.parameters()}


def tool_schema() -> dict:
    return schema(RETRIEVE)


def search_tool_schema() -> dict:
    return schema(SEARCH)


def add_tool(body: dict, search: bool = False) -> bool:
    return add_context_tools(body, "tools", schema, search)



def output_reservation(body: dict):
    return int_field(body, "max_output_tokens")


# --- the request boundary (docs/design.md §5.1) ----------------------------------

def _check_item(it: dict, where: str) -> None:
    t = it.get("type")
    if t is not None:
        expect(t, STR, f"{where}.type")
    if t is None or t == "message":
        expect(it.get("role"), STR, f"{where}.role")
        content(it, where, STR_LIST_NULL)
    for key in ("call_id", "approval_request_id"):
        optional(it, key, STR, where)
    if t == "mcp_approval_request":
        expect(it.get("id"), STR, f"{where}.id")


def check(body: dict) -> None:
    history_items(body, ITEMS_KEY, _check_item, required=False, allow_string=True)


# --- usage as the provider reports it (docs/design.md §4.1; formats/usage.py) -----

USAGE_FIELDS = ("input_tokens", "output_tokens", "input_tokens_details.cached_tokens")


def usage_of(doc):
    """A whole answer's `usage`."""
    return doc.get("usage") if type(doc) is dict else None


def event_usage(doc):
    """`response.completed` (and `.incomplete`, `.failed`) carry the response and its usage."""
    if type(doc) is not dict:
        return None
    response = doc.get("response")
    return response.get("usage") if type(response) is dict else None


def usage_counts(f: dict) -> tuple:
    return (f.get("input_tokens"), f.get("input_tokens_details.cached_tokens"), None,
            f.get("output_tokens"))
