"""The page row (docs/design.md §4): its columns once, one integer rule, two shapes.

- ``PageRow``: a whole ``context_pages`` row as a dict of ``COLUMNS`` (what D1 returns
  for retrieval and search, what ``PageSigner.make_row`` signs, what ``upsert_pages``
  writes). A TypedDict: rows stay plain dicts, so reading one costs nothing.
- ``ActivePage``: the part of an active row a generation turn needs (where its body
  is, how long, until when). A tuple: a steady turn decodes one per stored page.

Integers: D1 may hand back an integral float; a bool is never an integer. Decoding a
row keeps a value that is not an integer as it is, so the row checks refuse it (an
odd row is a miss, never a 500); building or signing a row raises on it.
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple, TypedDict

COLUMNS = ("page_id", "authority", "principal", "session_id", "policy_revision", "sha256",
           "byte_length", "r2_key", "r2_offset", "body_written_at", "created_at",
           "expires_at", "signature")
INT_COLUMNS = frozenset({"policy_revision", "byte_length", "r2_offset", "body_written_at",
                         "created_at", "expires_at"})
STR_COLUMNS = tuple(c for c in COLUMNS if c not in INT_COLUMNS)


class PageRow(TypedDict):
    page_id: str
    authority: str          # "roleplay" here, "managed" for the Flask side
    principal: str
    session_id: str
    policy_revision: int
    sha256: str
    byte_length: int
    r2_key: str             # the object holding the body
    r2_offset: int          # the body's first byte in it
    body_written_at: int    # drives rewrites, unsigned
    created_at: int         # informational, unsigned
    expires_at: int
    signature: str


class ActivePage(NamedTuple):
    """Where an active page row's body is, how long it is, and until when the row lives.
    ``byte_length`` sizes the session's objects for merging (docs/design.md §5.9)."""
    expires_at: int
    body_written_at: int
    r2_key: str
    r2_offset: int
    byte_length: int = 0


assert set(ActivePage._fields) <= set(COLUMNS)


def integer(v: Any) -> int:
    """An integer column's value; TypeError for anything else (bools included)."""
    if isinstance(v, bool):
        raise TypeError("bool is not an integer field")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    raise TypeError("integer field expected")


def read_integer(v: Any) -> Any:
    """``integer(v)`` when it is one, else ``v`` unchanged (decoding: the checks refuse it)."""
    try:
        return integer(v)
    except TypeError:
        return v


def decoded(values: Iterable) -> PageRow:
    """A row from its column values in ``COLUMNS`` order (D1's json_array, or a row's
    prefixed columns), integer columns read with ``read_integer``."""
    row = dict(zip(COLUMNS, values))
    for c in INT_COLUMNS:
        row[c] = read_integer(row[c])
    return row  # type: ignore[return-value]


def active(expires_at, body_written_at, r2_key, r2_offset, byte_length) -> ActivePage:
    """An ActivePage from D1 values (integers read with ``read_integer``)."""
    return ActivePage(read_integer(expires_at), read_integer(body_written_at), r2_key,
                      read_integer(r2_offset), read_integer(byte_length))
