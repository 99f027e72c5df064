"""Where a steady paged turn's CPU goes, step by step, against the floor (issue 13).

The pure-CPU steps of a steady turn, each timed alone on the same body (the paging
bench's roleplay chat, a 32k-token window so most of the history is paged, as in
``bench_generation.py --cpu``), then the turn itself: the request boundary, the plan,
the upstream bytes and the response annotation. What the Worker also does per turn
(binding calls, the context row, the page-write decisions) is in
``bench_generation.py --cpu``; this bench says which step costs what.

"required" sums the steps the design requires that already run as C calls (one per
body, group or page): the depth check (Pyodide's ``json.loads`` dies on a deep body),
decode + parse, each group's bytes (page bodies and upstream bytes), the pages' SHA-256
and their page ids (an HMAC of that digest, docs/design.md §4). "required / floor" is
the least turn / floor this design reaches with them as they are; "beyond required" is
the Python-level rest (field types, grouping, the plan's bookkeeping, upstream bytes,
annotation).

Rounds are interleaved (every step once per round, 25 rounds, medians), so a noisy
machine shifts all steps alike. Then the same turns on real conversations
(``real_chats``: bench_recall.py's LoCoMo set, read in place; skipped when absent). Usage: ``python bench/bench_turn.py`` (CPython) or
``node bench/pyodide_bench.mjs bench_turn``; ``npm run bench`` runs both.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import statistics
import sys
import time
from functools import partial

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
for path in (SRC, HERE):
    if os.path.isdir(path) and path not in sys.path:
        sys.path.insert(0, path)

from bench_paging import PRINCIPAL, REVISION, SESSION, SIGNER, roleplay_body  # noqa: E402
from multillm_edge import formats  # noqa: E402
from multillm_edge.routes import generation  # noqa: E402
from multillm_edge.core import paging, prepared, recall, resume, validation  # noqa: E402
from multillm_edge.core.last_turns import LastTurns  # noqa: E402
from multillm_edge.search import STATE  # noqa: E402
from multillm_edge.search.corpus import CORPORA  # noqa: E402
from multillm_edge.search.docs import CACHE  # noqa: E402
from multillm_edge.formats.usage import Meter  # noqa: E402

SIZES = (50, 200, 800)
REQUIRED = ("depth check", "decode + parse", "group bytes", "page SHA-256", "page ids")
ROUNDS = 25


def one_turn(raw: bytes, budget: int, figures: dict, recalling: bool = False, cold: bool = False,
             new: bool = False):
    """A steady chat turn's pure-CPU part: the request boundary, the plan (declaring
    recall or not; ``cold``: no exchange analysed yet; ``new``: nor any word stemmed,
    as in a new isolate), the upstream bytes and the response annotation."""
    if cold or new:
        CACHE.clear()
    if new:
        STATE.reset()
    b = validation.parse_request("chat", raw)
    (p,) = paging.plan_candidates("chat", b, [budget], SIGNER.page_ids("roleplay", PRINCIPAL, SESSION, REVISION),
                                  strip=paging.EDGE_FIELDS, recalling=recalling)
    p.encoded("provider-model")
    generation.annotate(b'{"id":"x"}', generation.Turn(pages=p.pages, recalled=p.recall if recalling else None),
                        "chat", figures)


CACHE_CAPS = ["multillm_context_retrieve", "multillm_context_prompt_cache"]
NON_ASCII_ANSWER = json.dumps({"id": "x", "choices": [{"index": 0, "message": {
    "role": "assistant", "content": "\u201cAye,\u201d she says \u2014 the tide\u2019s turning. " * 40}}]},
    ensure_ascii=False).encode()
KEY = ("bench-digest", SESSION, "chat")


def resumed_turn(raw: bytes, budget: int, figures: dict, memory: LastTurns,
                 recalling: bool = False, cache: bool = True, anchored: bool = False):
    """``one_turn`` as the Worker runs it (docs/design.md §5.13): resumed from the session's
    last turn in ``memory`` when it can be, and kept there for the next. ``anchored``:
    its provider declares ``cache_breakpoints`` (the prompt cache's anchors, §5.7)."""
    b, prior = resume.parse_request(memory, KEY, "chat", raw)
    (p,) = paging.plan_candidates("chat", b, [budget], SIGNER.page_ids("roleplay", PRINCIPAL, SESSION, REVISION),
                                  strip=paging.EDGE_FIELDS, recalling=recalling, prompt_cache=cache,
                                  prior=prior, breakpoints=[anchored])
    p.encoded("provider-model")
    generation.annotate(b'{"id":"x"}', generation.Turn(pages=p.pages, recalled=p.recall if recalling else None),
                        "chat", figures)
    resume.keep(memory, KEY, raw, b, prior)
    return p


def new_words(n: int, i: int) -> str:
    """Turn ``i``'s question asking words no turn before it asked (issue 45): two ports'
    numbers (each held by a few exchanges) and a word no exchange holds."""
    return f"*frowns* Port {(37 * i + 11) % n} or {(53 * i + 5) % n}, by the tern{i}? What did the whales sing there?"


BIRDS = "雀鷹鷲鳩燕鴎鶴鷺梟鴉雁鴨鵜鶏雉鶯鵡鸚鷸鴫"


def new_words_ja(n: int, i: int) -> str:
    """``new_words`` for ``bench_paging.roleplay_body_ja``: two ports' numbers and a
    bigram no exchange holds (two birds' kanji, 397 pairs in turn: ``i`` mod a prime, so
    that rounds numbered by thousands ask others), beside bigrams asked before."""
    k = i % 397
    birds = BIRDS[k % 20] + BIRDS[k // 20]
    return f"*眉をひそめる* 港{(37 * i + 11) % n}か港{(53 * i + 5) % n}、{birds}のそばで？鯨はそこで何を歌った？"


def turn_pairs(n: int, budget: int, recalling: bool, cache: bool = True, new: bool = False) -> tuple:
    """Two pairs of consecutive turns of one session near ``n`` exchanges, each the
    second one exchange longer: one between steps (the same exchanges paged), one
    crossing a step (more paged); without the prompt cache the boundary moves anyway.
    ``new``: each turn asks words no turn asked before (``new_words``), else the same."""
    body = roleplay_body(n)
    body["capabilities"] = CACHE_CAPS + (["multillm_context_recall"] if recalling else []) if cache \
        else ["multillm_context_retrieve"] + (["multillm_context_recall"] if recalling else [])
    ask = f"*frowns* Port {n // 10} again? What did the whales sing there?"
    pairs: dict = {}
    raws = []
    for i in range(60):
        body["messages"][-1]["content"] = ((new_words(n, i) if new else ask) if recalling
                                           else "*takes a deep breath* Let's set sail.")
        raws.append(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())
        body["messages"][-1]["content"] = f"*nods* On we go, {i}."
        body["messages"] += [{"role": "assistant", "content": body["messages"][-2]["content"]},
                             {"role": "user", "content": ""}]
    memory = LastTurns()
    fits = [resumed_turn(r, budget, {}, memory, recalling, cache).fit.k for r in raws]
    for i in range(1, len(raws)):
        kind = "steady" if fits[i] == fits[i - 1] else "step"
        pairs.setdefault(kind, (raws[i - 1], raws[i]))
    return pairs.get("steady"), pairs.get("step")


def second_of(pair: tuple, budget: int, figures: dict, recalling: bool = False, cache: bool = True,
              usage: bool = False):
    """The second turn of ``pair`` in an isolate that just ran the first: its seconds
    (``usage``: and its streamed answer's usage metered, issue 44)."""
    memory = LastTurns()
    resumed_turn(pair[0], budget, figures, memory, recalling, cache)
    gc.collect()        # the first turn's garbage is not the second's cost
    t0 = time.perf_counter()
    resumed_turn(pair[1], budget, figures, memory, recalling, cache)
    if usage:
        metered(STREAM_READS, True)
    return time.perf_counter() - t0


# The answer a turn relays, as its reads reach the usage meter (docs/design.md §4.1): a
# 400-token chat stream (an event per token, `"usage":null` in each as some providers
# send, the final usage chunk), two events per read; and the same answer whole.
def _answer_reads() -> tuple[list, list]:
    def event(doc):
        return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"
    events = [event({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                     "choices": [{"index": 0, "delta": {"content": f" word{i}"}, "finish_reason": None}],
                     "usage": None}) for i in range(400)]
    usage = {"prompt_tokens": 28000, "completion_tokens": 400, "prompt_tokens_details": {"cached_tokens": 24000}}
    events += [event({"id": "chatcmpl-1", "choices": [], "usage": usage}), b"data: [DONE]\n\n"]
    stream = [b"".join(events[i:i + 2]) for i in range(0, len(events), 2)]
    whole = json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": " ".join(f"word{i}" for i in range(400))},
         "finish_reason": "stop"}], "usage": usage}).encode()
    return stream, [whole[i:i + 4096] for i in range(0, len(whole), 4096)]


STREAM_READS, JSON_READS = _answer_reads()


def metered(reads: list, sse: bool) -> None:
    """The usage meter over one answer's reads, to its settled figures."""
    m = Meter(formats.get("chat"), sse, 100_000, lambda usage: None)
    for r in reads:
        m.feed(r)
    m.end()


def steps(n: int) -> tuple[dict, int]:
    """name -> zero-argument callable, for an n-exchange body; and its page count."""
    raw = json.dumps(roleplay_body(n), ensure_ascii=False, separators=(",", ":")).encode()
    budget = max(32000, 100 * n) - 1024 - 256       # window - max_tokens - safety
    body = validation.parse_request("chat", raw)
    msgs = body["messages"]
    fmt = formats.get("chat")

    def ids():
        return SIGNER.page_ids("roleplay", PRINCIPAL, SESSION, REVISION)

    prep = prepared.Prepared("chat", body, ids(), strip=paging.EDGE_FIELDS)
    groups, shas = prep.groups, [hashlib.sha256(b).hexdigest() for b in prep.raw]
    (plan,) = paging.plan_candidates("chat", body, [budget], ids(), strip=paging.EDGE_FIELDS)
    turn = generation.Turn(pages=plan.pages)
    # the session's figures a paged answer carries (context_session, docs/design.md §5.11)
    figures = {"active_bytes": sum(len(p.body) for p in plan.pages), "limit_bytes": 1048576,
               "active_pages": len(plan.pages)}

    def whole_turn(data=raw, recalling=False, cold=False, new=False):
        one_turn(data, budget, figures, recalling, cold, new)

    # the same turn declaring recall (docs/design.md §6.2), its player asking about an
    # early port: the turn ranks every paged exchange and quotes the best
    asked = roleplay_body(n)
    asked["messages"][-1]["content"] = f"*frowns* Port {n // 10} again? What did the whales sing there?"
    asked["capabilities"] = ["multillm_context_retrieve", "multillm_context_recall"]
    recall_raw = json.dumps(asked, ensure_ascii=False, separators=(",", ":")).encode()

    steady, step = turn_pairs(n, budget, False)
    steady_recall, _ = turn_pairs(n, budget, True)
    steady_new, _ = turn_pairs(n, budget, True, new=True)
    moving, _ = turn_pairs(n, budget, False, cache=False)
    # the pair's full path: its second turn in a new isolate (the prompt cache declared too)
    memory_less = steady[1]

    return {
        "floor": lambda: hashlib.sha256(json.dumps(json.loads(raw), ensure_ascii=False,
                                                   separators=(",", ":")).encode()).hexdigest(),
        "depth check": lambda: validation._nests_deeper(validation._brackets(raw), validation.MAX_DEPTH),
        "decode + parse": lambda: json.loads(raw.decode("utf-8")),
        "field types": lambda: validation.check_body("chat", body),
        "grouping": lambda: formats.group_items(msgs, fmt.classify),
        "group bytes": lambda: prepared._group_bytes(msgs, groups),
        "page SHA-256": lambda: [hashlib.sha256(b).hexdigest() for b in prep.raw],
        "page ids": lambda: list(map(ids(), shas)),
        "plan": lambda: paging.plan_candidates("chat", body, [budget], ids(), strip=paging.EDGE_FIELDS),
        "upstream bytes": lambda: plan.encoded("provider-model"),
        "annotation": lambda: generation.annotate(b'{"id":"x"}', turn, "chat", figures),
        # a roleplay answer's text is rarely ASCII (curly quotes, dashes): the page list
        # beside it is encoded alone, never widened to its width (issue 45's twelfth pass)
        "annotation, non-ASCII answer": lambda: generation.annotate(NON_ASCII_ANSWER, turn, "chat", figures),
        "turn": whole_turn,
        # issue 44: the turn and its answer's usage, read as it is relayed
        "usage meter, stream": lambda: metered(STREAM_READS, True),
        "usage meter, JSON": lambda: metered(JSON_READS, False),
        "turn + usage (stream)": lambda: (whole_turn(), metered(STREAM_READS, True)),
        "turn + recall, warm": lambda: whole_turn(recall_raw, True),
        "turn + recall, cold": lambda: whole_turn(recall_raw, True, cold=True),
        "turn + recall, new isolate": lambda: whole_turn(recall_raw, True, new=True),
        **recall_ranking(recall_raw, budget, ids()),
        # issue 40: the second of two consecutive turns of one session in one isolate, the
        # first resumed from a full-path turn (it verifies the kept body once); a session's
        # later turns: bench_turn_chain.py (its table below)
        "pair, first isolate turn": lambda: resumed_turn(memory_less, budget, figures, LastTurns()) and None,
        "first resumed turn": lambda: second_of(steady, budget, figures),
        "first resumed turn + usage (stream)": lambda: second_of(steady, budget, figures, usage=True),
        "first resumed + recall, warm": lambda: second_of(steady_recall, budget, figures, True),
        "first resumed + recall, new words": lambda: second_of(steady_new, budget, figures, True),
        "first turn after a step": lambda: second_of(step, budget, figures),
        "first resumed, no prompt cache": lambda: second_of(moving, budget, figures, cache=False),
    }, len(plan.pages)


def recall_ranking(raw: bytes, budget: int, page_id_for) -> dict:
    """Recall's choice alone (docs/design.md §6.2) over one paged prefix, every query
    new (another port's number; its other words met before): "first", its corpus made
    (the exchanges' analyses cached: a session's first recalling turn here); "steady",
    the corpus kept from the turn before (a next turn between steps); "grown", that
    corpus one exchange short (a turn without the prompt cache: one more paged)."""
    b = validation.parse_request("chat", raw)
    prep = prepared.Prepared("chat", b, page_id_for, strip=paging.EDGE_FIELDS)
    fit = paging._fit(prep, budget - paging._recall_room(budget), paging.block_rule(paging.MAX_PAGE_BYTES))
    paged, asked = paging._paged_exchanges(prep, fit), iter(range(1 << 30))

    def choose(how: str):
        if how == "first":
            CORPORA.clear()
        elif how == "grown" and CORPORA.kept:     # its last exchange appended again
            CORPORA.kept[-1].cut(len(paged) - 1)
        query = f"*frowns* Port {next(asked) % len(paged)} again? What did the whales sing there?"
        recall.choose(query, paged, None, recall.MAX_BYTES, paging._recall_size)
    return {f"recall ranking, {how}": partial(choose, how) for how in ("first", "grown", "steady")}


def measure(n: int) -> tuple[dict, int]:
    fns, pages = steps(n)
    times = {k: [] for k in fns}
    for _ in range(ROUNDS):
        for k, f in fns.items():
            t0 = time.perf_counter()
            own = f()       # a step timing only its own part says so (``second_of``)
            times[k].append(own if type(own) is float else time.perf_counter() - t0)
    return {k: statistics.median(v) * 1000 for k, v in times.items()}, pages


def main(runtime: str = "CPython") -> int:
    results = {n: measure(n) for n in SIZES}
    print(f"turn bench — {runtime} {sys.version.split()[0]} (ms, medians of {ROUNDS} interleaved rounds)")
    print("| step | " + " | ".join(f"{n:,} exchanges ({results[n][1]} pages)" for n in SIZES) + " |")
    print("|---|" + "---:|" * len(SIZES))
    for step in results[SIZES[0]][0]:
        print(f"| {step} | " + " | ".join(f"{results[n][0][step]:.2f}" for n in SIZES) + " |")

    def row(name, figure):
        print(f"| {name} | " + " | ".join(figure(results[n][0]) for n in SIZES) + " |")

    def ratio(label: str, over: str, under: str):
        row(label, lambda r: f"{r[over] / r[under]:.2f}")

    def required(r):
        return sum(r[k] for k in REQUIRED)

    row("required steps (sum)", lambda r: f"{required(r):.2f}")
    ratio("turn / floor", "turn", "floor")
    row("required / floor", lambda r: f"{required(r) / r['floor']:.2f}")
    row("beyond required / floor", lambda r: f"{(r['turn'] - required(r)) / r['floor']:.2f}")
    # recall's targets (issue 26): warm ≤ 1.5 × the turn, cold ≤ 4 ×
    ratio("recall warm / turn", "turn + recall, warm", "turn")
    ratio("recall cold / turn", "turn + recall, cold", "turn")
    ratio("recall new isolate / turn", "turn + recall, new isolate", "turn")
    ratio("recall ranking, steady / first", "recall ranking, steady", "recall ranking, first")
    ratio("recall ranking, grown / first", "recall ranking, grown", "recall ranking, first")
    # issue 40's targets (Pyodide): steady ≤ 0.5 × floor at 200, ≤ 0.25 × at 800;
    # with recall, warm ≤ 1.0 × floor
    ratio("first resumed / floor", "first resumed turn", "floor")
    ratio("first resumed + recall warm / floor", "first resumed + recall, warm", "floor")
    ratio("first resumed + recall, new words / floor", "first resumed + recall, new words", "floor")
    ratio("after a step / floor", "first turn after a step", "floor")
    ratio("first resumed, no prompt cache / floor", "first resumed, no prompt cache", "floor")
    ratio("first resumed / the same turn in a new isolate", "first resumed turn", "pair, first isolate turn")
    growth(runtime)
    print()
    import bench_turn_chain     # a session's steady turns: the 3rd+ resumed of a chain
    bench_turn_chain.main(runtime)
    corpus_memory(runtime)
    # issue 44's target: a turn with its answer's usage metered within +5 % of the turn
    ratio("turn + usage / turn", "turn + usage (stream)", "turn")
    ratio("first resumed turn + usage / first resumed turn", "first resumed turn + usage (stream)", "first resumed turn")
    real_chats(runtime)
    sys.stdout.flush()
    return 0


GROWTH_SIZES = (200, 800, 3000)


def growth(runtime: str) -> None:
    """Issue 45's targets: the first resumed turns alone at 200, 800 and 3,000 exchanges
    (the second of a pair, as above; a session's later turns: bench_turn_chain.py), interleaved rounds, each size's ratio to 200's."""
    rows = {"first resumed turn": (False, False), "first resumed + recall, warm": (True, False),
            "first resumed + recall, new words": (True, True)}
    fns = {}
    for n in GROWTH_SIZES:
        budget = max(32000, 100 * n) - 1024 - 256
        figures = {"active_bytes": 1, "limit_bytes": 1048576, "active_pages": 1}
        for name, (recalling, new) in rows.items():
            pair, _ = turn_pairs(n, budget, recalling, new=new)
            fns[(name, n)] = partial(second_of, pair, budget, figures, recalling)
    times = {k: [] for k in fns}
    for _ in range(ROUNDS):
        for k, f in fns.items():
            times[k].append(f())
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    print(f"\nfirst resumed turns by length — {runtime} (ms, medians of {ROUNDS} interleaved rounds; × the one at 200)")
    print("| turn | " + " | ".join(f"{n:,}" for n in GROWTH_SIZES) + " | " + " | ".join(
        f"{n:,} / 200" for n in GROWTH_SIZES[1:]) + " |")
    print("|---|" + "---:|" * (2 * len(GROWTH_SIZES) - 1))
    for name in rows:
        base = med[(name, GROWTH_SIZES[0])]
        print(f"| {name} | " + " | ".join(f"{med[(name, n)]:.2f}" for n in GROWTH_SIZES) + " | "
              + " | ".join(f"{med[(name, n)] / base:.2f}" for n in GROWTH_SIZES[1:]) + " |")


def corpus_memory(runtime: str) -> None:
    """What recall's corpus of an 800- and a 3,000-exchange session holds (issue 45.5):
    its ``held_bytes`` and, where tracemalloc runs, what dropping it frees once the
    isolate's other memos are emptied (the analyses' word counts then its own), and
    all recall made (analyses, vocabulary, corpus) before that."""
    try:
        import tracemalloc
    except ImportError:         # pragma: no cover — a runtime without it: held_bytes alone
        tracemalloc = None
    print(f"\nrecall's corpus by session length — {runtime} (the paged exchanges of the roleplay chat; bytes)")
    print("| exchanges | paged | held_bytes | freed when dropped | all recall made | held / freed |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in (800, 3000):
        budget = max(32000, 100 * n) - 1024 - 256
        b = validation.parse_request("chat", json.dumps(roleplay_body(n), ensure_ascii=False).encode())
        prep = prepared.Prepared("chat", b, SIGNER.page_ids("roleplay", PRINCIPAL, SESSION, REVISION),
                                 strip=paging.EDGE_FIELDS)
        fit = paging._fit(prep, budget - paging._recall_room(budget), paging.block_rule(paging.MAX_PAGE_BYTES))
        paged = paging._paged_exchanges(prep, fit)
        STATE.reset()
        gc.collect()
        if tracemalloc:
            tracemalloc.start()
        for q in ("*frowns* Port 7 again? What did the whales sing there?", "The thunder and the velvet, captain?"):
            recall.choose(q, paged, None, recall.MAX_BYTES, paging._recall_size)
        held = CORPORA.held_bytes()
        made = freed = None
        if tracemalloc:
            made = tracemalloc.get_traced_memory()[0]
            for part in STATE._parts.values():
                if part is not CORPORA:
                    part.clear()
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            CORPORA.clear()
            gc.collect()
            freed = before - tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
        STATE.reset()
        print(f"| {n:,} | {len(paged):,} | {held:,} | {freed if freed is not None else '—':,} | "
              f"{made if made is not None else '—':,} | {held / freed if freed else float('nan'):.2f} |")


REAL_QUESTIONS = 8      # per conversation: its first questions, each the player's latest turn


def real_chats(runtime: str) -> None:
    """The same four turns on real conversations (bench_recall's LoCoMo set, read in
    place; said and skipped when absent): each conversation as one chat whose latest user
    message is one of its questions, on bench_recall's 32k window; ms summed over all."""
    import bench_recall
    conversations = bench_recall.locomo_conversations()
    if not conversations:
        print(f"\nreal chats: LoCoMo not found at {bench_recall.LOCOMO}: skipped")
        return
    bodies = []
    for _, conv in conversations:
        for q in [q for q in conv["qa"] if q.get("category") in bench_recall.CATEGORIES][:REAL_QUESTIONS]:
            body, _ = bench_recall.locomo_body(conv, q["question"])
            bodies.append((json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(),
                           json.dumps({**body, "capabilities": ["multillm_context_retrieve", "multillm_context_recall"]},
                                      ensure_ascii=False, separators=(",", ":")).encode()))
    figures = {"active_bytes": 1, "limit_bytes": 1048576, "active_pages": 1}

    def one(raw: bytes, recalling: bool, cold: bool = False, new: bool = False):
        one_turn(raw, bench_recall.BUDGET, figures, recalling, cold, new)

    times = {"turn": 0.0, "warm": 0.0, "cold": 0.0, "new": 0.0}
    for plain, asked in bodies:
        one(asked, True)                # its analyses made: the warm turn follows a turn
        for _ in range(5):
            for key, f in (("turn", lambda: one(plain, False)), ("warm", lambda: one(asked, True)),
                           ("cold", lambda: one(asked, True, True)), ("new", lambda: one(asked, True, new=True))):
                t0 = time.perf_counter()
                f()
                times[key] += time.perf_counter() - t0
    n = len(bodies) * 5
    print(f"\nreal chats — {runtime}: {len(conversations)} LoCoMo conversations, {len(bodies)} questions, "
          f"each the latest user message (ms per turn, means of 5 interleaved rounds)")
    print("| turn | turn + recall, warm | turn + recall, cold | turn + recall, new isolate "
          "| warm / turn | cold / turn | new isolate / turn |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {times['turn'] / n * 1000:.2f} | {times['warm'] / n * 1000:.2f} | {times['cold'] / n * 1000:.2f} "
          f"| {times['new'] / n * 1000:.2f} | {times['warm'] / times['turn']:.2f} | {times['cold'] / times['turn']:.2f} "
          f"| {times['new'] / times['turn']:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
