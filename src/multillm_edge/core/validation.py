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

import codecs
import json
import math
import re

from .. import formats
from ..base.errors import EdgeError, invalid_field
from ..formats.fields import optional

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
    outside = b"".join(map(_quotes_and_brackets, _slices(raw))).replace(b'""', b"")
    if b'"' in outside:
        outside = b"".join(outside.split(b'"')[::2])
    return outside.translate(_PARENS)


#: ``_brackets`` reads a body this much at a time: its passes copy a slice, never the
#: whole body (a large body's bytes are one block, and the heap has room for few more:
#: docs/design.md §7.2)
SLICE_BYTES = 2 << 20


def _slices(raw: bytes):
    """``raw`` in consecutive slices of about SLICE_BYTES (``raw`` itself when shorter),
    each cut after a byte that is not a backslash: no escape spans two."""
    start, n = 0, len(raw)
    while start < n:
        end = min(start + SLICE_BYTES, n)
        while end < n and raw[end - 1] == 0x5C:
            end += 1
        yield raw[start:end]
        start = end


def _quotes_and_brackets(part: bytes) -> bytes:
    """``part``'s quotes that delimit strings, and its brackets (escapes neutralized)."""
    if b'\\"' in part:
        if b'\\\\"' in part:          # a quote after 2+ backslashes: pair them all first
            part = part.replace(b"\\\\", b"__")
        part = part.replace(b'\\"', b"__")
    return part.translate(None, _ONLY_QUOTES_AND_BRACKETS)


def bracket_count(raw: bytes) -> int:
    """The arrays' and objects' bracket bytes in ``raw`` (exact for valid JSON)."""
    return len(_brackets(raw))


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
    return parse_json_counted(raw)[0]


def parse_json_counted(raw: bytes, pairs_hook=None) -> tuple:
    """``parse_json(raw)`` and the bracket bytes it counted (what a body resumed from
    this one may add, core/resume.py); ``pairs_hook``: json's ``object_pairs_hook``."""
    brackets = _brackets(raw)
    if len(brackets) > 2 * MAX_BRACKETS:
        raise _invalid_json(f"Request body holds more than {MAX_BRACKETS} arrays and objects.")
    if _nests_deeper(brackets, MAX_DEPTH):
        raise _invalid_json(f"Request body nests deeper than {MAX_DEPTH} levels.")
    if pairs_hook is None and len(raw) >= NARROW_MIN_BYTES:
        body = _parse_narrow(raw)
        if body is not _NOT_NARROW:
            return body, len(brackets)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _invalid_json("Request body is not valid UTF-8.") from None
    except MemoryError:
        # no block for the text a body this size decodes to (4 bytes a character): its
        # narrow view needs one byte a byte (docs/design.md §7.2); else the error stands
        body = _parse_narrow(raw) if pairs_hook is None else _NOT_NARROW
        if body is _NOT_NARROW:
            raise
        return body, len(brackets)
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                          object_pairs_hook=pairs_hook), len(brackets)
    except RecursionError:
        raise _invalid_json(f"Request body nests deeper than {MAX_DEPTH} levels.") from None
    except ValueError:  # JSONDecodeError, NaN/Infinity, overflow, huge integer literals
        raise _invalid_json("Request body is not valid JSON.") from None


class _DuplicateKey(Exception):
    pass


def _no_duplicates(pairs):
    """An object's keys checked, and nothing of it kept: the check holds one object
    at a time, not a second parse of the body (docs/design.md §7.2)."""
    if len({k for k, _ in pairs}) != len(pairs):
        raise _DuplicateKey
    return None


def has_duplicate_keys(raw: bytes) -> bool:
    """Whether some object in ``raw`` (already parsed once) repeats a key. Providers
    disagree on which value wins; the edge validated the last one. Read through its
    narrow view when that compares keys exactly (equal views are equal UTF-8 bytes)."""
    text = _narrow_view(raw)
    try:
        json.loads(raw if text is None else text, object_pairs_hook=_no_duplicates)
    except _DuplicateKey:
        return True
    return False


# -- The narrow parse (docs/design.md §7.2) ---------------------------------------------
# A body holding one character past U+FFFF (an emoji) decodes to a str of 4 bytes per
# character: json.loads then holds that text (4 × the body) and the parse together, ~8 ×
# the body at its peak. Its Latin-1 view is 1 byte per byte, and parses to the same
# structure; each string that is not ASCII is then its UTF-8 bytes read as Latin-1, so
# re-read as UTF-8 it is the exact value — unless an escape (``\u00e9``) made a
# non-ASCII character in it, which the view would read as a character rather than a
# byte: any such escape, and any doubt at all, takes the exact path, which also raises
# the exact error.

#: Bodies at least this long are parsed through their narrow view: smaller ones gain
#: little memory, and the path costs a walk of the parse (a new isolate's turn of a
#: 1.2 MiB chat took 39.4 → 48.6 ms in Pyodide with it; a 7.6 MiB body's parse, CPython,
#: 52 → 55 ms)
NARROW_MIN_BYTES = 2 << 20
#: An escape that may make a character past U+007F (``\\u`` before it: a false alarm,
#: which only costs the exact path)
_WIDE_ESCAPE = re.compile(rb"\\u(?!00[0-7])")
_NOT_NARROW = object()
_CHECK_BYTES = 64 * 1024


def _narrow_view(raw: bytes) -> str | None:
    """``raw`` read as Latin-1 when that view keeps every string's UTF-8 bytes (and
    ASCII escapes) exactly; None when ``raw`` is ASCII (its own text is as narrow) or
    an escape may make a non-ASCII character."""
    if raw.isascii() or _WIDE_ESCAPE.search(raw):
        return None
    return raw.decode("latin-1")


def _is_utf8(raw: bytes) -> bool:
    """Whether ``raw`` is valid UTF-8, decoded a slice at a time (never all at once)."""
    decoder, view = codecs.getincrementaldecoder("utf-8")(), memoryview(raw)
    try:
        for at in range(0, len(raw), _CHECK_BYTES):
            decoder.decode(view[at:at + _CHECK_BYTES])
        decoder.decode(b"", True)
    except UnicodeDecodeError:
        return False
    return True


def _parse_narrow(raw: bytes):
    """``raw`` parsed through its narrow view → the same value as the exact path, or
    _NOT_NARROW (no view, invalid UTF-8 anywhere, or any error: the exact path decides)."""
    text = _narrow_view(raw)
    if text is None or not _is_utf8(raw):
        return _NOT_NARROW
    try:
        body = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
        del text
        return _widen(body)
    except (ValueError, RecursionError):     # the exact path raises the exact error
        return _NOT_NARROW


def _wide(s: str) -> str:
    return s if s.isascii() else s.encode("latin-1").decode("utf-8")


def _widen(value):
    """Every string in ``value`` read back from its Latin-1 view, in place."""
    if type(value) is str:
        return _wide(value)
    todo = [value] if type(value) in (dict, list) else []
    while todo:
        node = todo.pop()
        if type(node) is dict:
            if not all(map(str.isascii, node)):
                pairs = [(_wide(k), v) for k, v in node.items()]
                node.clear()
                node.update(pairs)
            entries = node.items()
        else:
            entries = enumerate(node)
        for k, v in entries:            # a value replaced in place: no size changes
            t = type(v)
            if t is str:
                if not v.isascii():
                    node[k] = _wide(v)
            elif t is dict or t is list:
                todo.append(v)
    return value


# ---------------------------------------------------------------------------
# Fields the edge reads: the format's own (formats/), then the shared ones
# ---------------------------------------------------------------------------

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
    mod = formats.get(fmt)
    mod.check(body)
    for key in mod.MAX_TOKEN_FIELDS:
        _positive_int(body, key)
    _strings(body, "models", MAX_MODELS)
    _strings(body, "capabilities")
    optional(body, "tools", (list, type(None)))
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


# ---------------------------------------------------------------------------
# The search route's body (docs/design.md §6.1)
# ---------------------------------------------------------------------------

#: Longest search body read (a 1,000-character query in \uXXXX escapes is ~12 KiB).
MAX_SEARCH_BODY = 16 * 1024
MAX_QUERY_CHARS = 1000
SEARCH_LIMITS = (1, 10)
DEFAULT_SEARCH_LIMIT = 5


def search_request(raw: bytes) -> tuple[str, int]:
    """`{"query": string, "limit"?: integer}` → (query, limit); 400 naming the field.
    Other fields are ignored (nothing is forwarded); `limit: null` is the default."""
    body = parse_json(raw)
    if type(body) is not dict:
        raise EdgeError(400, "invalid_request", "Request body must be a JSON object.")
    query = body.get("query")
    if type(query) is not str:
        raise invalid_field("query", "must be a string")
    if not query.strip() or len(query) > MAX_QUERY_CHARS:
        raise invalid_field("query", f"must be 1 to {MAX_QUERY_CHARS} characters, not blank")
    try:
        query.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid_field("query", "must not contain a lone surrogate") from None
    limit = body.get("limit")
    if limit is None:
        return query, DEFAULT_SEARCH_LIMIT
    low, high = SEARCH_LIMITS
    if type(limit) is not int or not low <= limit <= high:   # a bool is not an int here
        raise invalid_field("limit", f"must be an integer from {low} to {high}")
    return query, limit
