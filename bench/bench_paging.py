"""Benchmark of the paging plan (issue 3), run identically in CPython and Pyodide.

What is measured, per history size (100, 500, 1,000 and 5,000 roleplay exchanges):

* floor  = one ``json.loads`` of the raw request body + one compact ``json.dumps`` of
           it + one SHA-256 of those UTF-8 bytes: the least any edge that parses,
           re-serializes and hashes the body pays.
* plan   = what the edge does per request: the request boundary
           (``validation.parse_request``: depth check, strict parse, field types) +
           ``paging.plan_candidates`` with one budget of 40 % of the body size (so most of the
           history is paged: grouping, sizing, page bytes, SHA-256 and a page id from the
           production ``PageSigner`` for every page, the marker and the upstream body).
           The upstream bytes are not made here: the dispatcher joins the plan's group
           bytes around the encoded rest of the body (``Plan.encoded``, the Worker's
           ``encode`` phase in ``bench_generation.py --cpu``).
* first-paging rows = ``page_writes.rows`` for every page of that plan (what a request
           that pages an existing history for the first time signs; a steady turn signs
           only its new and due rows). Reported, not part of the ratio.
* ratio  = plan / floor (issue 13 targets: ≤ 1.25 in Pyodide, ≤ 1.15 in CPython);
           scale = plan(5,000) / plan(500) (target ≤ 12).

Each figure is the median of 7-41 runs in the same process (after a warm-up run;
``gc.collect()`` before each run, the collector stays enabled during it).
Usage: ``python bench/bench_paging.py`` (CPython) or ``node bench/pyodide_bench.mjs``;
``npm run bench`` runs both.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
if os.path.isdir(SRC) and SRC not in sys.path:
    sys.path.insert(0, SRC)

from multillm_edge.core import page_writes  # noqa: E402
from multillm_edge.core import paging, validation  # noqa: E402
from multillm_edge.core.pages import Lifetime, Owner, PageSigner  # noqa: E402

SIZES = (100, 500, 1000, 5000)
# The production signer, fed as generation.py feeds it (a roleplay key's principal is a
# SHA-256 hex, a session id `rps_…`).
SIGNER = PageSigner(b"bench-signing-secret-of-some-length", b"bench-previous-secret")
PRINCIPAL, SESSION, REVISION = "a3" * 32, "rps_bench0123456789abcdef", 7


def page_id_for_request():
    """What generation.py hands the plan for one request: the production page-id function."""
    return SIGNER.page_ids("roleplay", PRINCIPAL, SESSION, REVISION)


def first_paging_rows(plan) -> list:
    """The rows a first paging signs (every page new): page_writes, as the Worker does."""
    w = page_writes.classify(plan.pages, {}, 1_800_000_000, 3600, 600)
    return page_writes.rows(w, SIGNER, Owner("roleplay", PRINCIPAL, SESSION, REVISION),
                            Lifetime(1_800_000_000, 3600))[2]


def roleplay_body(n: int) -> dict:
    """A roleplay chat of ``n`` exchanges (~1.6 KB each): narration, Unicode, dice rolls."""
    msgs = [{"role": "system", "content": "You are Captain Mira of the skyship Aurora. "
             "Stay in character; narrate in vivid second person. " * 8},
            {"role": "assistant", "content": "*The deck sways beneath your feet.* Welcome aboard! 🌬️"}]
    for i in range(n):
        msgs.append({"role": "user", "content": f"*leans on the rail* Tell me about port {i}, "
                     "captain. What do the sky-whales sing there? 港口の歌\n" * 4})
        if i % 5 == 2:
            msgs.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{i}_a", "type": "function",
                 "function": {"name": "roll_dice", "arguments": "{\"sides\": 20, \"count\": 1}"}},
                {"id": f"call_{i}_b", "type": "function",
                 "function": {"name": "weather", "arguments": "{\"port\": %d}" % i}}]})
            msgs.append({"role": "tool", "tool_call_id": f"call_{i}_a", "content": "17"})
            msgs.append({"role": "tool", "tool_call_id": f"call_{i}_b",
                         "content": "{\"wind\": \"NE 12kn\", \"sky\": \"clear\"}"})
        msgs.append({"role": "assistant", "content": (
            f"*Mira smiles and points toward the horizon.* Port {i} — ah, the singing harbour. "
            "The whales rise at dusk, their songs rolling through the cloud-sea like thunder "
            "wrapped in velvet. Sailors say if you listen closely you can hear your own name. "
            "¡Qué maravilla! Les marins y dansent jusqu'à l'aube. ") * 3 + "\r\n"})
    msgs.append({"role": "user", "content": "*takes a deep breath* Let's set sail."})
    return {"model": "openai:gpt-4o", "messages": msgs, "max_tokens": 1024, "temperature": 0.8,
            "capabilities": ["multillm_context_retrieve"]}


def roleplay_body_ru(n: int) -> dict:
    """``roleplay_body``'s chat in Russian (~2.3 KB an exchange: Cyrillic is two UTF-8
    bytes a letter): a text most of whose characters are not ASCII, its words stemmed
    by the Russian Snowball (issue 45's thirteenth pass: such a text's words were cut
    ~4x slower than a Latin one's, their cutting characters found ~9x slower)."""
    body = roleplay_body(n)
    body["messages"][0]["content"] = ("Ты — капитан Мира с небесного корабля «Аврора». "
                                      "Не выходи из роли; рассказывай ярко, во втором лице. ") * 8
    body["messages"][1]["content"] = "*Палуба качается под ногами.* Добро пожаловать на борт! 🌬️"
    for m in body["messages"][2:-1]:
        if m["role"] == "user":
            i = m["content"].split("port ", 1)[1].split(",", 1)[0]
            m["content"] = (f"*опирается на поручень* Расскажи мне о порте {i}, капитан. "
                            "Что там поют небесные киты? 港口の歌\n") * 4
        elif m["role"] == "assistant" and type(m["content"]) is str:
            i = m["content"].split("Port ", 1)[1].split(" ", 1)[0]
            m["content"] = (f"*Мира улыбается и указывает на горизонт.* Порт {i} — ах, поющая гавань. "
                            "Киты поднимаются в сумерках, и их песни катятся по облачному морю, как гром, "
                            "завёрнутый в бархат. Моряки говорят: если прислушаться, услышишь своё имя. "
                            "«Какое чудо!» — шепчут они до самого рассвета. ") * 3 + "\r\n"
    body["messages"][-1]["content"] = "*глубоко вздыхает* Поднимаем паруса."
    return body


def roleplay_body_ja(n: int) -> dict:
    """``roleplay_body``'s chat in Japanese: no spaces, its terms CJK bigrams counted in
    each exchange's text (docs/design.md §6.1; issue 45's thirteenth pass: a recalling
    turn counted each of them in every exchange, every turn)."""
    body = roleplay_body(n)
    body["messages"][0]["content"] = "あなたは飛空艇オーロラ号のミラ船長。役を崩さず、二人称で生き生きと語ること。" * 8
    body["messages"][1]["content"] = "*足元で甲板が揺れる。* ようこそ、乗船を歓迎するわ！🌬️"
    for m in body["messages"][2:-1]:
        if m["role"] == "user":
            i = m["content"].split("port ", 1)[1].split(",", 1)[0]
            m["content"] = f"*手すりにもたれて* 船長、港{i}のことを教えて。そこで空の鯨は何を歌うの？ 港口の歌\n" * 4
        elif m["role"] == "assistant" and type(m["content"]) is str:
            i = m["content"].split("Port ", 1)[1].split(" ", 1)[0]
            m["content"] = (f"*ミラは微笑んで地平線を指さす。* 港{i}——ああ、歌う港ね。鯨たちは夕暮れに昇り、"
                            "その歌はビロードに包まれた雷のように雲の海を転がっていく。耳を澄ませば自分の名前が"
                            "聞こえると船乗りたちは言う。「なんて素敵！」と夜明けまでささやくのよ。") * 3 + "\r\n"
    body["messages"][-1]["content"] = "*深呼吸して* さあ、出航しよう。"
    return body


def plan_one(fmt, body, budget, page_id_for):
    """The edge's plan for one candidate (``paging.plan_candidates`` with one budget)."""
    return paging.plan_candidates(fmt, body, [budget], page_id_for)[0]


def _median_ms(fn, reps: int) -> float:
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        gc.collect()  # every run starts from the same heap state (GC stays enabled)
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1000.0


def run(sizes=SIZES, reps: int | None = None) -> list[dict]:
    rows = []
    for n in sizes:
        raw = json.dumps(roleplay_body(n), ensure_ascii=False, separators=(",", ":")).encode()
        budget = int(len(raw) * 0.4)
        r = reps or {100: 41, 500: 15, 1000: 11}.get(n, 7)

        def floor():
            obj = json.loads(raw)
            hashlib.sha256(json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
                           .encode("utf-8")).hexdigest()

        def plan():
            return plan_one("chat", validation.parse_request("chat", raw), budget,
                                      page_id_for_request())

        p = plan()
        assert p.size <= budget and p.pages
        body = json.loads(raw)
        plan_only = _median_ms(lambda: plan_one("chat", body, budget, page_id_for_request()), r)
        signed = _median_ms(lambda: first_paging_rows(p), r)
        f = _median_ms(floor, r)
        t = _median_ms(plan, r)
        rows.append({"exchanges": n, "mb": len(raw) / 1e6, "pages": len(p.pages),
                     "floor_ms": f, "plan_ms": t, "plan_only_ms": plan_only, "rows_ms": signed,
                     "ratio": t / f})
    return rows


TARGETS = {"Pyodide": 1.25, "CPython": 1.15}


def table(rows, runtime: str) -> str:
    out = [f"paging bench — {runtime} {sys.version.split()[0]}",
           "| exchanges | body MB | pages | floor ms | plan ms (incl. loads) | plan ms (parsed) "
           "| first-paging rows ms | plan/floor |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['exchanges']:,} | {r['mb']:.2f} | {r['pages']:,} | {r['floor_ms']:.1f} | "
                   f"{r['plan_ms']:.1f} | {r['plan_only_ms']:.1f} | {r['rows_ms']:.1f} | {r['ratio']:.2f} |")
    by = {r["exchanges"]: r for r in rows}
    target = TARGETS.get(runtime, 1.25)
    ok = all(r["ratio"] <= target for r in rows)
    line = f"max ratio {max(r['ratio'] for r in rows):.2f} (target ≤ {target})"
    if 500 in by and 5000 in by:
        scale = by[5000]["plan_ms"] / by[500]["plan_ms"]
        ok = ok and scale <= 12.0
        line += f"; 5,000 / 500 exchanges = {scale:.1f}× (target ≤ 12)"
    out.append(line + ("  → targets met" if ok else "  → TARGETS MISSED"))
    return "\n".join(out), ok


def main(runtime: str = "CPython") -> int:
    text, ok = table(run(), runtime)
    print(text, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
