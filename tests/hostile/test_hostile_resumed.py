"""Hostile next turns through the resumed path (docs/design.md §5.13), in-process.

Each pair is a valid turn, then the same body with one exchange appended and spoiled
there or after the history (generator.resumed_pairs). The spoiled body is sent twice:
in an isolate that never saw the session (the full path) and right after the valid
turn (the resumed path). Both answers must be the same — status, body, what reached
the provider — and pass every hostile invariant (checks.py).
"""

import os
import random

from multillm_edge.core import resume
from multillm_edge.core.last_turns import LAST_TURNS
from tests.hostile import generator as gen
from tests.hostile.checks import check
from tests.hostile.test_hostile_inprocess import hostile_edge, run_case

PAIRS = int(os.environ.get("HOSTILE_RESUMED_PAIRS", "600"))


def test_hostile_next_turns_answer_as_a_first_turn(monkeypatch):
    seed = int(os.environ.get("HOSTILE_SEED", random.randrange(2 ** 32)))
    print(f"\nhostile resumed seed {seed}: {PAIRS} pairs (replay: HOSTILE_SEED={seed})")
    resumed = []
    real = resume._resume
    monkeypatch.setattr(resume, "_resume", lambda *a: resumed.append(real(*a)) or resumed[-1])
    edge, script = hostile_edge()
    kinds: dict = {}
    try:
        for first, spoiled in gen.resumed_pairs(seed, PAIRS):
            try:
                LAST_TURNS.clear()
                full = run_case(edge, script, spoiled)
                LAST_TURNS.clear()
                run_case(edge, script, first)
                before = len(resumed)
                again = run_case(edge, script, spoiled)
                check(spoiled, full)
                check(spoiled, again)
                assert (again.status, again.body) == (full.status, full.body)
                assert [b for _, b in again.provider_requests] == [b for _, b in full.provider_requests]
            except Exception as e:
                raise AssertionError(f"hostile resumed seed {seed}, {spoiled.describe()}") from e
            took = any(r is not None for r in resumed[before:])
            kinds[(full.status, took)] = kinds.get((full.status, took), 0) + 1
    finally:
        edge.close()
        LAST_TURNS.clear()
    print(f"hostile resumed: (status, resumed) -> pairs {dict(sorted(kinds.items()))}")
    # the resumed path answered both refusals and accepted turns
    assert sum(n for (status, took), n in kinds.items() if took and status == 200) > PAIRS // 20
    assert sum(n for (status, took), n in kinds.items() if status == 400) > PAIRS // 5
