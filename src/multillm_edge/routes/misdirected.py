"""A roleplay key on a roleplay path that lacks its session (docs/design.md §2,
"Reserved key format"): a generation or search without `X-Roleplay-Session-ID`, a page
retrieval without `roleplay_session_id`. Such a request would otherwise go to the
origin, which a roleplay key never reaches: 400 naming what is missing and how to get
a session. No storage call (the key is not looked up: the answer is the same for any
key of the format)."""

from __future__ import annotations

from ..base.errors import EdgeError
from ..base.http import Incoming, Outgoing
from ..base.platform import Platform

HEADER = "X-Roleplay-Session-ID"
HOW_TO_GET_ONE = ("Create a session with POST /v1/roleplay/sessions (same key; it answers "
                  "{\"session_id\": \"rps_…\"}) or `npm run admin -- session create --principal P`. "
                  "Requests with a roleplay key (rpk_…) are never forwarded to the origin.")


async def session_required(req: Incoming, platform: Platform) -> Outgoing:
    where, on = req.params["session_in"], req.params["on"]
    how = "header" if where == HEADER else "query parameter"
    raise EdgeError(400, "roleplay_session_required",
                    f"A roleplay key needs the {where} {how} on {req.method} {on}. {HOW_TO_GET_ONE}",
                    param=where)
