"""Roleplay key extraction and the checks every roleplay route shares (docs/design.md §2, §3,
§5.2, §6): `request_context` resolves a generation or a retrieval once."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Awaitable, Callable

from ..core import config
from ..storage import store
from ..base.errors import ChatNotGranted, EdgeError, PageNotFound, Unauthorized
from ..base.http import Incoming
from ..core.pages import PageSigner

SESSION_HEADER = "x-roleplay-session-id"


def key_digest(req: Incoming) -> str:
    """SHA-256 hex of the roleplay key (`Authorization: Bearer` or `x-api-key`); 401 if none."""
    key = None
    auth = req.header("authorization")
    if auth and auth[:7].lower() == "bearer ":
        key = auth[7:].strip()
    if not key:
        key = (req.header("x-api-key") or "").strip()
    if not key:
        raise Unauthorized()
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def database(platform):
    db = platform.db
    if db is None:
        raise EdgeError(503, "storage_unavailable", "The D1 binding is not configured.")
    return db


def page_bodies(platform):
    bucket = platform.page_bodies
    if bucket is None:
        raise EdgeError(503, "storage_unavailable", "The R2 binding is not configured.")
    return bucket


def check_principal(facts) -> store.Policy:
    """Key and chat grant; returns the current policy."""
    if facts is None or facts.key_revoked:
        raise Unauthorized()
    if facts.policy is None or not facts.policy.has_grant("chat"):
        raise ChatNotGranted()
    return facts.policy


def paging_enabled(platform) -> bool:
    """CONTEXT_PAGING_ENABLED, warning once per isolate about an invalid value."""
    return config.flag_state(platform.var(config.FLAG_NAME),
                             lambda msg: platform.log({"level": "warning", "message": msg}))


def signer(platform) -> PageSigner:
    secrets = config.signing_secrets(platform.var)
    if secrets is None:
        raise EdgeError(503, "signing_not_configured", "Page signing is not configured.")
    return PageSigner(*secrets)


@dataclass(frozen=True)
class RequestContext:
    """What a roleplay request resolved once and its later steps read: the platform and
    database, the caller's facts as the route's one D1 read returned them (principal,
    policy, session, the route's rows), key and grant checked, the session id, the clock
    reading the read was made at, the paging flag and, when resolved, the signer."""
    platform: object
    db: object
    caller: object          # store.GenerationContext | store.RetrievalFacts
    policy: store.Policy
    session_id: str
    now: int
    paging: bool            # CONTEXT_PAGING_ENABLED
    sign: PageSigner | None = None

    def signer(self) -> PageSigner:
        """The page signer (503 if signing is not configured)."""
        return self.sign or signer(self.platform)

    def page_bodies(self):
        """The R2 bucket of page bodies (503 if not bound)."""
        return page_bodies(self.platform)


Load = Callable[[object, int], Awaitable[object]]   # (db, now) -> the caller's facts


async def request_context(req: Incoming, platform, session_id: str, load: Load,
                          paged: bool = False) -> RequestContext:
    """Resolve a request whose key and session id were read: the paging flag; for a
    `paged` route (retrieval: it does not exist with the flag off, 404) the signer and
    the R2 binding, in that order; the D1 binding (503); the route's one D1 read; then
    the key and chat grant (401/403). Generation makes its signer only when it pages."""
    flag = paging_enabled(platform)
    sign = None
    if paged:
        if not flag:
            req.notes["miss"] = "paging_disabled"
            raise PageNotFound()
        sign = signer(platform)
    db = database(platform)
    if paged:
        page_bodies(platform)
    now = platform.now()
    caller = await load(db, now)
    return RequestContext(platform, db, caller, check_principal(caller), session_id, now, flag, sign)
