"""The runner enforces workerd's isolate memory limit (docs/design.md §7.2, §9): a request
that grows the heap past EDGE_MEMORY_LIMIT_MB (128 MiB by default) loses the isolate with
every request in flight (503 isolate_memory_exceeded, as Cloudflare's error 1102), one line
is logged, and a fresh isolate serves the next request."""

import json
import threading

import httpx
import pytest

from devkit.runner import ROOT

pytestmark = pytest.mark.slow
MiB = 1 << 20
ENTRY = str(ROOT / "tests/e2e/memory/memory_entry.py")
LOST = {"error": {"type": "server_error", "code": "isolate_memory_exceeded",
                  "message": "The Worker's isolate exceeded its memory limit; every request in flight was lost. Retry."}}


def lost_lines(edge):
    return [r for r in edge.logs() if r.get("runner") == "isolate_memory_exceeded"]


def test_a_request_past_the_limit_loses_the_isolate_and_a_fresh_one_serves(start_edge):
    edge = start_edge({}, extra_env={"EDGE_MAIN": ENTRY})
    first = edge.client.get("/isolate").json()["isolate"]
    start = edge.client.get("/__runner/memory").json()
    assert start["isolates_lost"] == 0 and start["limit_bytes"] == 128 * MiB
    assert 0 < start["wasm_bytes"] <= start["wasm_peak_bytes"] < 64 * MiB

    # two requests waiting in the isolate, then one that allocates 150 MiB
    waiting = {}
    def wait(i):
        with httpx.Client(base_url=edge.url, timeout=60) as c:
            waiting[i] = c.get("/wait", params={"s": 20})
    threads = [threading.Thread(target=wait, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    edge.wait_for_log(lambda r: False, timeout=1.0)         # let both reach the Worker
    grown = edge.client.get("/grow", params={"mib": 150})
    for t in threads:
        t.join(30)

    assert grown.status_code == 503 and grown.json() == LOST
    assert [waiting[i].status_code for i in range(2)] == [503, 503]
    assert all(waiting[i].json() == LOST for i in range(2))
    lines = lost_lines(edge)
    assert len(lines) == 1, edge.output()[-3000:]
    assert lines[0]["wasm_bytes"] > 128 * MiB and lines[0]["requests_lost"] == 3
    assert set(lines[0]) == {"runner", "wasm_bytes", "js_bytes", "limit_bytes", "requests_lost"}

    # the next request waits for the fresh isolate and is served by it
    again = edge.client.get("/isolate")
    assert again.status_code == 200 and again.json()["isolate"] != first
    assert edge.client.get("/d1").json() == {"rows": [{"one": 1}]}       # its bindings work
    after = edge.client.get("/__runner/memory").json()
    assert after["isolates_lost"] == 1
    assert after["wasm_bytes"] < 64 * MiB
    assert after["wasm_peak_bytes"] == lines[0]["wasm_bytes"]    # the growth refused counts
    assert len(lost_lines(edge)) == 1


def test_under_the_limit_nothing_is_lost_and_zero_turns_the_limit_off(start_edge):
    edge = start_edge({}, extra_env={"EDGE_MAIN": ENTRY, "EDGE_MEMORY_LIMIT_MB": "0"}, name="off")
    assert edge.client.get("/grow", params={"mib": 150}).status_code == 200
    mem = edge.client.get("/__runner/memory").json()
    assert mem["isolates_lost"] == 0 and mem["limit_bytes"] == 0
    assert mem["wasm_peak_bytes"] >= 150 * MiB
    on = start_edge({}, extra_env={"EDGE_MAIN": ENTRY}, name="on")
    assert on.client.get("/grow", params={"mib": 40}).json() == {"grown": 40 * MiB}
    assert on.client.get("/__runner/memory").json()["isolates_lost"] == 0
    assert not lost_lines(on)
