"""Routing (docs/design.md §2): what the edge answers itself; everything else goes to the origin."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Callable

from .base import cors
from .base.errors import EDGE_ENVELOPE, EdgeBusy, EdgeError, Envelope, InternalError, StorageError
from .base.platform import Platform
from .core import config
from .formats import messages
from .formats.registry import FORMATS
from .routes import batch
from .routes.generation import generate
from .routes.misdirected import HEADER, session_required
from .routes.models import list_models
from .routes.retrieval import SESSION_PARAM, retrieve_page
from .routes.search import search_pages
from .routes.sessions import create_session, end_session
from .routes.usage import usage_report
from .base.http import Incoming, Outgoing, error_response, json_response
from .service import budget
from .service.access import SESSION_HEADER, paging_enabled, warner
from .service.origin import forward
from .service.reserved_keys import carries_roleplay_key
from .storage import store


async def healthz(req: Incoming, platform: Platform) -> Outgoing:
    """Readiness as booleans, plus the settings whose value is invalid (`config_errors`,
    names only) and the providers registered models name that PROVIDERS lacks
    (docs/design.md §2, §3). Ready = tables, bucket, signing and a valid PROVIDERS."""
    db, warn = platform.db, warner(platform)
    try:
        tables_ok = db is not None and not await store.missing_tables(db)
        registered = await store.model_providers(db) if tables_ok else []
    except StorageError:
        tables_ok, registered = False, []
    checks = {
        "d1_tables": tables_ok,
        "r2_binding": platform.page_bodies is not None,
        "signing_configured": _signing_configured(platform),
        "paging_enabled": paging_enabled(platform),
        "config_errors": config.config_errors(platform.var),
        "missing_providers": _missing_providers(platform, registered, warn),
    }
    # An ignored CORS entry or an invalid flag (paging off) leaves the edge serving; an
    # invalid PROVIDERS fails every generation (a short secret already fails signing).
    ready = (checks["d1_tables"] and checks["r2_binding"] and checks["signing_configured"]
             and config.PROVIDERS_NAME not in checks["config_errors"])
    return json_response(200 if ready else 503, {"ok": ready, **checks},
                         [("cache-control", "no-store")])


def _signing_configured(platform: Platform) -> bool:
    try:
        return config.signing_secrets(platform.var, warner(platform)) is not None
    except EdgeError:
        return False


def _missing_providers(platform: Platform, registered: list, warn) -> list:
    try:
        configured = config.providers(platform.var(config.PROVIDERS_NAME), warn)
    except EdgeError:
        return []               # config_errors names PROVIDERS
    missing = config.missing_providers(registered, configured)
    if missing:
        config.warn_unserved(warn)
    return missing


@dataclass(frozen=True)
class Route:
    """One row of the routing table, in the spirit of starlette's ``Route``: a method,
    a path pattern whose ``{name}`` parts become ``req.params`` (a parameter takes the
    rest of the path, slashes included and possibly empty, so no look-alike path
    escapes to the origin),
    an extra condition, constants for the handler, the error envelope, and what its
    handler holds per byte of the request body (``body_factor``: 0, never read; §7.2)."""
    methods: tuple
    pattern: str
    handler: Callable
    when: Callable[[Incoming], bool] = lambda req: True
    constants: dict = field(default_factory=dict)
    envelope: Envelope = EDGE_ENVELOPE   # a generation route's: its wire format's
    cors: bool = False                   # browser-callable for CORS_ALLOWED_ORIGINS (base/cors.py)
    body_factor: float = 0.0             # bytes held per body byte (service/budget.py)
    regex: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        # `{name}` -> a named group; compiled once, with the table
        path = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>.*)", re.escape(self.pattern))
        object.__setattr__(self, "regex", re.compile(path))

    def match(self, req: Incoming) -> dict | None:
        if req.method not in self.methods or not self.when(req):
            return None
        m = self.regex.fullmatch(req.path)
        return None if m is None else {**self.constants, **m.groupdict()}


def _roleplay(req: Incoming) -> bool:
    # Present at all (even empty) makes it roleplay traffic: an empty session id is a
    # 400 at the edge, never a request (and roleplay key) forwarded to the origin.
    return req.header(SESSION_HEADER) is not None


def _session_param(req: Incoming) -> bool:
    return SESSION_PARAM in req.query     # without it: a managed handle, the origin's


def _needs_session(method: str, pattern: str, where: str = HEADER, envelope: Envelope = EDGE_ENVELOPE) -> Route:
    """The path of a roleplay route whose session is missing, with a roleplay key: 400
    naming ``where`` (the header or the query parameter), never forwarded (§2)."""
    return Route((method,), pattern, session_required, carries_roleplay_key,
                 {"session_in": where, "on": pattern}, envelope)


ROUTES = (
    Route(("GET", "HEAD"), "/healthz", healthz),
    *(Route(("POST",), f.CLIENT_PATH, generate, _roleplay, {"fmt": f.NAME}, f.ERROR_ENVELOPE,
            body_factor=budget.BODY_FACTOR) for f in FORMATS),
    *(_needs_session("POST", f.CLIENT_PATH, envelope=f.ERROR_ENVELOPE) for f in FORMATS),
    Route(("POST",), "/v1/roleplay/sessions", create_session, cors=True, body_factor=2),
    Route(("DELETE",), "/v1/roleplay/sessions/{session_id}", end_session, cors=True),
    Route(("GET",), "/v1/roleplay/usage", usage_report, cors=True),
    Route(("GET",), "/v1/context/pages/{page_id}", retrieve_page, _session_param, cors=True),
    _needs_session("GET", "/v1/context/pages/{page_id}", SESSION_PARAM),
    Route(("POST",), "/v1/context/search", search_pages, _roleplay, cors=True, body_factor=4),
    _needs_session("POST", "/v1/context/search"),
    # A live roleplay key's models; any other request forwarded (routes/models.py)
    Route(("GET",), "/v1/models", list_models),
    # Batch items never page (§7.1): judged with the flag on, else forwarded as before.
    Route(("POST",), "/v1/files", batch.upload_file, body_factor=budget.BATCH_FACTOR),
    Route(("POST",), "/v1/messages/batches", batch.inline_batch, envelope=messages.ERROR_ENVELOPE,
          body_factor=budget.BATCH_FACTOR),
    Route(("POST",), "/v1/batches", batch.create_batch, body_factor=budget.BATCH_FACTOR),
)
FORWARD = Route((), "", forward)
# An error the edge answers on a forwarded Anthropic path (a roleplay key refused, no
# origin) is in Anthropic's envelope, as on its routes there (§8).
FORWARD_MESSAGES = Route((), "", forward, envelope=messages.ERROR_ENVELOPE)
PREFLIGHT = Route(("OPTIONS",), "", cors.preflight)   # for the log line: answered by base/cors.py


def route(req: Incoming) -> Route:
    """The route answering ``req`` (its ``params`` set), else forwarding (docs/design.md §2)."""
    for r in ROUTES:
        params = r.match(req)
        if params is not None:
            req.params = params
            return r
    anthropic = req.path == messages.CLIENT_PATH or req.path.startswith(messages.CLIENT_PATH + "/")
    return FORWARD_MESSAGES if anthropic else FORWARD


async def handle(req: Incoming, platform: Platform) -> Outgoing:
    started = time.monotonic()
    matched = route(req)
    try:
        out = cors.preflight(req, platform, route)
        if out is None:
            # the bytes it will hold, or 503 edge_busy before anything is read (§7.2)
            req.ticket = await budget.BUDGET.admit(budget.wanted(req, matched.body_factor),
                                                   large=budget.large(req, matched.body_factor))
            out = await matched.handler(req, platform)
        else:
            matched = PREFLIGHT
    except MemoryError:
        # the caches go first; the request is answered, never killed (§7.2, §8)
        budget.BUDGET.clear_caches()
        if budget.stuck(req, matched.body_factor):     # nothing else holds the room
            platform.memory_exhausted()
        err = EdgeBusy(budget.RETRY_AFTER_SECONDS)
        req.notes.update(error=err.code, memory_error=True)
        out = error_response(err, matched.envelope)
    except EdgeError as err:
        req.notes["error"] = err.code
        out = error_response(err, matched.envelope)
        # A skipped candidate's stored error raised again references the handler's
        # frames, which reference it: without the traceback the request's objects (its
        # body among them) go at once, not at the next cycle collection.
        err.__traceback__ = None
    except Exception as exc:  # noqa: BLE001 — the Worker answers, in the route's envelope
        req.notes.update(error=InternalError.code, exception=type(exc).__name__)
        out = error_response(InternalError(), matched.envelope)
        exc.__traceback__ = None
    finally:
        budget.finished(req)
    if matched.cors:
        cors.decorate(out, req, platform)
    platform.log({"route": matched.handler.__name__, "method": req.method, "status": out.status,
                  "ms": round((time.monotonic() - started) * 1000, 1), **req.notes})
    return out
