"""What the isolate's caches and a turn hold, in bytes (issues 43, 46; docs/design.md §7.2).

1. **Caches**: each cache filled with hostile content through the code that fills it
   (blank lines, tiny messages, very long words, many distinct words, ``[{}]`` content);
   what its ``held_bytes()`` says against what clearing it frees (tracemalloc).
2. **A turn's peak per body byte**: a generation's pure part as the Worker runs it — the
   request boundary, the plan (recall declared or not), the upstream bytes, the last turn
   kept — on real chats (LoCoMo, read in place when present) and synthetic ones:
   tracemalloc's peak over the body's length (what ``service/budget.BODY_FACTOR``
   covers), and what is left once the turn is kept and its request gone.
3. **Recall's reranking on blank-line exchanges**: turns of one session whose exchanges
   each hold ~30,000 blank lines and one word, each turn asking for twelve others: the
   analyses cache's bytes, measured, turn after turn.

Usage: ``python bench/bench_memory.py`` (CPython) or ``node bench/pyodide_bench.mjs
bench_memory`` (Pyodide; its tracemalloc counts Python's allocations the same way).
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import sys
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("BENCH_SRC") or os.path.join(HERE, "..", "src"))  # another tree: before/after
sys.path.insert(0, HERE)

from multillm_edge.core import paging, recall, resume  # noqa: E402  (before bench_paging: BENCH_SRC's)
from multillm_edge.core.last_turns import LastTurns  # noqa: E402
from multillm_edge.core.pages import PageSigner  # noqa: E402
from multillm_edge.search import STATE, analysis, rank  # noqa: E402
from multillm_edge.search.docs import CACHE  # noqa: E402
from bench_paging import roleplay_body  # noqa: E402

MIB = 1 << 20
SIGNER = PageSigner(b"bench-memory-secret-0123456789abcdef")
IDS = SIGNER.page_ids("roleplay", "p_bench", "rps_bench", 1)
WINDOW = 32_768 - 1_024 - 256


def traced(fill, clear) -> tuple:
    """(what ``fill()`` left, as its caches say; what ``clear()`` then frees)."""
    STATE.reset()
    gc.collect()
    tracemalloc.start()
    try:
        said = fill()
        corpora = STATE._parts.get("corpora")
        if corpora is not None:
            corpora.clear()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        said = said()
        clear()
        gc.collect()
        return said, before - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        STATE.reset()


def docs_of(name: str) -> list:
    one = lambda t: [("assistant", t)]  # noqa: E731
    return {
        "blank lines": lambda: [one("\n" * 30000 + f"lantern {i}") for i in range(8)],
        "tiny messages": lambda: [one(f"a{i}") for i in range(4000)],
        "very long words": lambda: [one(" ".join(f"{i}{j}" + "x" * 3000 for j in range(10))) for i in range(20)],
        "distinct words": lambda: [one(" ".join(f"w{i}q{j}" for j in range(300))) for i in range(150)],
    }[name]()


def keys(name: str, n: int) -> list:
    return [(hashlib.sha256(f"{name}{i}".encode()).hexdigest(), i) for i in range(n)]


def chat(content, n: int) -> bytes:
    items = []
    for i in range(n):
        items += [{"role": "user", "content": content(i)}, {"role": "assistant", "content": content(i + 1)}]
    items.append({"role": "user", "content": "and now?"})
    return json.dumps({"model": "m", "messages": items,
                       "capabilities": ["multillm_context_retrieve", "multillm_context_recall"]},
                      separators=(",", ":"), ensure_ascii=False).encode()


def turn(memory: LastTurns, raw: bytes, recalling: bool, key=("d", "s", "chat")) -> bytes:
    body, prior = resume.parse_request(memory, key, "chat", raw)
    (plan,) = paging.plan_candidates("chat", body, [min(WINDOW, len(raw) // 3)], IDS, prior=prior,
                                     recalling=recalling)
    payload = plan.encoded("provider-model") if not isinstance(plan, Exception) else b""
    resume.keep(memory, key, raw, body, prior)
    return payload


def caches(runtime: str) -> None:
    print(f"\n## {runtime}: each cache, what it says it holds against what clearing it frees")
    print("| cache | content | held_bytes | freed (tracemalloc) | said / freed |")
    print("|---|---|---:|---:|---:|")
    vocabularies = STATE.caches()["vocabularies"]
    rows = []
    for name in ("blank lines", "tiny messages", "very long words", "distinct words"):
        docs = docs_of(name)

        def plain():
            rank("lantern harbour x", docs, 5, keys=keys(name, len(docs)))
            return lambda: CACHE.held_bytes()

        def indexed():
            rank("lantern harbour where", docs, 5, keys=keys(name, len(docs)), indexed=True)
            return lambda: CACHE.held_bytes() + vocabularies.held_bytes()

        rows.append(("analyses", name, *traced(plain, CACHE.clear)))
        rows.append(("analyses + vocabularies (indexed)", name,
                     *traced(indexed, lambda: (CACHE.clear(), vocabularies.clear()))))

    memos = [STATE.caches()[n] for n in ("cuts by characters", "cuts by bytes", "simple characters",
                                         "exchange starts")]

    def fill_memos():
        for i in range(300):
            chars = "".join(chr(0x391 + (i * 7 + j) % 0x2f0) for j in range(100))
            analysis.word_bag(analysis.fold(chars + " ・" + chr(0x2000 + i % 100)))
        for i in range(200):
            recall._STARTS.keep(hashlib.sha256(b"%d" % i).hexdigest(),
                                recall.formats.exchange_starts([{"role": "user", "content": "x"}] * 400))
        return lambda: sum(m.held_bytes() for m in memos)

    rows.append(("memos (cuts, NFKC, exchange starts)", "distinct character sets", *traced(
        fill_memos, lambda: [m.clear() for m in memos])))
    for name, make in (("tiny messages", lambda: chat(lambda i: "x", 20000)),
                       ("[{}] content", lambda: chat(lambda i: [{}] * 20, 4000)),
                       ("blank lines", lambda: chat(lambda i: "\n" * 2000 + str(i), 200)),
                       ("very long words", lambda: chat(lambda i: "x" * 20000 + str(i), 40)),
                       ("prose", lambda: chat(lambda i: f"*leans* Port {i}, captain? 港口の歌 " * 6, 400))):
        memory = LastTurns(max_bytes=1 << 30)

        def fill():
            turn(memory, make(), True)
            return memory.held_bytes

        rows.append(("last turns", name, *traced(fill, memory.clear)))
    for cache, content, said, freed in rows:
        print(f"| {cache} | {content} | {said / MIB:.2f} MiB | {freed / MIB:.2f} MiB | {said / max(freed, 1):.2f} |")


def real_bodies() -> list:
    out = []
    try:
        import bench_recall
        for _, conv in bench_recall.locomo_conversations()[:5]:
            q = next(q for q in conv["qa"] if q.get("category") in bench_recall.CATEGORIES)
            body, _ = bench_recall.locomo_body(conv, q["question"])
            body["capabilities"] = ["multillm_context_retrieve", "multillm_context_recall"]
            out.append(("LoCoMo " + str(len(out) + 1), json.dumps(body, ensure_ascii=False,
                                                                   separators=(",", ":")).encode()))
    except Exception as e:      # noqa: BLE001 — absent data: said, and the synthetic ones run
        print(f"(LoCoMo not read: {type(e).__name__})")
    for n in (200, 800, 3000):
        body = roleplay_body(n)
        body["capabilities"] = ["multillm_context_retrieve", "multillm_context_recall"]
        out.append((f"roleplay {n}", json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()))
    out.append(("dense (tiny messages)", chat(lambda i: f"m{i}", 10000)))
    return out


def peaks(runtime: str) -> None:
    print(f"\n## {runtime}: a generation turn's peak per body byte (boundary, plan, upstream bytes, kept)")
    print("| chat | body | recall | peak | peak / body | kept after | upstream body |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for name, raw in real_bodies():
        for recalling in (False, True):
            memory = LastTurns(max_bytes=1 << 30)
            STATE.reset()
            gc.collect()
            tracemalloc.start()
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            payload = turn(memory, raw, recalling)
            peak = tracemalloc.get_traced_memory()[1] - base
            size = len(payload)
            del payload
            gc.collect()
            kept = tracemalloc.get_traced_memory()[0] - base
            tracemalloc.stop()
            print(f"| {name} | {len(raw) / MIB:.2f} MiB | {'yes' if recalling else 'no'} | {peak / MIB:.2f} MiB "
                  f"| {peak / len(raw):.2f} | {kept / MIB:.2f} MiB | {size / MIB:.2f} MiB |")
    STATE.reset()


def reranked(runtime: str) -> None:
    """Recall on exchanges of ~30,000 blank lines: what the isolate keeps, turn after turn."""
    print(f"\n## {runtime}: recall over blank-line exchanges, twelve new ones asked for each turn")
    items = []      # 130 exchanges: a body under MAX_REQUEST_BYTES, each exchange one page
    for i in range(130):
        items += [{"role": "user", "content": "\n" * 29000 + f" zq{i}zq"},
                  {"role": "assistant", "content": f"ok {i}"}]
    memory = LastTurns(max_bytes=0)     # no last turn kept: the search's caches alone
    STATE.reset()
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    bytes_ = hasattr(CACHE, "held_bytes")
    print("| turn | the isolate keeps (measured) | analyses cache says | its bound |")
    print("|---:|---:|---:|---:|")
    for t in range(12):
        ask = " ".join(f"zq{(t * 12 + j) % 130}zq" for j in range(12))
        raw = json.dumps({"model": "m", "messages": items + [{"role": "user", "content": ask}],
                          "capabilities": ["multillm_context_retrieve", "multillm_context_recall"]},
                         separators=(",", ":")).encode()
        turn(memory, raw, True)
        del raw
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - base
        said = f"{CACHE.held_bytes() / MIB:.1f} MiB" if bytes_ else f"{CACHE.units / MIB:.2f} Mi units"
        bound = f"{CACHE.bound / MIB:.0f} MiB" if bytes_ else f"{CACHE.bound / MIB:.0f} Mi units"
        print(f"| {t + 1} | {kept / MIB:.1f} MiB | {said} | {bound} |")
    tracemalloc.stop()
    STATE.reset()


def main(runtime: str = "CPython") -> int:
    caches(runtime)
    peaks(runtime)
    if runtime == "CPython" or os.environ.get("BENCH_RERANK"):
        reranked(runtime)
    return 0


if __name__ == "__main__":
    sys.exit(main())
