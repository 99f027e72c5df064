"""A busy minute through the runner, with its isolate memory limit on (docs/design.md §7.2;
issue 43): for bench/bench_isolate_memory.py and tests/e2e/test_isolate_mix.py.

Phases, each reported with its statuses and the runner's memory after it:
  paged     `sessions` sessions each page a long chat once (0.93 MiB bodies, a 200k-token
            model, retrieve + recall declared), one after another, the provider at once;
  waiting   their next turns all at once, non-streamed, the provider answering after `delay`;
  streams   `streams` of their next turns at once, streamed (the provider's SSE over ~`delay`);
  large     `large` requests of 7.6 MiB at once without the capability (parsed, checked,
            forwarded as received to a wide model), the provider answering after `delay`.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from devkit import roleplay as rp
from devkit.fakes import FakeServer, Reply
from devkit.runner import Edge

MiB = 1 << 20
PAGED_MODEL, WIDE_MODEL = "fake:rp-200k", "fake:rp-wide"
CAPS = ["multillm_context_retrieve", "multillm_context_recall"]
PAGED_EXCHANGES = 620           # 0.93 MiB of 700-byte lines
LARGE_EXCHANGES = 5070          # 7.6 MiB
ANSWER = json.dumps({"id": "chatcmpl-mix", "object": "chat.completion", "created": 0, "model": "m",
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": "The fox runs."}}]}).encode()


def sse_events(n: int = 8) -> list[bytes]:
    chunk = {"id": "chatcmpl-mix", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": {"content": "word "}, "finish_reason": None}]}
    return [b"data: " + json.dumps(chunk).encode() + b"\n\n" for _ in range(n)] + [b"data: [DONE]\n\n"]


def encoded(body: dict) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def paged_body(s: int, turn: int, stream: bool = False) -> bytes:
    body = rp.chat_body(PAGED_EXCHANGES + turn, model=PAGED_MODEL, size=700, tag=f"S{s}",
                        new_turn=f"S{s} turn {turn}: what do we do now?", capabilities=CAPS)
    if stream:
        body["stream"] = True
    return encoded(body)


def large_body(i: int) -> bytes:
    body = rp.chat_body(LARGE_EXCHANGES, model=WIDE_MODEL, size=700, tag=f"L{i}")
    body.pop("capabilities")
    return encoded(body)


class Provider:
    """JSON after `delay` seconds; SSE over about `delay` seconds when asked to stream."""

    def __init__(self):
        self.delay = 0.0
        self.server = FakeServer(self.reply)

    def reply(self, rec) -> Reply:
        wants_stream = b'"stream":true' in rec.body[-200:] or rec.json().get("stream") is True
        if wants_stream:
            return Reply(headers=[("content-type", "text/event-stream")], chunks=sse_events(),
                         delay=self.delay / 8)
        return Reply(chunks=[ANSWER], head_delay=self.delay, length=True)


def outcome(r: httpx.Response | Exception) -> str:
    """`200`, `503 edge_busy`, `503 isolate_memory_exceeded`, … or the exception's name."""
    if isinstance(r, Exception):
        return type(r).__name__
    if r.status_code == 200:
        return "200"
    try:
        code = r.json()["error"].get("code") or r.json()["error"].get("type")
    except (ValueError, KeyError, TypeError, AttributeError):
        code = "?"
    retry = " retry-after" if r.headers.get("retry-after") else ""
    return f"{r.status_code} {code}{retry}"


def at_once(edge: Edge, jobs: list[tuple[dict, bytes, bool]]) -> Counter:
    """POST each (headers, body, stream) at the same moment; → Counter of outcomes."""
    results: list = [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def one(i, headers, raw, stream):
        with httpx.Client(base_url=edge.url, timeout=300) as client:
            start.wait()
            try:
                if stream:
                    with client.stream("POST", "/v1/chat/completions", content=raw, headers=headers) as r:
                        r.read()
                        results[i] = r
                else:
                    results[i] = client.post("/v1/chat/completions", content=raw, headers=headers)
            except httpx.HTTPError as e:
                results[i] = e

    threads = [threading.Thread(target=one, args=(i, *job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return Counter(outcome(r) for r in results)


def heap(edge: Edge, action: str = "read") -> int:
    """Bytes tracemalloc traces in the Worker's Python (POST /__runner/heap)."""
    return edge.client.post("/__runner/heap", json={"action": action}).json()["traced"]


def held_while_waiting(edge: Edge, provider: "Provider", n: int, result: dict):
    """A thread that reads the Worker's traced heap once `n` requests reach the provider."""
    def watch():
        deadline = time.monotonic() + 600
        while len(provider.server.received) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        result["during"] = heap(edge)
    thread = threading.Thread(target=watch)
    thread.start()
    return thread


def run_mix(state_dir: Path, sessions: int = 16, streams: int = 16, large: int = 8,
            delay: float = 4.0, limit_mb: int = 128, report=print, held: bool = False) -> dict:
    """Run the four phases on a fresh runner → {phase: {statuses, memory}} and the end's
    memory. ``held``: tracemalloc in the Worker during `waiting` and `large` (slower): each
    reports ``held_per_request``, (traced while all wait - traced after) / requests."""
    provider = Provider()
    out = {}
    try:
        with Edge(state_dir, vars=rp.edge_vars(provider.server.url),
                  extra_env={"EDGE_MEMORY_LIMIT_MB": str(limit_mb)}, start_timeout=180) as edge:
            rp.set_model(edge, PAGED_MODEL, 200_000, 1000)
            rp.set_model(edge, WIDE_MODEL, 40_000_000, 1000)
            players = [rp.new_player(edge) for _ in range(sessions + large)]
            out["start"] = {"memory": edge.memory()}
            report("start", out["start"])

            def phase(name, jobs, trace=False):
                t, seen = time.monotonic(), {}
                watcher = None
                if trace:
                    provider.server.clear()
                    heap(edge, "start")
                    watcher = held_while_waiting(edge, provider, len(jobs), seen)
                statuses = at_once(edge, jobs)
                out[name] = {"statuses": dict(statuses), "memory": edge.memory(),
                             "s": round(time.monotonic() - t, 1)}
                if watcher is not None:
                    watcher.join()
                    after = heap(edge, "stop")
                    out[name]["held_per_request"] = (seen["during"] - after) / len(jobs)
                provider.server.clear()
                report(name, out[name])

            provider.delay = 0.0
            t, paged = time.monotonic(), Counter()
            with httpx.Client(base_url=edge.url, timeout=300) as client:
                for s in range(sessions):
                    r = client.post("/v1/chat/completions", content=paged_body(s, 0),
                                    headers=players[s].headers())
                    paged[outcome(r)] += 1
            out["paged"] = {"statuses": dict(paged), "memory": edge.memory(), "s": round(time.monotonic() - t, 1)}
            provider.server.clear()
            report("paged", out["paged"])
            provider.delay = delay
            phase("waiting", [(players[s].headers(), paged_body(s, 1), False) for s in range(sessions)], held)
            phase("streams", [(players[s].headers(), paged_body(s, 2, stream=True), True)
                              for s in range(min(streams, sessions))])
            if large:
                phase("large", [(players[sessions + i].headers(), large_body(i), False)
                                for i in range(large)], held)
            out["end"] = {"memory": edge.memory(),
                          "lost_lines": [r for r in edge.logs() if r.get("runner") == "isolate_memory_exceeded"],
                          "heap": edge.client.post("/__runner/heap", json={"action": "read"}).json()}
    finally:
        provider.server.close()
    return out
