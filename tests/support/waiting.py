"""Requests waiting for their provider, on the in-process platform: what each holds
(docs/design.md §7.2), for bench/bench_waiting_request.py and tests/handlers.

N requests (distinct sessions) start with an upstream that answers only once all N wait
in its fetch; tracemalloc's traced bytes are read then, and again once every request has
answered and been dropped (what stays is the isolate's caches). The fetch takes the
upstream body and keeps only its length: in the Worker the runtime holds it (a JS
Uint8Array), outside the Python heap.
"""

from __future__ import annotations

import asyncio
import gc
import json
import tracemalloc

from devkit import roleplay as rp
from multillm_edge import app
from multillm_edge.base.http import Incoming
from tests.support.inprocess import Answer, InProcessPlatform, LocalEdge

MiB = 1 << 20
PAGED_MODEL, WIDE_MODEL = "fake:rp-200k", "fake:rp-wide"
RECALL = ["multillm_context_retrieve", "multillm_context_recall"]


def body_of(mib: float, tag: str) -> bytes:
    """A chat body of about `mib` MiB: paged with recall under 1 MiB, else plain."""
    paged = mib < 2
    n = max(10, int(mib * 667))          # ~1.6 KB per exchange (two 700-byte lines)
    body = rp.chat_body(n, model=PAGED_MODEL if paged else WIDE_MODEL, size=700, tag=tag)
    if paged:
        body["capabilities"] = RECALL
    else:
        body.pop("capabilities")
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


class Gate:
    def __init__(self, n: int):
        self.n, self.waiting, self.sent = n, 0, []
        self.all_waiting = asyncio.Event()
        self.release = asyncio.Event()


class WaitingPlatform(InProcessPlatform):
    gate: Gate

    async def read_body(self, limit: int, grow=None, room=None) -> bytes:
        return bytes(bytearray(await super().read_body(limit, grow, room)))   # the Worker's own copy

    async def fetch(self, url, method, headers, body=None, timeout=None):
        take = getattr(body, "take", None)
        self.gate.sent.append(len(take() if take else body))   # the runtime's copy: not Python's
        body = take = None
        self.gate.waiting += 1
        if self.gate.waiting == self.gate.n:
            self.gate.all_waiting.set()
        await self.gate.release.wait()
        return Answer(body=b'{"id":"x","object":"chat.completion","choices":[{"index":0,'
                           b'"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}')


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def wave(edge: LocalEdge, bodies: list[bytes], players: list) -> tuple[int, int, list]:
    gate = Gate(len(bodies))
    WaitingPlatform.gate = gate

    async def one(raw, player):
        key, session = player
        headers = [("authorization", f"Bearer {key}"), ("x-roleplay-session-id", session),
                   ("content-type", "application/json"), ("content-length", str(len(raw)))]
        req = Incoming("POST", "https://edge.test/v1/chat/completions", headers, stream=raw)
        out = await app.handle(req, WaitingPlatform(edge, raw, headers))
        return out.status

    tasks = [asyncio.ensure_future(one(raw, p)) for raw, p in zip(bodies, players)]
    # every request waits in fetch, unless one is answered first (then: fail, not hang)
    gated = asyncio.ensure_future(gate.all_waiting.wait())
    await asyncio.wait([gated, *tasks], timeout=600, return_when=asyncio.FIRST_COMPLETED)
    if not gated.done():
        gated.cancel()
        gate.release.set()
        raise AssertionError(f"answered before all waited: {[t.result() for t in tasks if t.done()]}")
    during = traced()
    gate.release.set()
    statuses = await asyncio.gather(*tasks)
    del tasks
    return during, gate.sent, statuses


def measure(mib: float, n: int) -> dict:
    edge = LocalEdge(rp.edge_vars("http://provider.test"))
    edge.set_model(PAGED_MODEL, 200_000, 1000)
    edge.set_model(WIDE_MODEL, 40_000_000, 1000)
    players = []
    for i in range(n):
        key, session = "rpk_" + f"waiting{i:02d}".ljust(43, "k"), f"rps_waiting_{i:02d}"   # the full key format
        edge.seed_player(f"p_waiting_{i}", key, session)
        players.append((key, session))
    bodies = [body_of(mib, f"W{i}") for i in range(n)]
    loop = edge.loop
    loop.run_until_complete(wave(edge, bodies, players))       # warm: imports, memos, last turns
    tracemalloc.start()
    base = traced()
    during, sent, statuses = loop.run_until_complete(wave(edge, bodies, players))
    after = traced()
    tracemalloc.stop()
    edge.close()
    return {"mib": mib, "n": n, "body": sum(map(len, bodies)) / n, "sent": sum(sent) / max(1, len(sent)),
            "held": (during - after) / n, "base": base, "after": after, "statuses": sorted(set(statuses))}


