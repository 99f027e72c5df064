"""bench/bench_turn.py's steady pair (bench/README.md): the pair it times is what it
says — two consecutive turns of one session, the second one exchange longer and
resumed from the first, between two steps (the same exchanges paged) or across one."""

import os
import sys

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

import bench_turn  # noqa: E402
from multillm_edge.core import resume  # noqa: E402
from multillm_edge.core.last_turns import LastTurns  # noqa: E402


def test_the_steady_pair_is_resumed_between_steps_and_the_other_crosses_one():
    n = 50
    budget = max(32000, 100 * n) - 1280
    steady, step = bench_turn.turn_pairs(n, budget, False)
    for pair, same in ((steady, True), (step, False)):
        first, second = pair
        assert second.startswith(first[:first.rindex(b'{"role":"user"')])   # one exchange appended
        memory = LastTurns()
        before = bench_turn.resumed_turn(first, budget, {}, memory)
        _, prior = resume.parse_request(memory, bench_turn.KEY, "chat", second)
        assert prior.reused >= len(before.pages)
        after = bench_turn.resumed_turn(second, budget, {}, memory)
        assert (after.fit.k == before.fit.k) is same
        assert ([p.page_id for p in after.pages] == [p.page_id for p in before.pages]) is same


def test_the_chain_times_turns_resumed_from_resumed_turns():
    """bench_turn_chain.py's timed turns are a session's later ones: each body the last
    plus one exchange, resumed from a turn that was itself resumed (its kept body
    verified already), some of them between steps."""
    import json
    import bench_turn_chain as chain
    n = 200
    budget = max(32000, 100 * n) - 1280
    raws = [r.replace(chain.ASK, json.dumps(chain.PLAIN).encode()) for r in chain.chain_bodies(n, False)]
    memory, fits = LastTurns(), []
    for k, raw in enumerate(raws):
        if k:
            earlier = raws[k - 1]
            assert raw.startswith(earlier[:earlier.rindex(b'{"role":"user"')])   # one exchange appended
        last = memory.get(bench_turn.KEY)
        _, prior = resume.parse_request(memory, bench_turn.KEY, "chat", raw)
        if k >= chain.FROM:
            assert prior.reused and last.verified > 0 and last.ends is not None, k
        fits.append(bench_turn.resumed_turn(raw, budget, {}, memory).fit.k)
    assert any(fits[k] == fits[k - 1] for k in range(chain.FROM, len(fits)))


def test_the_chain_bench_times_a_compare_of_every_kept_group():
    """bench_turn_chain.py's "of which the body's compare" row compares a steady turn's
    body with the session's kept one over every group the turn can resume."""
    import time
    import bench_turn_chain as chain
    assert chain.compared(200, time.perf_counter)() > 0


def test_the_chain_bench_counts_the_words_of_the_exchanges_a_new_isolates_recall_ranks(monkeypatch):
    """bench_turn_chain.py's "every word counted" row counts the words of the exchanges
    a recalling turn in a new isolate ranks, each once, and leaves recall as it was."""
    import time
    import bench_turn_chain as chain
    from multillm_edge.core import recall
    from multillm_edge.search import analysis
    ranked, real = [], recall.rank
    monkeypatch.setattr(recall, "rank", lambda q, texts, *a, **k: ranked.append(len(texts)) or real(q, texts, *a, **k))
    chain.isolate_turn(200, True, time.perf_counter)()
    counted, real_counts = [], analysis.counts
    monkeypatch.setattr(chain, "counts", lambda words: counted.append(1) or real_counts(words))
    run = chain.words_counted(200, time.perf_counter)
    assert run() > 0 and len(counted) == ranked[-1] > 100
    assert recall.rank.__name__ == "<lambda>"       # ours, put back as it was


def test_the_first_recall_bench_wraps_steps_a_new_isolates_recall_takes():
    """bench/bench_first_recall.py times recall's steps by wrapping them by name: each
    is still there, and a new isolate's recalling turn goes through the index's ones."""
    import json
    import bench_first_recall as first
    from multillm_edge.search import STATE
    for owner, name, _ in first.STEPS:
        assert callable(getattr(owner, name)), name
    seen = set()
    wrapped = {}
    for owner, name, label in first.STEPS:
        f = getattr(owner, name)
        wrapped[(owner, name)] = f
        setattr(owner, name, lambda *a, _f=f, _l=label, **k: seen.add(_l) or _f(*a, **k))
    try:
        n = 50
        body = bench_turn.roleplay_body(n)
        body["messages"][-1]["content"] = "*frowns* Port 5 again? What did the whales sing there?"
        body["capabilities"] = ["multillm_context_retrieve", "multillm_context_recall"]
        raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        STATE.reset()
        bench_turn.one_turn(raw, max(32000, 100 * n) - 1280, {"active_bytes": 1, "limit_bytes": 1048576,
                                                             "active_pages": 1}, True)
    finally:
        for (owner, name), f in wrapped.items():
            setattr(owner, name, f)
        STATE.reset()
    assert seen == {label for _, _, label in first.STEPS}


def test_the_branch_row_times_a_session_turn_after_its_branchs_on_the_same_pages():
    """bench_turn_chain.py's "a branch's turn between" row: the branch shares the
    session's first pages (so their keys), and each has a corpus of its own that the
    other's turn leaves whole."""
    import time
    import bench_turn_chain as chain
    from multillm_edge.search import STATE
    from multillm_edge.search.corpus import CORPORA
    STATE.reset()
    run = chain.branched(400, time.perf_counter)
    for _ in range(3):
        assert run() > 0
    main, side = sorted(CORPORA.kept, key=lambda c: len(c.words), reverse=True)[:2]
    assert len(CORPORA.kept) == 2 and len(side.words) < len(main.words) // 2
    from multillm_edge.search.corpus import shared
    assert shared(side.keys, main.keys) >= len(side.words) // 2    # the same pages, mostly
    STATE.reset()
