"""The prompt cache (docs/design.md §5.7): with `multillm_context_prompt_cache` the paged
boundary moves in steps, so between steps a turn writes nothing, sends the same marker
and an append-only window; recall's moments stand after that stable prefix; on Messages
the marker carries one cache breakpoint, never a fifth. Without the capability the
upstream bytes are the seed's, byte for byte."""

from __future__ import annotations

import hashlib
import json

import pytest

from devkit import roleplay as rp
from devkit.plans import created_tools, is_recall, marker_content, marker_ids, unpage
from multillm_edge import formats
from multillm_edge.base.errors import EdgeError
from multillm_edge.core import paging
from multillm_edge.core.pages import PageSigner
from multillm_edge.formats import breakpoints as bp, messages as anthropic

SIGNER = PageSigner(b"bench-signing-secret-of-some-length", b"bench-previous-secret")
IDS = SIGNER.page_ids("roleplay", "a3" * 32, "rps_bench0123456789abcdef", 7)
MAKERS = {"chat": rp.chat_body, "responses": rp.responses_body, "messages": rp.messages_body}


def dumps(o) -> bytes:
    return json.dumps(o, ensure_ascii=False, separators=(",", ":")).encode()


def plan(fmt, body, budget, **kw):
    (p,) = paging.plan_candidates(fmt, body, [budget], IDS, **kw)
    if isinstance(p, EdgeError):
        raise p
    return p


# Upstream bytes measured at 38c7b30, before the capability existed (sha256, page count).
SEED = {
    ("chat", 30, 6000, False): (27, "553d38a875c26b6063391ee38e24dbfc472d8c9d6834916d2a7eaa62a946bdc3"),
    ("chat", 60, 9000, True): (19, "a3ebd9ee9df59b32e27cb3f115d279ee42a3be327b4b6a36c7a98acebdffbaa4"),
    ("chat", 120, 20000, False): (20, "9830cea052cfbb457391717d41aaac202d8eabb336138686d8a7eed191a4f2dc"),
    ("responses", 30, 6000, False): (26, "913ec23d880ed89848fd2624b0ed6942e54d22b4ce2f46610caf2e708c2b7c31"),
    ("responses", 60, 9000, True): (55, "8bce9d320b63b5d217846ec9160495884fdcc89fa4a6fceb6a65e40ce3af7973"),
    ("responses", 120, 20000, False): (103, "d0922d6125d226928906232a4acc9aba385a8216bbe488031de9df77778d260b"),
    ("messages", 30, 6000, False): (26, "50e55a2ab5357a769a70ed0b54496b61ca39129d7cea4e04ecb79a16f96e0dff"),
    ("messages", 60, 9000, True): (15, "2c95189a8848019b2ea8ce88b61e6fb3ec0eaad15a6e5bfb4dca2cc2e1d6dc17"),
    ("messages", 120, 20000, False): (26, "ebf11a20affcd0f9ad807f1511f87e4ef9c6d21194ed88018a47a556cd91935f"),
}


@pytest.mark.parametrize("case", list(SEED))
def test_without_the_capability_the_upstream_bytes_are_the_seeds(case):
    fmt, n, budget, search = case
    p = plan(fmt, MAKERS[fmt](n, capabilities=[formats.TOOL_NAME]), budget, search=search)
    assert (len(p.pages), hashlib.sha256(p.encoded()).hexdigest()) == SEED[case]


# -- a chat growing turn by turn --------------------------------------------------

def turns(fmt: str, n: int, caps: list):
    """Each turn's body: the history up to its t-th genuine user message."""
    mod = formats.get(fmt)
    full = MAKERS[fmt](n, capabilities=caps)
    items = full[mod.ITEMS_KEY]
    for t in [i for i, it in enumerate(items) if mod.classify(it)[0] == formats.USER][1:]:
        yield {**full, mod.ITEMS_KEY: items[:t + 1]}


def paged_bytes(fmt, body, p) -> int:
    """Bytes of the history the plan pages (its items, as the client sent them)."""
    mod = formats.get(fmt)
    sent = {id(x) for x in p.body[mod.ITEMS_KEY]}
    return sum(len(dumps(it)) + 1 for it in body[mod.ITEMS_KEY] if id(it) not in sent)


def window(fmt, p) -> list:
    """The upstream history without recall's message."""
    return [it for it in p.body[formats.get(fmt).ITEMS_KEY] if not is_recall(it)]


@pytest.mark.parametrize("fmt", list(MAKERS))
@pytest.mark.parametrize("recalling", [False, True])
def test_between_steps_a_turn_writes_nothing_and_sends_an_append_only_window(fmt, recalling):
    budget = 20000          # a step of 4,000 bytes: ~6 of these exchanges
    step = paging.step_bytes(budget)
    caps = [formats.TOOL_NAME, formats.PROMPT_CACHE_CAPABILITY]
    before = written = None
    steps = quiet = 0
    for body in turns(fmt, 110, caps):
        p = plan(fmt, body, budget, prompt_cache=True, recalling=recalling)
        assert p.size == len(dumps(p.body)) <= budget
        if not p.pages:
            continue
        ids = {q.page_id for q in p.pages}
        unpaged = plan(fmt, body, budget)              # the seed's rule: only what must go
        extra = paged_bytes(fmt, body, p) - paged_bytes(fmt, body, unpaged)
        biggest = max(len(q.body) for q in p.pages)
        assert 0 <= extra <= step + biggest            # at most one step more than needed
        if before is not None:
            prev_ids, prev_window = before
            if ids == prev_ids:                        # between steps
                quiet += 1
                now, n = window(fmt, p), len(prev_window)
                i = n - 2 if recalling else n - 1      # last turn's window anchor (§5.7)
                assert now[:i] == prev_window[:i] and now[i + 1:n - 1] == prev_window[i + 1:n - 1]
                anchored = bp.anchored(now[i], anthropic.ANCHOR_BLOCKS)   # now a plain message
                assert prev_window[i] == (anchored if fmt == "messages" else now[i])
                assert dumps(window(fmt, p)[0]) == dumps(prev_window[0])   # the marker
                assert not (ids - written)             # no page to write
            else:
                steps += 1
                assert ids - written                   # a step writes its new pages
        if recalling and p.recall:
            items = p.body[formats.get(fmt).ITEMS_KEY]
            assert is_recall(items[-2]) and not is_recall(items[-1])
        written = (written or set()) | ids
        before = (ids, window(fmt, p))
    assert steps >= 2 and quiet >= 3 * steps


@pytest.mark.parametrize("fmt", list(MAKERS))
def test_the_capability_pages_in_steps_the_seed_rule_every_turn(fmt):
    """The contrast the capability exists for: the seed's boundary moves almost every
    turn, the stepped one rarely."""
    caps = [formats.TOOL_NAME]
    moves = {False: 0, True: 0}
    for cache in (False, True):
        prev = None
        for body in turns(fmt, 110, caps):
            p = plan(fmt, body, 20000, prompt_cache=cache)
            ids = frozenset(q.page_id for q in p.pages)
            moves[cache] += ids != prev and prev is not None and bool(ids)
            prev = ids
    assert moves[True] * 3 <= moves[False]


def test_a_413_stays_a_413_and_a_fit_stays_a_fit():
    body = rp.chat_body(40, capabilities=[formats.TOOL_NAME])
    body["messages"][-1]["content"] = "L" * 9000          # the protected latest turn
    for cache in (False, True):
        with pytest.raises(EdgeError) as e:
            plan("chat", body, 8000, prompt_cache=cache)
        assert e.value.code == "context_window_exceeded"
    body = rp.chat_body(40, capabilities=[formats.TOOL_NAME])
    for budget in range(4000, 30000, 1500):
        p = plan("chat", body, budget, prompt_cache=True)
        assert p.size <= budget
        assert dumps(unpage("chat", p.body, p.pages, created_tools("chat", body))) == \
            dumps(paging.strip_edge_fields(body))


# -- anchors: Messages, and chat to a provider declaring cache_breakpoints -----------

EPHEMERAL = {"type": "ephemeral"}


def breakpoints(body: dict) -> int:
    return bp.count(dumps(body))


def markers(body: dict) -> list:
    return [m for m in body["messages"] if marker_ids(marker_content(m))]


def before_latest(body: dict) -> dict:
    """The message right before the latest user turn (and before recall's message)."""
    items = [m for m in body["messages"] if not is_recall(m)]
    return items[-2]


def anchored_plan(fmt, body, budget, recalling=True, **kw):
    """With recall declared (moments or not), the window's anchor is before the latest turn."""
    return plan(fmt, body, budget, prompt_cache=True, breakpoints=[fmt == "chat"],
                recalling=recalling, **kw)


def assert_reversible(fmt, body, p):
    """Unpaging gives back the client's body once the edge's anchor is undone."""
    assert dumps(unpage(fmt, p.body, p.pages, created_tools(fmt, body), client=body)) == \
        dumps(paging.strip_edge_fields(body))


@pytest.mark.parametrize("fmt", ["messages", "chat"])
def test_the_marker_and_the_window_carry_the_anchors_and_the_size_is_exact(fmt):
    body = MAKERS[fmt](60, capabilities=[formats.TOOL_NAME])
    body["messages"].insert(30, {"role": "user", "content": "x"})     # two runs: an unpaired
    body["context_protected_indices"] = [30]                             # user turn kept
    p = anchored_plan(fmt, body, 9000)
    ms = markers(p.body)
    assert len(ms) == 2 and ms[-1] == bp.marker(marker_content(ms[-1]))
    assert ms[0] == formats.marker(marker_content(ms[0]))
    window = before_latest(p.body)
    client = body["messages"][-2]
    assert type(client["content"]) is str and window == {
        **client, "content": [{"type": "text", "text": client["content"], "cache_control": EPHEMERAL}]}
    assert breakpoints(p.body) == 2 and p.size == len(dumps(p.body))
    assert all(b"cache_control" not in q.body for q in p.pages)     # pages: the client's bytes
    assert_reversible(fmt, body, p)


@pytest.mark.parametrize("top", [False, True])
def test_without_recall_the_anchor_ends_the_request_unless_the_client_already_does(top):
    """Without recall the whole request is the next turn's prefix: the anchor goes on its
    last message (measured best, bench_cache.py); a top-level `cache_control` already puts
    a breakpoint there, so the anchor goes one message back."""
    body = rp.messages_body(60, capabilities=[formats.TOOL_NAME])
    if top:
        body["cache_control"] = dict(EPHEMERAL)
    p = anchored_plan("messages", body, 9000, recalling=False)
    sent, client = p.body["messages"], body["messages"]
    at = -2 if top else -1
    assert sent[at] == bp.anchored(client[at], anthropic.ANCHOR_BLOCKS) != client[at]
    others = [m for m in sent if m is not sent[at] and not marker_ids(marker_content(m))]
    assert all(any(m is c for c in client) for m in others)      # the rest: the client's own
    assert breakpoints(p.body) == 2 + top and p.size == len(dumps(p.body))
    assert_reversible("messages", body, p)


def test_chat_without_the_setting_and_responses_get_no_breakpoint():
    for fmt, declared in (("chat", False), ("responses", False), ("responses", True)):
        body = MAKERS[fmt](60, capabilities=[formats.TOOL_NAME])
        p = plan(fmt, body, 9000, prompt_cache=True, breakpoints=[declared])
        assert b"cache_control" not in p.encoded()


def test_a_list_content_takes_the_anchor_on_its_last_block_and_nothing_else_changes():
    body = rp.messages_body(60, capabilities=[formats.TOOL_NAME])
    body["messages"][-2] = {"role": "assistant", "content": [
        {"type": "text", "text": "first"}, {"type": "tool_use", "id": "t1", "name": "roll",
                                            "input": {"cache_control": 1}}]}
    body["messages"].insert(-1, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "6"}, {"type": "text", "text": "go"}]})
    p = anchored_plan("messages", body, 9000)
    client = body["messages"][-2]
    assert before_latest(p.body) == {"role": "user", "content": [
        client["content"][0], {**client["content"][1], "cache_control": EPHEMERAL}]}
    assert p.size == len(dumps(p.body))
    assert_reversible("messages", body, p)


@pytest.mark.parametrize("last", [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                  {"type": "text", "text": ""},
                                  {"type": "text", "text": "mine", "cache_control": EPHEMERAL}])
def test_a_window_that_cannot_take_an_anchor_leaves_it_to_the_marker(last):
    body = rp.messages_body(60, capabilities=[formats.TOOL_NAME])
    body["messages"][-2] = {"role": "assistant", "content": [{"type": "text", "text": "a"}, last]}
    p = anchored_plan("messages", body, 9000)
    assert before_latest(p.body) == body["messages"][-2]           # as the client sent it
    assert markers(p.body)[-1] == bp.marker(marker_content(markers(p.body)[-1]))
    assert breakpoints(p.body) == 1 + ("cache_control" in last) and p.size == len(dumps(p.body))


def test_within_four_the_clients_first_then_the_window_then_the_marker():
    body = rp.messages_body(60, capabilities=[formats.TOOL_NAME])
    body["cache_control"] = {"type": "ephemeral"}               # automatic caching: one slot
    body["system"] = [{"type": "text", "text": "card", "cache_control": {"type": "ephemeral"}}]
    last = body["messages"][-1]
    last["content"] = [{"type": "text", "text": last["content"], "cache_control": {"type": "ephemeral"}}]
    three = anchored_plan("messages", body, 9000)
    assert three.body["cache_control"] == {"type": "ephemeral"}  # passes through unchanged
    assert breakpoints(three.body) == 4                          # theirs, plus the window's
    assert before_latest(three.body) != body["messages"][-2]
    assert all(m == formats.marker(marker_content(m)) for m in markers(three.body))
    assert_reversible("messages", body, three)
    body["tools"] = [{"name": "roll", "description": "d", "input_schema": {"type": "object"},
                      "cache_control": {"type": "ephemeral"}}]
    four = anchored_plan("messages", body, 9000)
    assert breakpoints(four.body) == 4 and four.size == len(dumps(four.body))
    assert all(m == formats.marker(marker_content(m)) for m in markers(four.body))
    assert before_latest(four.body) == body["messages"][-2]


def test_a_breakpoint_inside_a_paged_exchange_goes_with_its_page():
    body = rp.messages_body(60, capabilities=[formats.TOOL_NAME])
    first = body["messages"][0]
    first["content"] = [{"type": "text", "text": first["content"],
                         "cache_control": {"type": "ephemeral"}}]
    p = anchored_plan("messages", body, 9000)
    [page] = [q for q in p.pages if first in q.items]
    assert b'"cache_control":{"type":"ephemeral"}' in page.body
    assert breakpoints(p.body) == 2                              # the marker's and the window's


def test_a_window_paged_whole_leaves_the_anchor_to_the_marker():
    body = rp.messages_body(8, capabilities=[formats.TOOL_NAME])
    body["messages"][-1]["content"] = "L" * 3000                 # the protected latest turn
    p = anchored_plan("messages", body, 4450)
    assert [m["role"] for m in p.body["messages"]] == ["user", "user"]   # marker, latest turn
    assert p.body["messages"][0] == bp.marker(marker_content(p.body["messages"][0]))
    assert breakpoints(p.body) == 1 and p.size == len(dumps(p.body)) <= 4450


@pytest.mark.parametrize("fmt", ["messages", "chat"])
def test_anchors_never_turn_a_fit_into_a_413(fmt):
    """At every budget the seed's rule fits, the anchored plan fits (without its
    anchors where their bytes would not); where the seed's is a 413, the same 413."""
    body = MAKERS[fmt](12, capabilities=[formats.TOOL_NAME])
    body["messages"][-1]["content"] = "L" * 3000
    fits = anchored = 0
    for budget in range(3000, 6000, 7):
        try:
            seed = plan(fmt, body, budget)
        except EdgeError as e:
            with pytest.raises(EdgeError) as again:
                anchored_plan(fmt, body, budget)
            assert (again.value.code, again.value.details) == (e.code, e.details)
            continue
        p = anchored_plan(fmt, body, budget)
        fits += 1
        anchored += b"cache_control" in p.encoded()
        assert p.size == len(dumps(p.body)) <= budget and seed.size <= budget
    assert fits and anchored < fits                  # some budgets fit only without them
