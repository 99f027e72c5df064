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


# -- the model of Anthropic's cache (bench/anthropic_cache.py) -------------------------

import anthropic_cache  # noqa: E402

CC = {"type": "ephemeral"}


def _body(n: int, anchor: int | None, top: bool = False) -> dict:
    """n one-block messages of 200 bytes; a breakpoint on message ``anchor``."""
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{i:04d}" + "x" * 196}
            for i in range(n)]
    if anchor is not None:
        msgs[anchor] = {**msgs[anchor], "content": [
            {"type": "text", "text": msgs[anchor]["content"], "cache_control": CC}]}
    body = {"system": "card", "messages": msgs}
    return {**body, "cache_control": CC} if top else body


def test_an_entry_is_written_at_a_breakpoint_and_read_within_the_look_back():
    cache = anthropic_cache.Cache()
    first = cache.turn(_body(20, 9))
    assert first["served"] == 0 and first["breakpoints"] == 1
    # the same content, the breakpoint 20 blocks later: the entry is at the look-back's edge
    again = cache.turn(_body(40, 29))
    blocks = anthropic_cache.blocks(_body(20, 9))
    assert again["served"] == sum(len(b) for b, _ in blocks[:11])   # system + 10 messages
    far = anthropic_cache.Cache()
    far.turn(_body(20, 9))
    assert far.turn(_body(40, 30))["served"] == 0                  # 21 blocks on: missed


def test_a_breakpoint_marks_the_prompt_it_is_not_in_it_and_top_level_ends_it():
    a = anthropic_cache.blocks(_body(6, 3))
    b = anthropic_cache.blocks(_body(6, None))
    assert [x for x, _ in a] == [x for x, _ in b] and [m for _, m in a].count(True) == 1
    assert anthropic_cache.blocks(_body(6, None, top=True))[-1][1] is True
    cache = anthropic_cache.Cache()
    cache.turn(_body(6, None, top=True))
    got = cache.turn(_body(8, None, top=True))
    assert got["served"] == sum(len(x) for x, _ in anthropic_cache.blocks(_body(6, None)))
    assert got["cost"] < got["total"]


def test_with_the_anchors_anthropic_serves_what_the_bytes_share():
    """A replayed chat to a cache_breakpoints provider: the model of Anthropic's cache
    serves within 0.03 of the byte prefix, with recall and without (issue 38)."""
    body = rp.chat_body(200, size=300)
    for case in ("chat (cache_breakpoints), recall", "chat (cache_breakpoints)"):
        r = bench_cache.replay_anthropic(body, bench_cache.ANTHROPIC[case])
        assert r["turns"] > 100 and r["anthropic"] > 0.75 and 0 <= r["gap"] <= 0.03
        assert r["max breakpoints"] == 2
