"""Generation through the local runner: storage operations per turn and added latency.

    .venv/bin/python bench/bench_generation.py [--exchanges 200] [--turns 20] [--repeat 30]

1. A roleplay session of N exchanges grows by one exchange per turn against a model
   window that forces paging; per turn, the runner's counters give the D1 statements and
   R2 puts (targets: ≤ 3 and ≤ 1 in steady state).
2. The same paged request is timed through the edge and sent straight to the stand-in
   provider; the ratio of medians (same run) is the edge's added latency.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support import roleplay as rp  # noqa: E402
from tests.support.fakes import FakeServer, Reply  # noqa: E402
from tests.support.runner import Edge  # noqa: E402

REPLY = json.dumps({"id": "c", "object": "chat.completion", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}).encode()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--exchanges", type=int, default=200)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    provider = FakeServer(Reply(chunks=[REPLY]))
    edge = Edge(Path(tempfile.mkdtemp(prefix="bench-gen-")), vars=rp.edge_vars(provider.url))
    try:
        body = rp.chat_body(args.exchanges, size=300, tag="B")
        window = len(json.dumps(body).encode()) // 2        # about half the history is paged
        rp.set_model(edge, "fake:rp-small", window, 1000)
        h = rp.new_player(edge).headers()
        print(f"session of {args.exchanges} exchanges ({len(json.dumps(body)) / 1e6:.2f} MB), "
              f"window {window} tokens, +1 exchange per turn")
        print(f"{'turn':>4} {'D1 stmts':>8} {'R2 puts':>7} {'pages':>5} {'new':>4}")
        msgs = body["messages"]
        for turn in range(args.turns):
            before = edge.stats()
            r = edge.client.post("/v1/chat/completions", json={**body, "messages": msgs}, headers=h)
            r.raise_for_status()
            after = edge.stats()
            log = [x for x in edge.logs() if x.get("route") == "generate"][-1]
            print(f"{turn + 1:>4} {after['d1_statements'] - before['d1_statements']:>8} "
                  f"{after['r2_puts'] - before['r2_puts']:>7} {log['pages']:>5} {log['new_pages']:>4}")
            msgs = msgs + [{"role": "assistant", "content": rp.line("B-a", 10_000 + turn, 300)},
                           {"role": "user", "content": rp.line("B-u", 10_000 + turn, 300)}]
        # Latency: the same paged request (its pages already stored) vs the provider alone.
        paged = {**body, "messages": msgs}
        direct_body = json.dumps(paged).encode()
        edge_ms, direct_ms = [], []
        with httpx.Client(timeout=60) as client:
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                client.post(edge.url + "/v1/chat/completions", json=paged, headers=h).raise_for_status()
                edge_ms.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                client.post(provider.url + "/v1/chat/completions", content=direct_body,
                            headers={"content-type": "application/json"}).raise_for_status()
                direct_ms.append((time.perf_counter() - t0) * 1000)
        e, d = statistics.median(edge_ms), statistics.median(direct_ms)
        print(f"\nlatency over {args.repeat} runs (median): through the edge {e:.1f} ms, "
              f"provider directly {d:.1f} ms, ratio {e / d:.1f}×, added {e - d:.1f} ms")
    finally:
        edge.stop()
        provider.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
