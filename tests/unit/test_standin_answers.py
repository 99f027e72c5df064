"""The stand-in provider's pure parts (devkit/standin.py): when `npm start` serves it,
what it reads from each wire format, and what it answers."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devkit import standin

PROVIDERS = json.dumps({"openai": {"base_url": "https://api.openai.com/v1", "formats": ["chat"],
                                   "api_key_secret": "OPENAI_API_KEY"}})


@pytest.mark.parametrize("local, toml_vars, configured", [
    ({"PROVIDERS": PROVIDERS, "OPENAI_API_KEY": ""}, {}, False),          # .dev.vars.example as copied
    ({"PROVIDERS": PROVIDERS, "OPENAI_API_KEY": "  "}, {}, False),
    ({"PROVIDERS": PROVIDERS, "OPENAI_API_KEY": "sk-real"}, {}, True),
    ({"OPENAI_API_KEY": "sk-real"}, {"PROVIDERS": PROVIDERS}, True),      # PROVIDERS from wrangler.toml
    ({"OPENAI_API_KEY": "sk-real"}, {"PROVIDERS": json.loads(PROVIDERS)}, True),   # as a TOML table
    ({"OTHER_KEY": "sk-real"}, {"PROVIDERS": PROVIDERS}, False),          # a key no provider reads
    ({"PROVIDERS": "{not json", "OPENAI_API_KEY": "sk-real"}, {}, False),
    ({}, {"PROVIDERS": "{}"}, False),
])
def test_npm_start_serves_the_stand_in_only_without_a_provider_key(local, toml_vars, configured):
    assert standin.provider_key_configured(local, toml_vars) is configured


def test_dotenv_reads_as_the_runner_does():
    assert standin.dotenv('export A = "x y"\nB=\'z\'\n# C=no\nD=\n') == {"A": "x y", "B": "z", "D": ""}


MARKER = "[multillm context] Earlier exchanges … Stored pages, oldest first: cp_one, cp_two."
RECALL = ("Earlier moments that may be relevant, quoted verbatim (retrieve the exchange to read it whole):\n"
          "[page_id cp_one, exchange 2]\nuser: …\n[page_id cp_two, exchange 1]\nuser: …")


def test_it_reads_each_format_alike():
    chat = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": MARKER},
                         {"role": "user", "content": RECALL}, {"role": "user", "content": "Go on."}]}
    responses = {"input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": MARKER}]},
                           {"role": "user", "content": RECALL}, {"role": "user", "content": "Go on."}]}
    messages = {"system": "s", "messages": [{"role": "user", "content": [{"type": "text", "text": MARKER}]},
                                            {"role": "user", "content": [{"type": "text", "text": RECALL}]},
                                            {"role": "user", "content": "Go on."}]}
    for fmt, body, n in (("chat", chat, 4), ("responses", responses, 3), ("messages", messages, 3)):
        s = standin.seen(fmt, body)
        assert (s.messages, s.marker_pages, s.recalled, s.latest) == (n, ["cp_one", "cp_two"], 2, "Go on.")


def test_a_tool_result_is_no_user_turn_and_ends_the_tool_loop():
    body = {"messages": [{"role": "user", "content": "multillm_context_search: lanterns"},
                         {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "[]"}]}],
            "tools": [{"name": "multillm_context_search"}]}
    s = standin.seen("messages", body)
    assert s.latest == "multillm_context_search: lanterns" and s.last_is_tool_result
    assert standin.decide("messages", body).tool is None


def test_a_string_input_is_one_user_message():
    assert standin.report(standin.seen("responses", {"input": "Hi"})) == (
        '[stand-in] 1 message reached me; no marker; 0 recalled moments; latest user message: "Hi".')


def test_only_a_declared_tool_is_called():
    body = {"messages": [{"role": "user", "content": "multillm_context_retrieve cp_abc exchange 3"}]}
    assert standin.decide("chat", body).tool is None                           # not declared: text
    body["tools"] = [{"type": "function", "function": {"name": "multillm_context_retrieve"}}]
    a = standin.decide("chat", body)
    assert (a.tool, a.arguments) == ("multillm_context_retrieve", {"page_id": "cp_abc", "exchange": 3})


def test_retrieve_with_no_page_known_answers_in_text():
    body = {"messages": [{"role": "user", "content": "multillm_context_retrieve"}],
            "tools": [{"type": "function", "function": {"name": "multillm_context_retrieve"}}]}
    assert standin.decide("chat", body).text.startswith("[stand-in] 1 message reached me")


@given(st.text(max_size=300))
def test_the_report_quotes_the_latest_message_start_as_json(text):
    line = standin.report(standin.seen("chat", {"messages": [{"role": "user", "content": text}]}))
    quoted = json.loads(line.split("latest user message: ", 1)[1][:-1])
    cut = len(text) > standin.LATEST_SHOWN
    assert quoted == text[:standin.LATEST_SHOWN] + ("…" if cut else "")


@pytest.mark.parametrize("path", list(standin.FORMATS))
@pytest.mark.parametrize("stream", [False, True])
def test_every_answer_is_json_or_server_sent_events(path, stream):
    body = json.dumps({"model": "standin:roleplay", "stream": stream,
                       "messages": [{"role": "user", "content": "Hi"}], "input": "Hi"}).encode()
    reply = standin.respond(path, body, 7)
    raw = b"".join(reply.chunks)
    if not stream:
        assert "[stand-in]" in json.dumps(json.loads(raw))
        return
    events = [e for e in raw.decode().split("\n\n") if e]
    docs = [json.loads(e.split("data: ", 1)[1]) for e in events if "data: [DONE]" not in e]
    assert all(e.startswith(("data: ", "event: ")) for e in events) and docs


def test_unknown_paths_and_bodies_are_errors():
    assert standin.respond("/v1/embeddings", b"{}", 1).status == 404
    assert standin.respond("/v1/messages", b"[1]", 1).status == 400
