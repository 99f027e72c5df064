"""The cost of a search over a full session, through the local runner (issue 18 item 7).

    .venv/bin/python bench/bench_search.py [--first 380] [--step 3] [--queries 24] [--rounds 3] [--json out.json]

A session is filled through real paged turns (OpenAI Chat, the English conversation
of bench/recall_corpus.py, ~2.5 KB per exchange, 32k-token window): a first paging of
--first exchanges, then turns of --step more exchanges each until the session's
active pages pass 1,000,000 bytes (the allowance is 1 MiB) or it refuses more. Then
--queries questions of the corpus (worded unlike their needles), --rounds times each,
through `POST /v1/context/search`: the Worker's own CPU from its log line (`cpu_parse_ms`,
`cpu_load_ms` (decoding the D1 row), `cpu_check_ms` (every row's HMACs and fields),
`cpu_verify_ms` (SHA-256, decode and json.loads of every page), `cpu_rank_ms`
(page_texts + search), `cpu_response_ms`: perf_counter around pure-CPU sections, never
across an await), the runner's D1 statements and R2 gets, bytes read. The floor is
verifying the same pages (SHA-256 + UTF-8 decode + json.loads of each), timed in the
Worker's own Pyodide in the same run (`POST /__runner/floor?kind=pages`). Target:
CPU ≤ 8× the floor, for the typical questions and for a 1,000-character query (a
stop-words-only query is reported too: it answers no hits). Each round runs the
questions, then each of those two queries 3 times (interleaved, so a noisy stretch
shifts them alike); medians. Exit status non-zero when the target is missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import recall_corpus  # noqa: E402
from devkit import roleplay as rp  # noqa: E402
from devkit.fakes import FakeServer, Reply  # noqa: E402
from devkit.runner import Edge  # noqa: E402

REPLY = json.dumps({"id": "c", "object": "chat.completion", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}).encode()
PHASES = ("parse", "load", "check", "verify", "rank", "response")
TARGET = 8.0
FULL = 1_000_000
STOP_ONLY = "What did they do there when it was then?"


def long_query(exchanges: list) -> str:
    """1,000 characters of the conversation's own words (the most terms a query holds)."""
    return " ".join(t for ex in exchanges[::7] for t in ex["assistant"])[:1000]


def fill(edge: Edge, player, exchanges: list, first: int, step: int) -> dict:
    """Paged turns until the session's active bytes pass FULL (or it refuses more)."""
    n, turns, active = first, 0, 0
    while n <= len(exchanges):
        body = recall_corpus.chat_body(exchanges[:n])
        body.update(model="fake:rp-small", capabilities=["multillm_context_retrieve"])
        r = edge.client.post("/v1/chat/completions", json=body, headers=player.headers(), timeout=120)
        if r.status_code == 413:
            break
        r.raise_for_status()
        turns += 1
        active = edge.sql("SELECT COALESCE(SUM(byte_length), 0) AS b FROM context_pages"
                          " WHERE session_id = ?1", player.session)[0]["b"]
        if active >= FULL:
            break
        n += step
    return {"turns": turns, "exchanges": n, "active_bytes": active}


def floor_ms(edge: Edge, session: str, reps: int) -> tuple[float, int, int]:
    """Median floor of the session's active pages, in the Worker's Pyodide."""
    rows = edge.sql("SELECT r2_key, r2_offset, byte_length FROM context_pages WHERE session_id = ?1"
                    " ORDER BY created_at, r2_key, r2_offset", session)
    objects = {k: edge.r2_get(k) for k in {r["r2_key"] for r in rows}}
    bodies = [objects[r["r2_key"]][r["r2_offset"]:r["r2_offset"] + r["byte_length"]] for r in rows]
    lengths = ",".join(str(len(b)) for b in bodies)
    ms = edge.client.post(f"/__runner/floor?kind=pages&reps={reps}&lengths={lengths}",
                          content=b"".join(bodies)).json()["ms"]
    return statistics.median(ms[1:] or ms), len(rows), sum(map(len, bodies))


def one_search(edge: Edge, player, query: str) -> dict:
    before, n = edge.stats(), len(edge.logs())
    r = edge.client.post("/v1/context/search", json={"query": query, "limit": 5}, headers=player.headers())
    if r.status_code != 200:
        sys.exit(f"search answered {r.status_code}: {r.text[:300]}; log: {edge.logs()[-3:]}")
    after = edge.stats()
    deadline = time.monotonic() + 5
    while not [x for x in edge.logs()[n:] if x.get("route") == "search_pages"] and time.monotonic() < deadline:
        time.sleep(0.005)
    log = [x for x in edge.logs()[n:] if x.get("route") == "search_pages"][-1]
    row = {p: log.get(f"cpu_{p}_ms", 0.0) for p in PHASES}
    row.update(cpu=sum(row.values()), wall=log["ms"], d1=after["d1_statements"] - before["d1_statements"],
               r2=after["r2_gets"] - before["r2_gets"], objects=log["objects_read"],
               bytes=log["bytes_read"], pages=log["pages"], hits=len(r.json()["data"]))
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--first", type=int, default=380)
    ap.add_argument("--step", type=int, default=3)
    ap.add_argument("--queries", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    exchanges, questions = recall_corpus.conversation("en", 18)
    provider = FakeServer(Reply(chunks=[REPLY]))
    edge = Edge(Path(tempfile.mkdtemp(prefix="bench-search-")), vars=rp.edge_vars(provider.url))
    try:
        rp.set_model(edge, "fake:rp-small", 32000, 1000)
        player = rp.new_player(edge)
        filled = fill(edge, player, exchanges, args.first, args.step)
        asked = [q for q in questions if q.exchange < filled["exchanges"]][:args.queries]
        odd = (("1,000 characters", long_query(exchanges)), ("stop words only", STOP_ONLY))
        rows, others = [], {label: [] for label, _ in odd}
        for _ in range(args.rounds):    # interleaved: a noisy stretch shifts every query alike
            rows += [one_search(edge, player, q.text) for q in asked]
            for label, q in odd:
                others[label] += [one_search(edge, player, q) for _ in range(3)]
        floor, pages, size = floor_ms(edge, player.session, 7)
    finally:
        edge.stop()
        provider.close()
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    ratio = med["cpu"] / floor
    print(f"== Search over a full session through the runner (Pyodide): {filled['turns']} paged turns, "
          f"{filled['exchanges']} exchanges, {pages} pages, {size:,} page bytes in {med['objects']:g} objects; "
          f"medians of {len(rows)} searches ({len(asked)} questions × {args.rounds})")
    print("| " + " | ".join(f"cpu {p}" for p in PHASES) + " | CPU ms | floor ms | CPU / floor | wall ms | D1 statements | R2 gets | bytes read |")
    print("|---:" * (len(PHASES) + 7) + "|")
    print("| " + " | ".join(f"{med[p]:.1f}" for p in PHASES)
          + f" | {med['cpu']:.1f} | {floor:.1f} | {ratio:.2f} | {med['wall']:.0f} | {med['d1']:g} | {med['r2']:g} | {med['bytes']:,.0f} |")
    print(f"CPU / floor {ratio:.2f} (target ≤ {TARGET:g}); R2 gets per search {med['r2']:g} (target ≤ 16: "
          f"the storing path's compaction bounds the objects)")
    worst = ratio
    print("| query | cpu rank | CPU ms | CPU / floor | CPU / typical | hits |\n|---|---:|---:|---:|---:|---:|")
    print(f"| typical (median) | {med['rank']:.1f} | {med['cpu']:.1f} | {ratio:.2f} | 1.00 | {med['hits']:g} |")
    for label, rs in others.items():
        m = {k: statistics.median(r[k] for r in rs) for k in ("rank", "cpu", "hits")}
        worst = max(worst, m["cpu"] / floor)
        print(f"| {label} | {m['rank']:.1f} | {m['cpu']:.1f} | {m['cpu'] / floor:.2f} | "
              f"{m['cpu'] / med['cpu']:.2f} | {m['hits']:g} |")
    if args.json:
        args.json.write_text(json.dumps({"filled": filled, "pages": pages, "bytes": size, "floor_ms": floor,
                                         "median": med, "ratio": ratio}, indent=1))
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
