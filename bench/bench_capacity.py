"""How long a roleplay a window carries (issue 19): the largest history that still plans.

A chat of ~1.9 KB exchanges after a 2 KB character card (system message), 1,024 output
tokens reserved and 256 safety tokens, bytes as tokens (docs/design.md §5.4–5.5). For an
8k, 32k and 128k window: the largest number of exchanges whose plan fits (the plan alone:
the 1 MiB session allowance is not applied here), the window bytes each paged exchange
costs (marker bytes / paged exchanges), and pages per 1,000 exchanges (the plan's pages /
paged exchanges). Each row with blocks (the production rule) and without (span 1: one page
per exchange, the plan before blocks). Page ids from the production signer.
Usage: ``python bench/bench_capacity.py [--check]`` or ``node bench/pyodide_bench.mjs bench_capacity``.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
for path in (SRC, HERE):
    if os.path.isdir(path) and path not in sys.path:
        sys.path.insert(0, path)

from bench_paging import page_id_for_request  # noqa: E402
from multillm_edge.core import paging  # noqa: E402
from multillm_edge.base.errors import EdgeError  # noqa: E402

WINDOWS = (8192, 32768, 131072)
OUTPUT, SAFETY = 1024, 256
NO_BLOCKS = paging.block_rule(span=1)


def body(n: int) -> dict:
    """``n`` exchanges of ~1.9 KB (a user turn and a reply, each its own text) and a
    latest user turn, after a 2 KB card."""
    msgs = [{"role": "system", "content": ("Card: Captain Mira of the skyship Aurora. " * 49)[:2048]}]
    for i in range(n):
        msgs.append({"role": "user", "content": f"[{i}] *leans on the rail* " + "Tell me of the ports. " * 30})
        msgs.append({"role": "assistant", "content": f"*{i}: the wind rises* " + "The sky-whales sing low. " * 48})
    msgs.append({"role": "user", "content": "And then?"})
    return {"model": "p:m", "max_tokens": OUTPUT, "messages": msgs}


def plan(n: int, window: int, rule):
    (p,) = paging.plan_candidates("chat", body(n), [window - OUTPUT - SAFETY],
                                  page_id_for_request(), rule=rule)
    return None if isinstance(p, EdgeError) else p


def largest(window: int, rule) -> int:
    """The largest n that plans, by bisection. With blocks the handle count is not
    monotonic in n (a block's open tail is one handle per exchange until it closes), so
    a smaller history may still fail: ``--check`` plans every history one by one (8k:
    up to the bisection figure, 32k: up to 2,000, the issue's target)."""
    lo, hi = 1, 2
    while plan(hi, window, rule) is not None:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if plan(mid, window, rule) is not None else (lo, mid)
    return lo


def figures(n: int, window: int, rule) -> tuple[float, float]:
    p = plan(n, window, rule)
    # each reply still in the window is an exchange not paged
    paged = n - sum(1 for m in p.body["messages"] if m["role"] == "assistant")
    markers = [m for m in p.body["messages"] if m["content"].startswith("[multillm context]")]
    marker_bytes = sum(len(paging.compact(m)) for m in markers)
    return marker_bytes / paged, 1000 * len(p.pages) / paged


def check(n: int, window: int, rule) -> int | None:
    """The first history up to ``n`` exchanges that does not plan, None if all do."""
    return next((i for i in range(1, n + 1) if plan(i, window, rule) is None), None)


def main(runtime: str = "CPython") -> int:
    print(f"capacity — {runtime} {sys.version.split()[0]}: ~1.9 KB exchanges, 2 KB card, "
          f"{OUTPUT} output tokens (bytes as tokens)")
    print("| window | rule | largest history that plans | window bytes per paged exchange | pages per 1,000 paged exchanges |")
    print("|---|---|---:|---:|---:|")
    for w in WINDOWS:
        for name, rule in (("one page per exchange", NO_BLOCKS), ("blocks", None)):
            n = largest(w, rule)
            per, pages = figures(n, w, rule)
            print(f"| {w // 1024}k | {name} | {n:,} | {per:.1f} | {pages:.0f} |")
            if "--check" in sys.argv and w <= 32768:
                upto = n if w <= 8192 else min(n, 2000)
                first = check(upto, w, rule)
                print(f"  (--check: every history up to {upto:,} plans)" if first is None else
                      f"  (--check: {first:,} exchanges do not plan; every shorter one does)")
    print(f"(exchange = {len(paging.compact(body(1)['messages'][1:3])) - 1:,} bytes)")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
