"""The isolate's memory of last turns under a soak, through the runner (real Pyodide,
local D1 and R2; docs/design.md §5.13): many long sessions taking turns in one isolate,
each body ~0.4 MB, far more than the memory's bound holds, so entries are evicted all
along. The Worker's heap stays near its working size (the bound is in bytes, least
recently used evicted), every turn is answered, and the runner's RSS is reported."""

import json

import httpx
import pytest

from devkit import roleplay as rp
from devkit.fakes import FakeServer
from devkit.runner import Edge
from multillm_edge.core import last_turns
from tests.e2e.test_generation import provider_reply

pytestmark = pytest.mark.slow
MODEL, WINDOW = "fake:rp-soak", 40000
SESSIONS, TURNS = 24, 4
MiB = 1 << 20
CAPS = ["multillm_context_retrieve", "multillm_context_prompt_cache"]


def growing(tag: str, turn: int) -> bytes:
    body = rp.chat_body(260 + turn, model=MODEL, size=700, tag=tag, capabilities=CAPS)
    body = {"messages": body.pop("messages"), **body}          # SillyTavern: the history first
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def test_many_long_sessions_keep_the_heap_bounded(tmp_path):
    with FakeServer(provider_reply) as provider, Edge(tmp_path / "soak", vars=rp.edge_vars(provider.url)) as edge:
        rp.set_model(edge, MODEL, WINDOW, 200)
        key, principal = rp.seed_principal(edge)
        for s in range(SESSIONS):
            edge.sql("INSERT INTO roleplay_sessions (session_id, principal, created_at) VALUES (?1, ?2, 0)",
                     f"rps_soak_{s}", principal)
        sizes = []
        with httpx.Client(base_url=edge.url, timeout=120) as client:
            def turn(s: int, t: int):
                raw = growing(f"S{s}", t)
                sizes.append(len(raw))
                r = client.post("/v1/chat/completions", content=raw,
                                headers={"Authorization": f"Bearer {key}", "X-Roleplay-Session-ID": f"rps_soak_{s}"})
                assert r.status_code == 200, r.text[:300]
                assert r.json()["context_pages"]

            for s in range(8):           # the memory full, the heap at its working size
                turn(s, 0)
            before = client.get("/__runner/memory").json()
            for t in range(1, TURNS):
                for s in range(SESSIONS):
                    turn(s, t)
            after = client.get("/__runner/memory").json()
    bound = last_turns.MAX_BYTES / MiB
    grown = (after["wasm_bytes"] - before["wasm_bytes"]) / MiB
    print(f"\nsoak: {SESSIONS} sessions × {TURNS} turns, bodies {min(sizes) / MiB:.2f}–{max(sizes) / MiB:.2f} MiB, "
          f"memory bound {bound:.0f} MiB (estimated): wasm heap {before['wasm_bytes'] / MiB:.0f} → "
          f"{after['wasm_bytes'] / MiB:.0f} MiB, runner RSS {before['rss_bytes'] / MiB:.0f} → "
          f"{after['rss_bytes'] / MiB:.0f} MiB, wasm peak {after['wasm_peak_bytes'] / MiB:.0f} MiB, "
          f"isolates lost {after['isolates_lost']}")
    assert after["wasm_bytes"] <= 128 * MiB
    assert grown <= 32
    # under the runner's isolate limit (on by default, docs/design.md §9): never passed
    assert after["limit_bytes"] == 128 * MiB and after["isolates_lost"] == 0
