"""The hostile cases through the runner: real Pyodide, real local D1 and R2.

A sample of the in-process generator's cases (≥ 200, the depth bombs among them) is
each answered, under 500, storing and dispatching nothing when rejected; the runner
still answers /healthz after them. Then memory: rejected 8 MiB requests leave the
Worker's heap where it was (errors are raised fresh, so no traceback pins a body), and
so do bodies of many tiny messages planned to a 413 (nothing of them is left in a
reference cycle, which only a cycle collection would free).
"""

import hashlib
import json
import os
import random
import re
import time

import httpx
import pytest

from tests.hostile import generator as gen
from tests.hostile.checks import Observed, check
from devkit import roleplay as rp
from devkit.fakes import FakeServer, Reply
from devkit.runner import Edge

SAMPLE = int(os.environ.get("HOSTILE_RUNNER_CASES", "220"))
MiB = 1 << 20


@pytest.fixture(scope="module")
def servers():
    script = {"status": 200}

    def provider_reply(rec):
        answer = script.get("answer")
        if answer is None:
            return Reply(status=script["status"], chunks=[b'{"id":"x","choices":[]}'])
        ctype, body, size, _ = answer      # the case's usage fields, in reads of `size` bytes
        size = size or len(body)
        return Reply(status=script["status"], headers=[("content-type", ctype)],
                     chunks=[body[i:i + size] for i in range(0, len(body), size)])

    with FakeServer(provider_reply) as provider, FakeServer() as origin:
        yield provider, origin, script


@pytest.fixture(scope="module")
def edge(servers, tmp_path_factory):
    provider, origin, _ = servers
    with Edge(tmp_path_factory.mktemp("hostile"), vars=rp.edge_vars(provider.url, origin.url, CORS_ALLOWED_ORIGINS=gen.CORS_SETTING)) as edge:
        for principal, key, session in (("p_hostile", gen.KEY, gen.SESSION), ("p_other", gen.OTHER_KEY, "rps_other"),
                                        ("p_limited", gen.LIMITED_KEY, gen.LIMITED_SESSION),
                                        ("p_spent", gen.SPENT_KEY, gen.SPENT_SESSION)):
            edge.sql("INSERT INTO roleplay_keys (key_sha256, principal, created_at) VALUES (?1, ?2, 0)",
                     hashlib.sha256(key.encode()).hexdigest(), principal)
            rp.set_policy(edge, principal)
            edge.sql("INSERT INTO roleplay_sessions (session_id, principal, created_at) VALUES (?1, ?2, 0)",
                     session, principal)
        edge.sql("INSERT INTO roleplay_keys (key_sha256, principal, created_at, revoked_at) VALUES (?1, 'p_revoked', 0, 1)",
                 hashlib.sha256(gen.REVOKED_KEY.encode()).hexdigest())
        rp.set_policy(edge, "p_revoked")
        gen.seed_limited(edge.sql)
        rp.set_model(edge, gen.MODEL, gen.WINDOW, 1000)
        rp.set_model(edge, gen.RECALL_MODEL, gen.RECALL_WINDOW, 1000)
        rp.set_model(edge, "fake:tiny", 300, 100)
        rp.set_model(edge, gen.HUGE_MODEL, gen.HUGE_WINDOW, 1000)
        yield edge


def stored(edge) -> tuple:
    return edge.sql("SELECT COUNT(*) AS n FROM context_pages")[0]["n"], edge.stats()["r2_puts"]


def usage_totals(edge) -> tuple:
    """principal_usage's sums (after `stored`: /__runner/stats waits for waitUntil work)."""
    [row] = edge.sql("SELECT COALESCE(SUM(requests), 0) AS r, COALESCE(SUM(input_tokens), 0) AS i, "
                     "COALESCE(SUM(output_tokens), 0) AS o, COALESCE(SUM(estimated), 0) AS e FROM principal_usage")
    return row["r"], row["i"], row["o"], row["e"]


def send(edge, servers, case) -> Observed:
    provider, origin, script = servers
    script["status"], script["answer"] = case.provider_status, case.provider_answer
    p0, o0, before = len(provider.received), len(origin.received), stored(edge)
    usage0 = usage_totals(edge)
    # On the wire a header value has no surrounding whitespace (servers strip it; h11 refuses to send it).
    # the true Content-Length (a declared one is the in-process tier's: a lie would stall)
    headers = {k: v.strip() for k, v in case.headers.items() if k != "Content-Length"}
    r = edge.client.request(case.method, case.path, headers=headers, content=case.body or None)
    reached = provider.received[p0:]
    at_origin = [(repr(x.raw_headers), x.body) for x in origin.received[o0:]]
    after = stored(edge)
    delta = tuple(b - a for a, b in zip(usage0, usage_totals(edge)))
    return Observed(r.status_code, r.content, [(repr(x.raw_headers), x.body) for x in reached],
                    len(at_origin), before, after, at_origin, list(r.headers.items()), delta)


def bombs():
    for n, depth in enumerate([100_000, 10 * gen.MAX_DEPTH, gen.MAX_DEPTH + 1]):
        body = b'{"model":"fake:rp-small","messages":' + gen.depth_bomb(depth) + b"}"
        headers = {"Authorization": f"Bearer {gen.KEY}", "X-Roleplay-Session-ID": gen.SESSION}
        yield gen.Case(-1 - n, f"depth {depth}", "POST", "/v1/chat/completions", headers, body)


def test_hostile_sample_through_the_runner(edge, servers):
    seed = int(os.environ.get("HOSTILE_SEED", random.randrange(2 ** 32)))
    print(f"\nhostile seed {seed}: {SAMPLE} cases + 3 depth bombs through the runner")
    started = time.monotonic()
    cases = list(bombs()) + list(gen.cases(seed, SAMPLE))
    for case in cases:
        try:
            seen = send(edge, servers, case)
            check(case, seen)
        except Exception as e:
            raise AssertionError(f"hostile seed {seed}, {case.describe()}") from e
    assert edge.client.get("/healthz").status_code == 200
    logs = repr(edge.logs()).lower()
    assert gen.QUERY_MARK.lower() not in logs and "lantern" not in logs
    assert not [r for r in edge.logs() if r.get("error") == "internal_error" or r.get("runner") == "worker_exception"]
    print(f"hostile (runner): {len(cases)} cases in {time.monotonic() - started:.1f} s")


def big_body(tail: bytes = b"}") -> bytes:
    head = b'{"model":"fake:rp-small","messages":[{"role":"user","content":"'
    filler = b"x" * (8 * MiB - len(head) - 3 - len(tail) - 1024)
    return head + filler + b'"}]' + tail


def test_rejected_8_mib_requests_do_not_grow_the_heap(edge):
    client = httpx.Client(base_url=edge.url, timeout=60)
    good = {"Authorization": f"Bearer {gen.KEY}"}
    kinds = [({**good, "X-Roleplay-Session-ID": "rps_unknown"}, big_body(), 404),   # read, parsed, then refused
             ({"Authorization": "Bearer rpk_wrong", "X-Roleplay-Session-ID": gen.SESSION}, big_body(), 401),
             ({**good, "X-Roleplay-Session-ID": gen.SESSION}, big_body(b"]"), 400)]  # read, bad JSON

    def burst(n):
        for i in range(n):
            headers, body, status = kinds[i % 3]
            r = client.post("/v1/chat/completions", content=body, headers=headers)
            assert r.status_code == status, r.text

    with client:
        burst(6)                                   # the heap reaches its working size
        before = client.get("/__runner/memory").json()
        burst(50)
        after = client.get("/__runner/memory").json()
    grown = (after["wasm_bytes"] - before["wasm_bytes"]) / MiB
    print(f"\nwasm heap {before['wasm_bytes'] / MiB:.0f} → {after['wasm_bytes'] / MiB:.0f} MiB after 50 rejected 8 MiB requests; "
          f"runner RSS {before['rss_bytes'] / MiB:.0f} → {after['rss_bytes'] / MiB:.0f} MiB")
    assert grown <= 32


def dense_body(messages: int) -> bytes:
    """Many tiny messages: the most objects per byte a chat body can make the edge hold."""
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": str(i)} for i in range(messages)]
    return json.dumps({"model": gen.MODEL, "messages": msgs, "capabilities": ["multillm_context_retrieve"]},
                      separators=(",", ":")).encode()


def test_bodies_planned_to_a_413_do_not_grow_the_heap(edge):
    body = dense_body(100_000)                     # 3.6 MB, ~50,000 exchanges: cannot fit
    client = httpx.Client(base_url=edge.url, timeout=120)
    headers = {"Authorization": f"Bearer {gen.KEY}", "X-Roleplay-Session-ID": gen.SESSION}

    def burst(n):
        for _ in range(n):
            r = client.post("/v1/chat/completions", content=body, headers=headers)
            assert r.status_code == 413 and r.json()["error"]["code"] == "context_window_exceeded"

    with client:
        burst(2)
        before = client.get("/__runner/memory").json()["wasm_bytes"]
        burst(4)
        after = client.get("/__runner/memory").json()["wasm_bytes"]
    print(f"\nwasm heap {before / MiB:.0f} → {after / MiB:.0f} MiB after 4 more dense 413s")
    assert after - before <= 8 * MiB


RESUMED_PAIRS = int(os.environ.get("HOSTILE_RUNNER_RESUMED", "60"))


def refusal(seen: Observed):
    """An error body with its clock taken out: a 429's `Retry-After` counts down between
    the two sends (36 s, then 35 s): the body without it, and the figure (0 when none)."""
    if seen.status != 429:
        return seen.body, 0
    err = json.loads(seen.body)["error"]
    retry = err.pop("retry_after_seconds")
    err["message"] = re.sub(r"Retry after \d+ s", "Retry after N s", err["message"])
    return err, retry


def test_hostile_next_turns_through_the_runner(edge, servers):
    """generator.resumed_pairs in real Pyodide (docs/design.md §5.13): each spoiled next
    turn sent on a session the isolate never saw (the full path) and right after its
    valid turn on another: the same status, and the same error body when refused (page
    ids and session figures name the session: in-process, test_hostile_resumed.py
    compares accepted turns byte for byte on one session). The limited principal's
    request window is emptied before each spoiled send: it is shared by the two sessions,
    and the kept one spends a slot on its valid turn first, so the full path and the
    resumed one meet the same window (the sample above fills it)."""
    seed = int(os.environ.get("HOSTILE_SEED", random.randrange(2 ** 32)))
    print(f"\nhostile resumed seed {seed}: {RESUMED_PAIRS} pairs through the runner")
    principal = edge.sql("SELECT principal FROM roleplay_sessions WHERE session_id = ?1", gen.SESSION)[0]["principal"]
    resumed = 0
    for n, (first, spoiled) in enumerate(gen.resumed_pairs(seed, RESUMED_PAIRS)):
        fresh, kept = f"rps_resumed_{seed}_{n}_a", f"rps_resumed_{seed}_{n}_b"
        for session in (fresh, kept):
            edge.sql("INSERT INTO roleplay_sessions (session_id, principal, created_at) VALUES (?1, ?2, 0)",
                     session, principal)
        on = {}
        for session in (fresh, kept):
            case = {name: gen.Case(c.n, c.kind, c.method, c.path,
                                   {**c.headers, "X-Roleplay-Session-ID": session}
                                   if c.headers.get("X-Roleplay-Session-ID") == gen.SESSION else c.headers, c.body)
                    for name, c in (("first", first), ("spoiled", spoiled))}
            if session == kept:
                send(edge, servers, case["first"])
            if gen.LIMITED_KEY in case["spoiled"].headers.get("Authorization", ""):
                edge.sql("DELETE FROM principal_requests WHERE principal = 'p_limited'")
            try:
                on[session] = send(edge, servers, case["spoiled"])
                check(case["spoiled"], on[session])
            except Exception as e:
                raise AssertionError(f"hostile resumed seed {seed}, {spoiled.describe()}") from e
        full, again = on[fresh], on[kept]
        assert again.status == full.status, spoiled.describe()
        if full.status >= 400:
            (body, retry), (full_body, full_retry) = refusal(again), refusal(full)
            assert body == full_body and not again.provider_requests, spoiled.describe()
            assert 0 <= full_retry - retry <= 2, spoiled.describe()
        resumed += again.status == 200
    resumed_logs = [r for r in edge.logs() if r.get("resumed")]
    print(f"hostile resumed (runner): {RESUMED_PAIRS} pairs, {resumed} answered 200, "
          f"{len(resumed_logs)} turns resumed")
    assert resumed_logs


def test_the_sample_never_lost_the_isolate(edge):
    """Last in the module: the whole sample ran under the runner's 128 MiB isolate limit
    (docs/design.md §9) and never passed it."""
    mem = edge.memory()
    assert mem["limit_bytes"] == 128 * MiB
    assert mem["isolates_lost"] == 0, [r for r in edge.logs() if r.get("runner") == "isolate_memory_exceeded"]
    print(f"\nhostile sample: wasm peak {mem['wasm_peak_bytes'] / MiB:.0f} MiB, 0 isolates lost")
