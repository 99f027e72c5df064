"""What every step of a generation reads (Scope, fixed before planning) and writes (Turn,
the running record for the response and the log line)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...base.errors import EdgeError
from ...base.http import Incoming
from ...core import config, paging
from ...core.pages import PageSigner
from ...service.access import RequestContext


@dataclass
class Turn:
    """The running record of one generation request, for the response and the log line."""
    notes: dict = field(default_factory=dict)   # storage counts and CPU for the log line
    rows: dict = field(default_factory=dict)    # page_id -> rows.ActivePage, as stored now
    new_bytes: int = 0                          # page bytes this request added to the session
    new_pages: int = 0
    attempts: list = field(default_factory=list)   # {model_index, status, ms} per provider call
    timings: dict = field(default_factory=dict)
    repeats_a_key: bool | None = None           # the raw body repeats a key (checked lazily)
    pages: list = field(default_factory=list)   # (page_id, sha256) of the dispatched plan's pages
    compacted: int = 0                          # exchanges the dispatched plan dropped
    recalled: list | None = None                # recall.Moment quoted; None: recall not declared
    # page_id -> byte_length of active single pages the dispatched plan's blocks hold
    # again (docs/design.md §5.9): not counted in the figures
    covered: dict = field(default_factory=dict)
    model: str = ""                             # the answering candidate's `provider:model`
    sent_bytes: int = 0                         # its upstream body (usage estimate, §4.1)


@dataclass(frozen=True)
class Scope:
    """What one generation request fixed before planning; every later step reads it,
    none writes it: the request, its context (service.access.RequestContext: platform, database,
    caller, session), the wire format, whether it is paged (docs/design.md §5.3) and its
    signer then, the fields the upstream body goes without, the provider timeouts."""
    req: Incoming
    rc: RequestContext
    fmt: str
    paging: bool
    strip: tuple                    # request fields the upstream body goes without
    timeout: float                  # seconds to the provider's response headers
    idle: float                     # longest silence inside a provider stream
    sign: PageSigner | None         # when paging


def settle(req: Incoming, rc: RequestContext, fmt: str, asked: bool) -> Scope:
    """The request's Scope: paged when the flag is on, the capability asked and the
    retention not zero; its signer then (503 if not configured)."""
    var = rc.platform.var
    paged = rc.paging and asked and rc.policy.retention != "zero"
    return Scope(req, rc, fmt, paged, consumed_fields(rc.paging),
                 config.seconds(var("UPSTREAM_TIMEOUT_SECONDS"), config.DEFAULT_UPSTREAM_TIMEOUT_SECONDS),
                 config.seconds(var("UPSTREAM_IDLE_SECONDS"), config.DEFAULT_UPSTREAM_IDLE_SECONDS),
                 rc.signer() if paged else None)


def consumed_fields(flag_on: bool) -> tuple:
    """Request fields the edge acts on itself, which providers reject as unknown
    parameters: `models` always (the edge runs the fallbacks), and with the flag on
    `capabilities` and `context_protected_indices` (docs/design.md §5.10) — whether or not
    this request is paged (no capability, zero retention)."""
    return ("models",) + (paging.EDGE_FIELDS if flag_on else ())


def error(code: str, message: str, status: int = 400) -> EdgeError:
    return EdgeError(status, code, message)
