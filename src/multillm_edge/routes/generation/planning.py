"""Step 1: the candidates (one per model, with its budget) and their plans (docs/design.md §5.4–5.7)."""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import NamedTuple

from ... import formats
from ...base.errors import EdgeError
from ...core import compaction, config, paging
from ...core.pages import ROLEPLAY as AUTHORITY
from ...storage import store
from .scope import Scope, error

#: Where an unknown model's caller looks next (docs/design.md §8).
FIND_MODELS = ("GET /v1/models (same key) lists the models it can use; an operator registers one with "
               "`npm run admin -- model set provider:model --input-tokens N --max-output-tokens M` "
               "and its provider in PROVIDERS.")


CAPABILITY, SEARCH_CAPABILITY = formats.RETRIEVE_CAPABILITY, formats.SEARCH_CAPABILITY


class Sent(NamedTuple):
    """What the answer needs of a dispatched plan (docs/design.md §7.2): its pages'
    ``(page_id, sha256)`` (a Page's first two fields: the answer reads pages by index, so
    either will do), the exchanges compaction dropped, the moments recall quoted (without
    their excerpts). The plan itself — bodies, items, encoded history — is let go before
    the request waits for its provider."""
    pages: tuple
    dropped: int
    recall: tuple

    @classmethod
    def of(cls, plan: paging.Plan) -> "Sent":
        # C calls only (no Python frame per page): a steady turn may page hundreds
        return cls(tuple(map(_ID_AND_DIGEST, plan.pages)), plan.dropped,
                   tuple(m._replace(lines=()) for m in plan.recall))


_ID_AND_DIGEST = itemgetter(0, 1)              # Page(page_id, sha256, body)


@dataclass
class Candidate:
    model: str                      # provider:model, as the client named it
    provider: config.Provider
    window: store.ModelWindow
    budget: int
    plan: paging.Plan | None = None         # what it sends (paged or compacted alike)
    skipped: EdgeError | None = None        # why it was never sent
    covered: dict = field(default_factory=dict)   # single pages its blocks hold again (§5.9)
    sent: Sent | None = None                # once dispatched: what the answer needs (plan let go)


def requested_models(body: dict) -> list[str]:
    """`model` then the explicit fallbacks of `models` (validated strings), each once."""
    models = [body.get("model")] + (body.get("models") or [])
    for m in models:
        config.split_model(m)
    return list(dict.fromkeys(models))


def wants_paging(body: dict) -> bool:
    return CAPABILITY in (body.get("capabilities") or ())


def wants_recall(body: dict) -> bool:
    """Recalled moments before the latest turn (docs/design.md §6.2): declared next to retrieval."""
    return formats.RECALL_CAPABILITY in (body.get("capabilities") or ())


def wants_prompt_cache(body: dict) -> bool:
    """The boundary moves in steps (docs/design.md §5.7): declared next to retrieval."""
    return formats.PROMPT_CACHE_CAPABILITY in (body.get("capabilities") or ())


def wants_search(body: dict) -> bool:
    """The search tool too (docs/design.md §6.1): declared next to retrieval."""
    return SEARCH_CAPABILITY in (body.get("capabilities") or ())


def candidates(fmt: str, body: dict, models: list[str], ctx: store.GenerationContext,
               providers: dict, safety: int) -> list[Candidate]:
    """One candidate per model. A model no configured provider serves in this format is
    kept as skipped (a later one may serve), and is the error only when all are."""
    reserve = paging.output_reservation(fmt, body)
    out = []
    for name in models:
        window = ctx.models.get(name)
        if window is None:
            raise error("unknown_model", f"Unknown model: {name}. {FIND_MODELS}")
        provider = providers.get(config.split_model(name)[0])
        reservation = reserve if reserve is not None else window.max_output_tokens
        c = Candidate(name, provider, window, window.input_tokens - reservation - safety)
        if provider is None or not provider.serves(fmt):
            c.skipped = error("unknown_model", f"No provider serves {name} in this format. {FIND_MODELS}")
        out.append(c)
    if all(c.skipped for c in out):
        raise out[0].skipped
    return out


def plan_all(scope: Scope, body: dict, cands: list[Candidate], prior=None) -> None:
    """Fill each candidate's plan (paged, or the existing behaviour: as received or
    compacted); a candidate that cannot fit is skipped with its 413. ``prior``: the
    session's last turn in this isolate (core/resume.py, docs/design.md §5.13)."""
    live = [c for c in cands if not c.skipped]
    budgets = [c.budget for c in live]
    if scope.paging:
        # One id function per request: its fixed fields are encoded once, not per page.
        ctx = scope.rc.caller
        page_id_for = scope.sign.page_ids(AUTHORITY, ctx.principal, scope.rc.session_id,
                                          ctx.policy.revision)
        results = paging.plan_candidates(scope.fmt, body, budgets, page_id_for, strip=scope.strip,
                                         search=wants_search(body), recalling=wants_recall(body),
                                         prompt_cache=wants_prompt_cache(body),
                                         breakpoints=[c.provider.cache_breakpoints for c in live],
                                         prior=prior)
    else:
        results = compaction.compact_candidates(scope.fmt, body, budgets, strip=scope.strip,
                                                prior=prior)
    for c, result in zip(live, results):
        if isinstance(result, EdgeError):
            c.skipped = result
        else:
            c.plan = result
    if all(c.skipped for c in cands):
        raise cands[0].skipped
