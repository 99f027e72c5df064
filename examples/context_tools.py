"""A roleplay client that executes both context tools and keeps a sliding window, with
the official `openai` SDK.

The edge pages older exchanges of a long roleplay and gives the model two tools:
`multillm_context_retrieve` (one exchange of a page, its exact messages) and
`multillm_context_search` (stored exchanges by the words they contain: page id, exchange,
role, verbatim excerpt; a page may give several). Declaring `multillm_context_recall` too,
the edge also quotes the stored exchanges most related to the latest user message inside
a message before the latest turn, without a tool call, and lists them in `context_recall` (page id, exchange,
score). The client runs the tools with the same roleplay key and session
(`run_tool`, whatever the wire format; `examples/context_tools_sdks.py` has the same
loop for the Responses API and Anthropic Messages). Every paged answer reports the session's
stored-page figures (`context_session`); once the active bytes pass a share of the
allowance, the client stops sending the oldest complete exchanges (they stay in its own
history), and on a 413 `context_session_limit_exceeded` it starts a new session once and
sends the turn again with the window applied:

    client = openai.OpenAI(api_key=KEY, base_url=EDGE_URL + "/v1")
    session = Session(open_session(http, EDGE_URL, KEY))
    reply = run_turn(client, http, EDGE_URL, KEY, session, messages, model="openai:gpt-4o")
    for line in recall_lines(session.recall):
        print(line)          # e.g. "recalled: cp_… exchange 3 (score 7.41)"
    if session.left_out:
        print(f"{session.left_out} oldest messages are no longer sent to the model")

From the repository root, one turn against an edge (the reply, then `# ` lines: the
session, the pages of the request, the moments recalled, the messages left out;
`--help` for the rest):

    ROLEPLAY_KEY=$KEY .venv/bin/python -m examples.context_tools --model standin:roleplay \
        --history chat.json "Where did we leave the silver compass?"
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai

if __package__ in (None, ""):   # run as a file: the repository root, for `examples.…`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples._cli import open_session  # noqa: E402
from examples.retrieve_loop import _assistant_message, fetch_page  # noqa: E402

RETRIEVE, SEARCH = "multillm_context_retrieve", "multillm_context_search"
RECALL = "multillm_context_recall"       # a capability, not a tool: the edge quotes, nobody calls
PROMPT_CACHE = "multillm_context_prompt_cache"   # the paged boundary moves in steps
TOOLS = (RETRIEVE, SEARCH)
CAPABILITIES = [RETRIEVE, SEARCH, RECALL, PROMPT_CACHE]
DEFAULT_ALLOWANCE = 1024 * 1024      # what a 413 without figures is taken to mean


@dataclass
class Session:
    """The roleplay session and what the window knows of it."""
    id: str
    figures: dict | None = None      # the last `context_session` the edge reported
    window_limit: int | None = None  # set once the window started; it stays on
    left_out: int = 0                # messages the last request did not send
    recall: list | None = None       # the last `context_recall`: [{page_id, exchange, score}]


def context_recall(reply) -> list | None:
    """An SDK answer's `context_recall` (None when the request was not paged)."""
    return (getattr(reply, "model_extra", None) or {}).get("context_recall")


def recall_lines(recall: list | None) -> list[str]:
    """What the edge brought back for the latest message, one line per exchange."""
    return [f"recalled: {m['page_id']} exchange {m['exchange']} (score {m['score']:.2f})" for m in recall or []]


def search_pages(http: httpx.Client, edge_url: str, key: str, session_id: str, args: dict) -> str:
    """POST /v1/context/search → compact text for the model: one line per hit."""
    query, limit = args.get("query"), args.get("limit", 5)
    if not isinstance(query, str) or not query.strip() or type(limit) is not int or not 1 <= limit <= 10:
        return json.dumps({"error": "query must be a non-blank string, limit an integer 1-10"})
    r = http.post(f"{edge_url.rstrip('/')}/v1/context/search", json={"query": query, "limit": limit},
                  headers={"Authorization": f"Bearer {key}", "X-Roleplay-Session-ID": session_id})
    if r.status_code != 200:
        try:
            code = r.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = f"http_{r.status_code}"
        return json.dumps({"error": code, "status": r.status_code})
    doc = r.json()
    lines = [f"{h['page_id']} exchange={h['exchange']} {h['excerpt']['role']}: {h['excerpt']['text']}"
             for h in doc["data"]]
    return "\n".join([f"{len(lines)} stored exchanges match ({searched(doc)} searched):", *lines])


def searched(doc: dict) -> str:
    """"N exchanges in M pages" (an edge before exchange-level search: "M pages")."""
    pages, exchanges = doc.get("pages_searched", 0), doc.get("exchanges_searched")
    return f"{pages} pages" if exchanges is None else f"{exchanges} exchanges in {pages} pages"


def run_tool(http: httpx.Client, edge_url: str, key: str, session_id: str, name: str, args) -> str:
    """One context tool call (its parsed arguments) → the text the model gets back."""
    args = args if isinstance(args, dict) else {}
    if name == SEARCH:
        return search_pages(http, edge_url, key, session_id, args)
    return fetch_page(http, edge_url, key, session_id, args.get("page_id"), args.get("exchange", 1))["content"]


def parse_arguments(text) -> dict:
    """A tool call's JSON arguments; anything unparsable counts as none."""
    try:
        args = json.loads(text or "{}")
    except ValueError:
        return {}
    return args if isinstance(args, dict) else {}


# ------------------------------------------------------------- sliding window

def _genuine_user(m: dict) -> bool:
    """A user turn, not a user message holding only tool results."""
    c = m.get("content")
    return m.get("role") == "user" and not (
        isinstance(c, list) and c and all(isinstance(p, dict) and p.get("type") == "tool_result" for p in c))


def _size(m: dict) -> int:
    return len(json.dumps(m, ensure_ascii=False, separators=(",", ":")).encode())


#: The cut moves in steps (README: the sliding-window recipe): only where an exchange
#: reaches a new grid line of the history's bytes, counted from the chat's start, one
#: line every WINDOW_STEP of the window; between steps the request starts as the last one
#: did, and the provider's prompt cache keeps it.
WINDOW_STEP = 0.20


def window_cut(sizes: list[int], budget: int, step: int = 0) -> int:
    """How many of the oldest exchanges (their byte `sizes`) to leave out so the rest is
    at most `budget`; never the newest. `step` > 0: the first such cut whose last exchange
    reaches a grid line (every `step` bytes) its predecessor did not; else as few as fit,
    else all but the newest."""
    rest = sum(sizes)
    if rest <= budget:
        return 0
    end = line = 0
    least = None
    for g, n in enumerate(sizes[:-1]):
        rest, end = rest - n, end + n
        reached = step > 0 and end // step > line
        line = end // step if step > 0 else 0
        if rest > budget:
            continue
        if not step or reached:
            return g + 1
        least = least or g + 1
    return least or max(len(sizes) - 1, 0)


def slide_window(messages: list, budget: int, step: int = 0) -> tuple[list, int]:
    """Leaves the oldest complete exchanges out (an exchange runs from a genuine user
    message to the next; system messages always stay; the newest exchange always stays)
    until the non-system history is at most `budget` bytes, cutting on the `step` grid
    (`window_cut`) → (sent, how many left out)."""
    groups: list[list[int]] = []
    for i, m in enumerate(messages):
        if m.get("role") == "system":
            continue
        if not groups or _genuine_user(m):
            groups.append([])
        groups[-1].append(i)
    cut = window_cut([sum(_size(messages[i]) for i in g) for g in groups], budget, step)
    out = {i for g in groups[:cut] for i in g}
    return [m for i, m in enumerate(messages) if i not in out], len(out)


def _to_send(messages: list, session: Session, share: float) -> list:
    f = session.figures
    if session.window_limit is None and f and f["active_bytes"] > share * f["limit_bytes"]:
        session.window_limit = f["limit_bytes"]
    if session.window_limit is None:
        session.left_out = 0
        return messages
    budget = int(share * session.window_limit)
    sent, session.left_out = slide_window(messages, budget, max(1, int(WINDOW_STEP * budget)))
    return sent


# --------------------------------------------------------------------- turn

def run_turn(client: openai.OpenAI, http: httpx.Client, edge_url: str, key: str, session: Session,
             messages: list, model: str, share: float = 0.75, window: bool = True,
             max_rounds: int = 4, **create_kwargs):
    """One user turn: call the model, run the context tools it asks for, call it again.
    `messages` is the full history, extended in place with this turn's tool messages.
    With `window` off, a 413 is raised as the SDK raises it."""
    retried = False
    rounds = 0
    while True:
        sent = _to_send(messages, session, share) if window else messages
        try:
            completion = client.chat.completions.create(
                model=model, messages=sent, extra_body={"capabilities": CAPABILITIES},
                extra_headers={"X-Roleplay-Session-ID": session.id}, **create_kwargs)
        except openai.APIStatusError as e:
            err = e.body if isinstance(e.body, dict) else {}
            if not window or retried or err.get("code") != "context_session_limit_exceeded":
                raise
            retried = True       # once: a new session, the window applied
            session.window_limit = err.get("limit_bytes") or err.get("allowance_bytes") or DEFAULT_ALLOWANCE
            session.id, session.figures = open_session(http, edge_url, key), None
            continue
        session.figures = (completion.model_extra or {}).get("context_session") or session.figures
        session.recall = context_recall(completion)
        message = completion.choices[0].message
        calls = message.tool_calls or []
        rounds += 1
        if not calls or rounds >= max_rounds or any(tc.function.name not in TOOLS for tc in calls):
            return completion
        messages.append(_assistant_message(message))
        for tc in calls:
            content = run_tool(http, edge_url, key, session.id, tc.function.name,
                               parse_arguments(tc.function.arguments))
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": content})


def main(argv=None) -> None:
    """One turn from the command line (the module docstring's last example)."""
    from examples import _cli
    p = _cli.parser(__doc__, "examples.context_tools")
    p.add_argument("--no-window", action="store_true", help="never leave the oldest messages out")
    args = p.parse_args(argv)
    key = _cli.roleplay_key(p)
    history = _cli.load_history(args.history)
    messages = history.messages + [{"role": "user", "content": args.message}]
    with httpx.Client(timeout=120) as http, _cli.session(http, args, key, history) as held:
        session = Session(held.id)
        client = openai.OpenAI(api_key=key, base_url=args.edge_url.rstrip("/") + "/v1", max_retries=0)
        try:
            reply = run_turn(client, http, args.edge_url, key, session, messages, model=args.model,
                             window=not args.no_window, max_tokens=args.max_tokens)
        finally:
            held.id = session.id        # a session replaced at its allowance (run_turn)
    message = reply.choices[0].message
    if not message.tool_calls:          # else the rounds ran out: not kept
        messages.append({"role": "assistant", "content": message.content})
    _cli.save_history(args.history, session.id, messages)
    _cli.report(session.id, message.content, reply.model_extra)
    if session.left_out:
        print(f"# left out: {session.left_out} oldest messages (still in the history)")


if __name__ == "__main__":
    from examples import _cli
    sys.exit(_cli.run(main))
