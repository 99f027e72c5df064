"""The history up to the last paged group, kept with a session's walks (``paging._Prefix``,
docs/design.md §5.13, issue 45): a steady turn takes the last turn's and builds the same
upstream bytes as the full path; a turn whose paged groups changed makes its own."""

from __future__ import annotations

import json

from multillm_edge.core import paging, resume, validation
from multillm_edge.core.last_turns import LastTurns
from multillm_edge.core.pages import PageSigner

IDS = PageSigner(b"prefix-test-secret-0123456789abcdef").page_ids("roleplay", "p", "rps_prefix", 1)
KEY = ("digest", "rps_prefix", "chat")
CAPS = ["multillm_context_retrieve", "multillm_context_prompt_cache"]


def body(n: int, edit: bool = False) -> bytes:
    msgs = [{"role": "system", "content": "You are Mira."}]
    for i in range(n):
        said = f"TURN {i} " * 30 if edit and i == 2 else f"turn {i} " * 30     # as long: the same fit
        msgs += [{"role": "user", "content": said}, {"role": "assistant", "content": f"reply {i} " * 30}]
    msgs.append({"role": "user", "content": "and now?"})
    return json.dumps({"model": "m", "messages": msgs, "capabilities": CAPS},
                      ensure_ascii=False, separators=(",", ":")).encode()


def turn(memory: LastTurns, raw: bytes, budget: int):
    b, prior = resume.parse_request(memory, KEY, "chat", raw)
    (plan,) = paging.plan_candidates("chat", b, [budget], IDS, strip=paging.EDGE_FIELDS,
                                     prompt_cache=True, prior=prior)
    resume.keep(memory, KEY, raw, b, prior)
    return plan, prior


def full(raw: bytes, budget: int):
    (plan,) = paging.plan_candidates("chat", validation.parse_request("chat", raw), [budget], IDS,
                                     strip=paging.EDGE_FIELDS, prompt_cache=True)
    return plan


def prefixes(prior) -> list:
    return [v for k, v in prior.prep.walks.items() if k[0] == "prefix"]


def test_a_steady_turn_takes_the_last_turns_prefix_and_sends_the_same_bytes():
    memory, budget, taken = LastTurns(), 6000, 0
    plan, prior = turn(memory, body(30), budget)
    for n in range(31, 40):
        was = prefixes(prior)
        plan, prior = turn(memory, body(n), budget)
        assert plan.encoded("m") == full(body(n), budget).encoded("m")
        now = prefixes(prior)
        taken += bool(now and now[0] in was)    # the same object: no group walked again
    assert taken >= 5      # between the prompt cache's steps, every turn


def test_a_turn_whose_paged_groups_changed_makes_its_own():
    memory, budget = LastTurns(), 6000
    turn(memory, body(30), budget)
    plan, prior = turn(memory, body(31), budget)
    was = prefixes(prior)
    raw = body(31, edit=True)       # an early, paged message edited, the fit unchanged
    plan, prior = turn(memory, raw, budget)
    assert plan.encoded("m") == full(raw, budget).encoded("m")
    assert prefixes(prior) and not set(map(id, prefixes(prior))) & set(map(id, was))
