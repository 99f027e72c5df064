"""What the examples' command lines share: the edge, the key, the session, the history file.

Run an example from the repository root as a module, e.g.
`ROLEPLAY_KEY=rpk_… python -m examples.retrieve_loop --model openai:gpt-4o-mini "Hello"`.
The key comes from the environment only (a command-line argument would show in the
process list and the shell's history).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import httpx

KEY_VARIABLE = "ROLEPLAY_KEY"
DEFAULT_EDGE = "http://127.0.0.1:8787"


def parser(doc: str, prog: str) -> argparse.ArgumentParser:
    """The common arguments; the description is the module docstring's first paragraph."""
    p = argparse.ArgumentParser(prog=f"python -m {prog}", description=doc.strip().split("\n\n")[0],
                                epilog=f"The roleplay key is read from ${KEY_VARIABLE}.")
    p.add_argument("message", help="the new user message of this turn")
    p.add_argument("--model", required=True, help="provider:model, as registered on the edge")
    p.add_argument("--edge-url", default=os.environ.get("EDGE_URL", DEFAULT_EDGE),
                   help=f"the edge's base URL, without /v1 (default: $EDGE_URL, else {DEFAULT_EDGE})")
    p.add_argument("--session", help="an open roleplay session id (default: open a new one)")
    p.add_argument("--history", type=Path,
                   help="a JSON file of the earlier messages: read if it exists, then written "
                        "back with this turn appended, so the next run continues the chat")
    p.add_argument("--max-tokens", type=int, default=512)
    return p


def roleplay_key(p: argparse.ArgumentParser) -> str:
    key = os.environ.get(KEY_VARIABLE, "").strip()
    if not key:
        p.error(f"set {KEY_VARIABLE} to your roleplay key")
    return key


def open_session(http: httpx.Client, edge_url: str, key: str) -> str:
    """POST /v1/roleplay/sessions → the new session's id."""
    r = http.post(f"{edge_url.rstrip('/')}/v1/roleplay/sessions", headers={"Authorization": f"Bearer {key}"})
    if r.status_code != 201:
        raise SystemExit(f"the edge refused a new session: {r.status_code} {r.text[:300]}")
    return r.json()["session_id"]


def load_history(path: Path | None) -> list:
    if path is None or not path.exists():
        return []
    doc = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(doc, list):
        raise SystemExit(f"{path}: the history must be a JSON array")
    return doc


def save_history(path: Path | None, items: list) -> None:
    if path is not None:
        path.write_text(json.dumps(items, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def report(session_id: str, text: str, extra: dict | None) -> None:
    """The reply's text, then what the edge said about the turn, one `# ` line each."""
    extra = extra or {}
    print(text or "")
    print(f"# session: {session_id}")
    pages = extra.get("context_pages")
    if pages is not None:
        print(f"# pages in this request: {len(pages)}")
    for m in extra.get("context_recall") or []:
        print(f"# recalled: {m['page_id']} exchange {m['exchange']} (score {m['score']})")
    sys.stdout.flush()
