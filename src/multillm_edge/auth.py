"""Roleplay key extraction and the checks every roleplay route shares (docs/design.md §2, §3, §5.2)."""

from __future__ import annotations

import hashlib

from . import config, store
from .errors import ChatNotGranted, EdgeError, Unauthorized
from .http import Incoming
from .pages import PageSigner

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
