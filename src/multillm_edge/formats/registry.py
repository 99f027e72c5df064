"""The wire formats the edge speaks, one line each (docs/design.md §5.6). Routing,
validation, dispatch and error rendering read a format from here, never by name."""

from __future__ import annotations

from . import chat, messages, responses

FORMATS = (
    chat,
    responses,
    messages,
)
BY_NAME = {f.NAME: f for f in FORMATS}
NAMES = tuple(BY_NAME)


def get(fmt: str):
    try:
        return BY_NAME[fmt]
    except KeyError:
        raise ValueError(f"unknown wire format {fmt!r}") from None
