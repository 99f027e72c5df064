"""Who may read or write a session's pages (docs/design.md §2, §3, §5.2, §6): the key's
digest, the request's resolved context, and every reason a page row is not served.

Shared by generation, retrieval and search: `request_context` resolves a request once
(flag, bindings, the route's one D1 read, key and grant); `row_misses` is the check a
row passes before its page is served or ranked.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Awaitable, Callable

from ..base.errors import ChatNotGranted, EdgeError, PageNotFound, StorageUnavailable, Unauthorized
from ..base.http import Incoming
from ..base.platform import Bucket, Database, Platform
from ..core import config
from ..core.pages import ROLEPLAY as AUTHORITY, PageSigner, is_valid_location, is_well_formed_page_id
from ..core.rows import PageRow
from ..storage import store

SESSION_HEADER = "x-roleplay-session-id"


def presented_key(req: Incoming) -> str | None:
    """The key the request carries (`Authorization: Bearer`, scheme in any case, else
    `x-api-key`), trimmed; None when it carries none."""
    key = None
    auth = req.header("authorization")
    if auth and auth[:7].lower() == "bearer ":
        key = auth[7:].strip()
    if not key:
        key = (req.header("x-api-key") or "").strip()
    return key or None


def digest(key: str) -> str:
    """A key's SHA-256 hex: all the edge keeps or compares of it."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def key_digest(req: Incoming) -> str:
    """SHA-256 hex of the roleplay key; 401 if none."""
    key = presented_key(req)
    if key is None:
        raise Unauthorized()
    return digest(key)


def database(platform: Platform) -> Database:
    db = platform.db
    if db is None:
        raise StorageUnavailable("D1")
    return db


def page_bodies(platform: Platform) -> Bucket:
    bucket = platform.page_bodies
    if bucket is None:
        raise StorageUnavailable("R2")
    return bucket


def check_principal(facts) -> store.Policy:
    """Key and chat grant; returns the current policy."""
    if facts is None or facts.key_revoked:
        raise Unauthorized()
    if facts.policy is None or not facts.policy.has_grant("chat"):
        raise ChatNotGranted()
    return facts.policy


def warner(platform: Platform) -> Callable[[str], None]:
    """The log's warning line (config.warn_once calls it once per isolate and setting)."""
    return lambda msg: platform.log({"level": "warning", "message": msg})


def paging_enabled(platform: Platform) -> bool:
    """CONTEXT_PAGING_ENABLED, warning once per isolate about an invalid value."""
    return config.flag_state(platform.var(config.FLAG_NAME), warner(platform))


def signer(platform: Platform) -> PageSigner:
    """The page signer; 503 signing_not_configured without a secret or with a short one."""
    secrets = config.signing_secrets(platform.var, warner(platform))
    if secrets is None:
        raise EdgeError(503, "signing_not_configured", "Page signing is not configured: set the "
                        "MEDIA_SIGNING_SECRET secret (openssl rand -base64 32).")
    return PageSigner(*secrets)


@dataclass(frozen=True)
class RequestContext:
    """What a roleplay request resolved once and its later steps read: the platform and
    database, the caller's facts as the route's one D1 read returned them (principal,
    policy, session, the route's rows), key and grant checked, the session id, the clock
    reading the read was made at, the paging flag and, when resolved, the signer."""
    platform: Platform
    db: Database
    caller: object          # store.GenerationContext | store.RetrievalFacts | store.SessionPages
    policy: store.Policy
    session_id: str
    now: int
    paging: bool            # CONTEXT_PAGING_ENABLED
    sign: PageSigner | None = None

    def signer(self) -> PageSigner:
        """The page signer (503 if signing is not configured)."""
        return self.sign or signer(self.platform)

    def page_bodies(self) -> Bucket:
        """The R2 bucket of page bodies (503 if not bound)."""
        return page_bodies(self.platform)

    def reader(self, principal: str, many: bool = False) -> "Reader":
        """Who reads pages here (`row_misses`); ``many``: one id verifier for many rows."""
        sign = self.signer()
        verify = (sign.page_id_verifier(AUTHORITY, principal, self.session_id, self.policy.revision)
                  if many else None)
        return Reader(principal, self.session_id, self.policy, sign, self.now, verify)


Load = Callable[[Database, int], Awaitable[object]]   # (db, now) -> the caller's facts


async def request_context(req: Incoming, platform: Platform, session_id: str, load: Load,
                          paged: bool = False) -> RequestContext:
    """Resolve a request whose key and session id were read: the paging flag; for a
    `paged` route (retrieval, search: they do not exist with the flag off, 404) the
    signer and the R2 binding, in that order; the D1 binding (503); the route's one D1
    read; then the key and chat grant (401/403). Generation makes its signer only when
    it pages."""
    flag = paging_enabled(platform)
    sign = None
    if paged:
        if not flag:
            req.record.note(miss="paging_disabled")
            raise PageNotFound()
        sign = signer(platform)
    db = database(platform)
    if paged:
        page_bodies(platform)
    now = platform.now()
    caller = await load(db, now)
    return RequestContext(platform, db, caller, check_principal(caller), session_id, now, flag, sign)


@dataclass(frozen=True)
class Reader:
    """Whose pages may be served: the caller's principal and session under its current
    policy, at ``now``; ``verify_id`` (``sign.page_id_verifier`` of these facts) when
    many rows are checked, else each id is verified alone."""
    principal: str
    session_id: str
    policy: store.Policy
    sign: PageSigner
    now: int
    verify_id: Callable[[object, object], bool] | None = None

    def id_verifies(self, page_id, sha256) -> bool:
        if self.verify_id is not None:
            return self.verify_id(page_id, sha256)
        return self.sign.verify_page_id(page_id, AUTHORITY, self.principal, self.session_id,
                                        self.policy.revision, sha256)


def row_misses(row: PageRow, page_id: str, reader: Reader) -> list[str]:
    """Every reason a page row may not be served to ``reader``, the session's state aside
    (empty = servable): retrieval's check, and search's before a page is ranked
    (docs/design.md §6.1). No early exit: the work does not say which check failed."""
    misses = [reason for reason, ok in _row_facts(row, page_id, reader) if not ok]
    # The id must be the HMAC of (authority, principal, session, CURRENT revision,
    # sha256) — computed from the caller's facts, not only the row's — and the row
    # must carry a valid signature over all its fields.
    id_ok = reader.id_verifies(page_id, row.get("sha256"))
    row_ok = reader.sign.verify_row(row)
    return misses + [m for m, ok in (("page_id_signature", id_ok), ("row_signature", row_ok)) if not ok]


def _row_facts(row: PageRow, page_id: str, reader: Reader) -> tuple:
    expires = row.get("expires_at")
    return (("expired", isinstance(expires, int) and expires > reader.now),
            ("absent", row.get("page_id") == page_id),
            ("authority", row.get("authority") == AUTHORITY),
            ("principal", row.get("principal") == reader.principal),
            ("other_session", row.get("session_id") == reader.session_id),
            ("stale_revision", row.get("policy_revision") == reader.policy.revision),
            ("r2_key", is_valid_location(row)))


# A syntactically valid id that no row can carry (HMAC output is never this), used
# to keep the verification work constant when the row is absent.
_DUMMY_SHA = "0" * 64


def page_misses(page_id: str, facts: store.RetrievalFacts, reader: Reader) -> list[str]:
    """Every reason retrieval may not serve ``page_id`` (empty = servable). No early exit:
    an absent row costs the same HMAC work as a present one."""
    misses = []
    if not is_well_formed_page_id(page_id):
        misses.append("malformed")
    if not facts.session.open:
        misses.append("session")
    row = facts.page
    if row is None:
        reader.sign.verify_page_id(page_id, AUTHORITY, facts.principal, reader.session_id,
                                   reader.policy.revision, _DUMMY_SHA)
        reader.sign.verify_row({"signature": "", "page_id": page_id})
        misses.append("absent")
        return misses
    if not facts.page_active:
        misses.append("expired")
    return misses + [m for m in row_misses(row, page_id, reader) if m not in misses]
