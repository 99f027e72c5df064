"""A turn resumed from the session's last one gives what the full path gives, byte for
byte (docs/design.md §5.13, issue 40).

A hypothesis property drives random sequences of turns of one session — append an
exchange, swipe, regenerate, edit an old message, a sliding client window, tool loops,
a changed model, max tokens, system or tools, a step crossed, bodies that turn invalid
in their new part only, bodies a client encodes its own way — through both paths and
compares the parsed body, every candidate's upstream bytes, pages (ids, digests,
bytes, items), sizes, recall's moments, dropped counts and errors.
"""

from __future__ import annotations

import json
from itertools import accumulate, cycle
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from multillm_edge import formats
from multillm_edge.formats import breakpoints
from multillm_edge.base.errors import EdgeError
from multillm_edge.core import compaction, last_turns, paging, prepared, recall, resume, validation
from multillm_edge.core.config import MAX_PAGE_BYTES
from multillm_edge.core.last_turns import LastTurns
from multillm_edge.core.pages import PageSigner, canonical_bytes
from multillm_edge.search import STATE
from multillm_edge.search.docs import CACHE

SIGNER = PageSigner(b"resume-test-secret-0123456789abcdef", b"resume-previous-secret-0123456789")
IDS = SIGNER.page_ids("roleplay", "p_resume", "rps_resume", 3)
OTHER_IDS = SIGNER.page_ids("roleplay", "p_resume", "rps_resume", 4)   # a new policy revision
KEY = ("digest", "rps_resume", "chat")
SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

WORDS = ["lantern", "harbour", "whale", "🎭", "港口", "é", "\"q\"", "\\", "\n", "\u2028", "x" * 40]
text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)


def enc(obj, style: str = "compact") -> bytes:
    if style == "ascii":
        return json.dumps(obj, separators=(",", ":")).encode()
    if style == "spaced":
        return json.dumps(obj, ensure_ascii=False).encode()
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


# -- one session's turns, in each wire format ---------------------------------------

def user(fmt, t):
    return {"role": "user", "content": t}


def reply(fmt, t):
    if fmt == "messages":
        return {"role": "assistant", "content": [{"type": "text", "text": t}]}
    return {"role": "assistant", "content": t}


def tool_loop(fmt, n, t):
    cid = f"call_{n}"
    if fmt == "chat":
        return [{"role": "assistant", "content": None, "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": "roll", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": cid, "content": t}]
    if fmt == "responses":
        return [{"type": "function_call", "call_id": cid, "name": "roll", "arguments": "{}"},
                {"type": "function_call_output", "call_id": cid, "output": t}]
    return [{"role": "assistant", "content": [{"type": "tool_use", "id": cid, "name": "roll", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, "content": t}]}]


BAD_TAILS = [            # the new part only turns invalid: bytes spliced after the last item
    b',{"role":5,"content":"x"}', b',7', b',{"role":"user","content":NaN}', b',{"role":"user","content":1e999}',
    b',' + b'[' * 300 + b']' * 300, b',{"role":"user","content":"\xff\xfe"}',
    b',{"role":"user","content":"\\ud800"}', b',', b',{"role":"user","content":"x"', b',{"role":"user",}',
    b',{"role":"user","content":"' + b'9' * 10 + b'"}],"messages":[{"role":"user","content":"dup"}]}',
]


class Session:
    """What a client sends, turn after turn: a history, the fields around it, where the
    history stands among them, how the client encodes."""

    def __init__(self, fmt, first, style, extra):
        self.fmt, self.first, self.style = fmt, first, style
        self.key = "input" if fmt == "responses" else "messages"
        self.items = [{"role": "system", "content": "You are Mira."}] if fmt != "messages" else []
        self.fields = {"model": "openai:gpt-4o", "max_tokens": 300, **extra}
        self.n = 0

    def body(self) -> dict:
        h = {self.key: list(self.items)}
        return {**h, **self.fields} if self.first else {**self.fields, **h}

    def raw(self, bad: bytes | None = None) -> bytes:
        out = enc(self.body(), self.style)
        if bad is not None:     # spliced in after the history's last item
            at = out.index(enc(self.items, self.style)) + len(enc(self.items, self.style)) - 1
            out = out[:at] + bad + out[at:]
        return out


OPS = st.one_of(
    st.tuples(st.just("append"), text, text),
    st.tuples(st.just("append"), text, text),
    st.tuples(st.just("tools"), text, text),
    st.tuples(st.just("swipe"), text, text),
    st.tuples(st.just("regenerate"), text, text),
    st.tuples(st.just("edit"), st.integers(0, 200), text),
    st.tuples(st.just("slide"), st.integers(1, 3), text),
    st.tuples(st.just("field"), st.sampled_from(["model", "max_tokens", "system", "tools", "temperature"]), text),
    st.tuples(st.just("big"), st.integers(20, 60), text),
    st.tuples(st.just("bad"), st.sampled_from(range(len(BAD_TAILS))), text),
    st.tuples(st.just("style"), st.sampled_from(["compact", "ascii", "spaced"]), text),
    st.tuples(st.just("continue"), text, text),
    st.tuples(st.just("dup"), text, text),
    st.tuples(st.just("protect"), st.integers(0, 200), text),
    st.tuples(st.just("anchor"), text, text),
)


def apply(s: Session, op) -> bytes:
    kind, a, b = op
    items = s.items
    if kind == "append":
        items += [reply(s.fmt, a), user(s.fmt, b)] if items else [user(s.fmt, b)]
    elif kind == "tools":
        s.n += 1
        items += tool_loop(s.fmt, s.n, a)
    elif kind == "swipe":
        last = max((i for i, m in enumerate(items) if m.get("role") == "assistant"), default=None)
        if last is not None:
            items[last] = reply(s.fmt, a)
    elif kind == "edit" and items:
        i = a % len(items)
        if items[i].get("role") in ("user", "system"):
            items[i] = {**items[i], "content": b}
    elif kind == "slide":
        users = [i for i, m in enumerate(items) if m.get("role") == "user" and type(m.get("content")) is str]
        if len(users) > a + 1:
            keep = items[:1] if s.fmt != "messages" else []
            s.items = keep + items[users[a]:]
    elif kind == "field":
        if a == "model":
            s.fields["model"] = "openai:gpt-4o-mini" if s.fields["model"] == "openai:gpt-4o" else "openai:gpt-4o"
        elif a == "max_tokens":
            s.fields["max_tokens"] = 100 + len(b)
        elif a == "system" and s.fmt == "messages":
            s.fields["system"] = b
        elif a == "tools":
            s.fields["tools"] = [{"type": "function", "function": {"name": "roll", "parameters": {"d": b}}}]
        else:
            s.fields["temperature"] = len(b) / 10
    elif kind == "big":
        items += [reply(s.fmt, b * a), user(s.fmt, b)]
    elif kind == "bad":
        if items:
            return s.raw(BAD_TAILS[a])
    elif kind == "style":
        s.style = a
    elif kind == "continue":    # the player's last turn withdrawn, the reply continued
        if len(items) > 1 and items[-1].get("role") == "user":
            items.pop()
        items.append(reply(s.fmt, a))
    elif kind == "anchor":      # a reply with two of the client's own breakpoints (§5.7)
        block = {"type": "text", "text": a or "-", "cache_control": {"type": "ephemeral"}}
        items += [{"role": "assistant", "content": [block, block]}, user(s.fmt, b)]
    elif kind == "protect" and items:     # context_protected_indices (§5.6)
        s.fields["context_protected_indices"] = [a % len(items)]
    elif kind == "dup":         # the history's key again, after every other field
        out = s.raw()
        return out[:-1] + b',"' + s.key.encode() + b'":' + enc([user(s.fmt, a)]) + b"}"
    return s.raw()


# -- the two paths ------------------------------------------------------------------

def _error(e: EdgeError) -> tuple:
    return ("error", e.status, e.code, str(e), sorted(getattr(e, "figures", {}).items()))


def outcome(fmt, raw, budgets, options, parse) -> tuple:
    """Everything a turn's answer is made of, or its error."""
    try:
        body, prior = parse(raw)
        if options["paging"]:
            plans = paging.plan_candidates(fmt, body, budgets, options["ids"], strip=paging.EDGE_FIELDS,
                                           max_page_bytes=options.get("max_page_bytes", MAX_PAGE_BYTES),
                                           search=options["search"], recalling=options["recall"],
                                           prompt_cache=options["cache"], prior=prior,
                                           breakpoints=[options.get("anchors", False)] * len(budgets))
        else:
            plans = compaction.compact_candidates(fmt, body, budgets, strip=("models",), prior=prior)
    except EdgeError as e:
        return _error(e), None, None
    out = []
    for p in plans:
        if isinstance(p, EdgeError):
            out.append(_error(p))
            continue
        out.append((p.encoded("upstream-model"), p.size, p.dropped, p.as_received,
                    [(q.page_id, q.sha256, q.body, canonical_bytes(q.items)) for q in p.pages],
                    [tuple(m) for m in p.recall], p.fit,
                    p.superseded and [q.page_id for q in p.superseded({len(q.body) for q in p.pages})]))
    return ("ok", enc(unholed(body, prior)), out), body, prior


def unholed(body: dict, prior) -> dict:
    """``body`` with the items a kept turn held as bytes only (``prepared.HOLE``, §5.13)
    parsed again from those bytes, in a copy: what the full path parses."""
    prep = prior.prep if prior is not None else None
    if prep is None or not prep.holey:
        return body
    items = list(prep.items)
    for gi, g in enumerate(prep.groups):
        if items[g.start] is prepared.HOLE:
            items[g.start:g.end] = json.loads(prep.kept_turn.group_bytes(gi))
    return {**body, prep.mod.ITEMS_KEY: items}


def run_sequence(fmt, first, style, extra, ops, budgets, options, start=0, note=None):
    memory = LastTurns()
    s = Session(fmt, first, style, extra)
    for i in range(start):       # a chat already under way: long enough to page
        s.items += [user(fmt, f"*leans on the rail* Port {i}? " * (1 + i % 4)),
                    reply(fmt, f"*Mira smiles* Port {i}, the singing harbour. " * (2 + i % 5))]
    s.items.append(user(fmt, "hello"))
    key = ("digest", "rps_resume", fmt)
    reused = 0
    for op in [("regenerate", "", "")] + ops:
        raw = apply(s, op)
        full, _, _ = outcome(fmt, raw, budgets, options,
                             lambda r: (validation.parse_request(fmt, r), None))
        if options.get("forget"):       # no analysis kept: recall reads every exchange anew
            STATE.reset()
            CACHE.clear()
        got, body, prior = outcome(fmt, raw, budgets, options,
                                   lambda r: resume.parse_request(memory, key, fmt, r))
        assert got == full, (op, raw[-300:])
        if prior is not None:
            assert prior.brackets == validation.bracket_count(raw), op      # exact, resumed or not
            reused += prior.used
            prep = prior.prep       # its pageable groups (carried on when resumed) as if made anew
            if prep is not None and prep.items is not None:
                got, last_user = prep.all_pageable
                assert got == [gi for gi, g in enumerate(prep.groups[:last_user])
                               if g.kind != formats.STANDALONE and g.complete], op
            resume.keep(memory, key, raw, body, prior)
            kept = memory.get(key)      # its grid ends carried turn to turn: as if made anew
            if kept is not None and kept.ends is not None:
                assert kept.ends == list(accumulate([n + 1 for n in kept.inner])), op
            if kept is not None:    # every group's bytes: its own, or made again from its block page
                made = list(map(kept.group_bytes, range(len(kept.groups))))
                # its items: holes exactly where a piece's block page holds the group,
                # whole there (every item of the group); parsed again, those bytes
                holes = [gi for gi, g in enumerate(kept.groups) if kept.items[g.start] is prepared.HOLE]
                assert holes == [gi for a, b in resume._block_spans(kept.piece_end) for gi in range(a, b + 1)], op
                items = list(kept.items)
                for gi in holes:
                    g = kept.groups[gi]
                    assert items[g.start:g.end] == [prepared.HOLE] * (g.end - g.start), op
                    items[g.start:g.end] = json.loads(made[gi])
                assert prepared.HOLE not in items, op
                assert made == prepared._group_bytes(items, kept.groups), op
                assert len(kept.sizes) == len(kept.groups), op      # each group's items counted
                if note is not None:
                    note(f"groups held inside block pages: {kept.group_raw.count(None) > 0}")
            if kept is not None and kept.marks is not None:     # and its breakpoints' counts
                made = list(map(kept.group_bytes, range(len(kept.groups))))
                assert kept.marks == list(accumulate(map(breakpoints.count, made))), op
    return reused


@SETTINGS
@given(fmt=st.sampled_from(["chat", "chat", "responses", "messages"]), first=st.booleans(),
       style=st.sampled_from(["compact", "compact", "compact", "ascii", "spaced"]),
       extra=st.sampled_from([{}, {"temperature": 0.5, "stream": True}, {"models": ["openai:gpt-4o-mini"]}]),
       ops=st.lists(OPS, min_size=1, max_size=14),
       start=st.sampled_from([0, 0, 10, 30, 60]),
       budget=st.integers(600, 6000), paging_on=st.booleans(), search=st.booleans(),
       recall=st.booleans(), cache=st.booleans(), anchors=st.booleans(),
       ids=st.sampled_from([IDS, OTHER_IDS]))
def test_resumed_turns_answer_as_the_full_path(fmt, first, style, extra, ops, start, budget, paging_on,
                                               search, recall, cache, anchors, ids):
    caps = ["multillm_context_retrieve"] + (["multillm_context_recall"] if recall else []) \
        + (["multillm_context_prompt_cache"] if cache else [])
    extra = {**extra, "capabilities": caps}
    reused = run_sequence(fmt, first, style, extra, ops, [budget, budget * 2],
                          {"paging": paging_on, "search": search, "recall": recall, "cache": cache, "ids": ids,
                           "anchors": anchors},     # a chat provider declaring cache_breakpoints
                          start, event)
    event(f"turns resumed: {min(reused, 3)}{'+' if reused >= 3 else ''}")


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fmt=st.sampled_from(["chat", "responses", "messages"]),
       style=st.sampled_from(["compact", "compact", "ascii"]),
       ops=st.lists(OPS, min_size=1, max_size=10), budget=st.integers(2500, 9000),
       recall=st.booleans(), anchors=st.booleans(), ids=st.sampled_from([IDS, OTHER_IDS]),
       once=st.lists(st.booleans(), min_size=1, max_size=6), forget=st.booleans())
def test_turns_resumed_over_block_pages_answer_as_the_full_path(fmt, style, ops, budget, recall, anchors, ids,
                                                                 once, forget):
    """The same, on a chat long enough for block pages under the prompt cache, each
    turn kept whole or holding its history once (the groups inside block pages only
    there, bytes and parsed items, §5.13), in any order: every later turn — appended,
    edited, cut, re-encoded, signed anew — answers as the full path, recall's choice
    included when no analysis is kept (``forget``: each exchange read from its bytes)."""
    caps = ["multillm_context_retrieve", "multillm_context_prompt_cache"] \
        + (["multillm_context_recall"] if recall else [])
    policy = cycle(once)
    with mock.patch.object(resume, "_holds_once", lambda *_: next(policy)):
        run_sequence(fmt, True, style, {"capabilities": caps}, ops, [budget, budget * 2],
                     {"paging": True, "search": False, "recall": recall, "cache": True, "ids": ids,
                      "anchors": anchors, "forget": forget}, 60, event)


def port_session(max_bytes: int, scale: int = 1) -> tuple:
    """(a LastTurns of ``max_bytes``, a 60-exchange chat session under the prompt cache,
    its messages ``scale`` times as long)."""
    caps = {"capabilities": ["multillm_context_retrieve", "multillm_context_prompt_cache"]}
    memory, s = LastTurns(max_bytes=max_bytes), Session("chat", True, "compact", caps)
    for i in range(60):
        s.items += [user("chat", f"*leans* Port {i}? " * 8 * scale),
                    reply("chat", f"*Mira smiles* Port {i}. " * 12 * scale)]
    return memory, s


def kept_turn(memory: LastTurns, s: Session, text: str) -> tuple:
    """The session's next turn asking ``text`` (resumed where it can be), planned with
    recall on a 4,000-byte budget and kept: (its raw body, its Prior)."""
    s.items.append(user("chat", text))
    raw = s.raw()
    body, prior = resume.parse_request(memory, KEY, "chat", raw)
    paging.plan_candidates("chat", body, [4000], IDS, prior=prior, prompt_cache=True, recalling=True)
    resume.keep(memory, KEY, raw, body, prior)
    return raw, prior


def test_a_kept_turn_holds_the_groups_inside_its_block_pages_once():
    """When it would not fit whole (here: a bound it overflows), their bytes are the
    block pages' (the pages' bodies compare the next body), and the body is kept only
    past the verified groups: the history is held once, not three times (body, groups'
    bytes, block pages), and each next turn still reuses all it shares."""
    memory, s = port_session(350_000)
    for turn in range(3):
        raw, prior = kept_turn(memory, s, f"hello {turn}")
        assert prior.reused == (len(prior.prep.groups) - 2 if turn else 0)
        kept = memory.get(KEY)
        inside = [g for a, b in kept.blocks for g in range(a, b + 1)]
        assert inside and all(kept.group_raw[g] is None for g in inside)
        assert kept.cost <= memory.max_bytes * last_turns.MAX_SHARE
        assert len(kept.raw) < len(raw) - sum(kept.inner[:kept.piece_end[-1]])     # the body past the pieces
        assert b",".join(p[1:-1] for p in kept.pieces) == b",".join(r[1:-1] for r in prepared._group_bytes(
            s.items, kept.groups[:kept.piece_end[-1]]))
        # each piece's comma where its bytes end in the body (the carried ones' kept)
        assert kept.piece_comma == [a + len(p) - 2 for a, p in zip(kept.piece_at, kept.pieces)]
        assert all(raw[c:c + 1] == b"," for c in kept.piece_comma)
        # nor parsed: their items are holes, parsed again when a turn reads them
        assert kept.holed > 0 and all(kept.items[kept.groups[g].start] is prepared.HOLE for g in inside)
        s.items.append(reply("chat", f"*nods* {turn}"))
    # with room, the next turn keeps it whole again: one aligned compare, all its bytes
    memory.max_bytes = 1 << 30
    raw, prior = kept_turn(memory, s, "and now?")
    kept = memory.get(KEY)
    assert prior.used and not kept.pieces and kept.raw == raw and None not in kept.group_raw
    assert not kept.holed and kept.items == s.items


def test_a_session_whose_body_and_group_bytes_pass_the_share_is_kept_held_once(monkeypatch):
    """Held once (§5.13), an entry holds its body's bytes about once, not the body and
    its groups' bytes: a turn whose body and groups' bytes together pass a session's
    share, but whose entry held once fits it, is counted and kept, and the next turn
    resumes from it (refused before it was counted: every turn of a 4,500-exchange
    chat took the full path, bench/README.md)."""
    with monkeypatch.context() as m:        # what it holds once, with room for it whole
        m.setattr(resume, "_holds_once", lambda *_: True)
        memory, s = port_session(1 << 30, scale=12)
        raw, prior = kept_turn(memory, s, "hello")
        once, both = memory.get(KEY).cost, len(raw) + prior.prep.sum_inner
    assert once < both
    memory, s = port_session(once + both, scale=12)     # its share between the two
    raw, prior = kept_turn(memory, s, "hello")
    kept = memory.get(KEY)
    assert kept is not None and kept.pieces and kept.cost <= memory.max_bytes * last_turns.MAX_SHARE
    assert len(raw) + prior.prep.sum_inner > memory.max_bytes * last_turns.MAX_SHARE
    _, prior = kept_turn(memory, s, "and now?")
    assert prior.used and prior.reused == len(prior.prep.groups) - 2


def test_a_body_differing_at_a_pieces_edge_shares_only_the_groups_before():
    """The pieces (block pages' bodies) compare the next body (§5.13): a body whose last
    byte inside a piece differs, or that ends right there (no comma after it), shares
    the groups before that piece's last one, not the piece; one whose first byte
    differs, none of the piece's; the same body whole shares every group but the last."""
    memory, s = port_session(350_000)
    kept_turn(memory, s, "hello")
    kept = memory.get(KEY)
    assert len(kept.pieces) > 1
    s.items += [reply("chat", "*nods*"), user("chat", "and now?")]
    raw = s.raw()
    assert resume._shared(kept, raw) == len(kept.groups) - 1
    for k, comma in enumerate(kept.piece_comma):
        assert raw[comma:comma + 1] == b","
        flipped = raw[:comma - 1] + bytes([raw[comma - 1] ^ 1]) + raw[comma:]
        assert resume._shared(kept, flipped) == kept.piece_end[k] - 1, k
        at = kept.piece_at[k]       # its first byte: no group of it
        flipped = raw[:at] + bytes([raw[at] ^ 1]) + raw[at + 1:]
        assert resume._shared(kept, flipped) == (kept.piece_end[k - 1] if k else 0), k
        assert resume._shared(kept, raw[:comma]) == kept.piece_end[k] - 1, k
        assert resume._shared(kept, raw[:comma] + b"]") == kept.piece_end[k] - 1, k


def test_a_turn_without_paging_after_one_held_once_sends_the_history_the_full_path_does(monkeypatch):
    """Held once, a kept turn's items inside block pages are holes (§5.13). The
    session's next turn drops paging (no capability): it fits, and goes as received
    under the provider's name for the model — encoded from the groups' bytes, never
    from the parse with holes: the bytes the full path sends."""
    monkeypatch.setattr(resume, "_holds_once", lambda *_: True)
    caps = {"capabilities": ["multillm_context_retrieve", "multillm_context_prompt_cache"]}
    memory, s = LastTurns(), Session("chat", True, "compact", caps)
    for i in range(60):
        s.items += [user("chat", f"*leans* Port {i}? " * 8), reply("chat", f"*Mira smiles* Port {i}. " * 12)]
    s.items.append(user("chat", "hello"))
    raw = s.raw()
    body, prior = resume.parse_request(memory, KEY, "chat", raw)
    paging.plan_candidates("chat", body, [4000], IDS, prior=prior, prompt_cache=True)
    resume.keep(memory, KEY, raw, body, prior)
    assert memory.get(KEY).holed
    del s.fields["capabilities"]
    s.items += [reply("chat", "*nods*"), user("chat", "and now?")]
    raw = s.raw()
    body, prior = resume.parse_request(memory, KEY, "chat", raw)
    (plan,) = compaction.compact_candidates("chat", body, [1 << 20], strip=("models",), prior=prior)
    (full,) = compaction.compact_candidates("chat", validation.parse_request("chat", raw), [1 << 20],
                                            strip=("models",))
    assert prior.used and plan.as_received and full.as_received
    assert plan.encoded("upstream-model") == full.encoded("upstream-model")


def test_a_steady_session_reuses_its_history():
    """The property above could pass with nothing ever reused: a plain appending session
    in the edge's own encoding reuses every turn after the first."""
    ops = [("append", f"reply {i}", f"turn {i}") for i in range(6)]
    options = {"paging": True, "search": False, "recall": True, "cache": True, "ids": IDS}
    for fmt in ("chat", "responses", "messages"):
        for first in (True, False):
            caps = {"capabilities": ["multillm_context_retrieve", "multillm_context_recall"]}
            # (a Messages history starts with one exchange: nothing to share before the second)
            assert run_sequence(fmt, first, "compact", caps, ops, [700], options) == 6 - (fmt == "messages")


def recalling_turns(monkeypatch, answer: str):
    """A 60-exchange chat under the prompt cache with recall, asked turn after turn:
    (the keys each ranking is given — two a turn: resumed, then the full path —, an
    iterator of each turn's fit: planned resumed, answered as the full path, kept,
    then ``answer``ed)."""
    caps = {"capabilities": ["multillm_context_retrieve", "multillm_context_prompt_cache",
                             "multillm_context_recall"]}
    memory, s = LastTurns(), Session("chat", True, "compact", caps)
    for i in range(60):
        s.items += [user("chat", f"*leans* Port {i}? " * 8), reply("chat", f"*Mira smiles* Port {i}. " * 12)]
    seen, rank = [], recall.rank
    monkeypatch.setattr(recall, "rank", lambda *a, **k: seen.append(k["keys"]) or rank(*a, **k))

    def turns():
        for turn in range(40):
            s.items.append(user("chat", f"Where did the whales sing, by port {turn}?"))
            raw = s.raw()
            body, prior = resume.parse_request(memory, KEY, "chat", raw)
            (plan,) = paging.plan_candidates("chat", body, [12000], IDS, prior=prior, prompt_cache=True,
                                             recalling=True)
            (full,) = paging.plan_candidates("chat", json.loads(raw), [12000], IDS, prompt_cache=True,
                                             recalling=True)
            assert plan.encoded("m") == full.encoded("m")
            resume.keep(memory, KEY, raw, body, prior)
            s.items.append(reply("chat", answer))
            yield plan.fit.k
    return seen, turns()


def test_a_steady_recalling_turn_ranks_with_the_keys_the_last_turn_kept(monkeypatch):
    """Between steps a turn pages what the last one paged: recall takes that turn's
    paged exchanges and their keys' list as they were (no key made again), and answers
    as the full path."""
    seen, turns = recalling_turns(monkeypatch, "*nods*")
    fits = [next(turns) for _ in range(4)]
    steady = [t for t in range(1, 4) if fits[t] == fits[t - 1]]
    assert steady and all(seen[2 * t] is seen[2 * t - 2] for t in steady)


def test_a_recalling_turn_crossing_a_step_takes_the_last_turns_paged_exchanges_it_shares(monkeypatch):
    """A turn that crosses a step pages what the last one did and more (§5.7): recall
    takes the last turn's paged exchanges of the pages both make (their keys the same
    objects, none made again) and makes only the rest, and answers as the full path."""
    seen, turns = recalling_turns(monkeypatch, "*Mira smiles* On we sail. " * 12)
    fits, steps = [], []
    for turn, fit in enumerate(turns):
        fits.append(fit)
        if turn and fits[-1] != fits[-2]:
            steps.append(turn)
            if len(steps) == 2:
                break
    assert len(steps) == 2
    for t in steps:
        now, last = seen[2 * t], seen[2 * t - 2]
        shared = next((i for i, (a, b) in enumerate(zip(now, last)) if a is not b), len(last))
        assert len(now) > len(last) and shared >= len(last) // 2, (shared, len(last))


def test_a_resumed_turn_counts_the_breakpoints_of_the_groups_it_reuses():
    """Anthropic takes 4 breakpoints a request: the edge fills what the client leaves
    (§5.7). Three of the client's sit in the latest replies the window keeps, which a
    steady turn reuses: counted from the last turn's groups (``Prepared.marks``, carried on), the
    edge adds its window anchor only, turn after turn — never a fifth breakpoint, which
    Anthropic would refuse."""
    memory, key, items = LastTurns(), ("digest", "rps_marks", "messages"), []
    for i in range(30):
        block = {"type": "text", "text": f"*Mira smiles* Port {i}. " * 12}
        if i >= 27:
            block["cache_control"] = {"type": "ephemeral"}
        items += [user("messages", f"*leans* Port {i}, captain? " * 8), {"role": "assistant", "content": [block]}]
    for turn in range(4):
        items.append(user("messages", f"Where now, {turn}?"))
        raw = enc({"model": "m", "max_tokens": 64, "messages": items,
                   "capabilities": ["multillm_context_retrieve", "multillm_context_prompt_cache"]})
        body, prior = resume.parse_request(memory, key, "messages", raw)
        (plan,) = paging.plan_candidates("messages", body, [6000], IDS, strip=paging.EDGE_FIELDS,
                                         prompt_cache=True, prior=prior)
        assert plan.pages and prior.used == (turn > 0)
        assert plan.encoded("m").count(b'"cache_control":') == 4, turn
        resume.keep(memory, key, raw, body, prior)
        assert memory.get(key).marks[-1] == 3
        items.append(reply("messages", f"*points* Port {turn}."))


def small_turn(memory: LastTurns, s: "Session | None" = None) -> tuple:
    """(session, raw) of a three-message chat's turn, planned and kept in ``memory``."""
    if s is None:
        s = Session("chat", True, "compact", {})
        s.items += [user("chat", "a"), reply("chat", "b"), user("chat", "c")]
    raw = s.raw()
    body, prior = resume.parse_request(memory, KEY, "chat", raw)
    paging.plan_candidates("chat", body, [300], IDS, prior=prior)
    resume.keep(memory, KEY, raw, body, prior)
    return s, raw


def test_a_body_not_in_the_edges_encoding_is_not_kept():
    """No group of it stands in the body as the edge encodes it: no turn could resume
    from it, so the memory holds nothing for it (and forgets the session's last)."""
    memory = LastTurns()
    s, _ = small_turn(memory)
    assert len(memory) == 1
    s.style = "spaced"
    small_turn(memory, s)
    assert len(memory) == 0 and memory.held_bytes() == 0


def test_another_owner_or_format_reuses_nothing():
    memory = LastTurns()
    _, raw = small_turn(memory)
    for other in (("other-digest", KEY[1], "chat"), (KEY[0], "rps_other", "chat"), (KEY[0], KEY[1], "messages")):
        assert resume.parse_request(memory, other, "chat", raw)[1].last is None
    assert resume.parse_request(memory, KEY, "chat", raw)[1].reused == 2


def test_a_new_revision_makes_its_own_page_ids():
    """Kept pages carry ids signed for the last turn's revision: a turn signing for
    another one makes its own (the property test mixes both id makers too)."""
    memory = LastTurns()
    s = Session("chat", True, "compact", {"capabilities": ["multillm_context_retrieve"]})
    for i in range(8):
        s.items += [user("chat", f"turn {i} " * 30), reply("chat", f"reply {i} " * 30)]
    s.items.append(user("chat", "now"))
    for ids in (IDS, OTHER_IDS):
        raw = s.raw()
        body, prior = resume.parse_request(memory, KEY, "chat", raw)
        (plan,) = paging.plan_candidates("chat", body, [1500], ids, prior=prior)
        resume.keep(memory, KEY, raw, body, prior)
        assert plan.pages and all(p.page_id == ids(p.sha256) for p in plan.pages)


def test_the_memory_is_bounded_and_evicts_the_least_recent():
    memory = LastTurns(max_bytes=10 * 800)
    entry = lambda n: last_turns.LastTurn(b"x" * n, b"", [], [], [], [], [], {}, {}, {}, 0, 0, 8 * n)  # noqa: E731
    for k in range(12):
        memory.put(k, entry(100))
        memory.get(0)                    # 0 stays the most recent
    assert memory.total <= memory.max_bytes and len(memory) == 10
    assert memory.get(0) is not None and memory.get(1) is None
    memory.put("huge", entry(600))       # over half the bound: never kept
    assert memory.get("huge") is None and memory.total <= memory.max_bytes


@pytest.mark.parametrize("recalling", [False, True])
def test_an_entry_counts_the_bytes_it_holds(recalling):
    """An entry's ``cost`` is what forgetting it frees (tracemalloc, CPython), ±25 %
    (the bound is stated in bytes, docs/design.md §5.13), and resumed turns count alike."""
    import gc
    import tracemalloc
    s = Session("chat", True, "compact", {"capabilities": ["multillm_context_retrieve"]
                                          + (["multillm_context_recall"] if recalling else [])})
    for i in range(200):
        s.items += [user("chat", f"*leans* Port {i}, captain? 港口の歌 " * 6),
                    reply("chat", f"*Mira smiles* Port {i} — the singing harbour. " * 8)]
    memory = LastTurns()
    tracemalloc.start()
    for turn in range(3):       # the full path, then two resumed turns
        s.items.append(user("chat", f"Mira, the singing harbour of port {turn}?"))
        raw = s.raw()
        body, prior = resume.parse_request(memory, KEY, "chat", raw)
        paging.plan_candidates("chat", body, [len(raw) // 3], IDS, prior=prior, recalling=recalling)
        resume.keep(memory, KEY, raw, body, prior)
        assert bool(prior.used) == (turn > 0)
        s.items.append(reply("chat", f"*Mira points* Port {turn}."))
        del body, prior, raw
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0]
    cost = memory.total
    memory.clear()
    gc.collect()
    held = kept - tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert 0.75 * held <= cost <= 1.25 * held, (held, cost)


WALKS = {       # scenarios the walk to a fit must not carry over (core/paging.Walk)
    "an early message edited": [("edit", 5, "a much longer early message " * 20), ("append", "r", "u")],
    "the last reply shrunk": [("big", 400, "long "), ("swipe", "short", "")],
    "the window grows past fits": [("append", "reply " * 40, "turn " * 10)] * 6,
    "an exchange protected": [("append", "r", "u"), ("protect", 9, ""), ("protect", 3, "")],
    "a reply continued": [("append", "r", "u"), ("continue", "more " * 30, ""), ("append", "r", "u")],
    "an early message edited, then recalled": [
        ("append", "r", "Mira, sing me the lantern whale song again"),
        ("edit", 5, "the lantern whale song of port two, sung at dusk by the whole crew"),
        ("append", "r", "Mira, the lantern whale song of port two, sung at dusk?")],
}


@pytest.mark.parametrize("scenario", list(WALKS))
def test_the_walk_to_a_fit_resumes_only_where_it_may(scenario):
    # a small page limit: the prompt cache's first fit answers when a stop's page is over it
    options = {"paging": True, "search": False, "recall": False, "ids": IDS, "max_page_bytes": 1200}
    for cache, anchors, recall in ((False, False, False), (True, False, False), (True, True, False),
                                   (True, True, True), (False, False, True)):
        for fmt in ("chat", "messages"):
            for budget in range(1000, 9000, 250):
                caps = {"capabilities": ["multillm_context_retrieve"]
                        + (["multillm_context_prompt_cache"] if cache else [])}
                run_sequence(fmt, True, "compact", caps, [("append", "r", "u")] + WALKS[scenario],
                             [budget], {**options, "cache": cache, "anchors": anchors, "recall": recall},
                             start=40)


# -- the bracket count (issue 46) ------------------------------------------------------

def schema_tools(n: int) -> list:
    """n tool schemas, each nesting a few objects and arrays: a head of ~12 n brackets."""
    return [{"type": "function", "function": {
        "name": f"tool_{i}", "description": "Roll dice [for the scene].",
        "parameters": {"type": "object", "required": ["dice"], "properties": {
            "dice": {"type": "array", "items": {"type": "object", "properties": {"sides": {"type": "integer"}}}},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}}}}}} for i in range(n)]


def long_session(turns: int, tools: int = 200):
    """A chat with a large tool schema before its history, one exchange appended per
    turn, each turn resumed when it can: yields (turn, raw, Prior) after keeping it.
    (Encoded as a client would, one new message at a time.)"""
    memory = LastTurns()
    head = enc({"model": "openai:gpt-4o", "max_tokens": 300, "tools": schema_tools(tools)})[:-1] + b',"messages":['
    items = [enc({"role": "system", "content": "You are Mira."}), enc(user("chat", "hello"))]
    for turn in range(1, turns + 1):
        raw = head + b",".join(items) + b"]}"
        body, prior = resume.parse_request(memory, KEY, "chat", raw)
        prepared.Prepared("chat", body, None, prior=prior)       # takes the reused groups
        resume.keep(memory, KEY, raw, body, prior)
        yield turn, raw, prior
        items += [enc(reply("chat", f"*Mira* [{turn}] {{the harbour}}")), enc(user("chat", f"turn {turn} [x]"))]


def test_a_long_session_counts_its_brackets_as_a_full_parse_does():
    """Each resumed turn's bracket count is the body's, exactly: it does not climb turn
    over turn until resumption stops by itself (2 × MAX_BRACKETS)."""
    for turn, raw, prior in long_session(60):
        assert prior.brackets == validation.parse_json_counted(raw)[1], turn
        assert turn < 3 or prior.used, turn


def test_a_200_tool_session_resumes_on_its_500th_turn():
    counts = []
    for turn, raw, prior in long_session(500):
        counts.append(prior.brackets == validation.bracket_count(raw))     # what the full parse counts
        assert turn < 3 or prior.used, turn
    assert all(counts) and len(counts) == 500


def test_a_memory_error_while_resuming_is_not_taken_for_doubt(monkeypatch):
    """Any doubt about a cut body sends the turn the full path; running out of memory is
    no doubt about the body: it reaches the memory handling (issue 46)."""
    memory = LastTurns()
    s = Session("chat", True, "compact", {})
    s.items += [user("chat", "a"), reply("chat", "b"), user("chat", "c")]
    body, prior = resume.parse_request(memory, KEY, "chat", s.raw())
    prepared.Prepared("chat", body, None, prior=prior)
    resume.keep(memory, KEY, s.raw(), body, prior)
    s.items += [reply("chat", "d"), user("chat", "e")]
    assert resume.parse_request(memory, KEY, "chat", s.raw())[1].last is not None     # it resumes

    real_parse, real_check, calls = validation.parse_json_counted, validation.check_body, []

    def exhausted(raw, pairs=None):      # only resuming runs out; the full path would not
        if pairs is None:
            return real_parse(raw)
        raise MemoryError

    def exhausted_check(fmt, body):
        calls.append(fmt)
        if len(calls) == 1:
            raise MemoryError
        return real_check(fmt, body)

    for where, fake in (("parse_json_counted", exhausted), ("check_body", exhausted_check)):
        with monkeypatch.context() as m:
            m.setattr(resume, where, fake)
            with pytest.raises(MemoryError):
                resume.parse_request(memory, KEY, "chat", s.raw())
    with monkeypatch.context() as m:      # any other exception resuming: the full path answers
        m.setattr(resume, "parse_json_counted", lambda raw, pairs=None: real_parse(raw) if pairs is None else 1 / 0)
        body, prior = resume.parse_request(memory, KEY, "chat", s.raw())
        assert prior.last is None and body == json.loads(s.raw())


def test_a_session_counted_and_refused_is_refused_uncounted_until_it_may_fit(monkeypatch):
    """A turn whose body fits a session's share but whose entry, counted, does not is
    refused (§5.13). Its session's next turns are refused before they are counted — at
    what that entry held per body byte they pass the share too — for at most
    ``REFUSED_TURNS`` turns, then one is counted again; once the bound has room, the
    next is counted, kept and resumed from. Another session's turns are counted."""
    with monkeypatch.context() as m:        # what its entry holds, with room for it
        m.setattr(resume, "_holds_once", lambda *_: True)
        memory, s = port_session(1 << 30, scale=12)
        raw, _ = kept_turn(memory, s, "hello")
        once = memory.get(KEY).cost
    assert len(raw) < once
    memory, s = port_session(int((len(raw) + once) / 2 / last_turns.MAX_SHARE), scale=12)
    counted = []
    held = last_turns.held
    monkeypatch.setattr(last_turns, "held", lambda *a: counted.append(len(a[0])) or held(*a))
    kept_turn(memory, s, "hello")
    assert memory.get(KEY) is None and len(counted) == 1      # counted, then refused
    for turn in range(last_turns.REFUSED_TURNS):
        s.items.append(reply("chat", f"*nods* {turn}"))
        _, prior = kept_turn(memory, s, f"turn {turn}")
        assert memory.get(KEY) is None and prior.last is None
    assert len(counted) == 1                    # none of them counted
    other = port_session(memory.max_bytes, scale=12)[1]
    other_key = ("other digest",) + KEY[1:]
    other.items.append(user("chat", "hello"))
    raw = other.raw()
    body, prior = resume.parse_request(memory, other_key, "chat", raw)
    paging.plan_candidates("chat", body, [4000], IDS, prior=prior, prompt_cache=True, recalling=True)
    resume.keep(memory, other_key, raw, body, prior)
    assert len(counted) == 2                    # another session's: counted
    s.items.append(reply("chat", "*nods*"))
    kept_turn(memory, s, "counted again")
    assert len(counted) == 3 and memory.get(KEY) is None
    s.items.append(reply("chat", "*nods*"))
    kept_turn(memory, s, "refused uncounted")
    assert len(counted) == 3
    memory.max_bytes = 1 << 30                  # room for it: counted and kept
    s.items.append(reply("chat", "*nods*"))
    kept_turn(memory, s, "kept")
    assert len(counted) == 4 and memory.get(KEY) is not None
    s.items.append(reply("chat", "*nods*"))
    _, prior = kept_turn(memory, s, "resumed")
    assert prior.used and prior.reused == len(prior.prep.groups) - 2


def test_the_sessions_refused_are_remembered_within_a_bound():
    """At most ``REFUSED_KEPT`` sessions' refusals are remembered, the least recently
    refused forgotten first; a session kept is forgotten there, and so is every one
    when the cache is emptied."""
    from types import SimpleNamespace
    memory = LastTurns(max_bytes=1000)
    for i in range(last_turns.REFUSED_KEPT + 1):
        memory.put(("d", i), SimpleNamespace(cost=600), 300)       # 2 bytes a body byte
    assert not memory.refuses(("d", 0), 300)                        # forgotten
    assert memory.refuses(("d", 1), 300) and memory.refuses(("d", last_turns.REFUSED_KEPT), 300)
    assert not memory.refuses(("d", 1), 200)        # 400 bytes fit the 500-byte share
    assert not memory.refuses(("d", 1), 300)        # and the refusal is forgotten
    memory.put(("d", 2), SimpleNamespace(cost=400), 300)
    assert memory.get(("d", 2)) is not None and not memory.refuses(("d", 2), 10_000)
    memory.clear()
    assert not memory.refuses(("d", 3), 300)
