"""How a Flask origin reads `Authorization: Basic …`, as Werkzeug's sources do (issue 46),
for the tests that check the edge's guard sees every roleplay key the origin would read
(docs/design.md §2, "Reserved key format"). Werkzeug itself is not a dependency.

- Werkzeug ≥ 2.3 (`Authorization.from_header`): the scheme is what precedes the first
  space, in any case; the rest is stripped and passed, as text, to Python's default
  `base64.b64decode` (validate=False: characters outside the alphabet skipped; non-ASCII
  text raises — a 500, no key read); the bytes are UTF-8; `user:password` split at the
  first colon.
- Werkzeug ≤ 2.2 (`parse_authorization_header`): WSGI's latin-1 bytes split at the first
  run of whitespace; b64decode of the bytes (non-ASCII skipped too); UTF-8 each side.
"""

from __future__ import annotations

import base64


def werkzeug_reads(value: str):
    scheme, _, rest = value.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, _, password = base64.b64decode(rest.strip()).decode().partition(":")
    except (ValueError, UnicodeError):      # binascii.Error, non-ASCII text
        return None
    return user, password


def old_werkzeug_reads(value: str):
    try:
        scheme, info = value.encode("latin-1").split(None, 1)
    except (UnicodeEncodeError, ValueError):
        return None
    if scheme.lower() != b"basic":
        return None
    try:
        user, password = base64.b64decode(info).split(b":", 1)
        return user.decode(), password.decode()
    except (ValueError, UnicodeError):
        return None


def origin_reads_a_key(value: str) -> bool:
    """Whether either reader gets `user:rpk_…` or `rpk_…:…` from this header value."""
    return any(pair is not None and (pair[0].lower().startswith("rpk_") or pair[1].lower().startswith("rpk_"))
               for pair in (werkzeug_reads(value), old_werkzeug_reads(value)))
