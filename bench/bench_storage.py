"""What a growing session's storage costs, merging on and off (issue 18, docs/design.md §5.9).

One session grows one exchange per turn (~1.9 KB exchanges, devkit.roleplay's chat, a
32k-token window model), turns back to back (the clock moves ``--step`` seconds per
turn), through the real handlers on the in-process platform (sqlite D1 on the real
migrations, an in-memory R2), until its pages fill the 1 MiB allowance (the first 413).
Every ``--every`` turns and at the end, for merging on and off (lazy refresh alone):
- objects: distinct R2 objects holding the session's active rows: what a search reads;
- rows/turn: D1 rows written per turn so far (the log line's ``rows_written``);
- R2 ÷ new: R2 bytes put so far ÷ bytes of the pages new to the session so far;
- puts: R2 puts per turn that writes bodies (must be 1; none for a refresh alone).
Then the worst figures, the targets (≤ 16 objects at every turn, ≤ 6 rows per turn more
than merging off, R2 ≤ 8× the new bytes) and ``cpu_sign_ms`` (the page-write decisions,
merges included) per turn with a put, median, on and off. Exit status non-zero when a
target is missed.

Usage: ``python bench/bench_storage.py [--step 5] [--every 50] [--max-turns 1200]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for path in (os.path.join(ROOT, "src"), ROOT):
    if path not in sys.path:
        sys.path.insert(0, path)

from devkit import roleplay as rp  # noqa: E402
from multillm_edge.core import page_writes  # noqa: E402
from tests.support.inprocess import LocalEdge  # noqa: E402

KEY, SESSION, MODEL = "rpk_bench_storage", "rps_bench_storage", "fake:rp-32k"
SIZE = 900           # per message: ~1.9 KB per exchange with its JSON


def grow(merging: bool, step: int, every: int, max_turns: int, start: int = 16) -> dict:
    page_writes.MERGE = page_writes.MergeRule(enabled=merging)
    edge = LocalEdge(rp.edge_vars("http://provider.test"))
    edge.seed_player("p_bench", KEY, SESSION)
    edge.set_model(MODEL, 32768, 1024)
    headers = {"Authorization": f"Bearer {KEY}", "X-Roleplay-Session-ID": SESSION}
    puts = [0]
    real_put = edge.bucket.put
    put_bytes = [0]

    async def put(key, data):
        put_bytes[0] += len(data)
        await real_put(key, data)
    edge.bucket.put = put
    seen: dict = {}
    out = {"rows": 0, "new": 0, "turns": 0, "worst_objects": 0, "lines": [], "cpu": [],
           "puts_per_storing_turn": set(), "merge_turns": 0, "exchange": 0}
    try:
        for n in range(start, start + max_turns):
            body = rp.chat_body(n, model=MODEL, size=SIZE)
            before = edge.bucket.ops["put"]
            r = edge.request("POST", "/v1/chat/completions", headers, body)
            if r.status == 413:
                break
            assert r.status == 200, r.body
            log = edge.logs[-1]
            stored = edge.bucket.ops["put"] - before
            if log.get("rows_written", 0) > log.get("rows_refreshed", 0):   # bodies to write
                out["puts_per_storing_turn"].add(stored)
            else:
                assert stored == 0
            if stored:
                out["cpu"].append(log.get("cpu_sign_ms", 0))
            out["merge_turns"] += bool(log.get("pages_moved"))
            out["rows"] += log.get("rows_written", 0)
            rows = edge.sql("SELECT page_id, byte_length, r2_key FROM context_pages "
                            "WHERE session_id = ?1 AND expires_at > ?2", SESSION, edge.clock)
            for row in rows:
                if row["page_id"] not in seen:
                    seen[row["page_id"]] = row["byte_length"]
                    out["new"] += row["byte_length"]
            objects = len({row["r2_key"] for row in rows})
            out["worst_objects"] = max(out["worst_objects"], objects)
            out["turns"] += 1
            if out["turns"] % every == 0:
                out["lines"].append(line(out, objects, put_bytes[0], sum(x["byte_length"] for x in rows)))
            edge.clock += step
        out["final"] = line(out, objects, put_bytes[0], sum(x["byte_length"] for x in rows))
        out["r2_ratio"] = put_bytes[0] / out["new"]
        out["exchange"] = round(len(rp.chat_body(101, size=SIZE)["messages"][-3]["content"]) * 2)
    finally:
        edge.close()
        page_writes.MERGE = page_writes.MergeRule()
    return out


def line(out: dict, objects: int, put_bytes: int, active: int) -> tuple:
    t = out["turns"]
    return (t, objects, round(out["rows"] / t, 2), round(put_bytes / max(out["new"], 1), 2), active)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--step", type=int, default=5, help="seconds between turns")
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--max-turns", type=int, default=1200)
    a = ap.parse_args(argv)
    on = grow(True, a.step, a.every, a.max_turns)
    off = grow(False, a.step, a.every, a.max_turns)
    print(f"storage bench — one session, +1 exchange per turn ({SIZE}-character messages), "
          f"32k window, clock +{a.step} s per turn, until the 1 MiB allowance")
    print("| turn | objects (merging) | rows/turn (merging) | R2 ÷ new (merging) | objects (off) "
          "| rows/turn (off) | R2 ÷ new (off) | active bytes |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for x, y in zip(on["lines"] + [on["final"]], off["lines"] + [off["final"]]):
        print(f"| {x[0]} | {x[1]} | {x[2]} | {x[3]} | {y[1]} | {y[2]} | {y[3]} | {x[4]:,} |")
    extra = on["rows"] / on["turns"] - off["rows"] / off["turns"]
    print(f"turns to the allowance: {on['turns']} (merging), {off['turns']} (off)")
    print(f"worst objects a search reads: {on['worst_objects']} (merging), {off['worst_objects']} (off)")
    print(f"R2 puts per storing turn: {sorted(on['puts_per_storing_turn'])} (merging), "
          f"{sorted(off['puts_per_storing_turn'])} (off); turns that moved pages: {on['merge_turns']}")
    print(f"rows per turn: +{extra:.2f} over lazy refresh alone; R2 bytes ÷ new page bytes "
          f"{on['r2_ratio']:.2f} (merging), {off['r2_ratio']:.2f} (off)")
    print(f"cpu_sign_ms per turn with a put, median: {statistics.median(on['cpu']):.3f} (merging), "
          f"{statistics.median(off['cpu']):.3f} (off); mean {statistics.mean(on['cpu']):.3f} / "
          f"{statistics.mean(off['cpu']):.3f}")
    ok = on["worst_objects"] <= 16 and extra <= 6 and on["r2_ratio"] <= 8 \
        and on["puts_per_storing_turn"] == {1}
    print("targets (≤ 16 objects, ≤ +6 rows/turn, R2 ≤ 8× new, one put):", "met" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
