"""The stand-in provider: a local model that needs no key and tells what reached it.

`npm start` serves it through the local runner when no provider key is configured
(`runner/standin.mjs`, `EDGE_STANDIN=1`, docs/design.md §9) and `npm run demo` runs it
inside the demo's process; it is never part of the uploaded Worker. It answers the three wire formats
(`/v1/chat/completions`, `/v1/responses`, `/v1/messages`), streaming or not, and its
reply says what reached it: how many messages, whether a marker and how many page
handles, how many recalled moments, and the start of the latest user message. When the
latest user message names a tool the request declares (`multillm_context_search`,
`multillm_context_retrieve`, or a client's own), it answers with a call to that tool.

Standard library only: `python -m devkit.standin` serves it until its stdin closes.
"""

from __future__ import annotations

import json
import re
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from devkit.fakes import FakeServer, Received, Reply

PROVIDER = "standin"
MODEL = f"{PROVIDER}:roleplay"
#: A small window, so a chat of a few dozen exchanges pages (README: Quick start).
WINDOW_TOKENS, MAX_OUTPUT_TOKENS = 8000, 512
FORMATS = {"/v1/chat/completions": "chat", "/v1/responses": "responses", "/v1/messages": "messages"}
SEARCH, RETRIEVE = "multillm_context_search", "multillm_context_retrieve"
# The edge's own texts (src/multillm_edge/formats, core/recall), read as a provider would.
MARKER_START = "[multillm context]"
RECALL_START = "Earlier moments that may be relevant"
PAGE_ID = re.compile(r"cp_[A-Za-z0-9_-]+")
LATEST_SHOWN = 60        # characters of the latest user message the reply quotes


# --------------------------------------------------------------- when it is served

DOTENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")


def dotenv(text: str) -> dict[str, str]:
    """A .dev.vars file as the runner reads it (runner/dev.mjs parseDotenv)."""
    out = {}
    for line in text.splitlines():
        m = DOTENV_LINE.match(line)
        if m:
            v = m.group(2).strip()
            out[m.group(1)] = v[1:-1] if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"" else v
    return out


def provider_key_configured(local: dict[str, str], toml_vars: dict) -> bool:
    """Whether a provider PROVIDERS names has its key: `local` (.dev.vars) overrides the
    [vars] of wrangler.toml, and secrets come from `local` only. An unreadable PROVIDERS
    counts as none configured (the Worker reports it: /healthz config_errors)."""
    providers = local.get("PROVIDERS", toml_vars.get("PROVIDERS", "{}"))
    if isinstance(providers, str):
        try:
            providers = json.loads(providers or "{}")
        except ValueError:
            return False
    if not isinstance(providers, dict):
        return False
    return any(isinstance(p, dict) and local.get(str(p.get("api_key_secret")), "").strip()
               for p in providers.values())


def wanted(root: Path, vars_file: Path | None = None) -> bool:
    """`npm start` serves the stand-in when no provider key is configured."""
    local_file = vars_file or root / ".dev.vars"
    local = dotenv(local_file.read_text(encoding="utf-8")) if local_file.exists() else {}
    toml_vars = tomllib.loads((root / "wrangler.toml").read_text(encoding="utf-8")).get("vars", {})
    return not provider_key_configured(local, toml_vars)


# --------------------------------------------------------------- what reached it

@dataclass
class Seen:
    """What one request carried, as the stand-in reports it."""
    messages: int = 0
    marker_pages: list[str] | None = None     # None: no marker
    recalled: int = 0
    latest: str | None = None                 # the latest genuine user message's text
    last_is_tool_result: bool = False
    tools: list[str] = field(default_factory=list)


def _texts(content) -> list[str]:
    """A message's text parts (a string, or a list of parts with `text`)."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return []


def _history(fmt: str, body: dict) -> list:
    items = body.get("input" if fmt == "responses" else "messages")
    if isinstance(items, str):                # a Responses `input` string: one user message
        return [{"role": "user", "content": items}]
    return items if isinstance(items, list) else []


def _is_tool_result(fmt: str, item) -> bool:
    if not isinstance(item, dict):
        return False
    if fmt == "chat":
        return item.get("role") == "tool"
    if fmt == "responses":
        return str(item.get("type", "")).endswith("_call_output")
    content = item.get("content")
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") == "tool_result" for p in content)


def _tool_names(fmt: str, body: dict) -> list[str]:
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []
    names = [(t.get("function") or {}).get("name") if fmt == "chat" else t.get("name")
             for t in tools if isinstance(t, dict)]
    return [n for n in names if isinstance(n, str)]


def seen(fmt: str, body: dict) -> Seen:
    """What reached the stand-in: the edge's marker and recalled moments are user
    messages of their own; the latest user message is the last other one."""
    items = _history(fmt, body)
    out = Seen(messages=len(items), tools=_tool_names(fmt, body),
               last_is_tool_result=bool(items) and _is_tool_result(fmt, items[-1]))
    for item in items:
        if not isinstance(item, dict) or item.get("role") != "user" or _is_tool_result(fmt, item):
            continue
        own = []
        for text in _texts(item.get("content")):
            if text.startswith(MARKER_START):
                out.marker_pages = (out.marker_pages or []) + PAGE_ID.findall(text)
            elif text.startswith(RECALL_START):
                out.recalled += text.count("[page_id ")
            else:
                own.append(text)
        if own:
            out.latest = " ".join(own)
    return out


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def report(s: Seen) -> str:
    """The reply's text: one line a player can read to see paging work."""
    marker = ("no marker" if s.marker_pages is None
              else f"a marker naming {_plural(len(s.marker_pages), 'page handle')}")
    latest = "none" if s.latest is None else json.dumps(
        s.latest[:LATEST_SHOWN] + ("…" if len(s.latest) > LATEST_SHOWN else ""), ensure_ascii=False)
    tail = "; the last message is a tool result" if s.last_is_tool_result else ""
    return (f"[stand-in] {_plural(s.messages, 'message')} reached me; {marker}; "
            f"{_plural(s.recalled, 'recalled moment')}; latest user message: {latest}{tail}.")


# --------------------------------------------------------------- what it answers

@dataclass
class Answer:
    text: str | None = None
    tool: str | None = None
    arguments: dict | None = None


def _asked_tool(s: Seen) -> str | None:
    """A declared tool the latest user message names (never right after a tool result:
    a client's tool loop ends)."""
    if s.last_is_tool_result or not s.latest:
        return None
    return next((name for name in s.tools if name in s.latest), None)


def _arguments(tool: str, s: Seen) -> dict | None:
    """The call's arguments: a search for the words after the tool's name; a retrieval of
    the page the message names, else the marker's oldest (`exchange N` if given)."""
    rest = s.latest.split(tool, 1)[1].strip(" :,.!?\"'«»")
    if tool == SEARCH:
        return {"query": rest or s.latest, "limit": 3}
    if tool == RETRIEVE:
        named = PAGE_ID.findall(s.latest) or s.marker_pages or []
        if not named:
            return None
        exchange = re.search(r"exchange\s+(\d+)", rest)
        return {"page_id": named[0], "exchange": int(exchange.group(1)) if exchange else 1}
    return {}


def decide(fmt: str, body: dict) -> Answer:
    s = seen(fmt, body)
    tool = _asked_tool(s)
    arguments = _arguments(tool, s) if tool else None
    if arguments is None:
        return Answer(text=report(s))
    return Answer(tool=tool, arguments=arguments)


def _usage(body_bytes: int) -> tuple[int, int]:
    """(input, output) tokens, in proportion to the request body: a quarter of its bytes,
    half of them read from a prompt cache (and on Anthropic an eighth written to one)."""
    return body_bytes // 4, 40


def cache_figures(prompt: int) -> tuple[int, int]:
    """(read from the prompt cache, written to it) of `prompt` input tokens."""
    return prompt // 2, prompt // 8


def _openai_usage(size: int, names=("prompt_tokens", "completion_tokens", "prompt_tokens_details")) -> dict:
    prompt, completion = _usage(size)
    inp, out, details = names
    return {inp: prompt, out: completion, "total_tokens": prompt + completion,
            details: {"cached_tokens": cache_figures(prompt)[0]}}


def _args_text(a: Answer) -> str:
    return json.dumps(a.arguments, ensure_ascii=False, separators=(",", ":"))


# --- non-streamed bodies, one per format

def _chat(body: dict, a: Answer, n: int, size: int) -> dict:
    message: dict = {"role": "assistant", "content": a.text}
    if a.tool:
        message["tool_calls"] = [{"id": f"call_standin_{n}", "type": "function",
                                  "function": {"name": a.tool, "arguments": _args_text(a)}}]
    return {"id": f"chatcmpl-standin-{n}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if a.tool else "stop"}],
            "usage": _openai_usage(size)}


def _responses_item(a: Answer, n: int) -> dict:
    if a.tool:
        return {"type": "function_call", "id": f"fc_standin_{n}", "call_id": f"call_standin_{n}",
                "name": a.tool, "arguments": _args_text(a), "status": "completed"}
    return {"type": "message", "id": f"msg_standin_{n}", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": a.text, "annotations": []}]}


def _responses(body: dict, a: Answer, n: int, size: int, status: str = "completed") -> dict:
    return {"id": f"resp_standin_{n}", "object": "response", "created_at": int(time.time()),
            "status": status, "model": body.get("model"),
            "output": [_responses_item(a, n)] if status == "completed" else [],
            "usage": _openai_usage(size, ("input_tokens", "output_tokens", "input_tokens_details"))}


def _messages_block(a: Answer, n: int) -> dict:
    if a.tool:
        return {"type": "tool_use", "id": f"toolu_standin_{n}", "name": a.tool, "input": a.arguments}
    return {"type": "text", "text": a.text}


def _messages(body: dict, a: Answer, n: int, size: int) -> dict:
    prompt, completion = _usage(size)
    read, written = cache_figures(prompt)      # Anthropic's input_tokens is the rest
    return {"id": f"msg_standin_{n}", "type": "message", "role": "assistant",
            "model": body.get("model"), "content": [_messages_block(a, n)],
            "stop_reason": "tool_use" if a.tool else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": prompt - read - written, "output_tokens": completion,
                      "cache_read_input_tokens": read, "cache_creation_input_tokens": written}}


ANSWERS = {"chat": _chat, "responses": _responses, "messages": _messages}


# --- streamed events, one generator per format

def _pieces(text: str) -> list[str]:
    """The text in three deltas, so a client sees it arrive in parts."""
    k = max(1, len(text) // 3)
    return [text[:k], text[k:2 * k], text[2 * k:]]


def _sse(doc: dict, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n\n").encode()


def _chat_events(body: dict, a: Answer, n: int, size: int) -> list[bytes]:
    def chunk(delta: dict, finish=None) -> bytes:
        return _sse({"id": f"chatcmpl-standin-{n}", "object": "chat.completion.chunk",
                     "created": int(time.time()), "model": body.get("model"),
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    out = [chunk({"role": "assistant", "content": None if a.tool else ""})]
    if a.tool:
        out.append(chunk({"tool_calls": [{"index": 0, "id": f"call_standin_{n}", "type": "function",
                                          "function": {"name": a.tool, "arguments": ""}}]}))
        out.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": _args_text(a)}}]}))
    else:
        out += [chunk({"content": p}) for p in _pieces(a.text)]
    out.append(chunk({}, "tool_calls" if a.tool else "stop"))
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:   # the final usage chunk
        out.append(_sse({"id": f"chatcmpl-standin-{n}", "object": "chat.completion.chunk",
                         "created": int(time.time()), "model": body.get("model"), "choices": [],
                         "usage": _openai_usage(size)}))
    return out + [b"data: [DONE]\n\n"]


def _responses_events(body: dict, a: Answer, n: int, size: int) -> list[bytes]:
    item = _responses_item(a, n)
    docs = [("response.created", {"response": _responses(body, a, n, size, "in_progress")})]
    if a.tool:
        docs += [("response.output_item.added", {"output_index": 0, "item": {**item, "arguments": ""}}),
                 ("response.function_call_arguments.delta",
                  {"item_id": item["id"], "output_index": 0, "delta": item["arguments"]}),
                 ("response.function_call_arguments.done",
                  {"item_id": item["id"], "output_index": 0, "arguments": item["arguments"]})]
    else:
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        docs += [("response.output_item.added", {"output_index": 0, "item": {**item, "content": [],
                                                                              "status": "in_progress"}}),
                 ("response.content_part.added", {**where, "part": part})]
        docs += [("response.output_text.delta", {**where, "delta": p}) for p in _pieces(a.text)]
        docs += [("response.output_text.done", {**where, "text": a.text}),
                 ("response.content_part.done", {**where, "part": {**part, "text": a.text}})]
    docs += [("response.output_item.done", {"output_index": 0, "item": item}),
             ("response.completed", {"response": _responses(body, a, n, size)})]
    return [_sse({"type": kind, "sequence_number": i, **doc}, kind) for i, (kind, doc) in enumerate(docs)]


def _messages_events(body: dict, a: Answer, n: int, size: int) -> list[bytes]:
    whole = _messages(body, a, n, size)
    start = {**whole, "content": [], "stop_reason": None, "usage": {**whole["usage"], "output_tokens": 1}}
    block = _messages_block(a, n)
    docs = [("message_start", {"message": start}),
            ("content_block_start", {"index": 0, "content_block": {**block, "input": {}} if a.tool
                                     else {**block, "text": ""}})]
    if a.tool:
        docs.append(("content_block_delta", {"index": 0, "delta": {"type": "input_json_delta",
                                                                   "partial_json": _args_text(a)}}))
    else:
        docs += [("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": p}})
                 for p in _pieces(a.text)]
    docs += [("content_block_stop", {"index": 0}),
             ("message_delta", {"delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
                                "usage": {"output_tokens": whole["usage"]["output_tokens"]}}),
             ("message_stop", {})]
    return [_sse({"type": kind, **doc}, kind) for kind, doc in docs]


EVENTS = {"chat": _chat_events, "responses": _responses_events, "messages": _messages_events}


def respond(path: str, raw: bytes, n: int) -> Reply:
    """The stand-in's HTTP answer to one request (`n` numbers its ids)."""
    fmt = FORMATS.get(path.split("?")[0])
    if fmt is None:
        return _error(404, "not_found", f"The stand-in serves {', '.join(FORMATS)}.")
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return _error(400, "invalid_json", "The body must be a JSON object.")
    a = decide(fmt, body)
    if body.get("stream") is True:
        return Reply(headers=[("content-type", "text/event-stream")],
                     chunks=EVENTS[fmt](body, a, n, len(raw)))
    doc = ANSWERS[fmt](body, a, n, len(raw))
    return Reply(chunks=[json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()])


def _error(status: int, code: str, message: str) -> Reply:
    return Reply(status=status, chunks=[json.dumps({"error": {"type": code, "message": message}}).encode()])


class StandIn(FakeServer):
    """The stand-in on a free local port. `keep`: record every request it receives (the
    demo, the tests); else forget each once answered (`npm start` serves for hours)."""

    def __init__(self, keep: bool = True):
        self.keep, self.count = keep, 0
        super().__init__(self._reply)

    def _reply(self, rec: Received) -> Reply:
        self.count += 1
        if not self.keep:
            self.clear()
        return respond(rec.path, rec.body, self.count)


def main() -> int:
    """Serve until stdin closes (the runner that started it went away) or a signal."""
    server = StandIn(keep=False)
    print(json.dumps({"standin": "listening", "url": server.url, "model": MODEL}), flush=True)
    try:
        sys.stdin.read()
    except KeyboardInterrupt:
        pass
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
