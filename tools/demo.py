#!/usr/bin/env python3
"""`npm run demo`: reversible context paging, end to end, with only local parts.

1. the stand-in provider `npm start` serves with no provider key (devkit/standin.py),
   here in this process, recording every request it receives;
2. the local runner (`node runner/dev.mjs`, real Pyodide + local D1/R2) with its own
   state under .wrangler/demo-state and a vars file turning paging on;
3. a key, a policy, a session and a small model window, made with the admin CLI;
4. a ~40-exchange roleplay sent with the official `openai` SDK that overflows the window;
5. what the provider received (messages, the marker, the retrieval tool);
6. one page retrieved as a client would, and verified byte for byte.

Every check prints a ✓ (or ✗); the exit status is 0 only if all of them passed.
The runner and the stand-in are always stopped.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from devkit.runner import Edge  # noqa: E402  (the same local parts the tests use)
from devkit.standin import StandIn  # noqa: E402
from tools.long_chat import USER_LINES  # noqa: E402
STATE = ROOT / ".wrangler" / "demo-state"
PRINCIPAL = "demo-player"
PROVIDER = "standin"
MODEL = f"{PROVIDER}:rp-demo"
WINDOW_TOKENS, MAX_OUTPUT_TOKENS, MAX_TOKENS = 6000, 800, 300
PROVIDER_KEY = "sk-standin-demo-provider-key"
SIGNING_SECRET = "demo-signing-secret-local-only-0123456789"
TURNS = 40
TOOL_NAME = "multillm_context_retrieve"
MARKER_START = "[multillm context]"

ROLL_DICE = {"type": "function", "function": {
    "name": "roll_dice", "description": "Roll a die for a skill check.",
    "parameters": {"type": "object", "properties": {"sides": {"type": "integer"},
                                                    "reason": {"type": "string"}},
                   "required": ["sides"]}}}

# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------

USE_COLOR = sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def _c(code: str, text: str) -> str:
    return f"\033[{code}m{text}\033[0m" if USE_COLOR else text


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed: list[str] = []

    def __call__(self, ok: bool, text: str, detail: str = "") -> bool:
        if ok:
            self.passed += 1
            print(f"  {_c('32', '✓')} {text}", flush=True)
        else:
            self.failed.append(text)
            print(f"  {_c('31', '✗')} {text}" + (f"\n      {detail}" if detail else ""), flush=True)
        return ok


class DemoFailed(Exception):
    pass


def step(n: int, title: str):
    print(f"\n{_c('1', f'{n}. {title}')}", flush=True)


def note(text: str):
    print(f"     {_c('2', text)}", flush=True)


def short(page_id: str) -> str:
    return page_id[:11] + "…"


def kb(n: int) -> str:
    return f"{n / 1024:.1f} KB"


def compact(obj) -> bytes:
    """The canonical page bytes (docs/design.md §5.8): compact JSON, UTF-8, no ASCII escaping."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


# ---------------------------------------------------------------------------
# The admin CLI
# ---------------------------------------------------------------------------

def admin(*args: str, secret_field: str | None = None) -> dict:
    rel_state = os.path.relpath(STATE, ROOT)
    cmd = [sys.executable, "tools/admin.py", "--local", "--persist-to", rel_state, "--json", *args]
    shown = [os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(str(ROOT)) else "python3",
             *cmd[1:]]
    print(f"     $ {shlex.join(shown)}", flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise DemoFailed(f"admin CLI failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    visible = dict(doc)
    if secret_field and secret_field in visible:
        visible[secret_field] = visible[secret_field][:8] + "…(shown once; hidden here)"
    print(f"       {_c('2', json.dumps(visible, ensure_ascii=False))}", flush=True)
    return doc


# ---------------------------------------------------------------------------
# The roleplay
# ---------------------------------------------------------------------------

def user_turn(i: int) -> str:
    if i % 8 == 5:
        return (f"Turn {i}: I stop and study the undergrowth before stepping on. "
                "I roll for perception (roll_dice).")
    return f"Turn {i}: " + USER_LINES[i % len(USER_LINES)]


def exchanges_of(history: list[dict]) -> list[list[dict]]:
    """The client's own view of its exchanges: each runs from a user turn to the next."""
    out, cur = [], None
    for m in history:
        if m["role"] == "user":
            cur = [m]
            out.append(cur)
        elif cur is not None:
            cur.append(m)
    return out


def paged_runs(history: list[dict], by_sha: dict):
    """(number of the first exchange, the messages, the page) for each run of the client's
    consecutive exchanges whose compact JSON is a page's bytes (a page may hold a block
    of exchanges, docs/design.md §5.7), in history order."""
    exchanges = exchanges_of(history)
    for a in range(len(exchanges)):
        for b in range(a + 1, len(exchanges) + 1):
            run = [m for e in exchanges[a:b] for m in e]
            page = by_sha.get(hashlib.sha256(compact(run)).hexdigest())
            if page:
                yield a + 1, run, page


def roll_result(i: int) -> int:
    return (i * 7) % 20 + 1


def play(edge_url: str, key: str, session_id: str, standin: StandIn, checks: Checks):
    client = openai.OpenAI(api_key=key, base_url=edge_url + "/v1", max_retries=0, timeout=60,
                           default_headers={"X-Roleplay-Session-ID": session_id})
    history = [{"role": "system", "content": "You are Aurore, a ranger of the northern woods. "
                                             "Stay in character; never break the fourth wall."},
               {"role": "assistant", "content": "Aurore looks up from the campfire. «You're late. "
                                                "The woods don't wait for anyone — come, before the light goes.»"}]
    first_paged = None
    last = None
    calls = 0
    t0 = time.monotonic()
    with client:
        for i in range(1, TURNS + 1):
            history.append({"role": "user", "content": user_turn(i)})
            while True:
                raw = client.chat.completions.with_raw_response.create(
                    model=MODEL, messages=history, tools=[ROLL_DICE], max_tokens=MAX_TOKENS,
                    extra_body={"capabilities": [TOOL_NAME]})
                completion = raw.parse()
                calls += 1
                msg = completion.choices[0].message
                pages = (completion.model_extra or {}).get("context_pages") or []
                last = {"turn": i, "completion": completion, "headers": raw.headers,
                        "pages": pages, "sent": list(history), "upstream": standin.received[-1]}
                if pages and first_paged is None:
                    first_paged = i
                    note(f"turn {i:2d}: the history no longer fits the window — the edge starts paging")
                if msg.tool_calls:
                    call = msg.tool_calls[0]
                    history.append({"role": "assistant", "content": None, "tool_calls": [
                        {"id": call.id, "type": "function",
                         "function": {"name": call.function.name, "arguments": call.function.arguments}}]})
                    history.append({"role": "tool", "tool_call_id": call.id,
                                    "content": json.dumps({"roll": roll_result(i)})})
                    continue
                history.append({"role": "assistant", "content": msg.content})
                break
            if i % 10 == 0 or i == TURNS:
                up = last["upstream"].json()
                note(f"turn {i:2d}: client sent {len(history) - 1:3d} messages "
                     f"({kb(len(compact(last['sent'])))}) → provider got {len(up['messages']):2d} "
                     f"({kb(len(last['upstream'].body))}), {len(pages):2d} pages")
    elapsed = time.monotonic() - t0
    replies = sum(1 for m in history if m["role"] == "assistant" and m.get("content")) - 1
    checks(replies == TURNS, f"{TURNS} exchanges played through the edge with the openai SDK: "
                             f"{replies} replies, {calls} requests in {elapsed:.1f} s")
    checks(first_paged is not None,
           f"the conversation overflowed the {WINDOW_TOKENS}-token window and was paged "
           f"(from turn {first_paged})")
    return history, last


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

def run(checks: Checks) -> None:
    step(1, "Stand-in provider")
    standin = StandIn()
    runner = None
    try:
        checks(True, f"listening on {standin.url} (OpenAI chat completions, records every request)")

        step(2, "Local runner (real Pyodide, local D1 + R2)")
        if STATE.exists():
            shutil.rmtree(STATE)
        STATE.mkdir(parents=True)
        providers = {PROVIDER: {"base_url": standin.url + "/v1", "formats": ["chat"],
                                "api_key_secret": "STANDIN_API_KEY"}}
        demo_vars = {"CONTEXT_PAGING_ENABLED": "true", "PROVIDERS": json.dumps(providers),
                     "STANDIN_API_KEY": PROVIDER_KEY, "MEDIA_SIGNING_SECRET": SIGNING_SECRET}
        note(f"state {os.path.relpath(STATE, ROOT)} "
             "(CONTEXT_PAGING_ENABLED=true, PROVIDERS → stand-in, demo signing secret)")
        try:
            runner = Edge(STATE, vars=demo_vars, control=False, log_file=STATE / "runner.log",
                          start_timeout=120, extra_env={"PORT": os.environ.get("DEMO_PORT", "0")})
        except RuntimeError as e:
            raise DemoFailed(str(e)) from None
        health = httpx.get(runner.url + "/healthz", timeout=30)
        checks(health.status_code == 200, f"runner listening on {runner.url} "
                                          f"(started in {runner.start_ms} ms), /healthz {health.status_code}",
               health.text[:300])

        step(3, "Key, policy, session and model window (admin CLI)")
        key = admin("key", "create", "--principal", PRINCIPAL, secret_field="key")["key"]
        checks(key.startswith("rpk_"), f"roleplay key created for {PRINCIPAL} (stored only as its SHA-256)")
        admin("policy", "set", "--principal", PRINCIPAL, "--revision", "1", "--grants", "chat",
              "--retention", "standard")
        checks(True, "policy revision 1: grants chat, retention standard")
        session_id = admin("session", "create", "--principal", PRINCIPAL)["session_id"]
        checks(bool(session_id), f"session {session_id} opened")
        admin("model", "set", MODEL, "--input-tokens", str(WINDOW_TOKENS),
              "--max-output-tokens", str(MAX_OUTPUT_TOKENS))
        checks(True, f"model {MODEL}: input window {WINDOW_TOKENS} tokens")

        step(4, f"A {TURNS}-exchange roleplay (openai SDK → edge → stand-in)")
        history, last = play(runner.url, key, session_id, standin, checks)

        step(5, "What the provider received for the last request")
        up = last["upstream"]
        body = up.json()
        sent = last["sent"]
        note(f"client sent {len(sent)} messages ({kb(len(compact(sent)))}); "
             f"provider received {len(body['messages'])} messages ({kb(len(up.body))})")
        note(f"the stand-in's answer: {last['completion'].choices[0].message.content}")
        markers = [m for m in body["messages"] if m["role"] == "user"
                   and isinstance(m.get("content"), str) and m["content"].startswith(MARKER_START)]
        checks(len(markers) >= 1, f"{len(markers)} marker message(s) (role user) in place of the paged exchanges")
        marker_ids = []
        for m in markers:
            text = m["content"]
            ids = text[text.rindex(": ") + 2:].rstrip(".").split(", ")
            marker_ids += ids
            shown = text if len(ids) <= 2 else text[:text.rindex(": ") + 2] + \
                f"{ids[0]}, {ids[1]}, … ({len(ids)} page ids)."
            print(f"       {_c('36', 'marker:')} {shown}")
        tool_names = [t.get("function", {}).get("name") for t in body.get("tools") or []]
        note(f"tools: {', '.join(tool_names)}")
        checks(TOOL_NAME in tool_names and "roll_dice" in tool_names,
               f"the {TOOL_NAME} tool schema was added next to the client's roll_dice tool")
        checks(body["model"] == MODEL and body["max_tokens"] == MAX_TOKENS and "capabilities" not in body,
               f"model {body['model']} and max_tokens {body['max_tokens']} unchanged; capabilities stripped")
        checks(up.headers.get("authorization") == f"Bearer {PROVIDER_KEY}"
               and key.encode() not in up.body and key not in json.dumps(up.headers),
               "the provider got its own key, never the roleplay key")
        latest = max(k for k, m in enumerate(sent) if m["role"] == "user")
        tail = len(sent) - latest
        checks(body["messages"][0] == sent[0] and body["messages"][-tail:] == sent[latest:],
               "the system prompt and the latest exchange travelled unchanged")
        page_ids = [p["page_id"] for p in last["pages"]]
        checks(page_ids == marker_ids and
               last["headers"].get("x-multillm-context-pages", "").split(",") == page_ids,
               f"the response lists the same {len(page_ids)} pages in context_pages "
               "and x-multillm-context-pages",
               f"context_pages={page_ids[:3]}… markers={marker_ids[:3]}…")

        step(6, "Retrieve one page as a client would, and verify it byte for byte")
        by_sha = {p["sha256"]: p for p in last["pages"]}
        chosen = next(((n, run, page) for n, run, page in paged_runs(history, by_sha)
                       if any(m.get("tool_calls") for m in run)), None)
        if not checks(chosen is not None, "the client finds a paged exchange (one with a dice roll) by "
                                          "the SHA-256 of its own messages"):
            raise DemoFailed("no paged exchange matches the client's history")
        n, exchange, page = chosen
        expected = compact(exchange)
        calls_before = len(standin.received)
        url = f"/v1/context/pages/{page['page_id']}"
        call = next(m for m in exchange if m.get("tool_calls"))["tool_calls"][0]
        note(f"exchange #{n}…: {len(exchange)} messages, {len(expected)} bytes, tool call {call['id']}")
        print(f"     $ GET {url}?roleplay_session_id={session_id}   (Authorization: Bearer rpk_…)")
        r = httpx.get(runner.url + url, params={"roleplay_session_id": session_id},
                      headers={"Authorization": f"Bearer {key}"}, timeout=30)
        if not checks(r.status_code == 200, f"HTTP {r.status_code} from the edge", r.text[:300]):
            raise DemoFailed("retrieval failed")
        got = r.json()
        note(f"{{page_id: {short(got.get('page_id', ''))}, sha256: {got.get('sha256', '')[:12]}…, "
             f"expires_at: {got.get('expires_at')}, messages: [{len(got.get('messages') or [])}], "
             f"body_base64: {len(got.get('body_base64') or '')} chars}}")
        stored = base64.b64decode(got.get("body_base64") or "", validate=True)
        checks(r.headers.get("cache-control") == "private, no-store", "Cache-Control: private, no-store")
        checks(stored == expected, f"body_base64 decodes to exactly the compact JSON of exchange #{n} "
                                   f"({len(stored)} bytes, byte for byte)",
               f"first difference at byte {next((k for k, (a, b) in enumerate(zip(stored, expected)) if a != b), min(len(stored), len(expected)))}")
        sha = hashlib.sha256(stored).hexdigest()
        checks(sha == got.get("sha256") == page["sha256"] == hashlib.sha256(expected).hexdigest(),
               f"sha256 {sha[:16]}… matches (client, context_pages, retrieval)")
        checks(got.get("messages") == exchange and got.get("page_id") == page["page_id"],
               "messages equal the original exchange, tool-call id and argument string included")
        checks(len(standin.received) == calls_before, "retrieval made no provider call")

        search_and_recall(runner.url, key, session_id, history, standin, checks)
    finally:
        if runner is not None:
            runner.stop()
            note(f"runner stopped (log: {os.path.relpath(STATE / 'runner.log', ROOT)})")
        standin.close()


RECALL = "multillm_context_recall"
ASK = "«Aurore, tell me again about the spiral stones. Who carved them, what do the old songs say?»"


def search_and_recall(edge_url: str, key: str, session_id: str, history: list, standin: StandIn,
                      checks: Checks) -> None:
    step(7, "Search the stored exchanges, then let the edge recall one without a tool call")
    auth = {"Authorization": f"Bearer {key}", "X-Roleplay-Session-ID": session_id}
    query = "spiral stones carved old songs"
    print(f"     $ POST /v1/context/search {json.dumps({'query': query, 'limit': 3})}")
    r = httpx.post(edge_url + "/v1/context/search", json={"query": query, "limit": 3},
                   headers=auth, timeout=30)
    hits = r.json().get("data") or [] if r.status_code == 200 else []
    for h in hits:
        note(f"exchange {h['exchange']} of {short(h['page_id'])} (score {h['score']}): "
             f"{h['excerpt']['role']}: {h['excerpt']['text'][:90]}…")
    checks(bool(hits) and "spiral stones" in hits[0]["excerpt"]["text"],
           f"search named the exchange that spoke of the spiral stones "
           f"({r.json().get('exchanges_searched')} exchanges of {r.json().get('pages_searched')} pages searched)"
           if r.status_code == 200 else f"search answered {r.status_code}", r.text[:300])
    calls_before = len(standin.received)
    turn = history + [{"role": "user", "content": ASK}]
    note(f"next turn, declaring {RECALL}: {ASK}")
    r = httpx.post(edge_url + "/v1/chat/completions", headers=auth, timeout=60, json={
        "model": MODEL, "messages": turn, "tools": [ROLL_DICE], "max_tokens": MAX_TOKENS,
        "capabilities": [TOOL_NAME, RECALL]})
    recalled = r.json().get("context_recall") or [] if r.status_code == 200 else []
    sent = standin.received[-1].json() if len(standin.received) > calls_before else {"messages": []}
    quoted = [m["content"] for m in sent["messages"] if m["role"] == "user"
              and isinstance(m.get("content"), str) and "Earlier moments" in m["content"]]
    if quoted:
        for line in quoted[-1][quoted[-1].index("Earlier moments"):].split("\n")[:4]:
            print(f"       {_c('36', 'recalled:')} {line[:110]}{'…' if len(line) > 110 else ''}")
    checks(bool(recalled) and bool(quoted) and "spiral stones" in quoted[-1]
           and r.headers.get("x-multillm-context-recall-count") == str(len(recalled)),
           f"the provider got {len(recalled)} earlier moment(s) quoted verbatim before the latest turn, "
           "named in context_recall — no tool call, no extra model call",
           r.text[:300])
    checks(len(standin.received) == calls_before + 1, "one provider call for the turn, none for recall")


def main() -> int:
    print(_c("1", "MultiLLM roleplay edge — reversible context paging demo") +
          _c("2", " (local runner, local D1/R2, stand-in provider)"))
    checks = Checks()
    try:
        run(checks)
    except DemoFailed as e:
        checks(False, "demo stopped", str(e))
    except KeyboardInterrupt:
        print("\ninterrupted")
        return 130
    except Exception as e:  # an unexpected failure is a failed check, never a silent pass
        checks(False, f"demo stopped: {type(e).__name__}", str(e)[:800])
    if checks.failed:
        print(f"\n{_c('31', f'{len(checks.failed)} check(s) failed')} ({checks.passed} passed).")
        return 1
    print(f"\n{_c('32', f'All {checks.passed} checks passed.')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
