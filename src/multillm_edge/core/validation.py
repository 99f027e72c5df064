"""The request boundary: bytes → a validated generation body (docs/design.md §5.1).

Nothing else touches a client's body before it passes here. Every rejection is a 400
(`invalid_json` for the bytes, `invalid_request` naming the field as a path such as
``messages[3].tool_calls[0].id``, like OpenAI's ``param``); nothing is stored or
dispatched. Fields the edge does not read pass untouched.

Depth is checked *before* the parse: Pyodide's ``json.loads`` recurses in C and a
deeply nested body overflows the JS stack (killing the isolate) before Python's
recursion limit can fire.
"""

from __future__ import annotations

import json
import math
from ..base.errors import EdgeError, invalid_field

#: Deepest nesting of arrays/objects accepted. Real chat bodies and tool schemas nest
#: well under 40 levels.
MAX_DEPTH = 256
#: Most explicit fallback models in `models`: each one is planned (and may be stored).
MAX_MODELS = 16
#: Longest `X-Roleplay-Session-ID` accepted (the edge's ids are 36 characters).
MAX_SESSION_ID = 256

#: More arrays and objects than any chat body of MAX_REQUEST_BYTES holds (a dense one,
#: `{"role":"user","content":"x"},` per message, has ~540,000): bounds the check below.
MAX_BRACKETS = 1 << 20

_ONLY_QUOTES_AND_BRACKETS = bytes(c for c in range(256) if c not in b'"[]{}')
_PARENS = bytes.maketrans(b"[{]}", b"(())")


def _invalid_json(message: str) -> EdgeError:
    return EdgeError(400, "invalid_json", message)


def _brackets(raw: bytes) -> bytes:
    """The arrays' and objects' brackets outside JSON strings, as ``(`` and ``)``, in
    C-speed passes. Only an escaped quote can move a string boundary: escapes pair a
    backslash with the next byte left to right, as `bytes.replace` does, so once escaped
    backslashes and quotes are neutralized every remaining quote delimits a string.
    Where ``raw`` stops being JSON the parse stops too, and up to there this is exact.
    Quotes then alternate open/close, so removing two adjacent ones either drops an empty
    string or fuses two strings: no bracket changes sides, and most quotes go in one
    C pass (strings rarely hold brackets) before the split."""
    if b'\\"' in raw:
        if b'\\\\"' in raw:          # a quote after 2+ backslashes: pair them all first
            raw = raw.replace(b"\\\\", b"__")
        raw = raw.replace(b'\\"', b"__")
    outside = raw.translate(None, _ONLY_QUOTES_AND_BRACKETS).replace(b'""', b"")
    if b'"' in outside:
        outside = b"".join(outside.split(b'"')[::2])
    return outside.translate(_PARENS)


def _nests_deeper(brackets: bytes, limit: int) -> bool:
    """Each pass removes every innermost ``()``, lowering the depth of a balanced
    structure by exactly one, so a run of ``limit + 1 - passes`` openers proves it too
    deep and a pass that removes nothing proves it is not. Never an underestimate (a
    truncated body may be overestimated: it is invalid JSON anyway). At most
    ``limit + 1`` passes over at most 2 × MAX_BRACKETS bytes."""
    if brackets.count(b"(") <= limit:
        return False
    run = b"(" * (limit + 1)
    for passes in range(limit + 1):
        if run[passes:] in brackets:
            return True
        shorter = brackets.replace(b"()", b"")
        if len(shorter) == len(brackets):
            return False
        brackets = shorter
    return True


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError("number out of range")
    return value


def parse_json(raw: bytes):
    """Strict JSON: UTF-8, nesting ≤ MAX_DEPTH, no NaN/Infinity, finite numbers."""
    brackets = _brackets(raw)
    if len(brackets) > 2 * MAX_BRACKETS:
        raise _invalid_json(f"Request body holds more than {MAX_BRACKETS} arrays and objects.")
    if _nests_deeper(brackets, MAX_DEPTH):
        raise _invalid_json(f"Request body nests deeper than {MAX_DEPTH} levels.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _invalid_json("Request body is not valid UTF-8.") from None
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise _invalid_json(f"Request body nests deeper than {MAX_DEPTH} levels.") from None
    except ValueError:  # JSONDecodeError, NaN/Infinity, overflow, huge integer literals
        raise _invalid_json("Request body is not valid JSON.") from None


class _DuplicateKey(Exception):
    pass


def _no_duplicates(pairs):
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _DuplicateKey
    return obj


def has_duplicate_keys(raw: bytes) -> bool:
    """Whether some object in ``raw`` (already parsed once) repeats a key. Providers
    disagree on which value wins; the edge validated the last one."""
    try:
        json.loads(raw, object_pairs_hook=_no_duplicates)
    except _DuplicateKey:
        return True
    return False


# ---------------------------------------------------------------------------
# Fields the edge reads, per wire format
# ---------------------------------------------------------------------------

_STR = (str,)
_PLAIN_ROLES = frozenset({"user", "assistant", "system", "developer"})
_STR_LIST_NULL = (str, list, type(None))
_STR_LIST = (str, list)
_TYPE_NAMES = {str: "a string", list: "an array", dict: "an object", type(None): "null"}


def _expect(value, types, param: str) -> None:
    if type(value) not in types:
        raise invalid_field(param, "must be " + " or ".join(_TYPE_NAMES[t] for t in types))


def _optional(obj: dict, key: str, types, where: str = "") -> None:
    if key in obj:
        _expect(obj[key], types, f"{where}.{key}" if where else key)


def _objects(value, param: str) -> list:
    """``value`` must be an array of objects."""
    if type(value) is not list:
        raise invalid_field(param, "must be an array of objects")
    for i, item in enumerate(value):
        if type(item) is not dict:
            raise invalid_field(f"{param}[{i}]", "must be an object")
    return value


def _content(msg: dict, where: str, types) -> None:
    """`content`: a string or an array of typed objects (null where the format allows)."""
    if "content" not in msg:
        return
    c = msg["content"]
    _expect(c, types, f"{where}.content")
    if type(c) is list:
        for j, block in enumerate(_objects(c, f"{where}.content")):
            _optional(block, "type", _STR, f"{where}.content[{j}]")


def _chat_message(m: dict, where: str) -> None:
    _expect(m.get("role"), _STR, f"{where}.role")
    _content(m, where, _STR_LIST_NULL)
    calls = m.get("tool_calls")
    if calls is not None:
        for j, call in enumerate(_objects(calls, f"{where}.tool_calls")):
            _expect(call.get("id"), _STR, f"{where}.tool_calls[{j}].id")
    if m.get("role") == "tool" or "tool_call_id" in m:
        _expect(m.get("tool_call_id"), _STR, f"{where}.tool_call_id")
    fc = m.get("function_call")
    if fc is not None:
        if type(fc) is not dict:
            raise invalid_field(f"{where}.function_call", "must be an object")
        _expect(fc.get("name"), _STR, f"{where}.function_call.name")
    if m.get("role") == "function" or "name" in m:
        _expect(m.get("name"), _STR, f"{where}.name")


def _responses_item(it: dict, where: str) -> None:
    t = it.get("type")
    if t is not None:
        _expect(t, _STR, f"{where}.type")
    if t is None or t == "message":
        _expect(it.get("role"), _STR, f"{where}.role")
        _content(it, where, _STR_LIST_NULL)
    for key in ("call_id", "approval_request_id"):
        _optional(it, key, _STR, where)
    if t == "mcp_approval_request":
        _expect(it.get("id"), _STR, f"{where}.id")


def _messages_message(m: dict, where: str) -> None:
    _expect(m.get("role"), _STR, f"{where}.role")
    _content(m, where, _STR_LIST)
    c = m.get("content")
    if type(c) is list:
        for j, block in enumerate(c):
            kind = block.get("type")
            if kind == "tool_use":
                _expect(block.get("id"), _STR, f"{where}.content[{j}].id")
            elif kind == "tool_result":
                _expect(block.get("tool_use_id"), _STR, f"{where}.content[{j}].tool_use_id")


def _history(body: dict, key: str, check_item, required: bool, allow_string: bool) -> None:
    if key not in body:
        if required:
            raise invalid_field(key, "is required")
        return
    value = body[key]
    if allow_string and type(value) is str:
        return
    if type(value) is not list:
        raise invalid_field(key, "must be " + ("a string or " if allow_string else "")
                            + "an array of objects")
    for i, item in enumerate(value):
        if type(item) is not dict:
            raise invalid_field(f"{key}[{i}]", "must be an object")
        # The common message, {"role": "user", "content": "text"}, has nothing else to check.
        role = item.get("role")
        if len(item) == 2 and type(role) is str and role in _PLAIN_ROLES \
                and type(item.get("content")) is str:
            continue
        check_item(item, f"{key}[{i}]")


def _chat(body: dict) -> None:
    _history(body, "messages", _chat_message, required=True, allow_string=False)
    _optional(body, "functions", (list, type(None)))


def _responses(body: dict) -> None:
    _history(body, "input", _responses_item, required=False, allow_string=True)


def _messages(body: dict) -> None:
    _history(body, "messages", _messages_message, required=True, allow_string=False)
    if "system" in body:
        _expect(body["system"], _STR_LIST, "system")
        if type(body["system"]) is list:
            _objects(body["system"], "system")


_FORMAT_CHECKS = {"chat": _chat, "responses": _responses, "messages": _messages}
_MAX_TOKEN_FIELDS = {"chat": ("max_tokens", "max_completion_tokens"),
                     "responses": ("max_output_tokens",), "messages": ("max_tokens",)}


def _positive_int(body: dict, key: str) -> None:
    v = body.get(key)
    if v is not None and (type(v) is not int or v <= 0):
        raise invalid_field(key, "must be a positive integer")


def _strings(body: dict, key: str, limit: int | None = None) -> None:
    v = body.get(key)
    if v is None:
        return
    if type(v) is not list or not all(type(x) is str for x in v):
        raise invalid_field(key, "must be an array of strings")
    if limit is not None and len(v) > limit:
        raise invalid_field(key, f"must have at most {limit} entries")


def check_body(fmt: str, body) -> dict:
    """The fields the edge reads, type-checked for wire format ``fmt``."""
    if type(body) is not dict:
        raise EdgeError(400, "invalid_request", "Request body must be a JSON object.")
    _FORMAT_CHECKS[fmt](body)
    for key in _MAX_TOKEN_FIELDS[fmt]:
        _positive_int(body, key)
    _strings(body, "models", MAX_MODELS)
    _strings(body, "capabilities")
    _optional(body, "tools", (list, type(None)))
    return body


def parse_request(fmt: str, raw: bytes) -> dict:
    return check_body(fmt, parse_json(raw))


def session_id(value: str | None) -> str:
    """The `X-Roleplay-Session-ID` value; present but blank or absurd → 400."""
    sid = (value or "").strip()
    if not sid:
        raise EdgeError(400, "invalid_request", "X-Roleplay-Session-ID must not be empty.")
    if len(sid) > MAX_SESSION_ID:
        raise EdgeError(400, "invalid_request",
                        f"X-Roleplay-Session-ID must be at most {MAX_SESSION_ID} characters.")
    return sid
