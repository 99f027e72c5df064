"""What the examples' command lines share: the edge, the key, the session, the history file.

Run an example from the repository root as a module with the venv `npm start` made, e.g.
`ROLEPLAY_KEY=rpk_… .venv/bin/python -m examples.retrieve_loop --model standin:roleplay "Hello"`.
The key comes from the environment only (a command-line argument would show in the
process list and the shell's history). `--history FILE` keeps the session with the
messages, so the next run continues the same chat in the same session; a run that
fails stores nothing and ends the session it opened. An HTTP or connection error is
one line on stderr (status, error code, message) and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
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
    p.add_argument("--session", help="an open roleplay session id (default: the history's, else a new one)")
    p.add_argument("--history", type=Path,
                   help="a JSON file of the session and the earlier messages: read if it exists, "
                        "then written back with this turn appended, so the next run continues "
                        "the chat in the same session")
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
    r.raise_for_status()
    return r.json()["session_id"]


def end_session(http: httpx.Client, edge_url: str, key: str, session_id: str) -> None:
    """DELETE /v1/roleplay/sessions/{id}, best effort: the run already failed."""
    try:
        http.delete(f"{edge_url.rstrip('/')}/v1/roleplay/sessions/{session_id}",
                    headers={"Authorization": f"Bearer {key}"})
    except httpx.HTTPError:
        pass


@dataclass
class History:
    """What `--history FILE` holds: the session the chat runs in, and its messages
    (a file holding a bare JSON array, as earlier versions wrote, has no session)."""
    session_id: str | None
    messages: list


def load_history(path: Path | None) -> History:
    if path is None or not path.exists():
        return History(None, [])
    doc = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(doc, list):
        return History(None, doc)
    if not (isinstance(doc, dict) and isinstance(doc.get("messages"), list)
            and isinstance(doc.get("session_id"), (str, type(None)))):
        raise SystemExit(f"{path}: the history must be {{\"session_id\": …, \"messages\": [...]}}")
    return History(doc["session_id"], doc["messages"])


def save_history(path: Path | None, session_id: str, items: list) -> None:
    if path is not None:
        doc = {"session_id": session_id, "messages": items}
        path.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


class Held:
    """The session a run uses; `id` follows a client that replaces it mid-turn."""

    def __init__(self, session_id: str):
        self.id = session_id


@contextmanager
def session(http: httpx.Client, args, key: str, history: History):
    """The run's session: `--session`, else the history's, else a new one. If the run
    fails, a session it opened is ended, so failed runs leave none behind."""
    given = args.session or history.session_id
    held = Held(given or open_session(http, args.edge_url, key))
    try:
        yield held
    except BaseException:
        if held.id != given:
            end_session(http, args.edge_url, key, held.id)
        raise


def error_line(e: BaseException) -> str | None:
    """An HTTP error as `status code: message` (from the edge's or a provider's JSON
    error), a connection error as what failed; None for anything else (a bug: traced)."""
    response = getattr(e, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int):
        try:
            err = response.json()["error"]
            return f"{status} {err.get('code') or err.get('type')}: {err.get('message')}"
        except (ValueError, KeyError, TypeError, AttributeError):
            return f"{status}: {response.text[:200]}"
    if isinstance(e, httpx.TransportError) or type(e).__name__ in ("APIConnectionError", "APITimeoutError"):
        cause = e.__cause__ or e
        return f"cannot reach the edge: {type(cause).__name__}: {cause}"
    return None


def run(main, argv=None) -> int:
    """`main(argv)` as a command: an HTTP or connection error is one line, exit status 1."""
    try:
        main(argv)
    except Exception as e:
        line = error_line(e)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 1
    return 0


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
