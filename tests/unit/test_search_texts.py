"""A page's message texts in each wire format: only string values of the items."""

import json

from multillm_edge.search import page_texts


def test_chat_content_parts_tool_calls_and_results():
    items = [{"role": "user", "content": "Roll for it"},
             {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
              "function": {"name": "roll_dice", "arguments": "{\"sides\": 20}"}}]},
             {"role": "tool", "tool_call_id": "call_1", "content": "17"},
             {"role": "assistant", "content": [{"type": "text", "text": "*It lands on 17.*"},
                                               {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]
    assert page_texts(items) == [("user", "Roll for it"), ("assistant", "roll_dice"),
                                 ("assistant", "{\"sides\": 20}"), ("tool", "17"),
                                 ("assistant", "*It lands on 17.*")]


def test_responses_messages_function_calls_and_outputs():
    items = [{"role": "user", "content": [{"type": "input_text", "text": "Где ключ?"}]},
             {"type": "function_call", "call_id": "fc_1", "name": "roll_dice", "arguments": "{\"d\":6}"},
             {"type": "function_call_output", "call_id": "fc_1", "output": "2d6 = 7"},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Под алтарём."}]}]
    assert page_texts(items) == [("user", "Где ключ?"), ("assistant", "roll_dice"),
                                 ("assistant", "{\"d\":6}"), ("tool", "2d6 = 7"),
                                 ("assistant", "Под алтарём.")]


def test_messages_tool_use_input_leaves_and_tool_results():
    items = [{"role": "user", "content": "鍵はどこ？"},
             {"role": "assistant", "content": [{"type": "text", "text": "*ダイスを振る。*"},
              {"type": "tool_use", "id": "toolu_1", "name": "roll_dice", "input": {"dice": "1d100", "n": 2}}]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                           "content": [{"type": "text", "text": "1d100 = 42"}]}]}]
    got = page_texts(items)
    assert got == [("user", "鍵はどこ？"), ("assistant", "*ダイスを振る。*"), ("assistant", "roll_dice"),
                   ("assistant", "1d100"), ("tool", "1d100 = 42")]
    # every text is a string value of the items, so an excerpt of it is verbatim page content
    raw = json.dumps(items, ensure_ascii=False)
    assert all(json.dumps(t, ensure_ascii=False)[1:-1] in raw for _, t in got)


def test_odd_shapes_give_no_text_and_no_error():
    assert page_texts(None) == [] and page_texts([1, None, [], {"role": 3, "content": ""}]) == []
