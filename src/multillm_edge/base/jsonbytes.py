"""The edge's one JSON encoding: compact separators, UTF-8 (docs/design.md §5.8).

Page bodies, upstream bodies, responses and log lines all use it; ``ascii=True`` is
for what must stay unambiguous whatever the text (signed data, SQL parameters, logs).
The paging plan keeps a faster encoder of its own with the same output (prepared.py),
and sends the history's bytes it already holds (``compact_with_list``).
"""

from __future__ import annotations

import json


def compact_text(obj, ascii: bool = False) -> str:
    return json.dumps(obj, ensure_ascii=ascii, separators=(",", ":"))


def compact(obj, ascii: bool = False) -> bytes:
    return compact_text(obj, ascii).encode("utf-8")


def compact_with_list(obj: dict, key: str, items: bytes) -> bytes:
    """``compact(obj)`` where ``obj[key]`` is a list whose items' compact encodings,
    comma-joined, are ``items`` (already encoded: a plan keeps each group's bytes).
    Only the other fields are encoded: a dict encodes as its members in order."""
    before, after, seen = {}, {}, False
    for k, v in obj.items():
        if k == key:
            seen = True
        elif seen:
            after[k] = v
        else:
            before[k] = v
    parts = [compact(before)[1:-1]] if before else []
    parts.append(compact(key) + b":[" + items + b"]")
    if after:
        parts.append(compact(after)[1:-1])
    return b"{" + b",".join(parts) + b"}"
