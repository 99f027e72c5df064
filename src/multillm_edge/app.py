"""Routing (docs/design.md §2): what the edge answers itself; everything else goes to the origin."""

from __future__ import annotations

import time

from . import store
from .auth import SESSION_HEADER, paging_enabled
from .config import signing_secrets
from .errors import EdgeError, InternalError, StorageError
from .forward import forward
from .generation import FORMAT_BY_PATH, generate
from .retrieval import is_retrieval, retrieve_page
from .sessions import SESSIONS_PATH, create_session, end_session
from .http import Incoming, Outgoing, error_response, json_response


async def healthz(req: Incoming, platform) -> Outgoing:
    db = platform.db
    try:
        tables_ok = db is not None and not await store.missing_tables(db)
    except StorageError:
        tables_ok = False
    checks = {
        "d1_tables": tables_ok,
        "r2_binding": platform.page_bodies is not None,
        "signing_configured": signing_secrets(platform.var) is not None,
        "paging_enabled": paging_enabled(platform),
    }
    ready = checks["d1_tables"] and checks["r2_binding"] and checks["signing_configured"]
    return json_response(200 if ready else 503, {"ok": ready, **checks},
                         [("cache-control", "no-store")])


def route(req: Incoming):
    """The handler for a request, or None to forward it (docs/design.md §2)."""
    if req.path == "/healthz" and req.method in ("GET", "HEAD"):
        return healthz
    # Present at all (even empty) makes it roleplay traffic: an empty session id is a
    # 400 at the edge, never a request (and roleplay key) forwarded to the origin.
    if req.method == "POST" and req.path in FORMAT_BY_PATH and req.header(SESSION_HEADER) is not None:
        return generate
    if req.path == SESSIONS_PATH and req.method == "POST":
        return create_session
    if req.path.startswith(SESSIONS_PATH + "/") and req.method == "DELETE":
        return end_session
    if is_retrieval(req):  # GET /v1/context/pages/{id}?roleplay_session_id=… (else forwarded)
        return retrieve_page
    return None


async def handle(req: Incoming, platform) -> Outgoing:
    started = time.monotonic()
    handler = route(req) or forward
    anthropic = req.path == "/v1/messages"
    try:
        out = await handler(req, platform)
    except EdgeError as err:
        req.notes["error"] = err.code
        out = error_response(err, anthropic=anthropic)
    except Exception as exc:  # noqa: BLE001 — the Worker answers, in the route's envelope
        req.notes.update(error=InternalError.code, exception=type(exc).__name__)
        out = error_response(InternalError(), anthropic=anthropic)
    platform.log({"route": handler.__name__, "method": req.method, "status": out.status,
                  "ms": round((time.monotonic() - started) * 1000, 1), **req.notes})
    return out
