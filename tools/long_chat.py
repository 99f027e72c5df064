#!/usr/bin/env python3
"""Send a roleplay chat long enough to page: the README's quick start, step 1.

    export KEY=rpk_… SESSION=rps_…      # the demo credentials `npm start` printed
    python3 tools/long_chat.py           # 40 exchanges, then the latest user message
    python3 tools/long_chat.py --recall "Aurore, who carved the spiral stones?"

It POSTs one chat completion to the edge (`$EDGE_URL`, else http://localhost:8787) with
`Authorization: Bearer $KEY` and `X-Roleplay-Session-ID: $SESSION`: a system prompt, the
exchanges (each a user line and the narrator's answer), and the latest user message; the
capabilities retrieve and search (`--recall` adds recall). The model defaults to the
stand-in `npm start` serves with no provider key (devkit/standin.py), whose window is
small enough that the chat pages. It saves the whole answer (`--out`, default
answer.json) and prints the reply (or the tool call the model made), then the number of
pages in the request and the moments recalled. An HTTP or connection error is one
line on stderr and exit status 1. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

DEFAULT_EDGE = "http://localhost:8787"
MODEL = "standin:roleplay"           # devkit/standin.MODEL (this script needs no import)
EXCHANGES = 40
SYSTEM = "You are Aurore, a ranger of the northern woods. Stay in character; never break the fourth wall."

USER_LINES = [
    "I follow Aurore along the riverbank, keeping my cloak tight against the cold. What do you see?",
    "«Wait,» I whisper, crouching beside her. «Those prints — could they be the smugglers'?»",
    "I offer her the last of my bread and ask how long she has been a ranger in these woods.",
    "I climb onto the fallen oak to get a better view of the valley below. Any smoke? Any lights?",
    "I ask Aurore about the spiral stones — who carved them, and what the old songs say about them.",
    "I keep watch while she rests, listening for the bell. Naïve as it sounds, I hum to stay awake.",
    "At dawn I wake her gently. «There's something moving by the ford — a cart, I think.»",
]

NARRATION = [
    "Aurore kneels by the stream and reads the mud: boot prints, three days old, heading north — "
    "toward the ruined watchtower. «Whoever came this way was in a hurry,» she murmurs.",
    "The wind turns. Somewhere beyond the pines a bell rings once, then falls silent. Aurore's hand "
    "finds the hilt of her knife; the lantern's glow trembles on the wet bark.",
    "She laughs, low and surprised. «You have a better eye than most city folk.» She passes you the "
    "waterskin; it smells of juniper and smoke. 夜の森 is never this quiet, she adds.",
    "The path narrows between two standing stones carved with spirals. Moss has eaten half the "
    "runes, but Aurore traces one with a fingertip: a warning, or a welcome — she is not sure.",
    "Night gathers. Aurore builds a small fire in the lee of a boulder and sets a pot of barley to "
    "simmer. Above, the moon 🌙 slips between clouds like a coin between fingers.",
]


def user_line(i: int) -> str:
    return f"Turn {i}: " + USER_LINES[i % len(USER_LINES)]


def history(exchanges: int) -> list[dict]:
    """The system prompt and `exchanges` user/narrator pairs, each text unique."""
    out = [{"role": "system", "content": SYSTEM}]
    for i in range(1, exchanges + 1):
        out += [{"role": "user", "content": user_line(i)},
                {"role": "assistant", "content": NARRATION[i % len(NARRATION)] + f" (reply {i})"}]
    return out


def request_body(args) -> dict:
    latest = args.message or user_line(args.exchanges + 1)
    capabilities = ["multillm_context_retrieve", "multillm_context_search"]
    return {"model": args.model, "max_tokens": 200,
            "capabilities": capabilities + (["multillm_context_recall"] if args.recall else []),
            "messages": history(args.exchanges) + [{"role": "user", "content": latest}]}


def send(url: str, key: str, session: str, body: dict) -> bytes:
    req = urllib.request.Request(url, data=json.dumps(body, ensure_ascii=False).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {key}", "X-Roleplay-Session-ID": session,
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read()


def one_line_error(e: Exception) -> str:
    """An HTTP error as `status code: message` (the edge's JSON error), else the reason."""
    if isinstance(e, urllib.error.HTTPError):
        try:
            err = json.loads(e.read())["error"]
            return f"{e.code} {err.get('code') or err.get('type')}: {err.get('message')}"
        except (ValueError, KeyError, TypeError):
            return f"{e.code} {e.reason}"
    return f"cannot reach the edge: {getattr(e, 'reason', e)}"


def show(answer: dict) -> None:
    message = answer["choices"][0]["message"]
    for call in message.get("tool_calls") or []:
        print(f"tool call: {call['function']['name']} {call['function']['arguments']}")
    if message.get("content"):
        print(message["content"])
    pages = answer.get("context_pages")
    print(f"pages in this request: {len(pages)}" if pages is not None else "not paged")
    for m in answer.get("context_recall") or []:
        print(f"recalled: {m['page_id']} exchange {m['exchange']} (score {m['score']})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 tools/long_chat.py", description=__doc__.split("\n\n")[0],
                                epilog="The key and session come from $KEY and $SESSION.")
    p.add_argument("message", nargs="?", help="the latest user message (default: one more turn)")
    p.add_argument("--exchanges", type=int, default=EXCHANGES, help=f"earlier exchanges (default {EXCHANGES})")
    p.add_argument("--recall", action="store_true", help="declare multillm_context_recall too")
    p.add_argument("--model", default=MODEL, help=f"provider:model (default {MODEL}, the stand-in)")
    p.add_argument("--edge-url", default=os.environ.get("EDGE_URL", DEFAULT_EDGE))
    p.add_argument("--out", type=Path, default=Path("answer.json"), help="where the whole answer goes")
    args = p.parse_args(argv)
    key, session = os.environ.get("KEY", "").strip(), os.environ.get("SESSION", "").strip()
    if not key or not session:
        p.error("set KEY and SESSION (npm start prints them)")
    try:
        answer = send(args.edge_url.rstrip("/") + "/v1/chat/completions", key, session, request_body(args))
    except (urllib.error.URLError, OSError) as e:
        print(f"error: {one_line_error(e)}", file=sys.stderr)
        return 1
    args.out.write_bytes(answer)          # as the edge sent it
    show(json.loads(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
