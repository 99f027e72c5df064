"""Recall of the exchange search on real and synthetic conversations, and its CPU
(issue 25; docs/design.md §6.1, §6.2; bench/README.md).

Usage: ``python bench/bench_recall.py [--no-cpu] [--recall-mode]`` or
``node bench/pyodide_bench.mjs bench_recall`` (the baseline and the search only: the
ablation is slow there; the real conversations reach Pyodide through its in-memory file
system, written by pyodide_bench.mjs from the host's file, never from the repository).

Real set: the LoCoMo conversations of ``$LOCOMO_ZIP`` (default
``../shared/data/locomo-dev.zip`` next to the repository; read in place, never copied;
absent → said, and the synthetic set goes on alone). Each conversation is one chat
history (OpenAI Chat): speaker A is ``user``, speaker B ``assistant``; every turn is a
``Name: text`` line (an image turn ends with ``[shares a photo: <caption>]``);
consecutive lines of one speaker are one message (joined with ``\\n``); a session's
first line is preceded by the line ``[date: <session date>]``. The body goes through
the real paging (``paging.plan_candidates``, production ``PageSigner``) for a 32k-token
model: budget = 32,768 window − 1,024 output reservation (the body's ``max_tokens``)
− 256 safety tokens (the default ``CONTEXT_SAFETY_TOKENS``) = 31,488, compared with
the body's UTF-8 bytes as the edge does (planning.candidates). The documents are the
paged exchanges (``formats.exchange_starts`` of each page, ``page_texts`` of each
exchange, an exchange stored twice counted once), oldest first. Every question of
categories 1-4 with an evidence turn in a paged exchange is a query; a hit is a ranked
exchange holding an evidence line (``Name: text``).

Synthetic set: bench/recall_corpus.py (English/Chat, Russian/Responses,
Japanese/Messages), paged the same way; a hit holds the question's needle.

Rankers: position (newest paged exchanges first), plain BM25, stemmed BM25 (the fair
baseline), the search (``rank`` with its default ``Scoring``) and the search with each
part removed (the ablation); then the search's R@5 misses on the real set, by what the
evidence shares with the question (``miss_anatomy``). ``--recall-mode`` adds
auto-recall: the question is the latest user message of the whole conversation, the
request is planned again, the exchanges it pages are ranked, and the top 3 at or above
``MIN_RELEVANCE`` are recalled.

CPU (``--no-cpu`` skips): the synthetic English session's newest pages up to 1 MiB;
the floor is verifying them (SHA-256 + UTF-8 decode + ``json.loads`` of each body); a
search is what the route runs (exchange texts of every page + ``rank``), for typical
questions, a 1,000-character query and a stop-words-only query. Targets: any query
≤ 3× a typical one, (floor + search) / floor ≤ 8. Exit status non-zero when a target
of the real set (R@5 ≥ 0.82, R@1 ≥ 0.50) or the CPU is missed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
for path in (SRC, HERE):
    if os.path.isdir(path) and path not in sys.path:
        sys.path.insert(0, path)

import recall_corpus  # noqa: E402
from bench_paging import PRINCIPAL, REVISION, SESSION, SIGNER  # noqa: E402
from multillm_edge import formats  # noqa: E402
from multillm_edge.core import paging, validation  # noqa: E402
from multillm_edge.core import recall as edge_recall  # noqa: E402
from multillm_edge.search import MIN_RELEVANCE, page_texts, rank  # noqa: E402
from multillm_edge.search import analysis  # noqa: E402
from multillm_edge.search.docs import CACHE  # noqa: E402
from multillm_edge.search.ranker import BASELINE, PLAIN, Scoring  # noqa: E402
from multillm_edge.search.stems import Stems  # noqa: E402

WINDOW, MAX_OUTPUT, SAFETY = 32_768, 1_024, 256
BUDGET = WINDOW - MAX_OUTPUT - SAFETY
KS = (1, 5, 10)
MIB = 1 << 20
LOCOMO = os.environ.get("LOCOMO_ZIP") or os.path.join(
    os.path.dirname(HERE), "..", "shared", "data", "locomo-dev.zip")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


# -- paging ------------------------------------------------------------------------

def paged(fmt: str, body: dict) -> list:
    raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    parsed = validation.parse_request(fmt, raw)
    ids = SIGNER.page_ids("roleplay", PRINCIPAL, SESSION, REVISION)
    (plan,) = paging.plan_candidates(fmt, parsed, [BUDGET], ids, strip=paging.EDGE_FIELDS)
    return plan.pages


def exchange_docs(items_per_page) -> list:
    """Every exchange of the pages as its (role, text) list, oldest first, each once
    (equal texts: as the route dedupes)."""
    docs, seen = [], set()
    for items in items_per_page:
        bounds = formats.exchange_starts(items) + [len(items)]
        for a, b in zip(bounds, bounds[1:]):
            texts = page_texts(items[a:b])
            if tuple(texts) not in seen:
                seen.add(tuple(texts))
                docs.append(texts)
    return docs


def holds(doc, needles) -> bool:
    return any(n in t for _, t in doc for n in needles)


# -- the real set (LoCoMo) ---------------------------------------------------------

def locomo_conversations() -> list:
    """[(name, conversation dict)] from the zip, or [] when it is absent."""
    if not os.path.isfile(LOCOMO):
        return []
    with zipfile.ZipFile(LOCOMO) as z:
        return [(n.rsplit(".", 1)[0], json.loads(z.read(n))) for n in sorted(z.namelist()) if n.endswith(".json")]


def _lines(conv: dict) -> tuple:
    """([(speaker, line)], {dia_id: line}) in conversation order."""
    lines, by_id = [], {}
    n = 1
    while f"session_{n}" in conv:
        for k, turn in enumerate(conv[f"session_{n}"]):
            line = f"{turn['speaker']}: {turn['text']}"
            by_id[turn["dia_id"]] = line
            if turn.get("blip_caption"):
                line += f" [shares a photo: {turn['blip_caption']}]"
            if k == 0:
                lines.append((turn["speaker"], f"[date: {conv[f'session_{n}_date_time']}]"))
            lines.append((turn["speaker"], line))
        n += 1
    return lines, by_id


def locomo_body(conv: dict, latest: str | None = None) -> tuple:
    c = conv["conversation"] if "conversation" in conv else conv
    lines, by_id = _lines(c)
    role = {c["speaker_a"]: "user", c["speaker_b"]: "assistant"}
    msgs = [{"role": "system", "content": f"{c['speaker_b']} talks with {c['speaker_a']}."}]
    for speaker, line in lines:
        if len(msgs) > 1 and msgs[-1]["role"] == role[speaker]:
            msgs[-1]["content"] += "\n" + line
        else:
            msgs.append({"role": role[speaker], "content": line})
    if latest is not None:
        msgs.append({"role": "user", "content": latest})
    return {"model": "bench:rp", "messages": msgs, "max_tokens": MAX_OUTPUT}, by_id


def _evidence(q: dict, by_id: dict) -> list:
    out = []
    for e in q.get("evidence") or ():
        for part in str(e).replace(",", ";").split(";"):
            line = by_id.get(part.strip())
            if line:
                out.append(line)
    return out


def locomo_runs() -> list:
    """[(conversation, docs, [(question, category, evidence lines)])]."""
    runs = []
    for name, conv in locomo_conversations():
        body, by_id = locomo_body(conv)
        docs = exchange_docs(p.items for p in paged("chat", body))
        qs = []
        for q in conv["qa"]:
            ev = _evidence(q, by_id)
            if q.get("category") in CATEGORIES and ev and any(holds(d, ev) for d in docs):
                qs.append((q["question"], CATEGORIES[q["category"]], [e for e in ev if any(holds(d, [e]) for d in docs)]))
        runs.append((name, docs, qs))
    return runs


def synthetic_runs() -> list:
    runs = []
    for fmt, body, questions in recall_corpus.corpus():
        docs = exchange_docs(p.items for p in paged(fmt, body))
        qs = [(q.text, q.kind, [q.needle]) for q in questions if any(holds(d, [q.needle]) for d in docs)]
        runs.append((fmt, docs, qs))
    return runs


# -- rankers and tables --------------------------------------------------------------

SEARCH = Scoring()
ABLATIONS = {
    "search": SEARCH,
    "− window": SEARCH._replace(window=0.0),
    "− passage": SEARCH._replace(passage=0.0),
    "− asked (question → its answer)": SEARCH._replace(asked=False),
    "passage idf over exchanges": SEARCH._replace(lidf=False),
    "− asked, passage idf over exchanges (issue 25)": SEARCH._replace(asked=False, lidf=False),
    "− irregular verbs": SEARCH._replace(irregular=False),
    "− stemming": SEARCH._replace(stem=False, irregular=False),
}


def rankers() -> dict:
    out = {"position (newest first)": None, "plain BM25": PLAIN, "stemmed BM25 (baseline)": BASELINE}
    out.update(ABLATIONS)
    return out


def ranked(scoring, q: str, docs: list) -> list:
    if scoring is None:
        return list(range(len(docs) - 1, len(docs) - 11, -1))
    return [h.doc for h in rank(q, docs, 10, scoring=scoring)]


def recall(runs, methods, kept: dict | None = None) -> dict:
    """{(method, group): [hits@1, @5, @10, count]} for groups "all", each conversation
    and each question kind; ``kept``: filled with the search's rankings, {(conversation,
    question): ranked exchanges} (``miss_anatomy`` reads them)."""
    table: dict = {}
    for conv, docs, questions in runs:
        for name, scoring in methods.items():
            for q, kind, needles in questions:
                got = ranked(scoring, q, docs)
                if kept is not None and name == "search":
                    kept[(conv, q)] = got
                for key in ((name, "all"), (name, conv), (name, kind)):
                    row = table.setdefault(key, [0, 0, 0, 0])
                    first = next((i for i, d in enumerate(got) if holds(docs[d], needles)), None)
                    for j, k in enumerate(KS):
                        row[j] += first is not None and first < k
                    row[3] += 1
    return table


def _row(label, group, row) -> str:
    h1, h5, h10, n = row
    return f"| {label} | {group} ({n}) | {h1 / n:.3f} | {h5 / n:.3f} | {h10 / n:.3f} |"


def print_table(title: str, table: dict, methods, groups) -> None:
    print(f"\n{title}")
    print("| method | questions | " + " | ".join(f"R@{k}" for k in KS) + " |")
    print("|---|---|" + "---:|" * len(KS))
    for m in methods:
        for g in groups:
            if (m, g) in table:
                print(_row(m, g, table[(m, g)]))


_LABEL = re.compile(r"^([^\W\d_][^\W_]*):", re.M)


def _content_terms(text: str, stems, labels: frozenset) -> set:
    """``text``'s terms as a query's (stems, CJK bigrams; no stop words), the speakers'
    names left out."""
    return {t.value for t in analysis.query_terms(text, stems)} - labels


MISS_KINDS = (
    "shares no query word (nor do its neighbours)",
    "only a neighbour shares a query word",
    "next to a top-5 hit (its moment found)",
    "shares query words, ranked 6-10",
    "shares query words, ranked below 10",
)


def miss_anatomy(runs, rankings: dict) -> dict:
    """{kind: count} of the real set's R@5 misses (``rankings``: {(conversation,
    question): ranked exchanges}, as ``recall`` keeps them), each in the first
    ``MISS_KINDS`` row that fits it: what the evidence exchange (or the best of several)
    shares with the question, in query terms without speakers' names (``Name:`` labels)."""
    stems = Stems()
    out = dict.fromkeys(MISS_KINDS, 0)
    for conv, docs, questions in runs:
        labels = frozenset(stems(analysis.fold(n)) for d in docs for _, t in d for n in _LABEL.findall(t))
        bags = [_content_terms("\n".join(t for _, t in d), stems, labels) for d in docs]
        for q, _kind, needles in questions:
            got = rankings[(conv, q)]
            if any(holds(docs[d], needles) for d in got[:5]):
                continue
            terms = _content_terms(q, stems, labels)
            evidence = [d for d, doc in enumerate(docs) if holds(doc, needles)]
            own = any(terms & bags[d] for d in evidence)
            near = any(terms & bags[e] for d in evidence for e in (d - 1, d + 1) if 0 <= e < len(docs))
            if not own:
                kind = MISS_KINDS[1] if near else MISS_KINDS[0]
            elif any(abs(h - d) == 1 for h in got[:5] for d in evidence):
                kind = MISS_KINDS[2]
            else:
                kind = MISS_KINDS[3] if any(holds(docs[d], needles) for d in got) else MISS_KINDS[4]
            out[kind] += 1
    return out


def print_miss_anatomy(runs, rankings: dict) -> None:
    counts = miss_anatomy(runs, rankings)
    total = sum(counts.values())
    print(f"\nthe search's R@5 misses on the real set ({total}), by what the evidence exchange shares with the question")
    print("| miss | questions | share of misses |")
    print("|---|---:|---:|")
    for kind, n in counts.items():
        print(f"| {kind} | {n} | {n / max(total, 1):.2f} |")


def recalled_plan(fmt: str, body: dict):
    """The edge's plan for ``body`` declaring recall (docs/design.md §6.2)."""
    raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    parsed = validation.parse_request(fmt, raw)
    ids = SIGNER.page_ids("roleplay", PRINCIPAL, SESSION, REVISION)
    (plan,) = paging.plan_candidates(fmt, parsed, [BUDGET], ids, strip=paging.EDGE_FIELDS,
                                     recalling=True)
    return plan


def moment_texts(plan, m) -> list:
    """The (role, text) list of the exchange moment ``m`` names in ``plan``'s pages."""
    page = next(p for p in plan.pages if p.page_id == m.page_id)
    bounds = formats.exchange_starts(page.items) + [len(page.items)]
    return page_texts(page.items[bounds[m.exchange - 1]:bounds[m.exchange]])


def auto_recall(cases) -> dict:
    """Recall as the edge runs it: each case (format, body whose latest user message is
    the question, evidence) planned with recall on the bench's 32k window; a case
    counts when an exchange holding the evidence is among the moments recalled (at most
    3). → {recall@3, nothing (share of turns recalling nothing), bytes (mean recalled
    bytes per turn), n} over the cases whose evidence the plan pages."""
    got = nothing = size = n = 0
    for fmt, body, needles in cases:
        plan = recalled_plan(fmt, body)
        docs = [t for p in plan.pages for t in exchange_docs([p.items])]
        if not any(holds(d, needles) for d in docs):
            continue              # the evidence is still in the window: not recall's to find
        n += 1
        nothing += not plan.recall
        size += len(json.dumps(edge_recall.text(plan.recall), ensure_ascii=False).encode()) - 2
        got += any(holds(moment_texts(plan, m), needles) for m in plan.recall)
    return {"recall@3": got / max(n, 1), "nothing": nothing / max(n, 1),
            "bytes": size / max(n, 1), "n": n}


def locomo_recall_cases(conversations) -> list:
    """The question as the latest user message of its whole conversation."""
    out = []
    for _, conv in conversations:
        for q in conv["qa"]:
            if q.get("category") in CATEGORIES:
                body, by_id = locomo_body(conv, q["question"])
                ev = _evidence(q, by_id)
                if ev:
                    out.append(("chat", body, ev))
    return out


def synthetic_recall_cases() -> list:
    """Each synthetic question as the latest user message of its session."""
    out = []
    for fmt, body, questions in recall_corpus.corpus():
        key = "input" if fmt == "responses" else "messages"
        for q in questions:
            b = dict(body)
            b[key] = body[key][:-1] + [{"role": "user", "content": q.text}]
            out.append((fmt, b, [q.needle]))
    return out


def print_auto_recall(label: str, r: dict) -> None:
    print(f"| {label} | {r['n']} | {r['recall@3']:.3f} | {r['nothing']:.3f} | {r['bytes']:.0f} |")


# -- CPU -----------------------------------------------------------------------------

STOP_ONLY = "What did they do there when it was then?"


def long_query(docs: list) -> str:
    """1,000 characters of the conversation's own words (the worst case for terms)."""
    text = " ".join(t for d in docs[::7] for _, t in d)
    return text[:1000]


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
    docs = exchange_docs(items)
    queries = {"typical": [q for q, _, _ in questions[:24]], "1,000 characters": [long_query(docs)] * 8,
               "stop words only": [STOP_ONLY] * 8}
    out = {"pages": len(chosen), "exchanges": len(docs), "bytes": total}
    t_floor = []
    for label, qs in queries.items():
        t_search, hits = [], 0
        for _ in range(rounds):
            for q in qs:
                CACHE.clear()
                t0 = time.perf_counter()
                floor()
                t1 = time.perf_counter()
                hits = len(rank(q, exchange_docs(items), 5))
                t2 = time.perf_counter()
                t_floor.append(t1 - t0)
                t_search.append(t2 - t1)
        out[label] = (statistics.median(t_search) * 1000, hits)
    out["floor"] = statistics.median(t_floor) * 1000
    return out


def main(runtime: str = "CPython") -> int:
    args = sys.argv[1:] if runtime == "CPython" else []
    ok = True
    conversations = locomo_conversations()
    methods = rankers()
    if runtime != "CPython":     # Pyodide: the baseline and the search (the ablation is slow there)
        methods = {k: v for k, v in methods.items() if k in ("stemmed BM25 (baseline)", "search")}
    if conversations and "--recall-only" not in args:
        runs = locomo_runs()
        for name, docs, qs in runs:
            print(f"LoCoMo {name}: {len(docs)} paged exchanges, {len(qs)} questions with paged evidence")
        rankings: dict = {}
        table = recall(runs, methods, rankings)
        print_table(f"real set (LoCoMo, {LOCOMO}) — {runtime}", table, methods, ("all",))
        groups = [r[0] for r in runs] + list(CATEGORIES.values())
        print_table("real set by conversation and category", table,
                    ("stemmed BM25 (baseline)", "search"), groups)
        h1, h5, _, n = table[("search", "all")]
        ok = h5 / n >= 0.82 and h1 / n >= 0.50
        print_miss_anatomy(runs, rankings)
    elif not conversations:
        print(f"LoCoMo conversations not found at {LOCOMO} (set LOCOMO_ZIP): synthetic set only")
    if "--recall-only" in args:
        return 0 if print_recall_mode(conversations) else 1
    synth = synthetic_runs()
    for fmt, docs, qs in synth:
        print(f"synthetic {fmt}: {len(docs)} paged exchanges, {len(qs)} questions with a paged needle")
    table = recall(synth, methods)
    print_table(f"synthetic set (bench/recall_corpus.py) — {runtime}", table, methods,
                ("all",) + recall_corpus.KINDS)
    if "--recall-mode" in args:
        ok = print_recall_mode(conversations) and ok
    if "--no-cpu" not in args:
        ok = print_cpu(runtime) and ok
    sys.stdout.flush()
    return 0 if ok else 1


def print_recall_mode(conversations) -> bool:
    """auto-recall on the real set (target ≥ 0.70) and the synthetic one."""
    print(f"\nauto-recall (the edge's recall on a {BUDGET}-token budget: ≤ 3 moments in "
          f"≤ min(15 %, 8 KiB), an average query term's share of relevance, ≥ {edge_recall.MIN_TERMS} query terms)")
    print("| set | questions | auto-recall@3 | recalling nothing | recalled bytes per turn |")
    print("|---|---:|---:|---:|---:|")
    real = auto_recall(locomo_recall_cases(conversations)) if conversations else None
    if real:
        print_auto_recall("real (LoCoMo)", real)
    print_auto_recall("synthetic", auto_recall(synthetic_recall_cases()))
    return real is None or real["recall@3"] >= 0.70


def print_cpu(runtime: str) -> bool:
    fmt, body, questions = recall_corpus.corpus()[0]
    pages = paged(fmt, body)
    qs = [(q.text, q.kind, [q.needle]) for q in questions]
    c = cpu(pages, qs)
    print(f"\nsearch CPU — {runtime}: the newest {c['pages']} pages up to 1 MiB ({c['bytes']:,} bytes, "
          f"{c['exchanges']} exchanges), no analysis cached; ms, medians")
    print("| query | floor: SHA-256 + decode + json.loads | exchange texts + rank | hits | (floor + search) / floor | / typical |")
    print("|---|---:|---:|---:|---:|---:|")
    typical = c["typical"][0]
    ok = True
    for label in ("typical", "1,000 characters", "stop words only"):
        ms, hits = c[label]
        ratio = (c["floor"] + ms) / c["floor"]
        rel = (c["floor"] + ms) / (c["floor"] + typical)
        ok = ok and ratio <= 8 and rel <= 3
        print(f"| {label} | {c['floor']:.1f} | {ms:.1f} | {hits} | {ratio:.2f} | {rel:.2f} |")
    return ok


if __name__ == "__main__":
    sys.exit(main())
