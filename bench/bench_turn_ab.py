"""Before/after of the steady turns on a noisy machine: two source trees in one process
(issue 45). ``bench_ab.py`` does it for a new isolate's turn; this does it for the turns
``bench_turn.py`` calls steady — the second of two consecutive turns of one session in
one isolate, plain, recalling the same question, and recalling words no turn asked
before (``bench_turn.new_words``: each round asks new ones) — and for a new isolate's
turn with recall against the same turn without it.

Each tree is imported as its own package (it imports relatively), its steady pairs
found as ``bench_turn.turn_pairs`` finds them; rounds alternate the trees (ABBA),
medians of CPU time (CPython; Pyodide's clock is the wall's); each figure's after /
before is measured in one run, and each tree's ratios between sizes too. The "first
resumed" rows are bench_turn's steady pair (the second turn of a pair: the first one
resumed from a full-path turn); the "chain" rows a production session's steady turns
(bench_turn_chain.py: the 3rd+ resumed of a chain); the "Russian chat" and
"Japanese chat" rows those turns on ``bench_paging.roleplay_body_ru`` (most characters
not ASCII) and ``roleplay_body_ja`` (CJK: its terms bigrams; new words
``bench_turn.new_words_ja``). Usage:

    python bench/bench_turn_ab.py BEFORE/src/multillm_edge AFTER/src/multillm_edge
    AB_BEFORE=BEFORE/src/multillm_edge node bench/pyodide_bench.mjs bench_turn_ab
"""

from __future__ import annotations

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

from bench_paging import roleplay_body, roleplay_body_ja, roleplay_body_ru  # noqa: E402
from bench_turn import CACHE_CAPS, new_words, new_words_ja  # noqa: E402
from bench_turn_chain import ASK as CHAIN_ASK, FROM, PLAIN, TURNS, chain_bodies  # noqa: E402

#: AB_SIZES (e.g. "200,800") runs fewer
SIZES = tuple(int(x) for x in os.environ.get("AB_SIZES", "").split(",") if x) or (200, 800, 3000)
ROUNDS = {200: 15, 800: 15, 3000: 5}
#: AB_WINDOW (tokens, e.g. 32000): one window at every size, so that what grows is the
#: history alone; else the benches' own, growing with it (max(32,000, 100 a exchange))
WINDOW = int(os.environ.get("AB_WINDOW") or 0)
#: (at 3,000 exchanges a session's turn is kept held once, its items as bytes: issue 45's
#: seventh pass in bench/README.md; before it, no turn was kept there and every turn took the full path)
CHAIN_SIZES = (200, 800, 3000)
ASK = "*frowns* Port {} again? What did the whales sing there?"
ASK_RU = "*хмурится* Снова порт {}? Что там пели киты?"
ASK_JA = "*眉をひそめる* また港{}？そこで鯨は何を歌った？"
#: CPU seconds where the process has its own clock (CPython on Linux: a loaded machine
#: shares its cores), else the wall clock (Pyodide).
CLOCK = time.perf_counter if sys.platform == "emscripten" else time.process_time


class Tree:
    """One tree's modules, imported as package ``name``."""

    def __init__(self, src: str, name: str, into: str):
        shutil.copytree(src, os.path.join(into, name), ignore=shutil.ignore_patterns("__pycache__"))
        for m in ("core.paging", "core.validation", "core.pages", "core.resume", "core.last_turns",
                  "search", "search.docs"):
            setattr(self, m.split(".")[-1], importlib.import_module(f"{name}.{m}"))
        self.signer = self.pages.PageSigner(b"bench-signing-secret-of-some-length")

    def turn(self, memory, raw: bytes, budget: int, recalling: bool, anchored: bool = False):
        """A turn as the Worker runs it (docs/design.md §5.13): resumed when it can be,
        kept for the next; the request boundary, the plan and the upstream bytes.
        ``anchored``: to a provider declaring ``cache_breakpoints`` (the anchors, §5.7)."""
        key = ("digest", "rps_bench", "chat")
        body, prior = self.resume.parse_request(memory, key, "chat", raw)
        (plan,) = self.paging.plan_candidates(
            "chat", body, [budget], self.signer.page_ids("roleplay", "a" * 64, "rps_bench", 1),
            strip=self.paging.EDGE_FIELDS, recalling=recalling, prompt_cache=True, prior=prior,
            breakpoints=[anchored])
        plan.encoded("provider-model")
        self.resume.keep(memory, key, raw, body, prior)
        return plan

    def second(self, pair: tuple, budget: int, recalling: bool) -> float:
        """Seconds of ``pair``'s second turn right after its first, in this isolate."""
        memory = self.last_turns.LastTurns()
        self.turn(memory, pair[0], budget, recalling)
        gc.collect()
        t0 = CLOCK()
        self.turn(memory, pair[1], budget, recalling)
        return CLOCK() - t0

    def chain(self, bodies: list, budget: int, recalling: bool, anchored: bool = False,
              steps: bool = False) -> float:
        """Seconds of a chain's steady turns from ``FROM`` on (bench_turn_chain.py: the
        3rd+ resumed, each body the last plus an exchange), their median; ``steps``: of
        its turns that cross a step instead (more paged than the turn before; NaN when
        none does)."""
        memory, fits, times = self.last_turns.LastTurns(), [], []
        for k, raw in enumerate(bodies):
            gc.collect()
            t0 = CLOCK()
            fit = self.turn(memory, raw, budget, recalling, anchored).fit.k
            dt = CLOCK() - t0
            fits.append(fit)
            if k >= FROM and (fits[-1] != fits[-2]) == steps:
                times.append(dt)
        return statistics.median(times) if times else float("nan")

    def new_isolate(self, raw: bytes, budget: int, recalling: bool) -> float:
        """Seconds of ``raw``'s turn in a new isolate (nothing kept, nothing analysed)."""
        self.search.STATE.reset()
        self.docs.CACHE.clear()
        gc.collect()
        t0 = CLOCK()
        self.turn(self.last_turns.LastTurns(), raw, budget, recalling)
        return CLOCK() - t0


def pairs(tree: Tree, n: int, budget: int, recalling: bool, new: bool) -> tuple:
    """The first steady pair (the same exchanges paged both turns) of a session near
    ``n`` exchanges, each turn one exchange longer; its second turn's question."""
    body = roleplay_body(n)
    body["capabilities"] = CACHE_CAPS + (["multillm_context_recall"] if recalling else [])
    memory, last, raws = tree.last_turns.LastTurns(), None, []
    for i in range(60):
        q = (new_words(n, i) if new else ASK.format(n // 10)) if recalling else "*takes a deep breath* Let's set sail."
        body["messages"][-1]["content"] = q
        raws.append((json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(), q))
        k = tree.turn(memory, raws[-1][0], budget, recalling).fit.k
        if last == k:
            return raws[-2][0], raws[-1][0], q
        last = k
        body["messages"][-1]["content"] = f"*nods* On we go, {i}."
        body["messages"] += [{"role": "assistant", "content": body["messages"][-2]["content"]},
                             {"role": "user", "content": ""}]
    raise RuntimeError(f"no steady pair at {n} exchanges")


def main(runtime: str = "CPython", before: str | None = None, after: str | None = None) -> int:
    before = before or (sys.argv[1] if len(sys.argv) > 2 else os.environ.get("AB_BEFORE_TREE"))
    after = after or (sys.argv[2] if len(sys.argv) > 2 else os.environ.get("AB_AFTER_TREE"))
    into = tempfile.mkdtemp()
    sys.path.insert(0, into)
    trees = {"before": Tree(before, "edge_before", into), "after": Tree(after, "edge_after", into)}
    rows = ("first resumed turn", "first resumed + recall, warm", "first resumed + recall, new words",
            "steady turn, chain", "steady turn, chain, anchors", "steady + recall, new words, chain",
            "recall, new words, chain, a turn crossing a step",
            "turn, new isolate", "turn + recall, new isolate",
            "turn, new isolate, Russian chat", "turn + recall, new isolate, Russian chat",
            "steady + recall, new words, chain, Japanese chat",
            "turn, new isolate, Japanese chat", "turn + recall, new isolate, Japanese chat")
    chained = ("steady turn, chain", "steady turn, chain, anchors", "steady + recall, new words, chain",
               "recall, new words, chain, a turn crossing a step",
               "steady + recall, new words, chain, Japanese chat")
    med: dict = {}
    for n in SIZES:
        budget = (WINDOW or max(32000, 100 * n)) - 1024 - 256
        asked = roleplay_body(n)
        asked["messages"][-1]["content"] = ASK.format(n // 10)
        plain_raw = json.dumps(roleplay_body(n), ensure_ascii=False, separators=(",", ":")).encode()
        asked["capabilities"] = ["multillm_context_retrieve", "multillm_context_recall"]
        asked_raw = json.dumps(asked, ensure_ascii=False, separators=(",", ":")).encode()
        # the same in Russian: a text most of whose characters are not ASCII
        plain_ru = json.dumps(roleplay_body_ru(n), ensure_ascii=False, separators=(",", ":")).encode()
        asked_ru = roleplay_body_ru(n)
        asked_ru["messages"][-1]["content"] = ASK_RU.format(n // 10)
        asked_ru["capabilities"] = asked["capabilities"]
        asked_ru = json.dumps(asked_ru, ensure_ascii=False, separators=(",", ":")).encode()
        # and in Japanese: no spaces, its terms CJK bigrams
        plain_ja = json.dumps(roleplay_body_ja(n), ensure_ascii=False, separators=(",", ":")).encode()
        asked_ja = roleplay_body_ja(n)
        asked_ja["messages"][-1]["content"] = ASK_JA.format(n // 10)
        asked_ja["capabilities"] = asked["capabilities"]
        asked_ja = json.dumps(asked_ja, ensure_ascii=False, separators=(",", ":")).encode()
        fns = {}
        chains = {r: chain_bodies(n, r) for r in (False, True)} if n in CHAIN_SIZES else {}
        if chains:
            chains["ja"] = chain_bodies(n, True, roleplay_body_ja)

        def chain_of(t, recalling, anchored=False, ja=False, steps=False, r=[0]):   # every round its own new words
            r[0] += 1
            words = new_words_ja if ja else new_words
            asks = [json.dumps(words(n, 1000 * r[0] + i) if recalling else PLAIN, ensure_ascii=False).encode()
                    for i in range(TURNS)]
            return t.chain([b.replace(CHAIN_ASK, a) for b, a in zip(chains["ja" if ja else recalling], asks)],
                           budget, recalling, anchored, steps)
        for name, tree in trees.items():
            plain = pairs(tree, n, budget, False, False)
            warm = pairs(tree, n, budget, True, False)
            new = pairs(tree, n, budget, True, True)

            def newly(t=tree, p=new, r=[0]):      # a new question each round
                r[0] += 1
                second = p[1].replace(json.dumps(p[2], ensure_ascii=False).encode(),
                                      json.dumps(new_words(n, 1000 + r[0]), ensure_ascii=False).encode())
                return t.second((p[0], second), budget, True)
            fns[name] = {
                "first resumed turn": lambda t=tree, p=plain: t.second(p, budget, False),
                "first resumed + recall, warm": lambda t=tree, p=warm: t.second(p, budget, True),
                "first resumed + recall, new words": newly,
                "steady turn, chain": lambda t=tree: chain_of(t, False),
                "steady turn, chain, anchors": lambda t=tree: chain_of(t, False, True),
                "steady + recall, new words, chain": lambda t=tree: chain_of(t, True),
                "recall, new words, chain, a turn crossing a step": lambda t=tree: chain_of(t, True, steps=True),
                "turn, new isolate": lambda t=tree: t.new_isolate(plain_raw, budget, False),
                "turn + recall, new isolate": lambda t=tree: t.new_isolate(asked_raw, budget, True),
                "turn, new isolate, Russian chat": lambda t=tree: t.new_isolate(plain_ru, budget, False),
                "turn + recall, new isolate, Russian chat": lambda t=tree: t.new_isolate(asked_ru, budget, True),
                "steady + recall, new words, chain, Japanese chat": lambda t=tree: chain_of(t, True, ja=True),
                "turn, new isolate, Japanese chat": lambda t=tree: t.new_isolate(plain_ja, budget, False),
                "turn + recall, new isolate, Japanese chat": lambda t=tree: t.new_isolate(asked_ja, budget, True),
            }
        times = {(k, row): [] for k in trees for row in rows}
        for r in range(ROUNDS[n]):
            for row in rows:
                if row in chained and not chains:
                    continue
                for k in (("before", "after") if r % 2 == 0 else ("after", "before")):
                    times[(k, row)].append(fns[k][row]())
        for key, v in times.items():
            v = [x for x in v if x == x]        # a chain with no turn crossing a step: none
            med[key + (n,)] = statistics.median(v) * 1000 if v else float("nan")
        gc.collect()
    window = f"a {WINDOW:,}-token window at every size; " if WINDOW else ""
    print(f"steady turns, before / after in one run — {runtime} {sys.version.split()[0]} "
          f"({window}ms, medians of " + ", ".join(f"{ROUNDS[n]} rounds at {n:,}" for n in SIZES) + ", ABBA)")
    print("| turn | exchanges | before | after | after / before |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        for n in SIZES:
            b, a = med[("before", row, n)], med[("after", row, n)]
            print(f"| {row} | {n:,} | {b:.2f} | {a:.2f} | {a / b:.2f} |")
    print("\n| ratio | before | after |")
    print("|---|---:|---:|")
    for row in ("first resumed turn", "first resumed + recall, warm", "first resumed + recall, new words",
                *chained):
        for n in SIZES[1:] if 200 in SIZES else ():      # (AB_SIZES without 200: no ratios to it)
            print(f"| {row}, {n:,} / 200 | " + " | ".join(
                f"{med[(k, row, n)] / med[(k, row, 200)]:.2f}" for k in trees) + " |")
    for n in [n for n in SIZES if n in CHAIN_SIZES]:
        print(f"| new isolate, recall / none, {n:,} | " + " | ".join(
            f"{med[(k, 'turn + recall, new isolate', n)] / med[(k, 'turn, new isolate', n)]:.2f}" for k in trees) + " |")
        for lang in ("Russian", "Japanese"):
            print(f"| new isolate, recall / none, {n:,}, {lang} chat | " + " | ".join(
                f"{med[(k, f'turn + recall, new isolate, {lang} chat', n)] / med[(k, f'turn, new isolate, {lang} chat', n)]:.2f}"
                for k in trees) + " |")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
