"""Roleplay sessions: create for the key's principal, end (pages stop being retrievable)."""

from __future__ import annotations

import secrets

from ..base.errors import SessionNotFound, StorageError, StorageFailed
from ..base.http import Incoming, Outgoing, json_response
from ..base.platform import Platform
from ..core import limits
from ..service.access import check_principal, database, key_digest
from ..storage import store


async def _principal(digest: str, db) -> str:
    facts = await store.load_principal(db, digest)
    check_principal(facts)
    return facts.principal


async def create_session(req: Incoming, platform: Platform) -> Outgoing:
    digest = key_digest(req)            # 401 before touching storage
    db = database(platform)
    try:
        principal = await _principal(digest, db)
        session_id = "rps_" + secrets.token_urlsafe(24)
        now = platform.now()
        created = await store.create_session(db, session_id, principal, now)
        if not created:   # sessions_per_day reached (docs/design.md §4.1): its figures
            counted = await store.principal_limits_and_counts(db, principal, now)
    except StorageError:
        raise StorageFailed("The session could not be created.") from None
    if not created:
        raise limits.session_limit_reached(counted.limits.sessions_per_day or 0,
                                           limits.until_tomorrow(now))
    return json_response(201, {"session_id": session_id, "created_at": now})


async def end_session(req: Incoming, platform: Platform) -> Outgoing:
    session_id = req.params["session_id"]
    digest = key_digest(req)
    db = database(platform)
    try:
        principal = await _principal(digest, db)
        ended = await store.end_session(db, session_id, principal, platform.now())
    except StorageError:
        raise StorageFailed("The session could not be ended.") from None
    if not ended:
        raise SessionNotFound()
    return json_response(200, {"session_id": session_id, "ended": True})
