"""Type checks of the fields the edge reads, shared by the formats' ``check`` (the
request boundary: docs/design.md §5.1). A rejection is a 400 naming the field as a path
such as ``messages[3].tool_calls[0].id``."""

from __future__ import annotations

from ..base.errors import invalid_field

STR = (str,)
_PLAIN_ROLES = frozenset({"user", "assistant", "system", "developer"})
STR_LIST_NULL = (str, list, type(None))
STR_LIST = (str, list)
_TYPE_NAMES = {str: "a string", list: "an array", dict: "an object", type(None): "null"}


def expect(value, types, param: str) -> None:
    if type(value) not in types:
        raise invalid_field(param, "must be " + " or ".join(_TYPE_NAMES[t] for t in types))


def optional(obj: dict, key: str, types, where: str = "") -> None:
    if key in obj:
        expect(obj[key], types, f"{where}.{key}" if where else key)


def objects(value, param: str) -> list:
    """``value`` must be an array of objects."""
    if type(value) is not list:
        raise invalid_field(param, "must be an array of objects")
    for i, item in enumerate(value):
        if type(item) is not dict:
            raise invalid_field(f"{param}[{i}]", "must be an object")
    return value


def content(msg: dict, where: str, types) -> None:
    """`content`: a string or an array of typed objects (null where the format allows)."""
    if "content" not in msg:
        return
    c = msg["content"]
    expect(c, types, f"{where}.content")
    if type(c) is list:
        for j, block in enumerate(objects(c, f"{where}.content")):
            optional(block, "type", STR, f"{where}.content[{j}]")


def history_items(body: dict, key: str, check_item, required: bool, allow_string: bool) -> None:
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
