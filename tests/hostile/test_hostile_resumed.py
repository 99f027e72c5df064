"""Hostile next turns through the resumed path (docs/design.md §5.13), in-process.

Each pair is a valid turn, then the same body with one exchange appended and spoiled
there or after the history (generator.resumed_pairs). Two edges receive the same
requests: one keeps no last turn (the full path), the other resumes the spoiled turn
from the valid one. Both answers must be the same — status, body, what reached the
provider — and pass every hostile invariant (checks.py).
"""

import os
import random

from multillm_edge.core import resume
from multillm_edge.core.last_turns import LastTurns
from multillm_edge.routes import generation
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
    (forgetful, script), (keeping, script_k) = hostile_edge(), hostile_edge()
    memories = {id(forgetful): LastTurns(max_bytes=0), id(keeping): LastTurns()}   # 0: keeps nothing
    kinds: dict = {}

    def on(edge, edge_script, case):
        monkeypatch.setattr(generation, "LAST_TURNS", memories[id(edge)])
        return run_case(edge, edge_script, case)

    try:
        for first, spoiled in gen.resumed_pairs(seed, PAIRS):
            try:
                memories[id(keeping)].clear()
                on(forgetful, script, first)
                on(keeping, script_k, first)
                before = len(resumed)
                full = on(forgetful, script, spoiled)
                again = on(keeping, script_k, spoiled)
                check(spoiled, full)
                check(spoiled, again)
                assert (again.status, again.body) == (full.status, full.body)
                assert [b for _, b in again.provider_requests] == [b for _, b in full.provider_requests]
            except Exception as e:
                raise AssertionError(f"hostile resumed seed {seed}, {spoiled.describe()}") from e
            took = any(r is not None for r in resumed[before:])
            kinds[(full.status, took)] = kinds.get((full.status, took), 0) + 1
    finally:
        forgetful.close()
        keeping.close()
    print(f"hostile resumed: (status, resumed) -> pairs {dict(sorted(kinds.items()))}")
    # the resumed path answered both refusals and accepted turns
    assert sum(n for (status, took), n in kinds.items() if took and status == 200) > PAIRS // 20
    assert sum(n for (status, took), n in kinds.items() if status == 400) > PAIRS // 5
