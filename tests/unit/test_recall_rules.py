"""Recall's rules that the plan-level tests do not single out (docs/design.md §6.2):
the query is the latest genuine user text, a trailing tool result being none; a moment
quoting the same words as one already chosen is left out."""

import json

from multillm_edge.core import paging, prepared
from multillm_edge.core.pages import PageSigner

SIGNER = PageSigner(b"recall-rules-signing-secret-0123456789")
IDS = SIGNER.page_ids("roleplay", "p", "s", 1)
NEEDLE = "We buried the silver compass beneath the third stone of the old mill."


def chat(n: int, needles: tuple = (4,), ask: str = "") -> dict:
    msgs = [{"role": "system", "content": "You are Mira."}]
    for i in range(n):
        said = NEEDLE if i in needles else f"Exchange {i}: the caravan moves on through dust and rain."
        reply = "Then it stays there." if i in needles else f"Reply {i}: " + "The road is long and grey. " * 12
        msgs += [{"role": "user", "content": said}, {"role": "assistant", "content": reply}]
    msgs.append({"role": "user", "content": ask})
    return {"model": "m", "messages": msgs}


def plan(body: dict, budget: int = 6000):
    return paging.plan_candidates("chat", body, [budget], IDS, recalling=True)[0]


def test_the_query_is_the_user_turn_before_a_trailing_tool_result():
    """Anthropic Messages: a user message holding only a tool_result is no new turn."""
    ask = "Where did we bury the silver compass, by the old mill?"
    msgs = chat(30, ask=ask)["messages"][1:]
    tail = [{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "roll", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "17"}]}]
    body = {"model": "m", "max_tokens": 100, "system": "You are Mira.", "messages": msgs + tail}
    assert paging.latest_user_text(prepared.Prepared("messages", body, IDS)) == ask
    p = paging.plan_candidates("messages", body, [6000], IDS, recalling=True)[0]
    assert p.recall and any(NEEDLE in json.dumps(m.lines) for m in p.recall)


def test_a_moment_with_the_same_words_as_one_chosen_is_left_out():
    once = plan(chat(30, needles=(4,), ask="Where did we bury the silver compass, by the old mill?"))
    twice = plan(chat(30, needles=(4, 9), ask="Where did we bury the silver compass, by the old mill?"))
    # the two needle exchanges say the same words: quoted once, as when said once
    assert [m.lines for m in twice.recall] == [m.lines for m in once.recall]
    assert sum(NEEDLE in json.dumps(m.lines) for m in twice.recall) == 1


def test_an_exchange_a_block_page_closes_over_is_not_analysed_again(monkeypatch):
    """Its analysis was cached under its own page's key; the turn a block page takes it
    in, it is found there (``Paged.alone``), not made again: a steady turn analyses only
    the exchanges newly paged."""
    from multillm_edge.core import recall
    from multillm_edge.search import STATE, docs
    STATE.reset()       # no analysis, and no corpus holding any of these exchanges
    seen, made, counts = [], [], []
    choose = recall.choose
    monkeypatch.setattr(recall, "choose", lambda q, paged, *a: seen.append(paged) or choose(q, paged, *a))
    analyze = docs.analyze
    monkeypatch.setattr(docs, "analyze", lambda *a, **k: made.append(1) or analyze(*a, **k))
    for n in range(30, 90, 3):
        made.clear()
        plan(chat(n, ask="Where did we bury the silver compass, by the old mill?"))
        counts.append(len(made))
    assert len(seen) == len(counts)
    keys = [{p.items[0]["content"]: p.key for p in paged} for paged in seen]
    # blocks did close over exchanges paged alone the turn before
    assert sum(k != before.get(said, k) for before, after in zip(keys, keys[1:]) for said, k in after.items())
    newly = [len(keys[0])] + [len(after.keys() - before.keys()) for before, after in zip(keys, keys[1:])]
    assert counts == newly
