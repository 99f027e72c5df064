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

from . import OTHER, TOOL_DESCRIPTION, TOOL_NAME, int_field, tool_parameters, tools_list_append
from .roles import NONE, PLAIN, by_role

NAME = "messages"
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


def tool_schema() -> dict:
    return {"name": TOOL_NAME, "description": TOOL_DESCRIPTION,
            "input_schema": tool_parameters()}


def add_tool(body: dict) -> bool:
    return tools_list_append(body, "tools", tool_schema())



def output_reservation(body: dict):
    return int_field(body, "max_tokens")
