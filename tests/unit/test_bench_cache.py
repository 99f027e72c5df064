"""bench/bench_cache.py's measure (bench/README.md): the shared prefix is exact, the
prompt is taken in a provider's order, and a replayed chat shows the capability's
cache where the seed's rule has none."""

import os
import sys

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

import bench_cache  # noqa: E402
from devkit import roleplay as rp  # noqa: E402


def test_the_shared_prefix_is_the_longest_common_one():
    for a, b in [(b"", b"x"), (b"abc", b"abd"), (b"abc", b"abcdef"), (b"same", b"same"),
                 (b"x" * 1000 + b"a", b"x" * 1000 + b"b")]:
        n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        assert bench_cache.shared_prefix(a, b) == n == bench_cache.shared_prefix(b, a)


def test_the_history_ends_the_rendered_prompt():
    body = rp.chat_body(3)
    plan, _ = bench_cache.plan_turn("chat", body, bench_cache.METHODS["paging"])
    got = bench_cache.rendered("chat", plan)
    assert got.endswith(b"What do we do now?\"}]") and got.startswith(b'{"model"')


def test_a_replayed_chat_caches_with_the_capability_and_not_without():
    body = rp.chat_body(200, size=300)
    seed = bench_cache.replay("chat", body, bench_cache.METHODS["paging"])
    cached = bench_cache.replay("chat", body, bench_cache.METHODS["prompt cache"])
    assert seed["turns"] == cached["turns"] > 50
    assert seed["turns >= 0.9"] < 0.5 < 0.8 < cached["turns >= 0.9"]
    assert cached["cost (anthropic)"] < 0.5 < seed["cost (anthropic)"]
    assert cached["puts/turn"] < 0.3 < seed["puts/turn"]
