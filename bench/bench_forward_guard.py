"""What the reserved-key check costs a forwarded request (docs/design.md §2, "Reserved
key format"): `service.reserved_keys.carries_roleplay_key`, which `service.origin.forward`
runs on every request it forwards, beside `base.http.forwardable` (the header filter
every forward already ran) on the same ten headers. CPU time (`time.process_time`),
median of 7 rounds of 20,000 calls.

    python3 bench/bench_forward_guard.py          node bench/pyodide_bench.mjs bench_forward_guard
"""

from __future__ import annotations

import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
if os.path.isdir(SRC) and SRC not in sys.path:
    sys.path.insert(0, SRC)

from multillm_edge.base.http import Incoming, forwardable  # noqa: E402
from multillm_edge.service.reserved_keys import carries_roleplay_key  # noqa: E402

COMMON = [("user-agent", "python-httpx/0.27"), ("accept", "*/*"), ("accept-encoding", "gzip"),
          ("connection", "keep-alive"), ("content-type", "application/json"), ("content-length", "512"),
          ("x-request-id", "rq-1"), ("cookie", "session=abc"), ("x-forwarded-for", "10.0.0.1")]
CASES = {
    "origin key (Bearer sk-…)": COMMON + [("authorization", "Bearer sk-flask-" + "a" * 40)],
    "no key": COMMON + [("x-trace", "t")],
    "Basic credential": COMMON + [("authorization", "Basic dXNlcjpwYXNzd29yZA==")],
    "Basic credential, spaced (issue 46)": COMMON + [("authorization", "Basic dXNl cjpw.YXNz\td29y ZA==")],
    "Basic credential, 1 KiB": COMMON + [("authorization", "Basic " + "dXNlcjpwYXNzd29yZA" * 57 + "==")],
    "roleplay key (refused)": COMMON + [("authorization", "Bearer rpk_" + "a" * 43)],
}
CALLS, ROUNDS = 20_000, 7


def cpu_us(fn, arg) -> float:
    """Median CPU microseconds per call."""
    rounds = []
    for _ in range(ROUNDS):
        started = time.process_time()
        for _ in range(CALLS):
            fn(arg)
        rounds.append((time.process_time() - started) / CALLS * 1e6)
    return statistics.median(rounds)


def main(runtime: str = "CPython") -> int:
    print(f"reserved-key check — {runtime} {sys.version.split()[0]}: CPU µs per forwarded request")
    print("| headers | check | forwardable() | check / forwardable |")
    print("|---|---:|---:|---:|")
    for name, headers in CASES.items():
        req = Incoming("POST", "https://edge.test/api/x", headers)
        guard, filtered = cpu_us(carries_roleplay_key, req), cpu_us(forwardable, headers)
        print(f"| {name} | {guard:.2f} | {filtered:.2f} | {guard / filtered:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
