"""D1 sizing (issue 19, item 5; docs/design.md §5.11): bytes per page row, rows written per
turn over an hour of play, and the EXPIRED_ROW_RETENTION_SECONDS one D1 database holds.

1. Bytes per row: sqlite on the real migrations (file-backed, 4 KiB pages, as D1), 10,000
   realistic rows (100 sessions × 100 pages: real page ids, signatures, object keys)
   written through ``storage.store.upsert_pages`` (one call per session, a first paging);
   the file's page count before/after, and ``dbstat`` per b-tree (the table, its primary
   key index, ``context_pages_active``).
2. Rows per turn: the in-process platform (tests/support/inprocess: the app, sqlite D1,
   memory R2) with a clock advanced 60 s per turn, one exchange (~1.9 KB) per turn, driven
   by examples/context_tools.run_turn (the sliding window, a new session on a 413) through
   the ``openai`` SDK. The log line's ``rows_written`` (rows the upsert wrote: new pages,
   rewritten bodies, lazily refreshed rows), per hour.
3. The arithmetic: rows held = players × (active rows + rows created a day × days kept),
   and the retention that fits the database.

Usage: ``python bench/bench_sizing.py [--players 100000] [--turns 50] [--db-gb 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for path in (os.path.join(ROOT, "src"), ROOT):
    if path not in sys.path:
        sys.path.insert(0, path)

import httpx  # noqa: E402
import openai  # noqa: E402

from devkit import roleplay as rp  # noqa: E402
from devkit.sqlite import SqliteExecutor, migrated_connection  # noqa: E402
from examples.context_tools import Session, run_turn  # noqa: E402
from multillm_edge.core import config  # noqa: E402
from multillm_edge.core.pages import Lifetime, Location, Owner, PageSigner, ROLEPLAY, object_key  # noqa: E402
from multillm_edge.storage import store  # noqa: E402
from tests.support.inprocess import Answer, LocalEdge  # noqa: E402

MODEL, WINDOW, RESERVED = "fake:rp-small", 32_000, 1024
KEY, SESSION = "rpk_sizing_key_0123456789abcdef", "rps_" + "s" * 32
NOW = 1_800_000_000


# ------------------------------------------------------------ 1. bytes per row

def bytes_per_row(n_sessions: int = 100, per_session: int = 100) -> dict:
    signer = PageSigner(rp.SIGNING_SECRET)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "d1.sqlite")
        conn = migrated_connection(path)
        conn.commit()
        ex = SqliteExecutor(conn)
        before = conn.execute("PRAGMA page_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        for s in range(n_sessions):
            principal, session = f"usr_{s:022d}", f"rps_{s:032d}"
            owner = Owner(ROLEPLAY, principal, session, 1)
            ids = signer.page_ids(ROLEPLAY, principal, session, 1)
            shas = [f"{s:08x}{i:056x}" for i in range(per_session)]
            pids = [ids(h) for h in shas]
            key, life = object_key(pids), Lifetime(NOW, config.PAGE_TTL_SECONDS)
            rows = [signer.make_row(owner, h, 1900, life, Location(key, 1900 * i, NOW), page_id=pid)
                    for i, (h, pid) in enumerate(zip(shas, pids))]
            done = asyncio.run(store.upsert_pages(ex, rows, store.PageSession(principal, session), NOW,
                                                  config.SESSION_ALLOWANCE_BYTES))
            assert len(done.rows) == per_session
        conn.commit()
        after = conn.execute("PRAGMA page_count").fetchone()[0]
        stat = {name: (pgs, payload) for name, pgs, payload in conn.execute(
            "SELECT name, SUM(pgsize), SUM(payload) FROM dbstat "
            "WHERE name LIKE '%context_pages%' GROUP BY name")}
        sample = conn.execute("SELECT * FROM context_pages LIMIT 1").fetchone()
        conn.close()
    n = n_sessions * per_session
    return {"rows": n, "file_bytes_per_row": (after - before) * size / n, "page_size": size,
            "btrees": {k: {"bytes_per_row": v[0] / n, "payload_per_row": v[1] / n} for k, v in stat.items()},
            "row_columns_bytes": sum(len(str(c)) for c in sample)}


# ------------------------------------------------------------ 2. rows per turn

class Client:
    """examples/context_tools over the openai SDK, its HTTP into the in-process edge."""

    def __init__(self, edge: LocalEdge):
        self.edge = edge
        transport = httpx.MockTransport(self.handle)
        self.http = httpx.Client(transport=transport)
        self.sdk = openai.OpenAI(api_key=KEY, base_url="https://edge.test/v1", max_retries=0,
                                 http_client=httpx.Client(transport=transport))

    def handle(self, request: httpx.Request) -> httpx.Response:
        r = self.edge.request(request.method, request.url.raw_path.decode(),
                              list(request.headers.items()), request.content)
        return httpx.Response(r.status, headers=r.headers, content=r.body)


def play(history: int, turns: int = 120) -> dict:
    """A chat of `history` exchanges, then `turns` turns one minute apart."""
    with LocalEdge(rp.edge_vars("http://provider.test"), clock=NOW) as edge:
        edge.seed_player("usr_sizing", KEY, SESSION)
        edge.set_model(MODEL, WINDOW, RESERVED)
        client, session = Client(edge), Session(SESSION)
        messages = [{"role": "system", "content": rp.CARD}]
        for i in range(history):
            messages.extend(rp.long_exchange(i))
        if history * 1900 > 0.75 * config.SESSION_ALLOWANCE_BYTES:
            # a chat that long has had its window on since earlier turns (figures reported)
            session.window_limit = config.SESSION_ALLOWANCE_BYTES
        per_turn = []
        for t in range(turns + 1):
            i = history + t
            messages.append(rp.long_turn(i))
            doc = {"id": f"c{i}", "object": "chat.completion", "created": 0, "model": "rp-small",
                   "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": rp.long_answer(i)}}]}
            edge.upstream = lambda sent, doc=doc: Answer(body=json.dumps(doc).encode())
            start = len(edge.logs)
            reply = run_turn(client.sdk, client.http, "https://edge.test", KEY, session, messages,
                             model=MODEL, max_tokens=RESERVED)
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
            logs = [r for r in edge.logs[start:] if r.get("route") == "generate"]
            per_turn.append({k: sum(r.get(k, 0) for r in logs) for k in
                             ("rows_written", "new_pages", "rows_refreshed", "pages_rewritten", "pages")})
            per_turn[-1]["sessions"] = len(logs)
            edge.clock += 60
        rows_total = edge.page_rows()
    first, rest = per_turn[0], per_turn[1:]
    hours = [rest[h * 60:(h + 1) * 60] for h in range(len(rest) // 60)]
    return {"history": history, "first_paging_rows": first["rows_written"], "pages_sent": rest[-1]["pages"],
            "hours": [{"rows_per_turn": sum(t["rows_written"] for t in h) / len(h),
                       "new_per_turn": sum(t["new_pages"] for t in h) / len(h),
                       "refreshed_per_turn": sum(t["rows_refreshed"] for t in h) / len(h),
                       "rewritten_per_turn": sum(t["pages_rewritten"] for t in h) / len(h),
                       "max_turn": max(t["rows_written"] for t in h),
                       "renewed_sessions": sum(t["sessions"] > 1 for t in h)} for h in hours],
            "rows_in_d1": rows_total}


# ------------------------------------------------------------ 3. arithmetic

def retention(per_row: float, created_day: float, sitting_s: float, players: int, db_bytes: float) -> dict:
    """A row lives from its write to last use + TTL + retention; a daily player's rows are
    gone before the next sitting (retention < a day minus the sitting and the TTL), so each
    day creates `created_day` rows again (first paging + the new pages of each turn):
    rows held = players × created_day × (sitting + TTL + retention) / 1 day <= capacity."""
    capacity = db_bytes / per_row
    life = capacity / (players * created_day) * 86400
    r = life - sitting_s - config.PAGE_TTL_SECONDS
    return {"capacity_rows": capacity, "per_player_rows": capacity / players, "life_s": life,
            "retention_seconds": int(r), "consistent": r < 86400 - sitting_s - config.PAGE_TTL_SECONDS}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--players", type=int, default=100_000)
    ap.add_argument("--turns", type=int, default=50, help="turns per player per day")
    ap.add_argument("--db-gb", type=float, default=10.0)
    ap.add_argument("--sizes", default="200,1500")
    args = ap.parse_args()
    size = bytes_per_row()
    print(f"D1 bytes per page row ({size['rows']:,} rows via store.upsert_pages, {size['page_size']} B pages): "
          f"{size['file_bytes_per_row']:.0f} B of file")
    for name, v in sorted(size["btrees"].items()):
        print(f"  {name}: {v['bytes_per_row']:.0f} B/row ({v['payload_per_row']:.0f} B payload)")
    runs = [play(int(n)) for n in args.sizes.split(",")]
    print("\n| history | first paging rows | pages sent | hour | rows/turn | new | refreshed | rewritten "
          "| max in one turn | sessions renewed |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        for h, x in enumerate(r["hours"], 1):
            print(f"| {r['history']:,} | {r['first_paging_rows']} | {r['pages_sent']} | {h} | "
                  f"{x['rows_per_turn']:.2f} | {x['new_per_turn']:.2f} | {x['refreshed_per_turn']:.2f} | "
                  f"{x['rewritten_per_turn']:.2f} | {x['max_turn']} | {x['renewed_sessions']} |")
    per_row = size["file_bytes_per_row"]
    sitting = args.turns * 60
    print(f"\nOne D1 database of {args.db_gb:g} GB = {args.db_gb * 1e9 / per_row:,.0f} rows of {per_row:.0f} B; "
          f"{args.players:,} players × {args.turns} turns a day, one sitting of {sitting // 60} min "
          f"(one turn a minute), TTL {config.PAGE_TTL_SECONDS} s:")
    for r in runs:
        # first paging + the new pages a turn writes, as measured (single pages, the blocks
        # they close, a renewed session's first paging)
        rate = sum(h["new_per_turn"] for h in r["hours"]) / len(r["hours"])
        created = round(r["first_paging_rows"] + args.turns * rate)
        x = retention(per_row, created, sitting, args.players, args.db_gb * 1e9)
        print(f"  {r['history']:,}-exchange chat: {r['first_paging_rows']} + {args.turns} × {rate:.2f} = {created} rows "
              f"a player-day; {x['per_player_rows']:.0f} rows/player / {created} × 86,400 s = "
              f"{x['life_s']:,.0f} s a row may live; - {sitting:,} s sitting - {config.PAGE_TTL_SECONDS:,} s TTL "
              f"→ EXPIRED_ROW_RETENTION_SECONDS ≤ {x['retention_seconds']:,}"
              + ("" if x["retention_seconds"] > 0 else "  (does not fit: more databases)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
