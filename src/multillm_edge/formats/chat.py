"""OpenAI Chat Completions (`messages`).

User turns: role ``user``. Tool calls: assistant ``tool_calls[].id`` answered by
``tool`` messages (``tool_call_id``); the legacy assistant ``function_call`` is answered
by the next ``function`` message of the same name. ``system`` and ``developer`` stand
alone. Content may be a string or an array; it does not matter for grouping.
"""

from __future__ import annotations

from . import OTHER, RETRIEVE, SEARCH, Tool, add_context_tools, int_field
from .roles import NONE, PLAIN, by_role
from ..base.errors import invalid_field
from .fields import STR, STR_LIST_NULL, content, expect, history_items, objects, optional
from .openai import ERROR_ENVELOPE, VERSION_HEADER, auth_headers, idle_event  # noqa: F401

NAME = "chat"
CLIENT_PATH = "/v1/chat/completions"   # the edge's route
UPSTREAM_PATH = "/chat/completions"     # after a provider's base_url
MAX_TOKEN_FIELDS = ("max_tokens", "max_completion_tokens")   # checked in this order
ITEMS_KEY = "messages"
#: With a provider declaring ``cache_breakpoints`` (routers to Claude and Gemini), the
#: edge's anchors go on text parts (docs/design.md §5.7; formats/breakpoints.py).
ANCHOR_BLOCKS = ("text",)


def classify(m):
    if type(m) is not dict:
        return PLAIN
    role = m.get("role")
    if role == "assistant":
        tcs = m.get("tool_calls")
        fc = m.get("function_call")
        if not tcs and not fc:
            return PLAIN
        calls = []
        if isinstance(tcs, list):
            for tc in tcs:
                calls.append(("t", tc.get("id") if isinstance(tc, dict) else None))
        if fc:
            calls.append(("f", fc.get("name") if isinstance(fc, dict) else None))
        return OTHER, calls, NONE
    if role == "tool":
        return OTHER, NONE, (("t", m.get("tool_call_id")),)
    if role == "function":
        return OTHER, NONE, (("f", m.get("name")),)
    return by_role(role)



def schema(tool: Tool) -> dict:
    return {"type": "function", "function": _legacy_schema(tool)}


def tool_schema() -> dict:
    return schema(RETRIEVE)


def search_tool_schema() -> dict:
    return schema(SEARCH)


def _legacy_schema(tool: Tool) -> dict:
    return {"name": tool.name, "description": tool.description, "parameters": tool.parameters()}


def _uses_legacy_functions(body: dict) -> bool:
    return body.get("tools") is None and isinstance(body.get("functions"), list)


def add_tool(body: dict, search: bool = False) -> bool:
    # A request on the deprecated `functions` parameter gets the schemas there: the API
    # does not accept `tools` and `functions` together.
    if _uses_legacy_functions(body):
        return add_context_tools(body, "functions", _legacy_schema, search)
    return add_context_tools(body, "tools", schema, search)



def output_reservation(body: dict):
    return int_field(body, "max_completion_tokens", "max_tokens")


# --- the request boundary (docs/design.md §5.1) ----------------------------------

def _check_message(m: dict, where: str) -> None:
    expect(m.get("role"), STR, f"{where}.role")
    content(m, where, STR_LIST_NULL)
    calls = m.get("tool_calls")
    if calls is not None:
        for j, call in enumerate(objects(calls, f"{where}.tool_calls")):
            expect(call.get("id"), STR, f"{where}.tool_calls[{j}].id")
    if m.get("role") == "tool" or "tool_call_id" in m:
        expect(m.get("tool_call_id"), STR, f"{where}.tool_call_id")
    fc = m.get("function_call")
    if fc is not None:
        if type(fc) is not dict:
            raise invalid_field(f"{where}.function_call", "must be an object")
        expect(fc.get("name"), STR, f"{where}.function_call.name")
    if m.get("role") == "function" or "name" in m:
        expect(m.get("name"), STR, f"{where}.name")


def check(body: dict) -> None:
    history_items(body, ITEMS_KEY, _check_message, required=True, allow_string=False)
    optional(body, "functions", (list, type(None)))


# --- usage as the provider reports it (docs/design.md §4.1; formats/usage.py) -----

#: `prompt_tokens` is every input token; DeepSeek names its cache hits apart.
USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "prompt_tokens_details.cached_tokens",
                "prompt_cache_hit_tokens")


def usage_of(doc):
    """A whole answer's `usage`."""
    return doc.get("usage") if type(doc) is dict else None


def event_usage(doc):
    """A stream chunk's `usage`: the last chunk's with `stream_options.include_usage`."""
    return doc.get("usage") if type(doc) is dict else None


def usage_counts(f: dict) -> tuple:
    """(input, cached, written, output); None where not reported."""
    cached = f.get("prompt_tokens_details.cached_tokens", f.get("prompt_cache_hit_tokens"))
    return f.get("prompt_tokens"), cached, None, f.get("completion_tokens")
