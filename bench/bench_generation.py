"""Generation through the local runner: storage cost per turn, first paging, leaks, latency.

    .venv/bin/python bench/bench_generation.py [--exchanges 200] [--size 450] [--window 32000]
                           [--turns 20] [--writers 35] [--repeat 30] [--json out.json]

1. Steady turns: a roleplay session of N exchanges (~0.27 MB at the defaults) grows by
   one exchange per turn against a 32k-token window, so most of it is paged. The first turn is the first paging of an
   existing long chat (R2 puts); each later turn reports D1 statements, D1 rows changed
   (meta.changes of the writes: rows inserted or rewritten) and meta.rows_written (index
   entries included), R2 puts, new pages, wall time and the edge's store_ms. After the
   runner clock moves 1,900 s (under half the 3,600 s TTL left), one more turn shows the
   lazy refresh.
2. Largest first paging: fresh sessions bring ever longer histories into a wide window in
   one request; the largest accepted (pages, bytes) and the first refusal are reported.
3. Concurrent writers: W requests with distinct histories race on one session against the
   1 MiB allowance; then R2 objects under context-pages/ without a row, and rows without
   an object, are counted.
4. Latency: the same paged request (pages stored) through the edge vs the provider alone.

With --cpu (issue 13) it runs instead, for each history size of --cpu-sizes (default
50, 200, 800 exchanges): a first paging, then --turns steady turns (+1 exchange each),
reporting the median of the Worker's own CPU per phase as its log line carries it
(`cpu_<phase>_ms`: perf_counter around pure-CPU sections, never across an await) —
parse, load (decoding the context row), plan, keep (the turn kept for the session's
next one, §5.13), sign (page writes: classify, rows),
encode (upstream body), response — their sum, and the floor of the same body (json.loads
+ compact json.dumps + SHA-256, timed right after each turn in the Worker's own Pyodide,
`/__runner/floor`). With --profile K, K steady turns at 200 exchanges run under cProfile
(in the Worker's Pyodide, `/__runner/profile`) and the top entries by own time print.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from devkit import roleplay as rp  # noqa: E402
from devkit.fakes import FakeServer, Reply  # noqa: E402
from devkit.runner import Edge  # noqa: E402

REPLY = json.dumps({"id": "c", "object": "chat.completion", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}).encode()
PREFIX = "context-pages/"


def delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after}


def last_log(edge: Edge) -> dict:
    found = edge.wait_for_log(lambda x: x.get("route") == "generate")
    return found[-1] if found else {}


def turn(edge: Edge, body: dict, headers: dict) -> dict:
    before = edge.stats()
    n = len(edge.logs())
    t0 = time.perf_counter()
    r = edge.client.post("/v1/chat/completions", json=body, headers=headers)
    wall = (time.perf_counter() - t0) * 1000
    r.raise_for_status()
    d = delta(edge.stats(), before)
    deadline = time.monotonic() + 5
    while len(edge.logs()) <= n and time.monotonic() < deadline:
        time.sleep(0.01)
    log = last_log(edge)
    return {"d1": d["d1_statements"] + d["d1_batches"], "changed": d.get("d1_rows_changed", 0),
            "written": d.get("d1_rows_written", 0), "puts": d["r2_puts"], "pages": log.get("pages", 0),
            "new": log.get("new_pages", 0), "wall_ms": wall, "store_ms": log.get("store_ms", 0.0)}


def grow(msgs: list, i: int, size: int) -> list:
    return msgs + [{"role": "assistant", "content": rp.line("B-a", 10_000 + i, size)},
                   {"role": "user", "content": rp.line("B-u", 10_000 + i, size)}]


def steady(edge: Edge, args, out: dict) -> tuple[dict, dict]:
    body = rp.chat_body(args.exchanges, size=args.size, tag="B")
    window = args.window
    rp.set_model(edge, "fake:rp-small", window, 1000)
    h = rp.new_player(edge).headers()
    print(f"== steady turns: {args.exchanges} exchanges ({len(json.dumps(body)) / 1e6:.2f} MB), "
          f"window {window} tokens, +1 exchange per turn")
    print(f"{'turn':>6} {'D1 stmts':>8} {'rows chg':>8} {'rows wr':>7} {'R2 puts':>7} {'pages':>5} "
          f"{'new':>4} {'wall ms':>8} {'store ms':>8}")
    msgs = sent = body["messages"]
    rows = []
    for i in range(args.turns + 1):
        row = turn(edge, {**body, "messages": msgs}, h)
        sent = msgs
        rows.append(row)
        print(f"{i + 1:>6} {row['d1']:>8} {row['changed']:>8} {row['written']:>7} {row['puts']:>7} "
              f"{row['pages']:>5} {row['new']:>4} {row['wall_ms']:>8.1f} {row['store_ms']:>8.1f}")
        msgs = grow(msgs, i, args.size)
    same = turn(edge, {**body, "messages": sent}, h)      # nothing new: the last turn resent
    edge.set_clock(1900)
    try:
        refresh = turn(edge, {**body, "messages": sent}, h)
        again = turn(edge, {**body, "messages": msgs}, h)
    finally:
        edge.set_clock(0)
    for name, row in (("same", same), ("+1900s", refresh), ("next", again)):
        print(f"{name:>6} {row['d1']:>8} {row['changed']:>8} {row['written']:>7} {row['puts']:>7} "
              f"{row['pages']:>5} {row['new']:>4} {row['wall_ms']:>8.1f} {row['store_ms']:>8.1f}")
    first, rest = rows[0], rows[1:]
    out["first_paging"] = {"pages": first["pages"], "r2_puts": first["puts"], "d1": first["d1"],
                           "wall_ms": round(first["wall_ms"], 1)}
    out["steady"] = {k: statistics.median(r[k] for r in rest)
                     for k in ("d1", "changed", "written", "puts", "new", "wall_ms", "store_ms")}
    out["steady"]["max_changed"] = max(r["changed"] for r in rest)
    out["steady"]["max_changed_minus_new"] = max(r["changed"] - r["new"] for r in rest)
    out["same_turn"] = same
    out["refresh_turn"] = refresh
    return body, {**body, "messages": msgs}


def largest(edge: Edge, ladder: list[int], out: dict):
    rp.set_model(edge, "fake:rp-wide", 80_000, 1000)
    print("\n== largest first paging (window 80,000 tokens, one request, fresh session each)")
    best, refusal = None, None
    for n in ladder:
        p = rp.new_player(edge)
        body = rp.chat_body(n, model="fake:rp-wide", size=500, tag=f"L{n}")
        stats0 = edge.stats()
        t0 = time.perf_counter()
        r = edge.client.post("/v1/chat/completions", json=body, headers=p.headers(), timeout=600)
        wall = (time.perf_counter() - t0) * 1000
        puts = edge.stats()["r2_puts"] - stats0["r2_puts"]
        if r.status_code == 200:
            pages = r.json().get("context_pages", [])
            size = edge.sql("SELECT COALESCE(SUM(byte_length), 0) AS b FROM context_pages "
                            "WHERE session_id = ?1", p.session)[0]["b"]
            print(f"  {n:>5} exchanges: 200, {len(pages)} pages, {size / 1048576:.3f} MiB, "
                  f"{puts} R2 puts, {wall:.0f} ms")
            best = {"exchanges": n, "pages": len(pages), "bytes": size, "r2_puts": puts, "wall_ms": round(wall)}
        else:
            err = r.json().get("error", {})
            detail = {k: v for k, v in err.items() if k not in ("type", "message")}
            print(f"  {n:>5} exchanges: {r.status_code} {detail}, {puts} R2 puts")
            refusal = {"exchanges": n, "status": r.status_code, **detail}
            break
    out["largest_first_paging"] = {"accepted": best, "first_refusal": refusal}


def orphans(edge: Edge, writers: int, out: dict):
    """W writers, distinct histories (~50 KB of pages each), one session, all at once."""
    print(f"\n== {writers} concurrent writers on one session")
    rp.set_model(edge, "fake:rp-tiny", 6000, 1000)
    p = rp.new_player(edge)
    bodies = [rp.chat_body(10, model="fake:rp-tiny", size=2500, tag=f"W{i}") for i in range(writers)]
    keys_before = set(edge.r2_list(PREFIX))

    def send(body):
        with httpx.Client(base_url=edge.url, timeout=300) as c:
            r = c.post("/v1/chat/completions", json=body, headers=p.headers())
            return r.status_code, r.json().get("error", {}).get("code")

    with ThreadPoolExecutor(writers) as pool:
        results = list(pool.map(send, bodies))
    objects = {k: v for k, v in edge.r2_list(PREFIX).items() if k not in keys_before}
    rows = edge.sql("SELECT r2_key, byte_length FROM context_pages WHERE session_id = ?1", p.session)
    referenced = {r["r2_key"] for r in rows}
    active = sum(r["byte_length"] for r in rows)
    res = {"accepted": sum(1 for s, _ in results if s == 200),
           "refused_413": sum(1 for s, _ in results if s == 413),
           "other": sorted({f"{s}:{c}" for s, c in results if s not in (200, 413)}),
           "session_bytes": active, "allowance_held": active <= 1024 * 1024,
           "objects": len(objects), "orphan_objects": len(set(objects) - referenced),
           "rows": len(rows), "rows_without_object": sum(1 for r in rows if r["r2_key"] not in objects)}
    print("  " + json.dumps(res))
    out["concurrent_writers"] = res


def latency(edge: Edge, provider: FakeServer, paged: dict, repeat: int, out: dict):
    h = rp.new_player(edge).headers()
    edge.client.post("/v1/chat/completions", json=paged, headers=h).raise_for_status()
    direct_body = json.dumps(paged).encode()
    edge_ms, direct_ms = [], []
    with httpx.Client(timeout=60) as client:
        for _ in range(repeat):
            t0 = time.perf_counter()
            client.post(edge.url + "/v1/chat/completions", json=paged, headers=h).raise_for_status()
            edge_ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            client.post(provider.url + "/v1/chat/completions", content=direct_body,
                        headers={"content-type": "application/json"}).raise_for_status()
            direct_ms.append((time.perf_counter() - t0) * 1000)
    e, d = statistics.median(edge_ms), statistics.median(direct_ms)
    print(f"\n== latency over {repeat} runs (median): through the edge {e:.1f} ms, "
          f"provider directly {d:.1f} ms, ratio {e / d:.1f}x, added {e - d:.1f} ms")
    out["latency"] = {"edge_ms": round(e, 1), "direct_ms": round(d, 1)}


def summary(out: dict):
    s, f, lf, cw = out["steady"], out["first_paging"], out["largest_first_paging"], out["concurrent_writers"]
    acc = lf["accepted"] or {}
    ref = lf["first_refusal"] or {}
    print("\n== summary")
    print("| figure | value |\n|---|---|")
    print(f"| D1 rows written per steady turn (median rows changed; max rows changed - new pages) "
          f"| {s['changed']:g}; {s['max_changed_minus_new']:g} |")
    print(f"| D1 meta.rows_written per steady turn (median, index entries included) | {s['written']:g} |")
    print(f"| R2 puts, first paging of a {out['exchanges']}-exchange history | {f['r2_puts']} "
          f"({f['pages']} pages) |")
    print(f"| largest first paging accepted | {acc.get('pages')} pages, "
          f"{(acc.get('bytes') or 0) / 1048576:.2f} MiB, {acc.get('r2_puts')} R2 puts "
          f"(next: {ref.get('status')} {ref.get('code')}) |")
    print(f"| D1 round trips per steady turn (median, one new page; nothing new) | {s['d1']:g}; "
          f"{out['same_turn']['d1']} |")
    print(f"| orphan R2 objects after {out['writers']} concurrent writers | {cw['orphan_objects']} "
          f"(rows without object: {cw['rows_without_object']}) |")
    print(f"| median steady-turn wall / store_ms | {s['wall_ms']:.1f} ms / {s['store_ms']:.1f} ms |")
    print(f"| refresh turn after +1,900 s: rows changed | {out['refresh_turn']['changed']} |")


PHASES = ("parse", "load", "plan", "keep", "sign", "encode", "response")


def post_turn(edge: Edge, raw: bytes, headers: dict) -> dict:
    """One turn as exact bytes → the Worker's log line for it."""
    n = len(edge.logs())
    r = edge.client.post("/v1/chat/completions", content=raw,
                         headers={**headers, "content-type": "application/json"})
    r.raise_for_status()
    deadline = time.monotonic() + 5
    while len(edge.logs()) <= n and time.monotonic() < deadline:
        time.sleep(0.005)
    return last_log(edge)


def compact(body: dict) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def cpu_session(edge: Edge, n: int, args, profile: int = 0, recall: bool = False) -> dict:
    """First paging of n exchanges, then args.turns steady turns: medians by phase.
    ``recall``: the same session declaring multillm_context_recall (docs/design.md §6.2)."""
    body = rp.chat_body(n, size=args.size, tag=f"C{n}")
    if recall:
        body["capabilities"] = body["capabilities"] + ["multillm_context_recall"]
    h = rp.new_player(edge).headers()
    msgs, turns = body["messages"], []
    for i in range(args.turns + 1 + profile):
        raw = compact({**body, "messages": msgs})
        if i == args.turns + 1 and profile:
            edge.client.post("/__runner/profile", json={"action": "start"}).raise_for_status()
        log = post_turn(edge, raw, h)
        if i > args.turns:          # profiled: the floor would show in the profile
            msgs = grow(msgs, i, args.size)
            continue
        floor = edge.client.post("/__runner/floor", content=raw).json()["ms"][0]
        if i > 0:
            row = {p: log.get(f"cpu_{p}_ms", 0.0) for p in PHASES}
            row.update(total=sum(row.values()), floor=floor, pages=log.get("pages", 0),
                       new=log.get("new_pages", 0), mb=len(raw) / 1e6,
                       recalled=log.get("recalled", 0))
            turns.append(row)
        msgs = grow(msgs, i, args.size)
    if profile:
        text = edge.client.post("/__runner/profile", json={"action": "stop", "top": args.top}).json()["text"]
        print(f"\n== cProfile of {profile} steady turns at {n} exchanges (Worker's Pyodide)\n{text}")
    med = {k: statistics.median(t[k] for t in turns) for k in turns[0]}
    med["ratio"] = statistics.median(t["total"] / t["floor"] for t in turns)
    return med


def cpu_mode(edge: Edge, args) -> dict:
    sizes = [int(x) for x in args.cpu_sizes.split(",")]
    print(f"== Worker CPU per steady turn by phase (ms, median of {args.turns} turns, "
          f"+1 exchange per turn, Pyodide in the runner)")
    print("| exchanges | window | body MB | pages | " + " | ".join(PHASES) + " | total | floor | total/floor |")
    print("|---:" * (len(PHASES) + 7) + "|")
    out = {}
    for n in sizes:
        # The markers of n pages must fit too: ~48 bytes of page id each.
        window = max(args.window, 100 * n)
        rp.set_model(edge, "fake:rp-small", window, 1000)
        m = cpu_session(edge, n, args, profile=args.profile if n == 200 else 0)
        out[n] = m
        print(f"| {n:,} | {window:,} | {m['mb']:.2f} | {m['pages']:g} | "
              + " | ".join(f"{m[p]:.2f}" for p in PHASES)
              + f" | {m['total']:.2f} | {m['floor']:.2f} | {m['ratio']:.2f} |", flush=True)
    if 200 in out and 800 in out:
        print(f"growth 800 vs 200 exchanges: {out[800]['total'] / out[200]['total']:.2f}× (target ≤ 4.5); "
              f"total/floor at 200: {out[200]['ratio']:.2f} (target ≤ 1.5)")
    if args.recall:
        recall_rows(edge, args, sizes, out)
    return out


def recall_rows(edge: Edge, args, sizes: list, plain: dict) -> None:
    """The same sessions declaring recall, in the same isolate after the plain ones (its
    analyses made by each session's first turn: the steady turns are warm): the Worker's
    plan and total CPU per turn with recall against without (target ≤ 1.5× at 200)."""
    print("\n== the same steady turns declaring multillm_context_recall (ms, medians)")
    print("| exchanges | moments recalled | plan | total | total without recall | with / without |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        rp.set_model(edge, "fake:rp-small", max(args.window, 100 * n), 1000)
        m = cpu_session(edge, n, args, recall=True)
        base = plain[n]
        plain[n]["with_recall"] = m
        print(f"| {n:,} | {m['recalled']:g} | {m['plan']:.2f} | {m['total']:.2f} | {base['total']:.2f} "
              f"| {m['total'] / base['total']:.2f} |", flush=True)


def storage_figures(edge: Edge, provider: FakeServer, args, out: dict):
    _, paged = steady(edge, args, out)
    largest(edge, [int(x) for x in args.ladder.split(",")], out)
    orphans(edge, args.writers, out)
    latency(edge, provider, paged, args.repeat, out)
    summary(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--exchanges", type=int, default=200)
    ap.add_argument("--size", type=int, default=450)
    ap.add_argument("--window", type=int, default=32000)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--writers", type=int, default=35)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--ladder", default="300,500,550,600,800,900,1000")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--cpu", action="store_true", help="only the Worker's CPU per steady turn, by phase")
    ap.add_argument("--cpu-sizes", default="50,200,800")
    ap.add_argument("--profile", type=int, default=0, help="with --cpu: profile K turns at 200 exchanges")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--recall", action="store_true",
                    help="with --cpu: the same sessions declaring multillm_context_recall")
    args = ap.parse_args()
    out = {"exchanges": args.exchanges, "writers": args.writers}
    provider = FakeServer(Reply(chunks=[REPLY]))
    edge = Edge(Path(tempfile.mkdtemp(prefix="bench-gen-")), vars=rp.edge_vars(provider.url))
    try:
        if args.cpu:
            out["cpu"] = cpu_mode(edge, args)
        else:
            storage_figures(edge, provider, args, out)
    finally:
        edge.stop()
        provider.close()
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
