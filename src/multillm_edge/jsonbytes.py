"""The edge's one JSON encoding: compact separators, UTF-8 (docs/design.md §5.8).

Page bodies, upstream bodies, responses and log lines all use it; ``ascii=True`` is
for what must stay unambiguous whatever the text (signed data, SQL parameters, logs).
The paging plan keeps a faster encoder of its own with the same output (paging.py).
"""

from __future__ import annotations

import json


def compact_text(obj, ascii: bool = False) -> str:
    return json.dumps(obj, ensure_ascii=ascii, separators=(",", ":"))


def compact(obj, ascii: bool = False) -> bytes:
    return compact_text(obj, ascii).encode("utf-8")
