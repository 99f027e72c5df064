"""Benchmark of roleplay page retrieval (issue 5) through the local runner.

Starts one runner (devkit/runner.Edge: real Pyodide, real local D1/R2) with a
fake provider and a fake Flask origin, stores real pages with one paged chat
generation, then measures, interleaved so machine-load drift hits both alike:

* retrieval = GET /v1/context/pages/{id}?roleplay_session_id=S (200, one page ~0.7-1 KB)
* forwarded = GET /v1/context/pages/{id} without the parameter: the plain forwarding
              path to the fake origin (a tiny JSON reply), through the same runner.

Reports the median and p90 client-observed latency of each (N requests, after a
warm-up), the ratio retrieval/forwarded of the medians, and the storage operations per
retrieval from the runner's counters (D1 statements, R2 gets/puts/heads/deletes).

Usage: .venv/bin/python bench/bench_retrieval.py [N]   (default N = 30)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "src"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from devkit import roleplay as rp  # noqa: E402
from devkit.fakes import FakeServer, Reply  # noqa: E402
from devkit.runner import Edge  # noqa: E402

MODEL = "fake:rp-small"


def p90(xs):
    return sorted(xs)[max(0, int(round(0.9 * len(xs))) - 1)]


def main(n: int = 30) -> int:
    provider = FakeServer(Reply(chunks=[b'{"id":"c1","choices":[{"index":0,"message":'
                                        b'{"role":"assistant","content":"hi"}}]}']))
    origin = FakeServer(Reply(chunks=[b'{"managed":true}']))
    edge = Edge(Path(tempfile.mkdtemp(prefix="bench-retrieval-")),
                vars=rp.edge_vars(provider.url, origin.url))
    try:
        rp.set_model(edge, MODEL, 6000, 1000)
        player = rp.new_player(edge)
        sid = player.session
        auth = {"Authorization": f"Bearer {player.key}"}
        r = edge.client.post("/v1/chat/completions", json=rp.chat_body(30, tag="B"),
                             headers=player.headers())
        r.raise_for_status()
        pages = [p["page_id"] for p in r.json()["context_pages"]]
        provider_calls = len(provider.received)

        def retrieve(pid):
            resp = edge.client.get(f"/v1/context/pages/{pid}",
                                   params={"roleplay_session_id": sid}, headers=auth)
            assert resp.status_code == 200, resp.text
            return resp

        def forwarded(pid):
            resp = edge.client.get(f"/v1/context/pages/{pid}", headers=auth)
            assert resp.status_code == 200, resp.text
            return resp

        for i in range(5):  # warm-up: both paths, JIT/caches/connections
            retrieve(pages[i % len(pages)])
            forwarded(pages[i % len(pages)])

        # Storage operations per retrieval, from the runner's counters.
        before = edge.stats()
        for i in range(n):
            retrieve(pages[i % len(pages)])
        after = edge.stats()
        per = {k: (after[k] - before[k]) / n for k in before}

        t_ret, t_fwd, sizes = [], [], []
        for i in range(n):
            pid = pages[i % len(pages)]
            order = (retrieve, forwarded) if i % 2 == 0 else (forwarded, retrieve)
            for fn in order:
                t0 = time.perf_counter()
                resp = fn(pid)
                dt = (time.perf_counter() - t0) * 1000
                if fn is retrieve:
                    t_ret.append(dt)
                    sizes.append(len(base64_body(resp)))
                else:
                    t_fwd.append(dt)
        assert len(provider.received) == provider_calls, "retrieval called the provider"

        med_r, med_f = statistics.median(t_ret), statistics.median(t_fwd)
        time.sleep(0.3)  # let the last log lines arrive
        logged = {"retrieve_page": [], "forward": [], "retrieve_d1": [], "retrieve_r2": []}
        for rec in edge.logs():
            if rec.get("route") in ("retrieve_page", "forward") and rec.get("status") == 200:
                logged[rec["route"]].append(rec["ms"])
                if rec["route"] == "retrieve_page" and "d1_ms" in rec:
                    logged["retrieve_d1"].append(rec["d1_ms"])
                    logged["retrieve_r2"].append(rec["r2_ms"])
        worker_ms = {k: round(statistics.median(v[-n:]), 2) for k, v in logged.items() if v}
        result = {
            "requests_each": n,
            "page_bytes_median": statistics.median(sizes),
            "retrieval_ms": {"median": round(med_r, 2), "p90": round(p90(t_ret), 2)},
            "forwarded_ms": {"median": round(med_f, 2), "p90": round(p90(t_fwd), 2)},
            "ratio_median": round(med_r / med_f, 2),
            "per_retrieval": {"d1_statements": per["d1_statements"], "d1_batches": per["d1_batches"],
                              "r2_gets": per["r2_gets"], "r2_puts": per["r2_puts"],
                              "r2_heads": per["r2_heads"], "r2_deletes": per["r2_deletes"]},
            "worker_logged_ms_median": worker_ms,
            "load_avg_1m": round(os.getloadavg()[0], 2),
        }
        print(f"retrieval  median {med_r:7.2f} ms  p90 {p90(t_ret):7.2f} ms")
        print(f"forwarded  median {med_f:7.2f} ms  p90 {p90(t_fwd):7.2f} ms")
        print(f"ratio (median)    {med_r / med_f:7.2f}")
        print(f"inside the Worker (logged ms, median): {worker_ms}")
        print(f"per retrieval: {per['d1_statements']:g} D1 statement(s), {per['r2_gets']:g} R2 get(s), "
              f"{per['r2_puts']:g} puts, {per['r2_heads']:g} heads, {per['r2_deletes']:g} deletes")
        print(json.dumps(result))
        return 0
    finally:
        edge.stop()
        provider.close()
        origin.close()


def base64_body(resp) -> bytes:
    import base64
    return base64.b64decode(resp.json()["body_base64"])


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 30))
