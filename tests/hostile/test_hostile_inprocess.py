"""≥ 10,000 seeded hostile requests, in-process (the app on sqlite D1 + in-memory R2).
Each is checked as in the runner tier (checks.py) and to leave no reference cycle.

HOSTILE_SEED fixes the seed (printed either way); HOSTILE_CASES the count. A failure
names the seed and the case, so `HOSTILE_SEED=<seed> pytest tests/hostile` replays it.
"""

import gc
import json
import os
import random
import time

from tests.hostile import generator as gen
from tests.hostile.checks import Observed, check
from devkit import roleplay as rp
from multillm_edge.service import budget
from tests.support.inprocess import Answer, LocalEdge

CASES = int(os.environ.get("HOSTILE_CASES", "10000"))
ORIGIN = "http://origin.test"
PROVIDER = "http://provider.test"


def hostile_edge() -> tuple[LocalEdge, dict]:
    script = {"status": 200}

    def upstream(sent):
        if sent.url.startswith(ORIGIN):
            return Answer(body=b'{"origin":true}')
        answer = script.get("answer")
        if answer is None:
            return Answer(status=script["status"], body=b'{"id":"x","choices":[]}')
        ctype, body, chunk, _ = answer
        return Answer(status=script["status"], headers=[("content-type", ctype)], body=body, chunk=chunk)

    edge = LocalEdge(rp.edge_vars(PROVIDER, ORIGIN, CORS_ALLOWED_ORIGINS=gen.CORS_SETTING), upstream)
    edge.seed_player("p_hostile", gen.KEY, gen.SESSION)
    edge.seed_player("p_other", gen.OTHER_KEY, "rps_other")
    edge.seed_player("p_revoked", gen.REVOKED_KEY, "rps_revoked")
    edge.sql("UPDATE roleplay_keys SET revoked_at = 1 WHERE principal = 'p_revoked'")
    edge.seed_player("p_limited", gen.LIMITED_KEY, gen.LIMITED_SESSION)
    edge.seed_player("p_spent", gen.SPENT_KEY, gen.SPENT_SESSION)
    gen.seed_limited(edge.sql)
    edge.set_model(gen.MODEL, gen.WINDOW, 1000)
    edge.set_model(gen.RECALL_MODEL, gen.RECALL_WINDOW, 1000)
    edge.set_model("fake:tiny", 300, 100)
    edge.set_model(gen.HUGE_MODEL, gen.HUGE_WINDOW, 1000)
    return edge, script


def stored(edge) -> tuple:
    return edge.sql("SELECT COUNT(*) AS n, COALESCE(SUM(expires_at), 0) AS e FROM context_pages")[0]["n"], \
        len(edge.bucket.objects)


def usage_totals(edge) -> tuple:
    row = edge.sql("SELECT COALESCE(SUM(requests), 0) AS r, COALESCE(SUM(input_tokens), 0) AS i, "
                   "COALESCE(SUM(output_tokens), 0) AS o, COALESCE(SUM(estimated), 0) AS e "
                   "FROM principal_usage")[0]
    return row["r"], row["i"], row["o"], row["e"]


def run_case(edge, script, case) -> Observed:
    script["status"], script["answer"] = case.provider_status, case.provider_answer
    sent0, before, usage0 = len(edge.sent), stored(edge), usage_totals(edge)
    r = edge.request(case.method, case.path, case.headers, case.body)
    new = edge.sent[sent0:]
    provider = [(repr(s.headers), s.body) for s in new if s.url.startswith(PROVIDER)]
    origin = [(repr(s.headers), s.body) for s in new if s.url.startswith(ORIGIN)]
    delta = tuple(b - a for a, b in zip(usage0, usage_totals(edge)))
    return Observed(r.status, r.body, provider, len(origin), before, stored(edge), origin, r.headers,
                    delta)


def test_hostile_requests_in_process():
    seed = int(os.environ.get("HOSTILE_SEED", random.randrange(2 ** 32)))
    print(f"\nhostile seed {seed}: {CASES} in-process cases (replay: HOSTILE_SEED={seed})")
    started = time.monotonic()
    statuses: dict = {}
    limited: dict = {}            # the limits' codes met (design §4.1)
    edge, script = hostile_edge()
    # The collector off, each request is checked to leave no reference cycle: one would
    # pin what it references (a whole request body) until a cycle collection runs.
    gc.collect()
    gc.disable()
    try:
        for case in gen.cases(seed, CASES):
            if case.n and case.n % 400 == 0:
                edge.clock += 4000          # earlier pages expire: paging keeps being exercised
            gc.collect(0)                   # the generator's own (json.dumps with indent)
            try:
                seen = run_case(edge, script, case)
                check(case, seen)
                cycles = gc.collect(0)      # only what this request allocated and left
                assert not cycles, f"{cycles} objects left in reference cycles"
                # every reservation given back (docs/design.md §7.2), a stream's once read
                assert budget.BUDGET.cur == 0, f"{budget.BUDGET.cur} bytes still reserved"
            except Exception as e:
                raise AssertionError(f"hostile seed {seed}, {case.describe()}") from e
            statuses[seen.status] = statuses.get(seen.status, 0) + 1
            if seen.status in gen.LIMIT_CODES:
                code = json.loads(seen.body)["error"]["code"]
                if code in gen.LIMIT_CODES[seen.status]:
                    limited[code] = limited.get(code, 0) + 1
        for record in edge.logs:
            text = repr(record)
            assert gen.KEY not in text and gen.OTHER_KEY not in text and gen.REVOKED_KEY not in text
            assert gen.LIMITED_KEY not in text and gen.SPENT_KEY not in text
            assert gen.QUERY_MARK.lower() not in text.lower() and "lantern" not in text.lower()
        assert not [r for r in edge.logs if r.get("error") == "internal_error"]
    finally:
        gc.enable()
        edge.close()
    print(f"hostile: {CASES} cases in {time.monotonic() - started:.1f} s; statuses {dict(sorted(statuses.items()))}")
    assert statuses.get(200, 0) > CASES // 20      # the generator also makes accepted requests
    print(f"hostile: limits met {dict(sorted(limited.items()))}")
    if CASES >= 5000:   # bursts of the principals with limits meet each of them
        assert {c for cs in gen.LIMIT_CODES.values() for c in cs} <= set(limited), limited
