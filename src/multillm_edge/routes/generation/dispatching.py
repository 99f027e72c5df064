"""Step 3: try the candidates in order, storing each one's pages first (docs/design.md §5.8)."""

from __future__ import annotations

import time

from ...base.errors import EdgeError
from ...base.http import Handoff, Incoming
from ...base.timing import timed
from ...core import config
from ...core.validation import has_duplicate_keys
from ...formats import get as format_module
from .planning import Candidate, Sent
from .scope import Scope, Turn, error
from ...core.pages import ROLEPLAY as AUTHORITY, Owner
from ...service import storing
from ...service.budget import waiting_on_upstream


RETRY_STATUSES = frozenset({408, 429}) | frozenset(range(500, 600))
# Client headers a provider may need; everything else (the roleplay key above all) stays here.

PASSED_HEADERS = ("accept", "anthropic-version", "anthropic-beta", "openai-beta")


def upstream_headers(req: Incoming, fmt: str, provider: config.Provider, platform) -> list:
    key = platform.var(provider.api_key_secret)
    version = format_module(fmt).VERSION_HEADER
    auth = config.provider_auth_headers(fmt, key, req.header(version) if version else None, provider)
    headers = [("content-type", "application/json")]
    headers += [(k, req.header(k)) for k in PASSED_HEADERS
                if req.header(k) is not None and k not in auth]
    return headers + list(auth.items())


class Held:
    """The client's raw body and its parse, held only while a candidate still to try may
    need them: let go before the last candidate's request waits (docs/design.md §7.2)."""
    __slots__ = ("body", "raw")

    def __init__(self, body: dict, raw: bytes):
        self.body, self.raw = body, raw

    def release(self) -> None:
        self.body = self.raw = None


def dispatch_body(c: Candidate, body: dict, raw: bytes, turn: Turn) -> bytes:
    """The bytes sent for candidate `c`: the request as received when its plan is the
    received body itself (planning returns a new object whenever it removes a field,
    drops or pages an exchange); otherwise the plan's body, naming the candidate's model
    as its provider wants it."""
    out = c.plan.body
    model = c.provider.upstream_model(c.model)
    # With a repeated key, providers disagree on which value wins: send the edge's
    # serialization of the value it validated instead of the raw bytes.
    if c.plan.as_received and out.get("model") == model and not _repeats_a_key(raw, turn):
        return raw
    return c.plan.encoded(model)


def _repeats_a_key(raw: bytes, turn: Turn) -> bool:
    """`has_duplicate_keys(raw)`, parsed at most once per request (fallbacks ask again)."""
    if turn.repeats_a_key is None:
        turn.repeats_a_key = has_duplicate_keys(raw)
    return turn.repeats_a_key


async def attempt(scope: Scope, c: Candidate, index: int, headers: list, payload: Handoff,
                  turn: Turn):
    """One provider call, recorded in `turn.attempts` → its answer, or None if it gave none
    (network error, or no response headers within UPSTREAM_TIMEOUT_SECONDS)."""
    started, status = time.monotonic(), "client_closed"
    try:
        answer = await scope.rc.platform.fetch(c.provider.endpoint(scope.fmt), "POST", headers,
                                               payload, timeout=scope.timeout)
        status = answer.status
        return answer
    except TimeoutError:
        status = "timeout"
        return None
    except OSError:
        status = "network_error"
        return None
    finally:
        turn.attempts.append({"model_index": index, "status": status,
                              "ms": round((time.monotonic() - started) * 1000, 1)})


def shelf(scope: Scope, turn: Turn) -> storing.Shelf:
    """Where this request stores, knowing what earlier candidates stored (§5.9)."""
    rc, ctx = scope.rc, scope.rc.caller
    platform = rc.platform
    # an earlier candidate's rows first; a plain dict (ChainMap lookups run in Python)
    known = {**ctx.active_pages, **turn.rows} if turn.rows else ctx.active_pages
    return storing.Shelf(rc.db, rc.page_bodies(), scope.sign,
                         Owner(AUTHORITY, ctx.principal, rc.session_id, ctx.policy.revision),
                         platform.now(), config.rewrite_after(platform.var("PAGE_REWRITE_AFTER_SECONDS")),
                         known, ctx.active_bytes + turn.new_bytes, ctx.limits.active_bytes,
                         (ctx.principal_active_bytes or 0) + turn.new_bytes)


async def store(scope: Scope, c: Candidate, turn: Turn) -> dict:
    """Store candidate ``c``'s pages (none: no binding is asked for) and fold what was
    stored into the turn → the single pages its blocks cover (§5.9)."""
    if not c.plan.pages:
        return {}
    with timed(turn.timings, "store_ms"):
        done = await storing.store_pages(shelf(scope, turn), c.plan.pages, scope.req.record,
                                         c.plan.superseded)
    turn.rows.update(done.rows)
    turn.new_bytes += done.new_bytes
    turn.new_pages += done.new_pages
    return done.covered


def no_answer(turn: Turn, cands: list) -> EdgeError:
    if not turn.attempts:                       # every candidate was skipped
        return next(c.skipped for c in cands if c.skipped)
    if any(a["status"] == "timeout" for a in turn.attempts):
        return error("upstream_timeout", "No provider answered in time.", 504)
    return error("upstream_unreachable", "No provider could be reached.", 502)


async def dispatch(scope: Scope, cands: list, held: Held, turn: Turn):
    """Try each candidate in order, storing its pages first → (upstream, candidate).
    A retryable answer is relayed if no later candidate gives a better one; a candidate
    whose provider is misconfigured is skipped like one that cannot fit.

    While a request waits for its provider it holds its upstream body at most, and that in
    the runtime (docs/design.md §7.2): each tried candidate's plan is reduced to what the
    answer needs (`Sent`), the bytes are handed to `fetch` (`Handoff`), and once no
    fallback is left the client's body and its parse (`held`) are let go."""
    req, platform = scope.req, scope.rc.platform
    upstream = chosen = None
    for index, c in enumerate(cands):
        if c.skipped:
            c.plan = None
            continue
        try:  # its provider key first: a misconfigured provider stores nothing
            headers = upstream_headers(req, scope.fmt, c.provider, platform)
        except EdgeError as err:
            c.skipped = err.with_traceback(None)    # no frames (and no `cands`) kept
            c.plan = None
            continue
        if scope.paging:
            c.covered = await store(scope, c, turn)
        with req.record.cpu("encode"):
            payload = Handoff(dispatch_body(c, held.body, held.raw, turn))
            c.sent = Sent.of(c.plan)
        c.plan = None       # freed here rather than at the request's end, as before: not "encode"
        if not any(not later.skipped for later in cands[index + 1:]):
            held.release()
        # From here the request holds `payload.size` bytes, in the runtime once fetch takes them.
        size = payload.size
        # its reservation lowered to that, and the answer if it is read whole (§7.2)
        waiting_on_upstream(req, size, bool(c.sent.pages or c.sent.dropped))
        answer = await attempt(scope, c, index, headers, payload, turn)
        del payload
        if answer is None:
            continue
        if upstream is not None:
            await upstream.discard()
        upstream, chosen = answer, c
        turn.model, turn.sent_bytes = c.model, size
        if answer.status not in RETRY_STATUSES:
            break
    held.release()
    if upstream is None:
        raise no_answer(turn, cands)
    return upstream, chosen
