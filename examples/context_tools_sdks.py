"""Both context tools with the Responses API (`openai`) and Anthropic Messages
(`anthropic`): the loop of examples/context_tools.py, only the shapes of a tool call
and of its result differ. (The sliding window is left out here; it works the same.)

    reply = responses_turn(openai_client, http, EDGE_URL, KEY, session_id, input_items,
                           model="openai:gpt-4o")
    reply = messages_turn(anthropic_client, http, EDGE_URL, KEY, session_id, messages,
                          model="anthropic:claude-sonnet-4-5", max_tokens=1024)

`input_items` / `messages` is the full history, extended in place with this turn's tool
calls and results. Both declare `multillm_context_recall` too: what the edge brought back
is on the answer, `recall_lines(context_recall(reply))`.

From the repository root, one turn against an edge (`--api responses` or `messages`;
the reply, then `# ` lines: the session, the pages of the request, the moments recalled):

    ROLEPLAY_KEY=$KEY .venv/bin/python -m examples.context_tools_sdks --api messages \
        --model standin:roleplay --history chat.json "Who holds the compass?"
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

if __package__ in (None, ""):   # run as a file: the repository root, for `examples.…`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.context_tools import CAPABILITIES, TOOLS, parse_arguments, run_tool  # noqa: E402


def _edge_fields(session_id: str) -> dict:
    return {"extra_body": {"capabilities": CAPABILITIES},
            "extra_headers": {"X-Roleplay-Session-ID": session_id}}


def responses_turn(client, http: httpx.Client, edge_url: str, key: str, session_id: str,
                   input_items: list, model: str, max_rounds: int = 4, **create_kwargs):
    """One user turn with `client.responses.create`: each `function_call` of the output
    is sent back with its `function_call_output`."""
    for _ in range(max_rounds):
        response = client.responses.create(model=model, input=input_items,
                                           **_edge_fields(session_id), **create_kwargs)
        calls = [it for it in response.output if it.type == "function_call"]
        if not calls or any(c.name not in TOOLS for c in calls):
            break
        for c in calls:
            output = run_tool(http, edge_url, key, session_id, c.name, parse_arguments(c.arguments))
            input_items += [{"type": "function_call", "call_id": c.call_id, "name": c.name,
                             "arguments": c.arguments},
                            {"type": "function_call_output", "call_id": c.call_id, "output": output}]
    return response


def messages_turn(client, http: httpx.Client, edge_url: str, key: str, session_id: str,
                  messages: list, model: str, max_tokens: int, max_rounds: int = 4, **create_kwargs):
    """One user turn with `client.messages.create`: the assistant's content (its
    `tool_use` blocks) is sent back, then one user message of `tool_result` blocks."""
    for _ in range(max_rounds):
        message = client.messages.create(model=model, messages=messages, max_tokens=max_tokens,
                                         **_edge_fields(session_id), **create_kwargs)
        uses = [b for b in message.content if b.type == "tool_use"]
        if not uses or any(u.name not in TOOLS for u in uses):
            break
        messages.append({"role": "assistant", "content": [b.to_dict() for b in message.content]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id,
             "content": run_tool(http, edge_url, key, session_id, u.name, u.input)}
            for u in uses]})
    return message


def _reply_text(api: str, reply) -> str:
    if api == "responses":
        return reply.output_text
    return "".join(b.text for b in reply.content if b.type == "text")


def main(argv=None) -> None:
    """One turn from the command line (the module docstring's last example)."""
    from examples import _cli
    p = _cli.parser(__doc__, "examples.context_tools_sdks")
    p.add_argument("--api", choices=("responses", "messages"), required=True,
                   help="the wire format: OpenAI Responses or Anthropic Messages")
    args = p.parse_args(argv)
    key = _cli.roleplay_key(p)
    history = _cli.load_history(args.history)
    items = history.messages + [{"role": "user", "content": args.message}]
    base = args.edge_url.rstrip("/")
    with httpx.Client(timeout=120) as http, _cli.session(http, args, key, history) as session:
        if args.api == "responses":
            import openai
            client = openai.OpenAI(api_key=key, base_url=base + "/v1", max_retries=0)
            reply = responses_turn(client, http, base, key, session.id, items, model=args.model,
                                   max_output_tokens=args.max_tokens)
        else:
            import anthropic
            client = anthropic.Anthropic(api_key=key, base_url=base, max_retries=0)
            reply = messages_turn(client, http, base, key, session.id, items, model=args.model,
                                  max_tokens=args.max_tokens)
    text = _reply_text(args.api, reply)
    if text:                            # else the rounds ran out on a tool call: not kept
        items.append({"role": "assistant", "content": text})
    _cli.save_history(args.history, session.id, items)
    _cli.report(session.id, text, getattr(reply, "model_extra", None))


if __name__ == "__main__":
    from examples import _cli
    sys.exit(_cli.run(main))
