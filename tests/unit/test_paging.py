"""Example tests of the paging plan on realistic roleplay transcripts, per format."""

import hashlib
import json

import pytest

from multillm_edge.core.pages import PageSigner, canonical_bytes
from devkit.plans import body_size, created_tools, marker_ids, plan_paging, unpage
from multillm_edge import formats
from multillm_edge.core import paging
from multillm_edge.base.errors import EdgeError


def pid(sha):
    return "cp_" + sha[:24]


def dumps(o):
    return json.dumps(o, ensure_ascii=False, separators=(",", ":")).encode()


def chat_body(n=8, **extra):
    msgs = [{"role": "system", "content": "You are Captain Mira of the skyship Aurora. Stay in character."},
            {"role": "assistant", "content": "*The deck sways beneath your feet.* Welcome aboard, stranger! 🌬️"}]
    for i in range(n):
        msgs.append({"role": "user", "content": f"*leans on the rail* Tell me about port {i}. 港口\t"})
        if i % 3 == 1:
            msgs.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{i}a", "type": "function", "function": {"name": "roll_dice", "arguments": "{\"sides\":20}"}},
                {"id": f"call_{i}b", "type": "function", "function": {"name": "roll_dice", "arguments": "{\"sides\":6}"}}]})
            msgs.append({"role": "tool", "tool_call_id": f"call_{i}a", "content": "17"})
            msgs.append({"role": "tool", "tool_call_id": f"call_{i}b", "content": "3"})
        msgs.append({"role": "assistant", "content": f"Port {i} is where the sky-whales sing. " * 5 + "\r\n"})
    msgs.append({"role": "user", "content": "And now? "})
    msgs.append({"role": "user", "content": "*waits*"})
    body = {"model": "openai:gpt-4o", "messages": msgs, "max_tokens": 300,
            "capabilities": ["multillm_context_retrieve"]}
    body.update(extra)
    return body


def test_fits_returns_body_unchanged_and_same_object_without_edge_fields():
    body = chat_body()
    del body["capabilities"]
    plan = plan_paging("chat", body, 10**6, pid)
    assert plan.body is body and plan.pages == [] and plan.size == len(dumps(body))


def test_fits_strips_edge_fields():
    body = chat_body(context_protected_indices=[3])
    plan = plan_paging("chat", body, 10**6, pid)
    assert "capabilities" not in plan.body and "context_protected_indices" not in plan.body
    assert "capabilities" in body  # input untouched
    assert plan.size == body_size(plan.body)


def test_chat_pages_oldest_first_with_one_marker_per_run():
    body = chat_body()
    full = body_size(paging.strip_edge_fields(body))
    plan = plan_paging("chat", body, full - 1500, pid)
    assert plan.size == body_size(plan.body) <= full - 1500
    msgs = plan.body["messages"]
    assert msgs[0]["role"] == "system"
    # the greeting (lead group) is the oldest pageable group
    assert plan.pages[0].items[0]["content"].startswith("*The deck sways")
    marker = msgs[1]
    assert marker["role"] == "user" and "multillm_context_retrieve" in marker["content"]
    assert marker_ids(marker["content"]) == [p.page_id for p in plan.pages]
    assert sum(1 for m in msgs if marker_ids(m.get("content")) is not None) == 1
    assert plan.body["tools"] == [formats.chat.tool_schema()]
    # latest exchange untouched, max_tokens unchanged, model unchanged
    assert msgs[-1] == {"role": "user", "content": "*waits*"}
    assert plan.body["max_tokens"] == 300 and plan.body["model"] == "openai:gpt-4o"
    for p in plan.pages:
        assert p.body == canonical_bytes(p.items)
        assert p.sha256 == hashlib.sha256(p.body).hexdigest() and p.page_id == pid(p.sha256)
    restored = unpage("chat", plan.body, plan.pages, created_tools("chat", body))
    assert dumps(restored) == dumps(paging.strip_edge_fields(body))


def min_size(fmt, body):
    with pytest.raises(EdgeError) as ei:
        plan_paging(fmt, body, 0, pid)
    return ei.value.details["protected_bytes"]


def test_protected_index_splits_runs_into_two_markers():
    body = chat_body(context_protected_indices=[4])  # index 4: inside exchange of port 1
    plan = plan_paging("chat", body, min_size("chat", body), pid)
    msgs = plan.body["messages"]
    markers = [i for i, m in enumerate(msgs) if marker_ids(m.get("content")) is not None]
    assert len(markers) == 2
    assert body["messages"][4] in msgs  # protected item kept
    assert all(body["messages"][4] not in p.items for p in plan.pages)


def test_window_exceeded_413_has_figures_and_classifier_words():
    body = chat_body()
    with pytest.raises(EdgeError) as ei:
        plan_paging("chat", body, 300, pid)
    e = ei.value
    assert e.status == 413 and e.code == "context_window_exceeded"
    assert "context window" in e.message and "maximum context length" in e.message
    assert e.details["budget"] == 300
    assert e.details["estimated_size"] == body_size(paging.strip_edge_fields(body))
    assert e.details["protected_bytes"] > 300


def test_page_too_large():
    body = chat_body()
    body["messages"][3]["content"] = "x" * 70000  # first real exchange is huge
    with pytest.raises(EdgeError) as ei:
        plan_paging("chat", body, body_size(body) - 70000, pid)
    assert ei.value.code == "context_page_too_large" and ei.value.status == 413
    assert ei.value.details["page_bytes"] > 65536 and ei.value.details["max_page_bytes"] == 65536
    # with a budget it cannot meet anyway the answer is the window error
    with pytest.raises(EdgeError) as ei:
        plan_paging("chat", body, 100, pid)
    assert ei.value.code == "context_window_exceeded"


def test_invalid_protected_indices():
    for bad in ("1", [1, -1], [1.0], [True], {"a": 1}):
        with pytest.raises(EdgeError) as ei:
            plan_paging("chat", chat_body(context_protected_indices=bad), 10**6, pid)
        assert ei.value.status == 400 and ei.value.code == "invalid_request"
    # null and out-of-range are harmless
    plan_paging("chat", chat_body(context_protected_indices=None), 10**6, pid)
    plan_paging("chat", chat_body(context_protected_indices=[10**6]), 1500, pid)


def test_identical_exchanges_are_one_page():
    body = {"model": "m", "messages": [
        {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi " * 300},
        {"role": "system", "content": "s"},
        {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi " * 300},
        {"role": "user", "content": "last"}]}
    plan = plan_paging("chat", body, min_size("chat", body), pid)
    assert len(plan.pages) == 1
    ids = [marker_ids(m["content"]) for m in plan.body["messages"] if m["role"] == "user"
           and marker_ids(m["content"])]
    assert ids == [[plan.pages[0].page_id], [plan.pages[0].page_id]]
    assert dumps(unpage("chat", plan.body, plan.pages, created_tools("chat", body))) == dumps(body)


def test_plan_candidates_share_pages_and_report_errors_per_candidate():
    body = chat_body()
    full = body_size(paging.strip_edge_fields(body))
    res = paging.plan_candidates("chat", body, [full, full - 1000, full - 2000, 10], pid)
    assert res[0].pages == [] and isinstance(res[3], EdgeError) and res[3].status == 413
    shared = {p.sha256: p for p in res[2].pages}
    assert res[1].pages and all(shared[p.sha256] is p for p in res[1].pages)


def responses_body():
    inp = [{"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": "The tavern door creaks open. 🍺", "annotations": []}]}]
    for i in range(6):
        inp.append({"role": "user", "content": f"I order drink #{i} — ¿qué hay?"})
        inp.append({"type": "reasoning", "id": f"rs_{i}", "summary": [], "encrypted_content": "gAAA" * 20})
        inp.append({"type": "function_call", "call_id": f"fc_{i}", "name": "menu", "arguments": "{}"})
        inp.append({"type": "function_call_output", "call_id": f"fc_{i}", "output": "ale, mead " * 10})
        inp.append({"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": "Mead it is.", "annotations": []}]})
    inp.append({"role": "user", "content": "Cheers!"})
    return {"model": "openai:gpt-4.1", "instructions": "You are the innkeeper. " * 20, "input": inp,
            "max_output_tokens": 200, "tools": [{"type": "function", "name": "menu", "parameters": {}}],
            "capabilities": ["multillm_context_retrieve"]}


def test_responses_paging_keeps_instructions_and_calls_together():
    body = responses_body()
    plan = plan_paging("responses", body, 2200, pid)
    assert plan.size == body_size(plan.body) <= 2200
    assert plan.body["instructions"] == body["instructions"]
    assert plan.body["tools"][0]["name"] == "menu" and plan.body["tools"][-1] == formats.responses.tool_schema()
    assert not created_tools("responses", body)
    for p in plan.pages:
        ids = [x.get("call_id") for x in p.items if x.get("type", "").startswith("function_call")]
        assert len(ids) % 2 == 0 and len(set(ids)) == len(ids) // 2
    assert dumps(unpage("responses", plan.body, plan.pages, created_tools("responses", body))) == dumps(paging.strip_edge_fields(body))


def test_responses_string_input_has_nothing_to_page():
    body = {"model": "m", "input": "x" * 1000, "instructions": "be nice"}
    assert plan_paging("responses", body, 5000, pid).pages == []
    with pytest.raises(EdgeError) as ei:
        plan_paging("responses", body, 500, pid)
    assert ei.value.code == "context_window_exceeded"
    assert ei.value.details["protected_bytes"] == body_size(body)


def messages_body():
    msgs = [{"role": "assistant", "content": "*A dragon eyes you from its hoard.* Speak, mortal."}]
    for i in range(6):
        msgs.append({"role": "user", "content": [{"type": "text", "text": f"I offer gem {i}. 💎"}]})
        msgs.append({"role": "assistant", "content": [
            {"type": "text", "text": "Let me appraise it."},
            {"type": "tool_use", "id": f"toolu_{i}", "name": "appraise", "input": {"gem": i}}]})
        msgs.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "worth 100 gold " * 8}]})
        msgs.append({"role": "assistant", "content": [{"type": "text", "text": "Acceptable. 🐉"}]})
    msgs.append({"role": "user", "content": "Then let me pass."})
    return {"model": "anthropic:claude", "system": [{"type": "text", "text": "You are Vyr the dragon. " * 10}],
            "messages": msgs, "max_tokens": 1024, "capabilities": ["multillm_context_retrieve"]}


def test_messages_marker_never_between_tool_use_and_result():
    body = messages_body()
    plan = plan_paging("messages", body, 2000, pid)
    assert plan.size == body_size(plan.body) <= 2000
    assert plan.body["system"] == body["system"]
    msgs = plan.body["messages"]
    for i, m in enumerate(msgs):
        if m["role"] == "assistant" and isinstance(m["content"], list) and any(
                b["type"] == "tool_use" for b in m["content"]):
            nxt = msgs[i + 1]["content"]
            assert isinstance(nxt, list) and nxt[0]["type"] == "tool_result"
    assert msgs[0]["role"] == "user" and marker_ids(msgs[0]["content"])
    assert plan.body["tools"] == [formats.messages.tool_schema()]
    assert dumps(unpage("messages", plan.body, plan.pages, created_tools("messages", body))) == \
        dumps(paging.strip_edge_fields(body))


def test_output_reservation_and_body_size():
    assert paging.output_reservation("chat", chat_body()) == 300
    assert paging.output_reservation("responses", responses_body()) == 200
    assert paging.output_reservation("messages", messages_body()) == 1024
    assert paging.output_reservation("messages", {}) is None
    b = {"a": "é🙂", "b": [1, None, True]}
    assert body_size(b) == len(json.dumps(b, ensure_ascii=False, separators=(",", ":")).encode())


def test_lone_surrogate_is_a_400():
    with pytest.raises(EdgeError) as ei:
        plan_paging("chat", {"messages": [{"role": "user", "content": "\ud800"}]}, 10, pid)
    assert ei.value.status == 400


def test_page_bytes_exact():
    items = [{"role": "user", "content": "a\tb \r\n é 🙂 \u202e"}]
    assert canonical_bytes(items) == json.dumps(items, ensure_ascii=False, separators=(",", ":")).encode()
    assert json.loads(canonical_bytes(items)) == items


@pytest.mark.parametrize("page_id", ["cp_" + "A-_z09" * 7 + "x", 'cp_"quoted"', "cp_back\\slash",
                                     "cp_é", "cp_\n", "cp_ ", ""])
def test_a_page_ids_length_in_the_marker_is_its_json_escaped_length(page_id):
    assert paging._id_len(page_id) == len(json.dumps(page_id, ensure_ascii=False).encode()) - 2


def test_fallback_plans_share_the_history_bytes_instead_of_copying_them():
    """16 fallback models, 16 plans: each holds group indices and its markers' bytes,
    never a copy of the history (joined only for the candidate being sent)."""
    body = chat_body(n=30)
    full = body_size(paging.strip_edge_fields(body))
    plans = paging.plan_candidates("chat", body, [full - 1500 - 300 * i for i in range(16)], pid)
    assert len({id(p.history.raw) for p in plans}) == 1
    for p in plans:
        markers = [x for x in p.history.parts if type(x) is bytes]
        assert markers and all(len(m) < 1000 for m in markers)
        assert p.encoded() == json.dumps(p.body, ensure_ascii=False, separators=(",", ":")).encode()


def test_plans_with_the_signers_ids_are_exactly_sized_and_name_their_pages_in_order():
    ids = PageSigner(b"k" * 32).page_ids("roleplay", "a3" * 32, "rps_sized", 3)
    body = chat_body(n=30)
    full = body_size(paging.strip_edge_fields(body))
    counts = set()
    for budget in range(full - 6000, full, 37):
        plan = plan_paging("chat", body, budget, ids)
        named = [i for m in plan.body["messages"] for i in marker_ids(m["content"]) or []]
        assert plan.size == len(dumps(plan.body)) <= budget
        assert named == [p.page_id for p in plan.pages]     # no two exchanges alike here
        counts.add(len(named))
    assert len(counts) > 10     # many different page counts


def test_ids_of_one_length_that_need_escaping_are_sized_escaped():
    body = chat_body(n=12)
    full = body_size(paging.strip_edge_fields(body))
    for budget in range(full - 1500, full, 50):
        plan = plan_paging("chat", body, budget, lambda sha: 'cp_"' + sha[:12])
        assert plan.size == len(dumps(plan.body)) <= budget


def test_pages_are_made_only_for_what_is_sent_and_none_for_a_413():
    """With the signer's declared id length the plan sizes first: a request that cannot
    fit costs no hashing or signing per exchange, a plan makes only the pages it sends."""
    made = []

    def ids(sha):
        made.append(sha)
        return "cp_" + sha[:43]
    ids.length = 46
    body = chat_body(n=40)
    with pytest.raises(EdgeError) as e:
        plan_paging("chat", body, 900, ids)
    assert e.value.code == "context_window_exceeded" and made == []
    plan = plan_paging("chat", body, body_size(paging.strip_edge_fields(body)) - 2000, ids)
    assert 0 < len(made) == len(plan.pages) < 40
