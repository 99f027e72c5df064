"""The request boundary (validation.py) in CPython: depth before the parse, strict
JSON, field types named by path, and the error objects raised fresh."""

import json
import sys

import pytest
from hypothesis import given, settings, strategies as st

from multillm_edge.core import validation
from multillm_edge.formats import messages
from multillm_edge.base.errors import EdgeError, PageNotFound, Unauthorized
from multillm_edge.core.validation import MAX_DEPTH, check_body, parse_json


def too_deep(raw: bytes, limit: int = MAX_DEPTH) -> bool:
    """The boundary's depth verdict (brackets inside strings do not count)."""
    return validation._nests_deeper(validation._brackets(raw), limit)


def nested(depth: int, inner: bytes = b"") -> bytes:
    return b"[" * depth + inner + b"]" * depth


def code_of(fn, *args):
    with pytest.raises(EdgeError) as ei:
        fn(*args)
    return ei.value.status, ei.value.code, ei.value.details.get("param")


# --- depth -------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [1, 200, MAX_DEPTH])
def test_nesting_up_to_the_limit_parses(depth):
    assert not too_deep(nested(depth))
    assert parse_json(nested(depth)) is not None


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 10 * MAX_DEPTH, 100_000])
def test_nesting_past_the_limit_is_rejected_before_the_parse(depth, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("json.loads must not see a too-deep body")
    monkeypatch.setattr(validation.json, "loads", boom)
    status, code, _ = code_of(parse_json, nested(depth))
    assert (status, code) == (400, "invalid_json")


def test_objects_and_arrays_count_alike_and_siblings_do_not_add_up():
    mixed = b'{"a":' * 128 + b"[" * 128 + b"1" + b"]" * 128 + b"}" * 128
    assert not too_deep(mixed)
    assert too_deep(b'{"a":' + mixed + b"}")
    siblings = b"[" + b",".join([nested(200)] * 50) + b"]"     # 10,000 openers, depth 201
    assert not too_deep(siblings)


def test_brackets_inside_strings_do_not_count():
    text = json.dumps({"messages": [{"role": "user", "content": "[[[{{" * 400 + '\\" ]] "'}]}).encode()
    assert not too_deep(text)
    assert parse_json(text)["messages"][0]["content"].startswith("[[[{{")


def test_an_escaped_quote_cannot_hide_brackets_from_the_check():
    # `"\\"` is a complete string (an escaped backslash): the brackets after it are real.
    raw = b'["\\\\",' + nested(300) + b"]"
    assert too_deep(raw)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"\\", b'"', b"[", b"]", b"{", b"}", b"a", b",", b":", b"\\\\"]),
                max_size=60),
       st.integers(1, 9))
def test_brackets_read_in_slices_are_the_brackets_read_whole(parts, size):
    """A large body's brackets are read a slice at a time (docs/design.md §7.2): no
    slice ends inside an escape, so any bytes, JSON or not, give the same brackets."""
    raw = b"".join(parts)
    whole = validation._brackets(raw)
    saved = validation.SLICE_BYTES
    validation.SLICE_BYTES = size
    try:
        sliced = validation._brackets(raw)
        pieces = list(validation._slices(raw))
    finally:
        validation.SLICE_BYTES = saved
    assert sliced == whole
    assert b"".join(pieces) == raw and all(not p.endswith(b"\\") for p in pieces[:-1])


def test_a_real_parse_of_the_depth_limit_stays_within_the_recursion_limit():
    assert MAX_DEPTH * 2 < sys.getrecursionlimit()


# --- strict JSON -------------------------------------------------------------------

@pytest.mark.parametrize("raw", [b'{"a": NaN}', b'{"a": Infinity}', b'{"a": -Infinity}',
                                 b'{"a": 1e400}', b'{"a": -1e400}', b'{"a": ' + b"9" * 5000 + b"}",
                                 b'\xff{}', b'{"a": "\x00"}', b'', b'{"a": 1', b'\xef\xbb\xbf{}'])
def test_not_json_is_invalid_json(raw):
    assert code_of(parse_json, raw)[:2] == (400, "invalid_json")


def test_tiny_and_large_finite_numbers_are_json():
    assert parse_json(b'[1e-400, 1e308, -0.0, 12345678901234567890]') == [0.0, 1e308, -0.0, 12345678901234567890]


def test_duplicate_keys_are_detected_anywhere():
    assert validation.has_duplicate_keys(b'{"model": "a", "model": "b"}')
    assert validation.has_duplicate_keys(b'{"messages": [{"role": "user", "role": "system"}]}')
    assert not validation.has_duplicate_keys(b'{"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]}')


# --- fields the edge reads, by path ---------------------------------------------------

CHAT = {"model": "p:m", "messages": [{"role": "user", "content": "hi"}]}


def with_(doc, path, value):
    doc = json.loads(json.dumps(doc))
    *head, last = path
    node = doc
    for p in head:
        node = node[p]
    node[last] = value
    return doc


@pytest.mark.parametrize("fmt,doc,param", [
    ("chat", {"model": "p:m"}, "messages"),
    ("chat", {**CHAT, "messages": "hi"}, "messages"),
    ("chat", {**CHAT, "messages": 7}, "messages"),
    ("chat", {**CHAT, "messages": [1, 2]}, "messages[0]"),
    ("chat", with_(CHAT, ["messages", 0, "content"], {"text": "x"}), "messages[0].content"),
    ("chat", with_(CHAT, ["messages", 0, "content"], [1]), "messages[0].content[0]"),
    ("chat", with_(CHAT, ["messages", 0, "role"], 3), "messages[0].role"),
    ("chat", with_(CHAT, ["messages", 0, "role"], ["user"]), "messages[0].role"),
    ("responses", {"model": "p:m", "input": [{"role": {"a": 1}, "content": "x"}]}, "input[0].role"),
    ("messages", {"model": "p:m", "messages": [{"role": [], "content": "x"}]}, "messages[0].role"),
    ("chat", with_(CHAT, ["messages", 0], {"content": "x"}), "messages[0].role"),
    ("chat", with_(CHAT, ["messages", 0], {"role": "tool", "tool_call_id": [1], "content": "x"}),
     "messages[0].tool_call_id"),
    ("chat", with_(CHAT, ["messages", 0], {"role": "tool", "content": "x"}), "messages[0].tool_call_id"),
    ("chat", with_(CHAT, ["messages", 0], {"role": "assistant", "tool_calls": [{"id": {}}]}),
     "messages[0].tool_calls[0].id"),
    ("chat", with_(CHAT, ["messages", 0], {"role": "assistant", "tool_calls": {"id": "a"}}),
     "messages[0].tool_calls"),
    ("chat", with_(CHAT, ["messages", 0], {"role": "assistant", "function_call": {"name": 1}}),
     "messages[0].function_call.name"),
    ("chat", {**CHAT, "max_tokens": -5}, "max_tokens"),
    ("chat", {**CHAT, "max_tokens": 0}, "max_tokens"),
    ("chat", {**CHAT, "max_tokens": True}, "max_tokens"),
    ("chat", {**CHAT, "max_completion_tokens": 1.5}, "max_completion_tokens"),
    ("chat", {**CHAT, "models": "p:m"}, "models"),
    ("chat", {**CHAT, "models": ["p:m", 1]}, "models"),
    ("chat", {**CHAT, "models": ["p:m"] * 17}, "models"),
    ("chat", {**CHAT, "capabilities": "multillm_context_retrieve"}, "capabilities"),
    ("chat", {**CHAT, "tools": {}}, "tools"),
    ("responses", {"model": "p:m", "input": 5}, "input"),
    ("responses", {"model": "p:m", "input": [[]]}, "input[0]"),
    ("responses", {"model": "p:m", "input": [{"type": "function_call", "call_id": [1]}]}, "input[0].call_id"),
    ("responses", {"model": "p:m", "input": [{"type": "mcp_approval_response",
                                              "approval_request_id": {}}]}, "input[0].approval_request_id"),
    ("responses", {"model": "p:m", "input": [{"type": "mcp_approval_request", "id": 1}]}, "input[0].id"),
    ("responses", {"model": "p:m", "input": [{"role": "user", "content": {}}]}, "input[0].content"),
    ("responses", {"model": "p:m", "input": [{"type": 3}]}, "input[0].type"),
    ("responses", {"model": "p:m", "input": "x", "max_output_tokens": -1}, "max_output_tokens"),
    ("messages", {"model": "p:m", "messages": {}}, "messages"),
    ("messages", {"model": "p:m", "messages": [{"role": "user", "content": None}]}, "messages[0].content"),
    ("messages", {"model": "p:m", "messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "id": [1], "name": "x", "input": {}}]}]}, "messages[0].content[0].id"),
    ("messages", {"model": "p:m", "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": None}]}]}, "messages[0].content[0].tool_use_id"),
    ("messages", {"model": "p:m", "messages": [], "system": 3}, "system"),
    ("messages", {"model": "p:m", "messages": [], "system": ["x"]}, "system[0]"),
])
def test_a_wrong_type_is_a_400_naming_the_field(fmt, doc, param):
    status, code, got = code_of(check_body, fmt, doc)
    assert (status, code, got) == (400, "invalid_request", param)


@pytest.mark.parametrize("fmt,doc", [
    ("chat", {**CHAT, "max_tokens": None, "unknown": {"deep": [1, {"x": None}]}, "tools": None}),
    ("chat", with_(CHAT, ["messages", 0], {"role": "assistant", "content": None,
                                           "tool_calls": [{"id": "c", "type": "function"}]})),
    ("responses", {"model": "p:m", "input": "a long string input"}),
    ("responses", {"model": "p:m"}),
    ("responses", {"model": "p:m", "input": [{"type": "reasoning", "summary": []},
                                             {"type": "message", "role": "user", "content": [{"type": "input_text"}]}]}),
    ("messages", {"model": "p:m", "system": [{"type": "text", "text": "s"}],
                  "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}),
])
def test_valid_shapes_pass_untouched(fmt, doc):
    before = json.dumps(doc)
    assert check_body(fmt, doc) is doc and json.dumps(doc) == before


@pytest.mark.parametrize("value", [None, "", "   ", "\t"])
def test_a_blank_session_header_is_a_400(value):
    assert code_of(validation.session_id, value)[:2] == (400, "invalid_request")


def test_session_header_is_trimmed_and_bounded():
    assert validation.session_id("  rps_abc ") == "rps_abc"
    assert code_of(validation.session_id, "r" * 257)[:2] == (400, "invalid_request")


# --- errors are fresh objects --------------------------------------------------------

def test_fixed_errors_are_classes_and_each_raise_is_a_new_object():
    seen = []
    for _ in range(3):
        try:
            raise PageNotFound()
        except EdgeError as e:
            seen.append(e)
    assert len({id(e) for e in seen}) == 3
    assert all(e.__traceback__.tb_next is None for e in seen)   # no accumulated frames
    assert seen[0].body() == seen[1].body() == PageNotFound().body()
    assert Unauthorized().status == 401 and json.loads(Unauthorized().body(messages.ERROR_ENVELOPE))["type"] == "error"


def test_no_module_level_exception_instance_is_left_in_src():
    import importlib
    import pkgutil
    import multillm_edge
    for info in pkgutil.walk_packages(multillm_edge.__path__, "multillm_edge."):
        if info.name.endswith("bindings"):
            continue          # needs the Workers runtime
        mod = importlib.import_module(info.name)
        shared = [n for n, v in vars(mod).items() if isinstance(v, BaseException)]
        assert not shared, (info.name, shared)


# --- the depth check agrees with a reference scanner --------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402


def reference_depth(raw: bytes) -> int:
    """Byte-by-byte JSON scanner: the deepest array/object nesting outside strings."""
    depth = best = 0
    in_string = escaped = False
    for b in raw:
        c = chr(b)
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            best = max(best, depth)
        elif c in "]}":
            depth -= 1
    return best


tricky_text = st.text(alphabet='[]{}"\\ab\u00e9', max_size=12)
json_values = st.recursive(
    st.none() | st.integers() | tricky_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=60)


@settings(max_examples=300, deadline=None)
@given(json_values, st.integers(min_value=0, max_value=12), st.booleans())
def test_too_deep_matches_a_reference_scanner(value, limit, ascii_only):
    raw = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert too_deep(raw, limit) == (reference_depth(raw) > limit)


@pytest.mark.parametrize("hider", [b'"]]]]]]]]]]"', b'"\\"]]]]]]]]]]"', b'"\\\\\\"]]]]]]]]]]"'])
def test_closers_inside_strings_cannot_offset_real_openers(hider):
    raw = b"[" + hider + b"," + nested(300) + b"]"
    assert reference_depth(raw) == 301 and too_deep(raw)


def test_a_body_of_brackets_alone_is_refused_whatever_its_depth():
    wide = b"[" + b"[]," * (validation.MAX_BRACKETS + 10) + b"[]]"
    assert not too_deep(wide)
    status, code, _ = code_of(parse_json, wide)
    assert (status, code) == (400, "invalid_json")


@pytest.mark.parametrize("body", [b"[" * 100 + b"1" + b"]" * 100,
                                  b'{"a":' * 40 + b"[[]]" + b"}" * 40])
def test_truncated_bodies_are_invalid_json(body):
    for cut in (1, len(body) // 2, len(body) - 1):
        assert code_of(parse_json, body[:cut])[:2] == (400, "invalid_json")


@pytest.mark.parametrize("fmt,key", [("chat", "messages"), ("messages", "messages"), ("responses", "input")])
def test_plain_items_take_the_short_path_and_anything_else_the_full_check(fmt, key):
    """`{"role", "content"}` strings are valid as they are; one field more, or a role
    that needs another field, is checked in full (and refused where it must be)."""
    ok = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]
    assert check_body(fmt, {key: ok, "max_tokens": 5} if fmt != "responses" else {key: ok})
    for bad in ({"role": 1, "content": "x"}, {"role": "user", "content": 5},
                {"role": "user", "content": [7]}, {"role": None, "content": "x"}):
        status, _, param = code_of(check_body, fmt, {key: ok + [bad]})
        assert status == 400 and param.startswith(f"{key}[2]"), (bad, param)
    if fmt == "chat":
        for needs in ({"role": "tool", "content": "17"}, {"role": "function", "content": "x"}):
            status, _, param = code_of(check_body, fmt, {key: ok + [needs]})
            assert status == 400 and param.startswith(f"{key}[2]"), (needs, param)


# --- the narrow parse (docs/design.md §7.2) ---------------------------------------------
def padded(core: bytes) -> bytes:
    """``core`` (a JSON object's members) in a body past NARROW_MIN_BYTES, so the
    narrow parse is tried: a chat's many short strings, each with an emoji."""
    line = '"é🌙 The lantern flickers."'.encode()
    pad = b",".join([line] * (validation.NARROW_MIN_BYTES // len(line) + 1))
    return b'{"pad":[' + pad + b'],' + core + b"}"


def exact(raw: bytes):
    """What the exact path answers: (value, brackets) or the error's (status, code, message)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return 400, "invalid_json", "Request body is not valid UTF-8."
    try:
        return json.loads(text, parse_constant=validation._reject_constant,
                          parse_float=validation._finite_float), validation.bracket_count(raw)
    except ValueError:
        return 400, "invalid_json", "Request body is not valid JSON."


def answered(raw: bytes):
    try:
        return validation.parse_json_counted(raw)
    except EdgeError as e:
        return e.status, e.code, e.message


@pytest.mark.parametrize("core", [
    '"k":"a\\u0041\\n\\t\\"\\\\b","é🌙":["夜の森","\\u0000",1.5,true,null,{"ü":{"x":"🌙"}}]'.encode(),
    '"dup":"x","dup":"é"'.encode(),
    b'"bad":"\xff","ok":1',                     # invalid UTF-8 in a kept string
    b'"a":"\xff","a":"ok"',                     # ... in a value a repeated key drops
    b'"k":"ok"\xc3\xa9',                        # non-ASCII outside a string
    b'"s":"\xed\xa0\x80"',                      # an encoded surrogate (not UTF-8)
    '"e":"\\u00e9","raw":"é"'.encode(),          # a non-ASCII escape: the exact path
    '"\\u00e9":1,"é":2'.encode(),                # the same key twice, one escaped
    '"lone":"\\ud83c","pair":"\\ud83c\\udf19"'.encode(),
    b'"n":NaN',
    b'"n":1e999',
    '"x":"\\\\u00e9 is text"'.encode(),          # an escaped backslash: a false alarm
])
def test_the_narrow_parse_answers_exactly_as_the_exact_path(core):
    raw = padded(core)
    assert len(raw) >= validation.NARROW_MIN_BYTES
    assert answered(raw) == exact(raw)


def test_the_narrow_parse_is_taken_and_holds_no_wide_text():
    """A body with an emoji decodes to 4 bytes a character; its narrow parse holds the
    parse and the body's Latin-1 view, never that text (tracemalloc's peak)."""
    import tracemalloc
    raw = padded(b'"k":"v"')
    assert validation._narrow_view(raw) is not None
    tracemalloc.start()
    try:
        body, _ = validation.parse_json_counted(raw)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert body == json.loads(raw.decode())
    assert peak < held + 2 * len(raw), (held, peak)      # the exact path: held + ~4 × len(raw)


def test_the_duplicate_check_reads_the_narrow_view_and_keeps_nothing():
    assert validation.has_duplicate_keys(padded('"é":1,"é":2'.encode()))
    assert validation.has_duplicate_keys(padded('"\\u00e9":1,"é":2'.encode()))     # exact path
    assert not validation.has_duplicate_keys(padded('"é":1,"e":2,"x":{"é":3}'.encode()))
    assert not validation.has_duplicate_keys(padded('"Ã©":1,"é":2'.encode()))


def test_a_body_whose_text_finds_no_room_is_parsed_through_its_narrow_view(monkeypatch):
    """Under the heap's ceiling (docs/design.md §7.2) the exact path's text of 4 bytes a
    character may find no block: a body under NARROW_MIN_BYTES then takes the narrow
    parse, the same value; one the narrow parse cannot take keeps the MemoryError."""
    raw = '{"a":["é🌙 x",{"ü":"夜"}],"b":1}'.encode()
    assert len(raw) < validation.NARROW_MIN_BYTES

    class Tight(bytes):
        def decode(self, encoding="utf-8", errors="strict"):
            if encoding == "utf-8":
                raise MemoryError
            return bytes(self).decode(encoding, errors)

    assert validation.parse_json_counted(Tight(raw)) == (json.loads(raw.decode()), 6)
    with pytest.raises(MemoryError):        # an escape the view cannot read exactly
        validation.parse_json_counted(Tight('{"a":"\\u00e9 é"}'.encode()))


_json_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), _json_text,
              st.floats(allow_nan=False, allow_infinity=False)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(_json_text, inner, max_size=4)),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(_json_values, st.booleans())
def test_the_narrow_view_parses_any_json_to_the_exact_value(value, escaped):
    """Property (docs/design.md §7.2): any JSON, raw UTF-8 or with its non-ASCII escaped,
    parsed through the narrow view is the exact path's value, or left to the exact path."""
    raw = json.dumps({"v": value, "m": "é🌙"}, ensure_ascii=escaped).encode()
    got = validation._parse_narrow(raw)
    if escaped:                             # "é" as \u00e9: the view cannot read it
        assert got is validation._NOT_NARROW
        return
    if got is validation._NOT_NARROW:       # only a false alarm: a text holding "\\u"
        assert validation._WIDE_ESCAPE.search(raw)
        return
    assert got == json.loads(raw.decode("utf-8")) and repr(got) == repr(json.loads(raw.decode("utf-8")))
