"""What the limits per principal (docs/design.md §4.1) add to a turn, before/after in one run.

Two source trees imported side by side (as bench_ab.py does), each on its own sqlite
database migrated from its own tree's migrations and seeded alike (a key, a policy, a
session holding N active pages): a turn's D1 work (before: the one context read; after:
the batch of the admission and the read) and the decoding of its row
(`store.generation_context`), without limits and, after, with every limit set.
Alternating per round (the order swapped every round), medians, CPython:

    python bench/bench_limits.py BEFORE_TREE AFTER_TREE     # each holding src/ and migrations/

SQLite here stands in for D1's own engine: its times say what the statements cost the
database, not the Worker; the decode is the Worker's CPU (`cpu_load_ms`).

Through two local runners, one from each repository (the before one a checkout of the
older commit with this one's node_modules, .venv and .cache linked in), steady turns
(the same 32k-window chat again: nothing new to store) alternated between the before
runner, the after runner, and the after runner with every limit set on its principal;
medians of the client's wall time, the Worker's `ms`, its CPU phases (`cpu_*_ms`) and
`load_ms` (the D1 round trip, local Miniflare's):

    python bench/bench_limits.py --runner BEFORE_REPO [--sizes 50,200] [--rounds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import importlib
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time

SIZES, ROUNDS = (50, 200, 800), 60
KEY = hashlib.sha256(b"rpk_bench").hexdigest()
NOW = 1_800_000_000


def load(tree: str, name: str, into: str):
    shutil.copytree(os.path.join(tree, "src", "multillm_edge"), os.path.join(into, name),
                    ignore=shutil.ignore_patterns("__pycache__"))
    return importlib.import_module(f"{name}.storage.store")


class Executor:
    """A bare executor over sqlite3 (devkit.sqlite's, with `batch` for either tree)."""

    def __init__(self, conn):
        self.conn = conn

    def _rows(self, sql, params):
        cur = self.conn.execute(sql, list(params))
        return [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()] if cur.description else []

    async def first(self, sql, params):
        rows = self._rows(sql, params)
        return rows[0] if rows else None

    async def all(self, sql, params):
        rows = self._rows(sql, params)
        self.conn.commit()
        return rows

    async def batch(self, statements):
        out = [self._rows(sql, params) for sql, params in statements]
        self.conn.commit()
        return out


def database(tree: str, pages: int, limited: bool) -> Executor:
    conn = sqlite3.connect(":memory:")
    for f in sorted(os.listdir(os.path.join(tree, "migrations"))):
        if f.endswith(".sql"):
            conn.executescript(open(os.path.join(tree, "migrations", f)).read())
    conn.execute("INSERT INTO roleplay_keys (key_sha256, principal, created_at) VALUES (?, 'p', 0)", (KEY,))
    conn.execute("INSERT INTO principal_policies (principal, revision, grants, retention, updated_at) "
                 "VALUES ('p', 1, '[\"chat\"]', 'standard', 0)")
    conn.execute("INSERT INTO roleplay_sessions (session_id, principal, created_at) VALUES ('rps_b', 'p', 0)")
    conn.executemany("INSERT INTO context_pages (page_id, authority, principal, session_id, policy_revision, "
                     "sha256, byte_length, r2_key, r2_offset, body_written_at, created_at, expires_at, signature) "
                     "VALUES (?, 'roleplay', 'p', 'rps_b', 1, ?, 900, ?, ?, ?, 0, ?, 'sig')",
                     [(f"cp_{i:043d}", "0" * 64, f"context-pages/k{i // 8}", 900 * (i % 8), NOW - 10,
                       NOW + 86400) for i in range(pages)])
    if limited:
        conn.execute("INSERT INTO principal_limits VALUES ('p', 1000000, 1000000000, 100, 100000000, 0)")
    conn.commit()
    return Executor(conn)


def read(store, db):
    """One turn's D1 work, then its row decoded; returns the seconds of each."""
    t0 = time.perf_counter()
    if hasattr(store, "read_generation_rows"):
        row, counted = asyncio.run(store.read_generation_rows(db, KEY, "rps_b", ["fake:m"], NOW))
        t1 = time.perf_counter()
        store.generation_context(row, counted, NOW)
    else:
        row = asyncio.run(store.read_generation_row(db, KEY, "rps_b", ["fake:m"], NOW))
        t1 = time.perf_counter()
        store.generation_context(row)
    t2 = time.perf_counter()
    if hasattr(store, "read_generation_rows"):   # the window stays where it was
        db.conn.execute("DELETE FROM principal_requests")
        db.conn.commit()
    return t1 - t0, t2 - t1


def runner_ab(before_repo: str, sizes, rounds: int) -> None:
    """Steady turns through two runners, alternated (see the module's docstring)."""
    import json
    from pathlib import Path
    repo = Path(HERE).parent
    sys.path[:0] = [str(repo), str(repo / "src")]
    import devkit.runner as runner
    from devkit import roleplay as rp
    from devkit.fakes import FakeServer, Reply

    def reply(rec):
        return Reply(chunks=[json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                                         "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": "ok"}}]}).encode()])

    def start(root, state, url):
        runner.ROOT = Path(root)          # which repository's runner and src/ it starts
        edge = runner.Edge(Path(state), vars=rp.edge_vars(url))
        rp.set_model(edge, "fake:rp-32k", 32000, 1000)
        return edge

    def log_of(edge, since):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            found = [r for r in edge.logs()[since:] if r.get("route") == "generate"]
            if found:
                return found[-1]
            time.sleep(0.005)
        raise RuntimeError("no log line")

    with FakeServer(reply) as provider, tempfile.TemporaryDirectory() as state:
        edges = [start(before_repo, state + "/before", provider.url), start(repo, state + "/after", provider.url)]
        try:
            print("| exchanges | run | client wall ms | Worker ms | Worker CPU phases ms | load_ms |")
            print("|---:|---|---:|---:|---:|---:|")
            for n in sizes:
                body = rp.chat_body(n, model="fake:rp-32k", size=450, tag=f"AB{n}")
                runs = {"before": (edges[0], rp.new_player(edges[0])), "after": (edges[1], rp.new_player(edges[1])),
                        "after, limits set": (edges[1], rp.new_player(edges[1]))}
                edges[1].sql("INSERT INTO principal_limits VALUES (?1, 100000, 1000000000, 100, 100000000, 0)",
                             runs["after, limits set"][1].principal)
                for edge, player in runs.values():
                    for _ in range(3):       # the first paging, then warm
                        edge.client.post("/v1/chat/completions", json=body, headers=player.headers()).raise_for_status()
                got = {k: {"wall": [], "ms": [], "cpu": [], "load": []} for k in runs}
                for r in range(rounds):
                    for k in (list(runs) if r % 2 == 0 else list(reversed(runs))):
                        edge, player = runs[k]
                        since, t = len(edge.logs()), time.perf_counter()
                        edge.client.post("/v1/chat/completions", json=body, headers=player.headers()).raise_for_status()
                        got[k]["wall"].append((time.perf_counter() - t) * 1000)
                        log = log_of(edge, since)
                        got[k]["ms"].append(log["ms"])
                        got[k]["cpu"].append(sum(v for name, v in log.items() if name.startswith("cpu_")))
                        got[k]["load"].append(log.get("load_ms", 0))
                for k, v in got.items():
                    print(f"| {n} | {k} | " + " | ".join(f"{statistics.median(v[m]):.2f}"
                                                         for m in ("wall", "ms", "cpu", "load")) + " |")
        finally:
            for edge in edges:
                edge.stop()


HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", nargs="?")
    ap.add_argument("after", nargs="?")
    ap.add_argument("--runner", metavar="BEFORE_REPO", help="A/B through two runners instead")
    ap.add_argument("--sizes", default="50,200")
    ap.add_argument("--rounds", type=int, default=60)
    args = ap.parse_args(argv)
    if args.runner:
        runner_ab(args.runner, [int(x) for x in args.sizes.split(",")], args.rounds)
        return 0
    if not (args.before and args.after):
        ap.error("BEFORE_TREE and AFTER_TREE, or --runner BEFORE_REPO")
    with tempfile.TemporaryDirectory() as into:
        sys.path.insert(0, into)
        stores = {"before": load(args.before, "edge_before", into), "after": load(args.after, "edge_after", into)}
        print("| active pages | D1 work before ms | after, no limits | after, limits set "
              "| decode before ms | after, no limits | after, limits set |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for n in SIZES:
            runs = {"before": (stores["before"], database(args.before, n, False)),
                    "after": (stores["after"], database(args.after, n, False)),
                    "limited": (stores["after"], database(args.after, n, True))}
            times = {k: ([], []) for k in runs}
            for r in range(ROUNDS):
                order = list(runs) if r % 2 == 0 else list(reversed(runs))
                for k in order:
                    gc.collect()
                    d1, decode = read(*runs[k])
                    times[k][0].append(d1)
                    times[k][1].append(decode)
            med = {k: [statistics.median(v) * 1000 for v in times[k]] for k in runs}
            print(f"| {n} | {med['before'][0]:.3f} | {med['after'][0]:.3f} | {med['limited'][0]:.3f} "
                  f"| {med['before'][1]:.3f} | {med['after'][1]:.3f} | {med['limited'][1]:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
