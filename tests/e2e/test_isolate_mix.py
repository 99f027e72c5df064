"""A smaller busy minute through the runner with its 128 MiB isolate limit on
(docs/design.md §7.2, §9; bench/bench_isolate_memory.py runs the issue's full mix):
sessions page a long chat once, their next turns wait together on a slow provider, streams
run together, and 7.6 MiB requests arrive together. The isolate is never lost and its wasm
heap stays within 112 MiB (the JS side's 16 MiB left); every paged turn and stream
answers 200; each large request answers 200, or 503 edge_busy with Retry-After, and at
least half answer 200 (admission by memory, issue 43 part 3)."""

import pytest

from multillm_edge.base.platform import HEAP_CEILING_BYTES
from tests.support.isolate_mix import MiB, run_mix

pytestmark = pytest.mark.slow


def test_paged_waiting_and_streamed_turns_never_lose_the_isolate(tmp_path):
    out = run_mix(tmp_path / "mix", sessions=6, streams=6, large=0, delay=2.0,
                  report=lambda name, doc: print(name, doc))
    end = out["end"]
    assert end["memory"]["isolates_lost"] == 0, end["lost_lines"]
    assert not end["lost_lines"]
    assert out["paged"]["statuses"] == {"200": 6}
    assert out["waiting"]["statuses"] == {"200": 6}
    assert out["streams"]["statuses"] == {"200": 6}
    assert end["memory"]["wasm_peak_bytes"] <= 112 * MiB


def test_large_requests_at_once_are_admitted_or_shed(tmp_path):
    out = run_mix(tmp_path / "mix", sessions=6, streams=6, large=3, delay=2.0,
                  report=lambda name, doc: print(name, doc))
    end = out["end"]
    assert end["memory"]["isolates_lost"] == 0, end["lost_lines"]
    assert out["paged"]["statuses"] == {"200": 6}
    assert out["waiting"]["statuses"] == {"200": 6}
    assert out["streams"]["statuses"] == {"200": 6}
    large = out["large"]["statuses"]
    assert set(large) <= {"200", "503 edge_busy retry-after"}, large
    assert large.get("200", 0) * 2 >= sum(large.values()), large
    assert not end["lost_lines"]
    assert end["memory"]["wasm_peak_bytes"] <= 112 * MiB
    # the allocator was capped at the heap's ceiling (docs/design.md §7.2): the break it
    # may reach (the footprint's base plus its limit) is 103.5 MiB, page-rounded
    heap = end["heap"]
    base = heap["break_bytes"] - heap["footprint_bytes"]
    assert heap["footprint_bytes"] <= heap["footprint_limit_bytes"]
    assert abs(base + heap["footprint_limit_bytes"] - HEAP_CEILING_BYTES) <= 64 * 1024, heap
