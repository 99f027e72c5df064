"""A session's turns answered the same whether the isolate resumes from the last turn or
not (docs/design.md §5.13): two edges run the same turns — one forgetting every turn
(the full path), one keeping them — and must send the provider the same bytes, answer
the same, store the same rows and objects. Another principal sending the same bytes
resumes nothing."""

import json

import pytest

from devkit import roleplay as rp
from multillm_edge import formats
from multillm_edge.core import resume
from multillm_edge.core.last_turns import LAST_TURNS, LastTurns
from multillm_edge.routes import generation
from tests.handlers.conftest import KEY, SESSION
from tests.support.inprocess import LocalEdge

WIDE = "fake:rp-8k"
CAPS = [formats.TOOL_NAME, formats.RECALL_CAPABILITY, formats.PROMPT_CACHE_CAPABILITY]
PATHS = {"/v1/chat/completions": (rp.chat_body, "messages"),
         "/v1/messages": (rp.messages_body, "messages"),
         "/v1/responses": (rp.responses_body, "input")}
HEADERS = {"Authorization": f"Bearer {KEY}", "X-Roleplay-Session-ID": SESSION}


def new_edge() -> LocalEdge:
    edge = LocalEdge(rp.edge_vars("http://provider.test", "http://origin.test"))
    edge.seed_player("p_handlers", KEY, SESSION)
    edge.seed_player("p_other", "rpk_other_key", "rps_other_session")
    edge.set_model(WIDE, 8000 + 200 + 256, 200)
    return edge


def turns(make, key, n, caps):
    """A chat growing turn by turn, the history first or last, with a swipe, a
    regeneration and an edit of an early message along the way."""
    full = make(n, model=WIDE, capabilities=caps)
    items = full[key]
    users = [i for i, m in enumerate(items) if m.get("role") == "user" and isinstance(m.get("content"), str)]
    for k, t in enumerate(users[1:]):
        history = [dict(m) for m in items[:t + 1]]
        history[-1]["content"] = history[-1]["content"] + " Aurore, the lantern?"
        if k % 7 == 5:                       # an early message edited
            history[1] = {**history[1], "content": f"edited {k}"}
        fields = {f: v for f, v in full.items() if f != key}
        body = {key: history, **fields} if k // 12 % 2 else {**fields, key: history}
        yield body
        if k % 5 == 3:                       # regenerated: the same body again
            yield body


def compact(body: dict) -> bytes:
    """As SillyTavern's JSON.stringify sends it: compact, Unicode as is."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def observe(edge, path, body, headers=HEADERS):
    r = edge.request("POST", path, headers, compact(body))
    rows = edge.sql("SELECT page_id, sha256, byte_length, r2_key, r2_offset, expires_at, signature "
                    "FROM context_pages ORDER BY page_id")
    return r.status, r.body, edge.sent[-1].body if edge.sent else None, rows, dict(edge.bucket.objects)


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("caps", [CAPS, CAPS[:1]], ids=["cache+recall", "plain"])
def test_kept_and_forgotten_turns_answer_alike(path, caps, monkeypatch):
    make, key = PATHS[path]
    resumed = []
    real = resume._resume
    monkeypatch.setattr(resume, "_resume", lambda *a: resumed.append(real(*a)) or resumed[-1])
    memories = {"forgetful": LastTurns(max_bytes=0), "keeping": LastTurns()}   # 0: keeps nothing
    with new_edge() as forgetful, new_edge() as keeping:
        for body in turns(make, key, 40, caps):
            monkeypatch.setattr(generation, "LAST_TURNS", memories["forgetful"])
            full = observe(forgetful, path, body)
            monkeypatch.setattr(generation, "LAST_TURNS", memories["keeping"])
            got = observe(keeping, path, body)
            assert got[0] == 200 and got == full
            forgetful.clock += 5
            keeping.clock += 5
        # the log line counts what was reused (the hit rate in production), nothing more
        turns_logged = [r for r in keeping.logs if "resumed" in r]
        assert sum(r["resumed"] > 0 for r in turns_logged) >= 30
        assert all(r.get("resumed", 0) == 0 for r in forgetful.logs)
    assert len(memories["forgetful"]) == 0
    assert sum(r is not None for r in resumed) >= 30


def test_another_principal_with_the_same_bytes_resumes_nothing(monkeypatch):
    make, key = PATHS["/v1/chat/completions"]
    body = make(20, model=WIDE, capabilities=CAPS[:1])
    other = {"Authorization": "Bearer rpk_other_key", "X-Roleplay-Session-ID": SESSION}
    seen = []
    real = resume.parse_request
    monkeypatch.setattr(resume, "parse_request",
                        lambda *a: seen.append(real(*a)) or seen[-1])
    with new_edge() as edge:
        LAST_TURNS.clear()
        raw = compact(body)
        assert edge.request("POST", "/v1/chat/completions", HEADERS, raw).status == 200
        edge.request("POST", "/v1/chat/completions", other, raw)   # its own session is another
        other_session = {**other, "X-Roleplay-Session-ID": "rps_other_session"}
        assert edge.request("POST", "/v1/chat/completions", other_session, raw).status == 200
        assert edge.request("POST", "/v1/chat/completions", HEADERS, raw).status == 200
    assert [p.last is not None for _, p in seen] == [False, False, False, True]
    LAST_TURNS.clear()


def test_the_log_line_says_what_was_taken_and_keeping_has_its_own_phase(monkeypatch):
    """`resumed`: the groups whose grouping, bytes and pages were taken (0 when the parse
    resumed but the groups could not be); `resumed_items`: the items whose parse was
    taken; `keep_ms`/`cpu_keep_ms`: keeping the turn, never counted as planning (issue 46)."""
    import time

    monkeypatch.setattr(generation, "LAST_TURNS", LastTurns())
    real_keep = resume.keep
    monkeypatch.setattr(resume, "keep", lambda *a: time.sleep(0.05) or real_keep(*a))
    sys_, u1, a1, u2 = ({"role": "system", "content": "You are Mira."}, {"role": "user", "content": "hello"},
                        {"role": "assistant", "content": "Welcome aboard."}, {"role": "user", "content": "Aurore?"})
    a2, u3 = {"role": "assistant", "content": "The lantern."}, {"role": "user", "content": "Sing."}
    more = {"role": "assistant", "content": "…and the whale."}      # a reply continued: no group opens
    bodies = [[sys_, u1, a1, u2], [sys_, u1, a1, u2, a2, u3], [sys_, u1, a1, u2, a2, more]]
    with new_edge() as edge:
        for messages in bodies:
            r = edge.request("POST", "/v1/chat/completions", HEADERS,
                             compact({"model": WIDE, "messages": messages}))
            assert r.status == 200
        logs = [r for r in edge.logs if "resumed" in r]
    assert [(r["resumed"], r["resumed_items"]) for r in logs] == [(0, 0), (2, 3), (0, 5)]
    for r in logs:
        assert r["keep_ms"] >= 50 and r["cpu_keep_ms"] >= 50
        assert r["plan_ms"] < 50 and r["cpu_plan_ms"] < 50
