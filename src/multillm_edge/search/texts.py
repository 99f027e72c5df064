"""A page's message texts, whatever its wire format (docs/design.md §6.1).

Items are the parsed JSON items of an OpenAI Chat, OpenAI Responses or Anthropic
Messages history. Each text is a string value that exists in the items as it is, so an
excerpt cut from it is verbatim page content. Collected: message content strings and
text parts (``text``, ``input_text``, ``output_text``, ``refusal``, ``thinking``,
reasoning summaries), tool call names and argument strings, tool results and call
outputs, and the string leaves of a ``tool_use`` input (its JSON is not a string of
the page; its string values are). Ids, types, signatures, URLs and media data are not
text. Roles: the message's role; a tool result or call output is ``tool``; a call is
``assistant``.
"""

from __future__ import annotations

_SKIP = frozenset(("id", "type", "call_id", "tool_call_id", "tool_use_id", "signature",
                   "image_url", "source", "data", "url", "file_id", "cache_control",
                   "status", "encrypted_content", "media_type", "detail", "role",
                   "approval_request_id", "server_label", "file_data", "image"))


def page_texts(items) -> list:
    """[(role, text), ...] of a page's items, in order; empty texts left out."""
    out: list = []
    if type(items) is list:
        for it in items:
            if type(it) is dict:
                _item(it, out)
            elif type(it) is str and it:
                out.append(("user", it))
    return out


def _item(it: dict, out: list) -> None:
    content = it.get("content")
    if type(content) is str and len(it) == 2 and type(it.get("role")) is str:
        if content:      # the common chat message: {"role", "content": str}
            out.append((it["role"], content))
        return
    t = it.get("type")
    role = it.get("role")
    if type(t) is str and t != "message" and role is None:
        if t.endswith("_output") or t.endswith("_response"):
            role = "tool"
        elif t == "reasoning":
            role = "assistant"
        else:
            role = "assistant"
    role = role if type(role) is str else "unknown"
    for key, v in it.items():
        if key in _SKIP:
            continue
        if key == "tool_calls" and type(v) is list:   # chat: function name + arguments
            _leaves(v, "assistant", out)
        else:
            _value(v, role, out)


def _value(v, role: str, out: list) -> None:
    if type(v) is str:
        if v:
            out.append((role, v))
    elif type(v) is list:
        for part in v:
            if type(part) is dict:
                _part(part, role, out)
            elif type(part) is str and part:
                out.append((role, part))
    elif type(v) is dict:
        _leaves(v, role, out)


def _part(part: dict, role: str, out: list) -> None:
    t = part.get("type")
    if t == "tool_result":
        role = "tool"
    elif t == "tool_use":
        role = "assistant"
    for key, v in part.items():
        if key not in _SKIP:
            _value(v, role, out)


def _leaves(v, role: str, out: list) -> None:
    """Every string leaf under ``v`` (tool call inputs and function fields)."""
    stack = [v]
    while stack:
        x = stack.pop()
        if type(x) is str:
            if x:
                out.append((role, x))
        elif type(x) is dict:
            stack.extend(reversed([x[k] for k in x if k not in _SKIP]))
        elif type(x) is list:
            stack.extend(reversed(x))
