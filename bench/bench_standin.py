"""What the stand-in provider (devkit/standin.py) costs `npm start`.

    .venv/bin/python bench/bench_standin.py [--starts 3] [--answers 500]

Runner starts with and without `EDGE_STANDIN=1`, alternating (a noisy stretch shifts
both alike), each its own fresh state: the runner's `start_ms` (Pyodide load, migrations,
platform proxy, and the stand-in's start). Then the stand-in's CPU per answer
(`time.process_time`) to the quick start's chat (tools/long_chat.py: 40 exchanges),
JSON and streamed. Medians. The stand-in is no part of the Worker: these figures only
say it does not slow a start or a turn down.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from devkit import roleplay as rp  # noqa: E402
from devkit import standin  # noqa: E402
from devkit.runner import Edge  # noqa: E402
from tools import long_chat  # noqa: E402

VARS = {"CONTEXT_PAGING_ENABLED": "true", "MEDIA_SIGNING_SECRET": rp.SIGNING_SECRET}
KINDS = (("without", {}), ("with", {"EDGE_STANDIN": "1"}))


def starts(rounds: int) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {"without": [], "with": []}
    for r in range(rounds):
        for name, env in (KINDS if r % 2 == 0 else KINDS[::-1]):
            with tempfile.TemporaryDirectory() as state, Edge(Path(state), vars=VARS, extra_env=env) as edge:
                out[name].append(edge.start_ms)
    return out


def answer_cpu_ms(stream: bool, reps: int) -> tuple[int, float]:
    body = {"model": standin.MODEL, "stream": stream,
            "messages": long_chat.history(long_chat.EXCHANGES) + [{"role": "user", "content": "Onward."}]}
    raw = json.dumps(body, ensure_ascii=False).encode()
    t = time.process_time()
    for n in range(reps):
        standin.respond("/v1/chat/completions", raw, n)
    return len(raw), (time.process_time() - t) / reps * 1000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--starts", type=int, default=3)
    p.add_argument("--answers", type=int, default=500)
    args = p.parse_args()
    measured = starts(args.starts)
    for name, ms in measured.items():
        print(f"runner start {name} the stand-in: median {statistics.median(ms):,.0f} ms {ms}")
    for stream in (False, True):
        size, ms = answer_cpu_ms(stream, args.answers)
        print(f"stand-in answer, {size:,}-byte chat, {'streamed' if stream else 'JSON'}: {ms:.3f} ms CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
