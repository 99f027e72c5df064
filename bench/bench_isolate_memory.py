"""A busy minute in one isolate, through the runner with its 128 MiB limit on (docs/design.md
§7.2; issue 43). The mix (tests/support/isolate_mix.py): 16 sessions page a long chat once
(0.93 MiB bodies, a 200k-token model); their 16 next turns at once, non-streamed, recall
declared, a provider answering after 4 s; 16 streamed turns at once; 8 × 7.6 MiB requests
at once without the capability. Then the same with 32 sessions (32 waiting turns).

Prints each phase's statuses and the runner's memory after it: the wasm heap, its peak
since start (across isolates: a lost isolate's refused growth counts), the JS side's peak
(fetch bodies not yet written) and the isolates lost.

  .venv/bin/python bench/bench_isolate_memory.py [--sessions 16,32] [--delay 4] [--limit-mb 128]
  .venv/bin/python bench/bench_isolate_memory.py --held --sessions 8 --large 4 --limit-mb 0

With --held, tracemalloc runs in the Worker's Python during the waiting and large phases:
each reports what one waiting request holds, (traced while all of them wait − traced once
all have answered) / requests — the isolate's caches excluded.

Targets (issue 43): wasm peak ≤ 112 MiB, 0 isolates lost, every paged turn and stream 200,
each large request 200 or 503 edge_busy with Retry-After (at least half 200); with 32
waiting turns still 0 isolates lost. Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from tests.support.isolate_mix import MiB, run_mix                  # noqa: E402


def show(name: str, doc: dict) -> None:
    m = doc["memory"]
    statuses = ", ".join(f"{k} ×{v}" for k, v in sorted(doc.get("statuses", {}).items())) or "—"
    took = f" {doc['s']:5.1f} s" if "s" in doc else " " * 8
    print(f"  {name:<8}{took}  wasm {m['wasm_bytes'] / MiB:6.1f} MiB  peak {m['wasm_peak_bytes'] / MiB:6.1f} MiB"
          f"  js peak {m.get('js_peak_bytes', 0) / MiB:5.1f} MiB  lost {m['isolates_lost']}  [{statuses}]"
          + (f"  held/request {doc['held_per_request'] / MiB:.2f} MiB" if "held_per_request" in doc else ""),
          flush=True)


def missed(sessions: int, out: dict) -> list[str]:
    bad = []
    end = out["end"]["memory"]
    if end["isolates_lost"]:
        bad.append(f"{end['isolates_lost']} isolate(s) lost")
    if sessions == 16 and end["wasm_peak_bytes"] > 112 * MiB:
        bad.append(f"wasm peak {end['wasm_peak_bytes'] / MiB:.1f} MiB > 112")
    for phase in ("paged", "waiting", "streams"):
        other = {k: v for k, v in out[phase]["statuses"].items() if k != "200"}
        shed_ok = sessions > 16 and phase == "waiting" and all(k == "503 edge_busy retry-after" for k in other)
        if other and not shed_ok:
            bad.append(f"{phase}: {other}")
    large = out["large"]["statuses"]
    if set(large) - {"200", "503 edge_busy retry-after"} or large.get("200", 0) * 2 < sum(large.values()):
        bad.append(f"large: {large}")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", default="16,32")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--large", type=int, default=8)
    ap.add_argument("--delay", type=float, default=4.0)
    ap.add_argument("--limit-mb", type=int, default=128, help="EDGE_MEMORY_LIMIT_MB (0: none)")
    ap.add_argument("--held", action="store_true",
                    help="tracemalloc in the Worker: what each waiting request holds (slower; no targets)")
    args = ap.parse_args()
    failed = []
    for sessions in map(int, args.sessions.split(",")):
        print(f"isolate memory, {sessions} sessions, {args.streams} streams, {args.large} × 7.6 MiB, "
              f"provider {args.delay:g} s, limit {args.limit_mb or 'off'} MiB", flush=True)
        with tempfile.TemporaryDirectory(prefix="bench-isolate-") as tmp:
            out = run_mix(Path(tmp) / "edge", sessions, args.streams, args.large, args.delay,
                          args.limit_mb, report=show, held=args.held)
        if args.held:
            continue
        bad = missed(sessions, out)
        print("  targets: " + ("met" if not bad else "MISSED: " + "; ".join(bad)), flush=True)
        failed += bad
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
