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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    args = ap.parse_args(argv)
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
