"""What one waiting generation request holds, in CPython (docs/design.md §7.2).

N requests (distinct sessions) are started on the in-process platform
(tests/support/inprocess.py) with an upstream that answers only once all N wait in its
fetch; tracemalloc's traced bytes are read then, and again once every request has
answered and been dropped (what stays is the isolate's caches: last turns, search memos).
held per waiting request = (waiting - after) / N. The fetch takes the upstream body and
keeps only its length: in the Worker the runtime holds it as a JS Uint8Array, outside the
Python heap (the runner counts it on the JS side).

  .venv/bin/python bench/bench_waiting_request.py [--n 8] [--sizes 0.93,7.6]

0.93 MiB: a long chat paged on a 200k-token model (capabilities retrieve + recall);
7.6 MiB: a longer chat without the capability on a 40M-token model (parsed, checked,
forwarded as received).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from tests.support.waiting import MiB, measure                        # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--sizes", default="0.93,7.6")
    args = ap.parse_args()
    print(f"held per waiting request, CPython {sys.version.split()[0]}, tracemalloc, n = {args.n}")
    print(f"{'body':>10} {'upstream body':>14} {'held':>10} {'held/body':>10} {'caches after':>13}  statuses")
    for mib in map(float, args.sizes.split(",")):
        r = measure(mib, args.n)
        print(f"{r['body'] / MiB:9.2f}M {r['sent'] / MiB:13.2f}M {r['held'] / MiB:9.2f}M "
              f"{r['held'] / r['body']:10.2f} {(r['after'] - r['base']) / MiB:12.1f}M  {r['statuses']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
