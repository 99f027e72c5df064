"""Before/after of a steady turn on a noisy machine: two source trees in one process.

Separate bench runs on a shared machine differ by more than a change costs (bench/README.md).
This imports two copies of ``multillm_edge`` side by side — e.g. a commit's tree from
``git worktree add`` and the working tree — and times the same chat turn (request
boundary, plan, upstream bytes) with each, alternating (the order swapped every round),
40 rounds, medians; the ratio ``after / before`` is measured in one run. Usage:

    python bench/bench_ab.py BEFORE/src/multillm_edge AFTER/src/multillm_edge

``--steady`` times a session's second turn instead (issue 40's steady turn, bench_turn.py):
the first turn kept in a new memory untimed, then the next body, one exchange longer,
resumed from it. A keyword given to ``plan_candidates`` by ``--after-kw name=true`` goes to the after tree
only (a new option, e.g. ``prompt_cache=true``). CPython; the tree must import
relatively (it does: ``from ..`` throughout).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_paging import roleplay_body  # noqa: E402

SIZES, ROUNDS = (50, 200, 800), 40


def load(tree: str, name: str, into: str) -> dict:
    """The modules a turn uses, from ``tree`` imported as package ``name``."""
    shutil.copytree(tree, os.path.join(into, name), ignore=shutil.ignore_patterns("__pycache__"))
    mods = ("paging", "validation", "pages") + (
        ("resume", "last_turns") if os.path.exists(os.path.join(tree, "core", "resume.py")) else ())
    return {m: importlib.import_module(f"{name}.core.{m}") for m in mods}


def turn(mod: dict, raw: bytes, budget: int, recalling: bool, extra: dict, memory=None) -> None:
    """One turn's request boundary, plan and upstream bytes. A tree that keeps the last
    turns (issue 40, core/resume.py) runs it as the Worker does: looked up in ``memory``
    (an empty one: a new isolate), then kept."""
    signer = mod["pages"].PageSigner(b"bench-signing-secret-of-some-length")
    resume = mod.get("resume")
    if resume is not None:
        memory = mod["last_turns"].LastTurns() if memory is None else memory
        key = ("digest", "rps_bench", "chat")
        body, prior = resume.parse_request(memory, key, "chat", raw)
        extra = {**extra, "prior": prior}
    else:
        body = mod["validation"].parse_request("chat", raw)
    (plan,) = mod["paging"].plan_candidates(
        "chat", body, [budget], signer.page_ids("roleplay", "a" * 64, "rps_bench", 1),
        strip=mod["paging"].EDGE_FIELDS, recalling=recalling, **extra)
    plan.encoded("provider-model")
    if resume is not None:
        resume.keep(memory, key, raw, body, prior)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--after-kw", action="append", default=[], metavar="NAME=true")
    ap.add_argument("--steady", action="store_true", help="time a session's second turn")
    ap.add_argument("--cpu-time", action="store_true",
                    help="the process's CPU time, not wall time (a machine others load)")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    args = ap.parse_args(argv)
    extra = {k: v.lower() == "true" for k, v in (kw.split("=", 1) for kw in args.after_kw)}
    with tempfile.TemporaryDirectory() as into:
        sys.path.insert(0, into)
        before, after = load(args.before, "edge_before", into), load(args.after, "edge_after", into)
        print("| exchanges | recall | before ms | after ms | after / before |")
        print("|---:|---|---:|---:|---:|")
        for n in SIZES:
            body = roleplay_body(n)
            if args.steady:
                body["capabilities"] = ["multillm_context_retrieve", "multillm_context_prompt_cache"]
            raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
            body["messages"] += [{"role": "assistant", "content": "*nods* On we go."},
                                 {"role": "user", "content": "*takes a deep breath* Let's set sail."}]
            raw2 = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
            budget = max(32000, 100 * n) - 1280
            for recalling in (False, True):
                runs = {"before": (before, {}), "after": (after, extra)}
                for mod, kw in runs.values():
                    turn(mod, raw, budget, recalling, kw)          # warm: recall's caches
                times = {k: [] for k in runs}
                clock = time.process_time if args.cpu_time else time.perf_counter
                for r in range(args.rounds):       # ABBA: the order alternates per round
                    for k in (("before", "after") if r % 2 == 0 else ("after", "before")):
                        mod, kw = runs[k]
                        memory = None
                        if args.steady and "last_turns" in mod:
                            memory = mod["last_turns"].LastTurns()
                            turn(mod, raw, budget, recalling, kw, memory)
                        gc.collect()
                        t = clock()
                        turn(mod, raw2 if args.steady else raw, budget, recalling, kw, memory)
                        times[k].append(clock() - t)
                b, a = (statistics.median(times[k]) * 1000 for k in ("before", "after"))
                print(f"| {n} | {'yes' if recalling else 'no'} | {b:.2f} | {a:.2f} | {a / b:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
