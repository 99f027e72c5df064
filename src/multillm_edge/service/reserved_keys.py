"""The roleplay key format is reserved (docs/design.md §2, "Reserved key format"): a
request carrying a key of that format is never forwarded, to the origin or anywhere else.

The format is the admin CLI's prefix, `rpk_` (tools/admin.py makes `rpk_` + 43 URL-safe
characters). Every `Authorization` and `x-api-key` value (each occurrence, a
comma-joined list included) is searched for a token starting with the prefix in any
letter case — at the value's start or after a character no key holds (space, tab,
comma, `=`, a quote) — so no scheme spelling (`Bearer`, `bearer`, `BEARER<TAB>`, none,
`Token`, `key=`) lets one through. A Basic credential is decoded as the origin will
(Werkzeug reads it with Python's default `base64.b64decode`, which skips characters
outside the alphabet and stops at the first complete padding): everything after
`basic` and whitespace, in any case, non-ASCII characters dropped, in the standard and
the URL-safe alphabet, padded where the end lacks it; and the same up to a comma (an
origin reading one of several joined values). Keys of any other form (the origin's own)
are forwarded byte-identical (§7).

On a path the edge forwards, such a request is answered here (`refuse`): 401 when the
key the edge reads is unknown, revoked or not of the full format (`rpk_` + 43 URL-safe
characters: no other can be live, so it costs no storage call), 403
`roleplay_key_not_accepted` when it is live (it is valid, only not for this path).
"""

from __future__ import annotations

import base64
import binascii
import re

from ..base.errors import EdgeError, StorageError, StorageFailed, Unauthorized
from ..base.http import Incoming
from ..base.platform import Platform
from ..storage import store
from .access import database, digest, presented_key

KEY_PREFIX = "rpk_"
CREDENTIAL_HEADERS = ("authorization", "x-api-key")
# The prefix where a token starts: not right after a character a key holds (base64url).
_RESERVED = re.compile(r"(?<![A-Za-z0-9_\-])" + KEY_PREFIX, re.IGNORECASE)
# The prefix then the admin CLI's 43 URL-safe characters (token_urlsafe(32)): only such a
# key can be live.
_FULL_KEY = re.compile(KEY_PREFIX + r"[A-Za-z0-9_\-]{43}")
_BASIC = re.compile(r"(?<![A-Za-z0-9])basic\s+", re.IGNORECASE)
_URLSAFE = bytes.maketrans(b"-_", b"+/")
# A padding that completes any end b64decode refuses: 2 or 3 characters of a quad ("=="),
# or 1 (a character more, then "==": one byte more than the quads hold, never a key's).
_PADDINGS = (b"", b"==", b"A==")


class UnknownRoleplayKey(Unauthorized):
    message = ("This roleplay key (rpk_…) is unknown or revoked. Keys starting with rpk_ are "
               "reserved for the roleplay edge and never forwarded to the origin.")


class RoleplayKeyNotAccepted(EdgeError):
    status, code = 403, "roleplay_key_not_accepted"
    message = ("Roleplay keys (rpk_…) are accepted only by the edge's roleplay routes "
               "(generation with X-Roleplay-Session-ID, /v1/roleplay/sessions, "
               "/v1/context/pages with roleplay_session_id, /v1/context/search, GET /v1/models) "
               "and are never forwarded to the origin: use the origin's own key here.")


def lenient_b64decode(data: bytes) -> bytes:
    """``base64.b64decode(data)`` (validate=False: what Werkzeug calls), and where it
    refuses the end (no or short padding, a lone last character), the bytes read with the
    end padded: never less than an origin reading it with or without padding."""
    for pad in _PADDINGS:
        try:
            return base64.b64decode(data + pad)
        except binascii.Error:
            continue
    return b""      # unreachable: "A==" completes any end


def _basic_tokens(value: str):
    """What an origin may decode as a Basic credential: all after the first `basic`
    (Werkzeug decodes the rest of the value), and, in a comma-joined list, what follows
    `basic` up to the next comma. Each character is decoded at most twice: a value of
    many `basic`s costs no more than a long one."""
    m = _BASIC.search(value)
    if m is None:
        return
    yield value[m.end():]
    if "," in value:
        for part in value.split(","):
            m = _BASIC.search(part)
            if m is not None:
                yield part[m.end():]


def _decoded_basic(value: str):
    """Each text a Basic credential in ``value`` may decode to, as latin-1 (every byte
    one character: a key the origin reads as UTF-8 reads the same here)."""
    for token in _basic_tokens(value):
        # b64decode refuses a str with non-ASCII; a bytes origin (Werkzeug < 2.3) skips it
        data = token.encode("ascii", "ignore")
        yield lenient_b64decode(data).decode("latin-1")
        if b"-" in data or b"_" in data:    # the URL-safe alphabet, where it differs
            yield lenient_b64decode(data.translate(_URLSAFE)).decode("latin-1")


def reserved(value: str) -> bool:
    """Whether one credential header's value holds a key of the reserved format."""
    low = value.lower()     # the plain tests first: every forwarded request pays this
    if KEY_PREFIX in low and _RESERVED.search(value):
        return True
    return "basic" in low and any(_RESERVED.search(text) for text in _decoded_basic(value))


def carries_roleplay_key(req: Incoming) -> bool:
    return any(name in CREDENTIAL_HEADERS and reserved(value) for name, value in req.headers)


def roleplay_key_digest(req: Incoming) -> str | None:
    """The digest of the key the edge reads (`Bearer`, else `x-api-key`) when it has the
    full format; None otherwise (no other key could be live: no storage call for junk)."""
    key = presented_key(req)
    if key is None or not _FULL_KEY.fullmatch(key):
        return None
    return digest(key)


async def refuse(req: Incoming, platform: Platform) -> EdgeError:
    """The answer to a request with a reserved-format key on a path the edge forwards:
    401 unless the key the edge reads is live, then 403. One D1 read, only for a key of
    the full format (``roleplay_key_digest``); without D1 (or when the read fails) 503: nothing is forwarded."""
    sha = roleplay_key_digest(req)
    facts = None if sha is None else await key_facts(req, platform, sha)
    req.record.note(forwarded="refused_roleplay_key")
    if facts is None or facts.key_revoked:
        return UnknownRoleplayKey()
    return RoleplayKeyNotAccepted()


async def key_facts(req: Incoming, platform: Platform, sha: str, load=store.load_principal):
    """The key's facts as ``load`` reads them (None = unknown); 503 without D1 or when
    the read fails: a key of the reserved format is never forwarded instead."""
    db = database(platform)
    with req.record.wall("d1_ms"):
        try:
            return await load(db, sha)
        except StorageError:
            raise StorageFailed("The roleplay key could not be checked.") from None
