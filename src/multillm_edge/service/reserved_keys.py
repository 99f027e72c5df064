"""The roleplay key format is reserved (docs/design.md §2, "Reserved key format"): a
request carrying a key of that format is never forwarded, to the origin or anywhere else.

The format is the admin CLI's prefix, `rpk_` (tools/admin.py makes `rpk_` + 43 URL-safe
characters). Every `Authorization` and `x-api-key` value (each occurrence, a
comma-joined list included) is searched for a token starting with the prefix in any
letter case — at the value's start or after a character no key holds (space, tab,
comma, `=`, a quote) — so no scheme spelling (`Bearer`, `bearer`, `BEARER<TAB>`, none,
`Token`, `key=`) lets one through; a Basic credential is decoded and searched too.
Keys of any other form (the origin's own) are forwarded byte-identical (§7).

On a path the edge forwards, such a request is answered here (`refuse`): 401 when the
key the edge reads is unknown, revoked or not the one of that format, 403
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
_BASIC = re.compile(r"(?<![A-Za-z0-9])basic\s+([A-Za-z0-9+/_\-]+)", re.IGNORECASE)
_URLSAFE = str.maketrans("-_", "+/")


class UnknownRoleplayKey(Unauthorized):
    message = ("This roleplay key (rpk_…) is unknown or revoked. Keys starting with rpk_ are "
               "reserved for the roleplay edge and never forwarded to the origin.")


class RoleplayKeyNotAccepted(EdgeError):
    status, code = 403, "roleplay_key_not_accepted"
    message = ("Roleplay keys (rpk_…) are accepted only by the edge's roleplay routes "
               "(generation with X-Roleplay-Session-ID, /v1/roleplay/sessions, "
               "/v1/context/pages with roleplay_session_id, /v1/context/search, GET /v1/models) "
               "and are never forwarded to the origin: use the origin's own key here.")


def _decoded_basic(value: str):
    for m in _BASIC.finditer(value):
        try:
            yield base64.b64decode(m.group(1).translate(_URLSAFE) + "==").decode("latin-1")
        except (binascii.Error, ValueError):
            continue


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
    format; None otherwise (no key of that format could be live then)."""
    key = presented_key(req)
    if key is None or not key.startswith(KEY_PREFIX):
        return None
    return digest(key)


async def refuse(req: Incoming, platform: Platform) -> EdgeError:
    """The answer to a request with a reserved-format key on a path the edge forwards:
    401 unless the key the edge reads is live, then 403. One D1 read, only for a key that
    could be live; without D1 (or when the read fails) 503: nothing is forwarded."""
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
