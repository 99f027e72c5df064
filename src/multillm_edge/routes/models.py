"""`GET /v1/models` for roleplay clients (docs/design.md §2, "Model list").

A request carrying a live roleplay key gets the models its principal may use, in
OpenAI's list shape, answered by the edge: what SillyTavern's Custom source checks on
Connect. Every other request is forwarded to the origin unchanged, as before (a Flask
client lists Flask's models with its own key):

1. no key (`Authorization: Bearer`, else `x-api-key`)            → forwarded, no storage call
2. no D1 binding, or the one D1 read fails                        → forwarded (the edge cannot
   tell a roleplay key from an origin's key; forwarding is what it did before)
3. ONE D1 statement (store.load_principal_models): the key's facts and the models table
4. unknown or revoked key                                         → forwarded: the origin gets
   the same request as one with any key the edge does not know (no oracle on keys)
5. no policy or no `chat` grant                                   → 403 `chat_not_granted`
6. `PROVIDERS` malformed                                          → 503 `providers_misconfigured`
7. 200: every `models` row whose name is `provider:model` and whose provider is configured
   in `PROVIDERS` (generation's `unknown_model` for the rest), sorted by id;
   `cache-control: private, no-store` (the list is the key's)

Not a CORS route: SillyTavern's server calls it, and a preflight carries no key to tell
an edge answer from a forwarded one. Logs: the count only, never the key or a name.
"""

from __future__ import annotations

from ..base.errors import EdgeError, StorageError
from ..base.http import NO_CACHE, Incoming, Outgoing, json_response
from ..base.platform import Platform
from ..core import config
from ..service.access import check_principal, presented_key_digest
from ..service.origin import forward
from ..storage import store

# The models table keeps no creation time: 0 says "unknown" in OpenAI's `created`.
CREATED = 0


async def list_models(req: Incoming, platform: Platform) -> Outgoing:
    digest = presented_key_digest(req)
    if digest is None:                                        # 1.
        return await _forwarded(req, platform, "no_key")
    facts = await _load(req, platform, digest)                # 2.-3.
    if facts is None or facts.key_revoked:                    # 4.
        return await _forwarded(req, platform, "not_roleplay")
    check_principal(facts)                                    # 5.
    usable = usable_models(facts.models, config.providers(platform.var("PROVIDERS")))   # 6.
    req.record.note(models=len(usable))
    return json_response(200, model_list(usable), NO_CACHE)   # 7.


async def _load(req: Incoming, platform: Platform, digest: str):
    db = platform.db
    if db is None:
        return None
    with req.record.wall("d1_ms"):
        try:
            return await store.load_principal_models(db, digest)
        except StorageError:
            req.record.note(storage="failed")
            return None


async def _forwarded(req: Incoming, platform: Platform, why: str) -> Outgoing:
    req.record.note(forwarded=why)
    return await forward(req, platform)


def usable_models(names, providers: dict) -> list[str]:
    """The names a generation could dispatch: `provider:model` with a configured provider."""
    out = []
    for name in names:
        try:
            provider = config.split_model(name)[0]
        except EdgeError:
            continue
        if provider in providers:
            out.append(name)
    return out


def model_list(names: list[str]) -> dict:
    """OpenAI's list shape (`GET /v1/models`)."""
    return {"object": "list",
            "data": [{"id": n, "object": "model", "created": CREATED,
                      "owned_by": n.split(":", 1)[0]} for n in names]}
