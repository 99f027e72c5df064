"""`GET /v1/models` for roleplay clients (docs/design.md §2, "Model list").

A request carrying a live roleplay key gets the models its principal may use, in
OpenAI's list shape, answered by the edge: what SillyTavern's Custom source checks on
Connect. A request with no key of the reserved format (service/reserved_keys.py) is
forwarded to the origin unchanged, as before (a Flask client lists Flask's models with
its own key); one with such a key never is:

1. no key of the reserved format in any credential header        → forwarded, no storage call
2. the key the edge reads (`Authorization: Bearer`, else `x-api-key`) is not of the format
   though another credential is                                   → 401, no storage call
3. no D1 binding, or the one D1 read fails                        → 503 (never forwarded)
4. ONE D1 statement (store.load_principal_models): the key's facts and the models table
5. unknown or revoked key                                         → 401 `invalid_api_key`
6. no policy or no `chat` grant                                   → 403 `chat_not_granted`
7. `PROVIDERS` malformed                                          → 503 `providers_misconfigured`
8. 200: every `models` row whose name is `provider:model` and whose provider is configured
   in `PROVIDERS` (generation's `unknown_model` for the rest), sorted by id;
   `cache-control: private, no-store` (the list is the key's)

Not a CORS route: SillyTavern's server calls it, and a preflight carries no key to tell
an edge answer from a forwarded one. Logs: the count only, never the key or a name.
"""

from __future__ import annotations

from ..base.errors import EdgeError
from ..base.http import NO_CACHE, Incoming, Outgoing, json_response
from ..base.platform import Platform
from ..core import config
from ..service.access import check_principal
from ..service.reserved_keys import UnknownRoleplayKey, carries_roleplay_key, key_facts, roleplay_key_digest
from ..service.origin import forward
from ..storage import store

# The models table keeps no creation time: 0 says "unknown" in OpenAI's `created`.
CREATED = 0


async def list_models(req: Incoming, platform: Platform) -> Outgoing:
    if not carries_roleplay_key(req):                         # 1.
        req.record.note(forwarded="not_roleplay")
        return await forward(req, platform)
    digest = roleplay_key_digest(req)
    facts = None if digest is None else await key_facts(req, platform, digest, store.load_principal_models)  # 2.-4.
    if facts is None or facts.key_revoked:                    # 5.
        raise UnknownRoleplayKey()
    check_principal(facts)                                    # 6.
    usable = usable_models(facts.models, config.providers(platform.var("PROVIDERS")))   # 7.
    req.record.note(models=len(usable))
    return json_response(200, model_list(usable), NO_CACHE)   # 8.


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
