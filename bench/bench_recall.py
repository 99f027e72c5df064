"""Recall of the page search over paged roleplay, and its CPU (issue 18 items 6 and 7).

The corpus (bench/recall_corpus.py: 3 seeded conversations, English/Chat,
Russian/Responses, Japanese/Messages, 520 exchanges each, 342 questions by rule) goes
through the real paging (``paging.plan_candidates`` with the production ``PageSigner``,
a 48 KB budget so all but the last few dozen exchanges are paged). Each question's
answer page is the page whose message texts hold its needle (by content, so pages of
several exchanges work too). Recall@1/5/10 for:

- position: the k oldest, and the k newest, stored pages (what the model has today);
- plain BM25: ``search(..., stem=False, extras=False)``;
- search: ``multillm_edge.search.search`` as the route runs it.

CPU: per session, its newest pages up to 1 MiB; the floor is what verifying
them costs (SHA-256 + UTF-8 decode + ``json.loads`` of every page body); the search is
``page_texts`` of every page's parsed items + ``search``, per question (median of the
first 24 questions, 5 rounds). Target: (floor + search) / floor ≤ 8.
Usage: ``python bench/bench_recall.py`` or ``node bench/pyodide_bench.mjs bench_recall``.
Exit status non-zero when a recall target is missed (R@5 ≥ 0.95 all, ≥ 0.85 name-only).
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
for path in (SRC, HERE):
    if os.path.isdir(path) and path not in sys.path:
        sys.path.insert(0, path)

import recall_corpus  # noqa: E402
from bench_paging import PRINCIPAL, REVISION, SESSION, SIGNER  # noqa: E402
from multillm_edge.core import paging, validation  # noqa: E402
from multillm_edge.search import page_texts, search  # noqa: E402

BUDGET = 48_000
KS = (1, 5, 10)
MIB = 1 << 20


def paged(fmt: str, body: dict) -> list:
    raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    parsed = validation.parse_request(fmt, raw)
    ids = SIGNER.page_ids("roleplay", PRINCIPAL, SESSION, REVISION)
    (plan,) = paging.plan_candidates(fmt, parsed, [BUDGET], ids, strip=paging.EDGE_FIELDS)
    return plan.pages


def answer_page(needle: str, texts: list):
    found = [i for i, ts in enumerate(texts) if any(needle in t for _, t in ts)]
    return found[0] if len(found) == 1 else None


def rankers(n_pages: int):
    return {
        "position: oldest": lambda q, texts: list(range(10)),
        "position: newest": lambda q, texts: list(range(n_pages - 1, n_pages - 11, -1)),
        "plain BM25": lambda q, texts: [h.page for h in search(q, texts, 10, stem=False, extras=False)],
        "search": lambda q, texts: [h.page for h in search(q, texts, 10)],
    }


def recall(runs) -> dict:
    """{(method, kind): [hits@1, @5, @10, count]}."""
    table: dict = {}
    for fmt, pages, questions in runs:
        texts = [page_texts(p.items) for p in pages]
        for name, rank in rankers(len(pages)).items():
            for q, ans in questions:
                got = rank(q.text, texts)
                for key in ((name, "all"), (name, q.kind)):
                    row = table.setdefault(key, [0, 0, 0, 0])
                    for j, k in enumerate(KS):
                        row[j] += ans in got[:k]
                    row[3] += 1
    return table


def cpu(pages, questions, rounds: int = 5) -> dict:
    chosen, total = [], 0
    for p in reversed(pages):
        if total + len(p.body) > MIB:
            break
        chosen.append(p)
        total += len(p.body)
    chosen.reverse()
    bodies = [p.body for p in chosen]

    def floor():
        return [json.loads(b.decode("utf-8")) for b in bodies if hashlib.sha256(b).digest()]

    items = floor()
    qs = [q.text for q, _ in questions[:24]]
    t_floor, t_search = [], []
    for _ in range(rounds):
        for q in qs:
            t0 = time.perf_counter()
            floor()
            t1 = time.perf_counter()
            search(q, [page_texts(it) for it in items], 5)
            t2 = time.perf_counter()
            t_floor.append(t1 - t0)
            t_search.append(t2 - t1)
    f, s = statistics.median(t_floor) * 1000, statistics.median(t_search) * 1000
    return {"pages": len(chosen), "bytes": total, "floor": f, "search": s, "ratio": (f + s) / f}


def main(runtime: str = "CPython") -> int:
    runs = []
    for fmt, body, questions in recall_corpus.corpus():
        pages = paged(fmt, body)
        texts = [page_texts(p.items) for p in pages]
        qa = [(q, answer_page(q.needle, texts)) for q in questions]
        runs.append((fmt, pages, [(q, a) for q, a in qa if a is not None]))
        print(f"{fmt}: {len(pages)} pages, {sum(len(p.body) for p in pages):,} bytes paged, "
              f"{sum(a is not None for _, a in qa)}/{len(qa)} questions answered in a page")
    table = recall(runs)
    print(f"\nrecall bench — {runtime} {sys.version.split()[0]}")
    kinds = ("all",) + recall_corpus.KINDS
    print("| method | questions | " + " | ".join(f"R@{k}" for k in KS) + " |")
    print("|---|---|" + "---:|" * len(KS))
    for method in rankers(1):
        for kind in kinds:
            h1, h5, h10, n = table[(method, kind)]
            print(f"| {method} | {kind} ({n}) | {h1 / n:.3f} | {h5 / n:.3f} | {h10 / n:.3f} |")
    print(f"\nsearch CPU — {runtime} (the newest pages up to 1 MiB; ms, medians over 24 questions x 5)")
    print("| session | pages | bytes | floor: SHA-256 + decode + json.loads | page_texts + search | (floor + search) / floor |")
    print("|---|---:|---:|---:|---:|---:|")
    for fmt, pages, questions in runs:
        c = cpu(pages, questions)
        print(f"| {fmt} | {c['pages']} | {c['bytes']:,} | {c['floor']:.1f} | {c['search']:.1f} | {c['ratio']:.2f} |")
    ok = table[("search", "all")][1] / table[("search", "all")][3] >= 0.95 and \
        table[("search", "name")][1] / table[("search", "name")][3] >= 0.85
    sys.stdout.flush()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
