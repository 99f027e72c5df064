"""The roles every format reads the same way: one table instead of each format module
spelling them out (the `classify` interface: formats/__init__ docstring, docs/design.md §5.6).

A message whose role alone says what it is: ``user`` starts a turn, ``system`` and
``developer`` stand alone, anything else (any value JSON can hold) is part of the
exchange around it. Each format's ``classify`` handles its tool calls and results, then
asks :func:`by_role`.
"""

from __future__ import annotations

from . import NONE, PLAIN, SYSTEM, USER
_BY_ROLE = {"user": (USER, NONE, NONE), "system": (SYSTEM, NONE, NONE),
            "developer": (SYSTEM, NONE, NONE)}


def by_role(role) -> tuple:
    """``classify``'s answer for a message known by its role only."""
    return _BY_ROLE.get(role, PLAIN) if type(role) is str else PLAIN
