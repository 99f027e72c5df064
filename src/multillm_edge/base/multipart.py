"""multipart/form-data (RFC 7578), read as the origin's form parser reads it: pure
parsing of a buffered body (the batch route judges uploads with it, docs/design.md §7.1)."""

from __future__ import annotations

import re


_PARAM = re.compile(r';\s*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)')
_BOUNDARY_CHARS = re.compile(r"[0-9A-Za-z'()+_,./:=? -]{0,69}[0-9A-Za-z'()+_,./:=?-]")
_BLANK_LINE = re.compile(rb"\r\n\r\n|\r\r|\n\n")
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")


def header_params(value: str) -> tuple[str, dict]:
    """A header value's token and its `;` parameters (names lower-cased, quotes removed)."""
    token, _, rest = value.partition(";")
    params = {}
    for name, raw in _PARAM.findall(";" + rest):
        raw = raw.strip()
        if raw[:1] == '"':
            raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
        params.setdefault(name.lower(), raw)
    return token.strip().lower(), params


def form_boundary(content_type: str) -> bytes | None:
    """The boundary of a `multipart/form-data` content type (RFC 2046 §5.1.1), else None."""
    kind, params = header_params(content_type or "")
    boundary = params.get("boundary")
    if kind != "multipart/form-data" or boundary is None or not _BOUNDARY_CHARS.fullmatch(boundary):
        return None
    return boundary.encode("ascii")


def delimiter(boundary: bytes) -> re.Pattern:
    return re.compile(rb"(?:\A|\r\n|\r|\n)--" + re.escape(boundary) + rb"(--)?[ \t]*(\r\n|\r|\n|\Z)")


def form_parts(body: bytes, boundary: bytes) -> list[tuple[dict, bytes]] | None:
    """Each part's headers (lower-case names) and content, or None if the body is not a
    complete form: a delimiter is `--boundary` at the start or after a line break, and
    the last one is closed (`--boundary--`). Linear: one regex scan of the body."""
    parts, start, closed = [], None, False
    for m in delimiter(boundary).finditer(body):
        if start is not None:
            found = part(body[start:m.start()])
            if found is None:
                return None
            parts.append(found)
        if m.group(1):
            closed = True
            break
        start = m.end()
    return parts if closed else None


def part(raw: bytes) -> tuple[dict, bytes] | None:
    blank = _BLANK_LINE.search(raw)
    if blank is None:
        return None
    headers = {}
    for line in _LINE_BREAK.split(raw[:blank.start()]):
        name, colon, value = line.partition(b":")
        if not colon:
            return None
        headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return headers, raw[blank.end():]


