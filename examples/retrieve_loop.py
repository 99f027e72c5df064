"""A roleplay client turn with context paging, using the official `openai` SDK.

The edge may replace older exchanges of a long roleplay with stored pages and give the
model a `multillm_context_retrieve` tool. When the model calls it, the client (not the
edge) fetches the page with the same roleplay key and session, and feeds the exchange's
original messages back as the tool result. A page may hold several consecutive
exchanges; the model names one (`exchange`, 1 = the page's oldest, the default) and
only that one is fetched, so it fits the window whatever the page's size:

    client = openai.OpenAI(api_key=KEY, base_url=EDGE_URL + "/v1")
    reply = run_turn(client, EDGE_URL, KEY, session_id, messages, model="openai:gpt-4o")
    print(reply.choices[0].message.content)
    print((reply.model_extra or {}).get("context_recall"))   # what the edge brought back itself

Declaring `multillm_context_recall` next to retrieval, the edge also quotes the stored
exchanges most related to the latest user message in a message before it (no tool call) and lists
them in `context_recall`: `[{"page_id": "cp_…", "exchange": 3, "score": 7.41}]`, `[]` when
nothing was relevant, absent when the request was not paged.

`messages` is the full roleplay history; it is extended in place with the assistant
tool-call messages and tool results of this turn, so the next turn sends them too.

From the repository root, one turn against an edge (the reply, then `# ` lines: the
session, the pages of the request, the moments recalled; `--help` for the rest):

    ROLEPLAY_KEY=$KEY .venv/bin/python -m examples.retrieve_loop --model standin:roleplay \
        --history chat.json "What did we bury under the old mill?"
"""

from __future__ import annotations

import base64
import json
import re
import sys
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):   # run as a file: the repository root, for `examples.…`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOOL_NAME = "multillm_context_retrieve"
RECALL = "multillm_context_recall"       # a capability, not a tool (docs/design.md §6.2)
PROMPT_CACHE = "multillm_context_prompt_cache"   # the paged boundary moves in steps (§5.7)
CAPABILITIES = [TOOL_NAME, RECALL, PROMPT_CACHE]
# Page ids are opaque capabilities; anything else the model names is refused before it
# reaches a URL (no path tricks such as "../").
_PAGE_ID = re.compile(r"cp_[A-Za-z0-9_-]{1,128}\Z")


def fetch_page(http: httpx.Client, edge_url: str, key: str, session_id: str,
               page_id: str, exchange=1) -> dict:
    """GET /v1/context/pages/{page_id}?roleplay_session_id=…&exchange=N → one exchange
    of the page.

    Returns {"ok": True, "content": <the exchange's exact stored JSON text>} or
    {"ok": False, "content": <a short JSON error the model can read>}."""
    if not isinstance(page_id, str) or not _PAGE_ID.match(page_id):
        return {"ok": False, "content": json.dumps({"error": "invalid page_id"})}
    if type(exchange) is not int or exchange < 1:
        return {"ok": False, "content": json.dumps({"error": "exchange must be an integer from 1"})}
    r = http.get(f"{edge_url.rstrip('/')}/v1/context/pages/{page_id}",
                 params={"roleplay_session_id": session_id, "exchange": exchange},
                 headers={"Authorization": f"Bearer {key}"})
    if r.status_code != 200:
        try:
            code = r.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = f"http_{r.status_code}"
        return {"ok": False, "content": json.dumps({"error": code, "status": r.status_code})}
    doc = r.json()
    # body_base64 is the exchange's exact stored bytes: a JSON array of its original messages.
    # Passing its text on (rather than re-serializing `messages`) keeps it byte-exact.
    text = base64.b64decode(doc["body_base64"]).decode("utf-8")
    return {"ok": True, "content": text, "messages": doc["messages"]}


def _assistant_message(message) -> dict:
    """The assistant tool-call message as it must be sent back."""
    out: dict[str, Any] = {"role": "assistant", "content": message.content}
    out["tool_calls"] = [{"id": tc.id, "type": "function",
                          "function": {"name": tc.function.name,
                                       "arguments": tc.function.arguments}}
                         for tc in message.tool_calls]
    return out


def run_turn(client, edge_url: str, key: str, session_id: str, messages: list,
             model: str, max_tokens: int = 512, max_rounds: int = 4,
             http: httpx.Client | None = None, **create_kwargs):
    """One user turn: call the model; while it asks for stored context, fetch the pages
    and call it again with the restored messages as tool results. Returns the final
    ChatCompletion (also when the model calls a tool this loop does not handle)."""
    own_http = http is None
    http = http or httpx.Client(timeout=60)
    try:
        for _ in range(max_rounds):
            completion = client.chat.completions.create(
                model=model, messages=messages, max_tokens=max_tokens,
                extra_body={"capabilities": CAPABILITIES},
                extra_headers={"X-Roleplay-Session-ID": session_id},
                **create_kwargs)
            message = completion.choices[0].message
            calls = message.tool_calls or []
            if not calls or any(tc.function.name != TOOL_NAME for tc in calls):
                return completion
            messages.append(_assistant_message(message))
            for tc in calls:
                try:
                    args = json.loads(tc.function.arguments or "{}")
                except ValueError:
                    args = None
                args = args if isinstance(args, dict) else {}
                page = fetch_page(http, edge_url, key, session_id, args.get("page_id"),
                                  args.get("exchange", 1))
                messages.append({"role": "tool", "tool_call_id": tc.id,
                                 "content": page["content"]})
        return completion
    finally:
        if own_http:
            http.close()


def main(argv=None) -> None:
    """One turn from the command line (the module docstring's last example)."""
    import openai
    from examples import _cli
    p = _cli.parser(__doc__, "examples.retrieve_loop")
    args = p.parse_args(argv)
    key = _cli.roleplay_key(p)
    history = _cli.load_history(args.history)
    messages = history.messages + [{"role": "user", "content": args.message}]
    with httpx.Client(timeout=120) as http, _cli.session(http, args, key, history) as session:
        client = openai.OpenAI(api_key=key, base_url=args.edge_url.rstrip("/") + "/v1", max_retries=0)
        reply = run_turn(client, args.edge_url, key, session.id, messages, model=args.model,
                         max_tokens=args.max_tokens, http=http)
    message = reply.choices[0].message
    if not message.tool_calls:          # else a tool this loop does not run: not kept
        messages.append({"role": "assistant", "content": message.content})
    _cli.save_history(args.history, session.id, messages)
    _cli.report(session.id, message.content, reply.model_extra)


if __name__ == "__main__":
    from examples import _cli
    sys.exit(_cli.run(main))
