"""Grouping, completeness, markers, tool schemas and output reservation per wire format."""

import json

import pytest

from devkit.plans import marker_content, marker_ids, remove_tool
from multillm_edge import formats
from multillm_edge.formats import EXCHANGE, LEAD, STANDALONE, chat, messages, responses


def groups(mod, items):
    return [(g.start, g.end, g.kind, g.complete) for g in formats.group_items(items, mod.classify)]


def test_chat_roleplay_grouping():
    items = [
        {"role": "system", "content": "You are Captain Mira of the skyship Aurora."},
        {"role": "assistant", "content": "*The deck sways.* Welcome aboard, stranger."},
        {"role": "user", "content": "*bows* Thank you, captain."},
        {"role": "user", "content": ""},  # consecutive user messages: each starts one
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "roll", "arguments": "{\"d\":20}"}},
            {"id": "call_b", "type": "function", "function": {"name": "roll", "arguments": "{\"d\":6}"}}]},
        {"role": "tool", "tool_call_id": "call_b", "content": "4"},
        {"role": "tool", "tool_call_id": "call_a", "content": "17"},
        {"role": "assistant", "content": [{"type": "text", "text": "A 17! The winds favour you."}]},
        {"role": "developer", "content": "Keep replies short."},
        {"role": "user", "content": "Set sail 🚀"},
        {"role": "assistant", "function_call": {"name": "weather", "arguments": "{}"}, "content": None},
        {"role": "function", "name": "weather", "content": "storm"},
        {"role": "user", "content": "Hold on!"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_c", "type": "function", "function": {"name": "roll", "arguments": "{}"}}]},
    ]
    assert groups(chat, items) == [
        (0, 1, STANDALONE, True),
        (1, 2, LEAD, True),
        (2, 3, EXCHANGE, True),
        (3, 8, EXCHANGE, True),
        (8, 9, STANDALONE, True),
        (9, 12, EXCHANGE, True),
        (12, 14, EXCHANGE, False),  # pending call_c
    ]


def test_chat_system_inside_exchange_splits_it_and_both_halves_are_incomplete():
    items = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                               "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "system", "content": "note"},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": "done"},
    ]
    assert groups(chat, items) == [(0, 2, EXCHANGE, False), (2, 3, STANDALONE, True),
                                   (3, 5, LEAD, False)]


def test_chat_orphan_result_is_incomplete():
    items = [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "zz", "content": ""}]
    assert groups(chat, items) == [(0, 2, EXCHANGE, False)]


def test_responses_grouping():
    items = [
        {"role": "developer", "content": "Narrate in second person."},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "You wake."}]},
        {"role": "user", "content": "I look around."},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "fc_1", "name": "look", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "fc_1", "output": "a cave\r\n"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A cave."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Light a torch"}]},
        {"type": "custom_tool_call", "call_id": "ct", "name": "x", "input": "y"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "item_reference", "id": "msg_9"},
    ]
    assert groups(responses, items) == [
        (0, 1, STANDALONE, True), (1, 2, LEAD, True), (2, 7, EXCHANGE, True),
        (7, 11, EXCHANGE, False)]


def test_messages_grouping_tool_results_continue_exchange():
    items = [
        {"role": "assistant", "content": "Greetings, wanderer."},
        {"role": "user", "content": "Who are you?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me check."},
                                          {"type": "tool_use", "id": "tu_1", "name": "lore", "input": {}},
                                          {"type": "tool_use", "id": "tu_2", "name": "lore", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "elf"},
                                     {"type": "tool_result", "tool_use_id": "tu_2", "content": [
                                         {"type": "text", "text": "old"}]}]},
        {"role": "assistant", "content": [{"type": "text", "text": "An old elf."}]},
        {"role": "user", "content": []},
        {"role": "user", "content": [{"type": "text", "text": "again"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "tu_3", "name": "x", "input": {}}]},
        # tool results followed by a text block: still the same exchange (see module doc)
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_3", "content": "r"},
                                     {"type": "text", "text": "and then?"}]},
    ]
    assert groups(messages, items) == [
        (0, 1, LEAD, True), (1, 5, EXCHANGE, True), (5, 6, EXCHANGE, True),
        (6, 9, EXCHANGE, True)]


def test_non_dict_items_do_not_crash():
    for mod in (chat, responses, messages):
        assert groups(mod, ["x", None, 3]) == [(0, 3, LEAD, True)]


FMT = {chat: "chat", responses: "responses", messages: "messages"}


@pytest.mark.parametrize("mod,check", [
    (chat, lambda t: t["type"] == "function" and t["function"]["name"] == formats.TOOL_NAME
     and t["function"]["parameters"]["required"] == ["page_id"]),
    (responses, lambda t: t["type"] == "function" and t["name"] == formats.TOOL_NAME
     and t["parameters"]["properties"]["page_id"]["type"] == "string"),
    (messages, lambda t: t["name"] == formats.TOOL_NAME
     and t["input_schema"]["required"] == ["page_id"]),
])
def test_tool_schema_and_add_remove(mod, check):
    assert check(mod.tool_schema())
    body = {"model": "m"}
    assert mod.add_tool(body) is True and body["tools"] == [mod.tool_schema()]
    remove_tool(FMT[mod], body, True)
    assert body == {"model": "m"}
    existing = [{"name": "roll"}]
    body = {"tools": existing}
    assert mod.add_tool(body) is False and body["tools"][-1] == mod.tool_schema()
    assert existing == [{"name": "roll"}]  # not mutated
    with pytest.raises(Exception) as ei:
        mod.add_tool({"tools": "nope"})
    assert ei.value.status == 400


def test_chat_legacy_functions_parameter_gets_the_schema():
    body = {"functions": [{"name": "roll", "parameters": {}}]}
    chat.add_tool(body)
    assert "tools" not in body and body["functions"][-1]["name"] == formats.TOOL_NAME


def test_marker_names_each_handle_and_parses_back():
    text = formats.marker_text(["cp_a", "cp_b"])
    assert "multillm_context_retrieve" in text and "page_id" in text
    assert "cp_a" in text and "cp_b" in text
    assert marker_ids(text) == ["cp_a", "cp_b"]
    assert marker_ids("hello") is None
    for mod in (chat, responses, messages):
        m = formats.marker(text)
        assert m["role"] == "user" and marker_content(m) == text
        assert mod.classify(m)[0] == formats.USER
        json.dumps(m)


def test_output_reservation():
    assert chat.output_reservation({"max_completion_tokens": 10, "max_tokens": 5}) == 10
    assert chat.output_reservation({"max_tokens": 5}) == 5
    assert chat.output_reservation({}) is None
    assert chat.output_reservation({"max_tokens": True}) is None
    assert responses.output_reservation({"max_output_tokens": 7, "max_tokens": 1}) == 7
    assert responses.output_reservation({"max_tokens": 1}) is None
    assert messages.output_reservation({"max_tokens": 9}) == 9
    assert formats.get("chat") is chat
    with pytest.raises(ValueError):
        formats.get("gemini")


@pytest.mark.parametrize("mod", [chat, responses, messages])
def test_search_tool_schema_in_each_format_and_added_after_retrieve(mod):
    s = json.loads(json.dumps(mod.search_tool_schema()))
    fn = s.get("function", s)
    params = fn.get("parameters") or fn.get("input_schema")
    assert fn["name"] == formats.SEARCH_TOOL_NAME and "words you remember" in fn["description"]
    assert params["required"] == ["query"]
    assert params["properties"]["limit"] == {"type": "integer", "minimum": 1, "maximum": 10,
                                             "description": "How many exchanges to return (default 5)."}
    body = {"tools": [{"name": "roll"}]}
    assert mod.add_tool(body, search=True) is False
    assert body["tools"] == [{"name": "roll"}, mod.tool_schema(), mod.search_tool_schema()]
    body = {}
    assert mod.add_tool(body, True) is True and len(body["tools"]) == 2
    remove_tool(FMT[mod], body, True)
    assert body == {}


def test_chat_legacy_functions_get_both_schemas():
    body = {"functions": [{"name": "roll", "parameters": {}}]}
    chat.add_tool(body, search=True)
    assert "tools" not in body
    assert [f["name"] for f in body["functions"]] == ["roll", formats.TOOL_NAME, formats.SEARCH_TOOL_NAME]


def test_marker_with_search_names_both_tools_and_parses_back():
    text = formats.marker_text(["cp_a", "cp_b"], search=True)
    assert formats.TOOL_NAME in text and formats.SEARCH_TOOL_NAME in text
    assert marker_ids(text) == ["cp_a", "cp_b"]
    assert formats.marker_text(["cp_a"]) == formats.MARKER_PREFIX + "cp_a."
