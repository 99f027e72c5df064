"""Seeded hostile requests over every route (the hostile tier, docs/design.md §9).

`cases(seed, n)` yields `Case`s: mutations of valid generation bodies in the three wire
formats (type swaps at every path, deletions, wrong containers, depth around the limit
and far beyond it, huge and tiny numbers, NaN/Infinity, model names around their length
limit and far beyond it, duplicate keys, lone surrogates, NUL, non-UTF-8 bytes), odd and
empty headers, session and retrieval ids with traversal and SQL metacharacters,
forwarded requests, the model list with live, unknown, revoked and odd keys, every
forwarded path with a roleplay-format key (live, revoked, unknown; every credential
spelling — the origin must never see one, checks.py asserts it of every request that
reaches it), and CORS preflights and actual requests (odd and huge Origin,
Access-Control-Request-* values, on every route family). The same case runs in-process and through the runner. Every header
value is printable ASCII (what an HTTP client can send); everything else is fair game.
"""

from __future__ import annotations

import base64
import json
import random
import re
from dataclasses import dataclass, field
from urllib.parse import quote

from devkit import roleplay as rp

KEY = "rpk_" + "hostile_KEY_7f3e".ljust(43, "0")     # the admin CLI's format (§2)
OTHER_KEY = "rpk_" + "hostile_other_91ab".ljust(43, "0")
SESSION = "rps_hostile_session"
# Principals with limits (design §4.1): LIMITED's requests_per_minute, sessions_per_day
# and active_bytes are small, so bursts of its cases meet each; SPENT's tokens_per_day
# is 0, so every generation of it is refused.
LIMITED_KEY, LIMITED_SESSION = "rpk_" + "hostile_limited_4d1c".ljust(43, "0"), "rps_hostile_limited"
SPENT_KEY, SPENT_SESSION = "rpk_" + "hostile_spent_77aa".ljust(43, "0"), "rps_hostile_spent"
LIMITS = {"p_limited": {"requests_per_minute": 3, "sessions_per_day": 2, "active_bytes": 1500},
          "p_spent": {"tokens_per_day": 0}}
LIVE_KEYS = (KEY, OTHER_KEY, LIMITED_KEY, SPENT_KEY)
LIMIT_CODES = {429: ("rate_limit_exceeded", "token_budget_exceeded", "session_limit_reached"),
               413: ("context_principal_limit_exceeded",)}


def seed_limited(sql) -> None:
    """Give LIMITED and SPENT their limits; ``sql(statement, *params)`` runs on the edge's D1."""
    for principal, values in LIMITS.items():
        cols = ", ".join(values)
        sql(f"INSERT INTO principal_limits (principal, {cols}, updated_at) VALUES "
            f"(?1, {', '.join(f'?{i + 2}' for i in range(len(values)))}, 0)", principal, *values.values())
MODEL = "fake:rp-small"
WINDOW = 1500          # small: most valid bodies page
RECALL_MODEL, RECALL_WINDOW = "fake:rp-wide", 9000   # recall's room (15 %) holds a moment
GENERATION = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
MAX_DEPTH = 256
MAX_MODEL_NAME = 256


@dataclass
class Case:
    n: int
    kind: str
    method: str
    path: str
    headers: dict
    body: bytes = b""
    provider_status: int = 200          # what the scripted provider answers
    # (content type, body, read size, (input, output) it reports, None = not a figure):
    # the provider's answer with usage fields, hostile or not (docs/design.md §4.1)
    provider_answer: tuple = None
    roleplay: bool = True               # the key must not reach the origin
    notes: dict = field(default_factory=dict)

    @property
    def anthropic(self) -> bool:
        path = self.path.split("?")[0]
        return path == "/v1/messages" or path.startswith("/v1/messages/")

    def describe(self) -> str:
        body = self.body if len(self.body) < 400 else self.body[:200] + b"..." + self.body[-100:]
        path = self.path if len(self.path) < 300 else self.path[:200] + "..." + self.path[-80:]
        return (f"case {self.n} [{self.kind}] {self.method} {path} headers={self.headers} "
                f"body({len(self.body)} B)={body!r}")


RECALL = "multillm_context_recall"
RECALL_SHAPES = [
    ["multillm_context_retrieve", RECALL], [RECALL], [RECALL, "multillm_context_retrieve", RECALL],
    ["multillm_context_retrieve", "multillm_context_search", RECALL], RECALL, [RECALL + "\u0000"],
    [[RECALL]], {RECALL: True}, ["MULTILLM_CONTEXT_RECALL", "multillm_context_retrieve"],
    ["multillm_context_retrieve", RECALL.upper()], ["multillm_context_retrieve", RECALL, None]]
CACHE = "multillm_context_prompt_cache"     # the stepped boundary (§5.7)
RECALL_SHAPES += [
    ["multillm_context_retrieve", RECALL, CACHE], ["multillm_context_retrieve", CACHE], [CACHE],
    CACHE, [CACHE, CACHE, "multillm_context_retrieve"], ["multillm_context_retrieve", CACHE.upper()],
    {CACHE: True}, ["multillm_context_retrieve", "multillm_context_search", RECALL, CACHE, None]]
# The latest user turn recall ranks against: never to appear in a log line either.
RECALL_ASKS = ["Hostileqmark lantern flickers Aurore?", "Hostileqmark *nods*", "Hostileqmark",
               "Hostileqmark H-u-0001 夜の森 lantern " * 40, "Hostileqmark \u05e9\u05dc\u05d5\u05dd mágico"]


def valid_body(rng: random.Random, fmt: str) -> dict:
    n = rng.choice([1, 2, 4, 8])
    make = {"chat": rp.chat_body, "responses": rp.responses_body, "messages": rp.messages_body}[fmt]
    body = make(n, model=MODEL, size=rng.choice([20, 80]), tag="H")
    if rng.random() < 0.3:
        del body["capabilities"]
    elif rng.random() < 0.4:   # the search tool too (§6.1), in odd shapes as well
        body["capabilities"] = rng.choice([
            ["multillm_context_retrieve", "multillm_context_search"], ["multillm_context_search"],
            ["multillm_context_search", "multillm_context_retrieve", "multillm_context_search"],
            "multillm_context_search", ["multillm_context_search\u0000"], [["multillm_context_search"]],
            {"multillm_context_search": True}, ["MULTILLM_CONTEXT_SEARCH", "multillm_context_retrieve"]])
    elif rng.random() < 0.4:   # recall (§6.2), in odd shapes as well, asking about the past:
        # a history long enough to page on a model whose room holds a moment
        body = make(30, model=RECALL_MODEL, size=80, tag="H")
        body["capabilities"] = rng.choice(RECALL_SHAPES)
        key = "input" if fmt == "responses" else "messages"
        body[key][-1] = {"role": "user", "content": rng.choice(RECALL_ASKS)}
    if rng.random() < 0.2:
        body["models"] = [MODEL, "fake:tiny"]
    if rng.random() < 0.2:
        body["stream"] = True
    # Every other field the edge reads, so type swaps reach them too.
    if rng.random() < 0.3:
        body["context_protected_indices"] = [1, 3]
    if rng.random() < 0.2:
        body["tools"] = [{"type": "function", "function": {"name": "roll_dice", "parameters": {}}}]
    if fmt == "chat" and rng.random() < 0.2:
        body["max_completion_tokens"] = 150
    if fmt == "chat" and rng.random() < 0.1:
        body["functions"] = [{"name": "roll_dice", "parameters": {}}]
    if fmt == "messages" and rng.random() < 0.3:
        body["system"] = [{"type": "text", "text": "You are Aurore."}]
    if fmt == "messages" and rng.random() < 0.2:     # breakpoints the prompt cache counts
        body["cache_control"] = rng.choice([{"type": "ephemeral"}, "x", None, [1], {"cache_control": 1}])
        if rng.random() < 0.5:
            body["system"] = [{"type": "text", "text": "card", "cache_control": {"type": "ephemeral"}}] * 4
    if fmt != "responses" and rng.random() < 0.15:
        body = anchored_body(rng, fmt, make)
    return body


CC = {"type": "ephemeral"}
#: What the message before the latest turn may be, where the edge's window anchor goes (§5.7).
WINDOW_SHAPES = [
    lambda t: t, lambda t: [{"type": "text", "text": t}],
    lambda t: [{"type": "text", "text": t}, {"type": "text", "text": t, "cache_control": CC}],
    lambda t: [{"type": "thinking", "thinking": t, "signature": "s"}], lambda t: [{"type": "text", "text": ""}],
    lambda t: "", lambda t: [], lambda t: [{"type": "text", "text": t, "cache_control": "odd"}]]


def anchored_body(rng: random.Random, fmt: str, make) -> dict:
    """A paged prompt-cache body (recall or not) with the client's own breakpoints in odd
    places — 4 already, a tool's input, a system block, a tool result — and a string or a
    list content on the message the window's anchor goes on (docs/design.md §5.7)."""
    body = make(30, model=RECALL_MODEL, size=80, tag="H")
    body["capabilities"] = ["multillm_context_retrieve", CACHE] + ([RECALL] if rng.random() < 0.5 else [])
    msgs = body["messages"]
    msgs[-2]["content"] = rng.choice(WINDOW_SHAPES)(msgs[-2]["content"] if isinstance(
        msgs[-2]["content"], str) else "Hostile window")
    for _ in range(rng.randint(0, 5)):
        where = rng.choice(["top", "system", "tool_input", "tool_result", "four", "part"])
        if where == "top":
            body["cache_control"] = dict(CC)
        elif where == "system" and fmt == "messages":
            body["system"] = [{"type": "text", "text": "card", "cache_control": dict(CC)}]
        elif where == "tool_input":
            body["tools"] = [{"name": "roll", "description": "d", "input_schema": {
                "type": "object", "properties": {"cache_control": {"type": "string"}}}}]
        elif where == "four":
            for m in msgs[:4]:
                m["content"] = [{"type": "text", "text": "early", "cache_control": dict(CC)}]
        else:
            for m in msgs:
                if isinstance(m.get("content"), list) and m["content"] and isinstance(m["content"][-1], dict):
                    m["content"][-1]["cache_control"] = dict(CC)
                    break
    return body


HOSTILE_VALUES = [
    None, True, False, 0, -1, 1, 2 ** 63, -(2 ** 63) - 1, 10 ** 30, 1.5, -0.0, 1e308, 5e-324,
    "", " ", "x" * 5000, "\ud800", "\udfff tail", "\x00", "\u202e\u0000\uffff", "🎭" * 50,
    [], {}, [1, 2, 3], [[]], [{}], [None], {"a": {}}, {"role": "user"}, ["multillm_context_retrieve"],
    MODEL, "fake:", ":", "fake:rp-small\r\nX: y", "../../etc/passwd", "' OR 1=1 --",
    "cp_" + "A" * 43, "[multillm context] Earlier exchanges", [-1], [10 ** 9],
]

ODD_NUMBERS = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"1e-400", b"-0",
               b"123456789012345678901234567890", b"9" * 4400, b"0.0000000000000000000001"]


def paths(doc, prefix=()):
    """Every path in a JSON tree (root excluded)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,)
            yield from paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield prefix + (i,)
            yield from paths(v, prefix + (i,))


def _set(doc, path, value):
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


def _delete(doc, path):
    node = doc
    for p in path[:-1]:
        node = node[p]
    del node[path[-1]]


def _dumps(rng, doc) -> bytes:
    ascii_ = rng.random() < 0.5
    indent = rng.choice([None, None, 1])
    return json.dumps(doc, ensure_ascii=ascii_, indent=indent).encode("utf-8", "surrogatepass")


HOLE = "__HOSTILE_HOLE__"


def _with_hole(rng, doc, raw_value: bytes) -> bytes:
    """Serialize ``doc`` with ``raw_value`` (any bytes) at a random path."""
    all_paths = list(paths(doc))
    _set(doc, rng.choice(all_paths), HOLE)
    return _dumps(rng, doc).replace(json.dumps(HOLE).encode(), raw_value, 1)


def depth_bomb(depth: int, opener=b"[") -> bytes:
    closer = b"]" if opener == b"[" else b"}"
    if opener == b"[":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + closer * depth


def mutate_body(rng: random.Random, doc: dict, kind: str | None = None) -> tuple[str, bytes]:
    kind = kind or rng.choice(["swap", "swap", "swap", "delete", "wrap", "depth", "number",
                               "duplicate", "surrogate", "bytes", "model", "top"])
    all_paths = list(paths(doc))
    if kind == "swap":
        _set(doc, rng.choice(all_paths), json.loads(json.dumps(rng.choice(HOSTILE_VALUES))))
        return kind, _dumps(rng, doc)
    if kind == "delete":
        _delete(doc, rng.choice(all_paths))
        return kind, _dumps(rng, doc)
    if kind == "wrap":
        path = rng.choice(all_paths)
        node = doc
        for p in path:
            node = node[p]
        _set(doc, path, rng.choice([[node], {"value": node}, json.dumps(node)]))
        return kind, _dumps(rng, doc)
    if kind == "depth":
        depth = rng.choice([MAX_DEPTH - 8, MAX_DEPTH - 3, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 5,
                            2 * MAX_DEPTH, 10 * MAX_DEPTH, 20_000, 100_000])
        return kind, _with_hole(rng, doc, depth_bomb(depth, rng.choice([b"[", b"{"])))
    if kind == "number":
        return kind, _with_hole(rng, doc, rng.choice(ODD_NUMBERS))
    if kind == "duplicate":
        raw = _dumps(rng, doc)
        key = rng.choice([b'"model"', b'"messages"', b'"input"', b'"max_tokens"', b'"capabilities"',
                          b'"role"', b'"content"', b'"tool_call_id"'])
        dup = key + b":" + rng.choice([b'"fake:tiny"', b"[]", b"1", b'"system"', b'"x"', b"null"]) + b","
        at = raw.find(b"{", rng.randrange(len(raw)))
        at = raw.find(b"{") if at < 0 else at
        return kind, raw[:at + 1] + dup + raw[at + 1:]
    if kind == "model":      # names around the length limit and far beyond it (a D1 parameter)
        name = "fake:" + "m" * (rng.choice([MAX_MODEL_NAME, MAX_MODEL_NAME + 1, 100_000]) - 5)
        if rng.random() < 0.5:
            doc["model"] = name
        else:
            doc["models"] = [name] * rng.choice([1, 16])
        return kind, _dumps(rng, doc)
    if kind == "surrogate":
        value = rng.choice([b'"\\ud800"', b'"a\\udc00b"', b'"\\ud83d"', b'{"\\udfff": 1}'])
        return kind, _with_hole(rng, doc, value)
    if kind == "bytes":
        raw = _dumps(rng, doc)
        at = rng.randrange(len(raw))
        junk = rng.choice([b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\x00", b"\xef\xbb\xbf", b"\x80\x80",
                           b'"', b"\\", b"\n"])
        if rng.random() < 0.3:
            return kind, raw[:at]                            # truncated
        return kind, raw[:at] + junk + raw[at:]
    # top: the whole body replaced
    return kind, rng.choice([b"", b"null", b"[]", b"0", b'"x"', b"{}", b"[{}]", b"{" * 3,
                             b"\xef\xbb\xbf{}", b"\x00" * 16, b"true", b'{"model":null}',
                             json.dumps({"model": MODEL}).encode()])


#: A model wide enough for a large body to be dispatched as received
HUGE_MODEL, HUGE_WINDOW = "fake:rp-huge", 4_000_000
#: Non-ASCII text, escaped quotes and backslash runs: a large body's slices (the bracket
#: pass reads 2 MiB at a time) end among them
FILLER_UNIT = 'é夜🌙 "said" \\ a\\\\b \\"x\\" The lantern flickers. '


def large_body(rng: random.Random, fmt: str, doc: dict) -> tuple[str, bytes]:
    """``doc`` grown past the narrow parse's threshold (2 MiB; docs/design.md §7.2) by one
    user message of non-ASCII text and escapes, then valid or spoiled as a small body is:
    the large path must answer exactly as the exact path would."""
    unit = FILLER_UNIT * rng.randint(1, 7)
    text = unit * ((rng.randint(2 << 20, 3 << 20)) // len(unit.encode()) + 1)
    doc["input" if fmt == "responses" else "messages"].insert(0, {"role": "user", "content": text})
    if rng.random() < 0.5:
        doc["model"] = HUGE_MODEL
    kind = rng.choice(["valid", "valid", "surrogate", "bytes", "number", "duplicate", "wide escape",
                       "depth", "swap"])
    if kind == "valid":
        return "large:valid", _dumps(rng, doc)
    if kind == "wide escape":        # a non-ASCII escape: the narrow view cannot read it
        return "large:wide escape", _with_hole(rng, doc, rng.choice([b'"\\u00e9"', b'"a\\u20acb"']))
    return "large:" + kind, mutate_body(rng, doc, kind)[1]


def roleplay_headers(rng: random.Random) -> tuple[str, dict]:
    headers = {"Authorization": f"Bearer {KEY}", "X-Roleplay-Session-ID": SESSION,
               "Content-Type": "application/json"}
    r = rng.random()
    if r < 0.72:
        return "valid", headers
    if r < 0.80:     # bursts of a principal with limits: its window fills, its bytes run out
        key, session = (LIMITED_KEY, LIMITED_SESSION) if r < 0.785 else (SPENT_KEY, SPENT_SESSION)
        headers.update({"Authorization": f"Bearer {key}", "X-Roleplay-Session-ID": session})
        return "limited" if key == LIMITED_KEY else "spent", headers
    variant = rng.choice(["empty_session", "blank_session", "long_session", "sql_session",
                          "no_key", "bearer_only", "x_api_key", "wrong_key", "other_key",
                          "content_type", "no_content_type", "lower_bearer", "passed_headers",
                          "declared_length"])
    if variant == "empty_session":
        headers["X-Roleplay-Session-ID"] = ""
    elif variant == "blank_session":
        headers["X-Roleplay-Session-ID"] = "   "
    elif variant == "long_session":
        headers["X-Roleplay-Session-ID"] = "rps_" + "a" * rng.choice([252, 253, 5000])
    elif variant == "sql_session":
        headers["X-Roleplay-Session-ID"] = rng.choice(["' OR '1'='1", "rps_x; DROP TABLE roleplay_keys", "../rps"])
    elif variant == "no_key":
        del headers["Authorization"]
    elif variant == "bearer_only":
        headers["Authorization"] = rng.choice(["Bearer", "Bearer ", "Basic abc", "bearer  "])
    elif variant == "x_api_key":
        del headers["Authorization"]
        headers["x-api-key"] = KEY
    elif variant == "wrong_key":
        headers["Authorization"] = "Bearer rpk_nope"
    elif variant == "other_key":
        headers["Authorization"] = f"Bearer {OTHER_KEY}"
    elif variant == "content_type":
        headers["Content-Type"] = rng.choice(["text/plain", "multipart/form-data; boundary=x", "application/x-www-form-urlencoded"])
    elif variant == "no_content_type":
        del headers["Content-Type"]
    elif variant == "passed_headers":           # the client headers the edge passes upstream
        headers.update({"anthropic-version": rng.choice(["", "2023-06-01", "x" * 300]),
                        "anthropic-beta": "tools-2024", "openai-beta": "assistants=v2",
                        "Accept": "text/event-stream"})
    elif variant == "declared_length":         # reserved before it is read (docs/design.md §7.2)
        headers["Content-Length"] = rng.choice(DECLARED_LENGTHS)
    else:
        headers["Authorization"] = f"bearer {KEY}"
    return variant, headers


#: Content-Lengths a client may declare, whatever its body: past the edge's limit (413),
#: at it (a reservation of 5 × 8 MiB), past what the budget holds (admitted alone), absurd,
#: not a number (reserved as the body is read). The runner tier sends the true length.
DECLARED_LENGTHS = [str(8 * 1024 * 1024 + 1), str(8 * 1024 * 1024), str(40 * 1024 * 1024),
                    str(2 ** 63), "9" * 30, "-1", "1e9", " 12", "0"]


HOSTILE_IDS = [
    "", "cp_", "cp_" + "A" * 43, "cp_" + "A" * 42 + "B", "cp_" + "A" * 44, "../../etc/passwd",
    "..%2F..%2Fsecret", "%00", "cp_%00" + "A" * 40, "' OR 1=1 --", "cp_'; DROP TABLE context_pages; --",
    "cp_" + "é" * 43, "cp_" + "A" * 5000, "rps_" + "x" * 300, "%E2%80%AE", "a/b/c", "cp_A*", "?x=1",
]


EXCHANGES = ["1", "2", "0", "-1", "", "1.0", "1e3", "99999999999999999999", "１", "٣",
             "\x00", "1&exchange=2", "0x1", " 1", "true", "null", "[1]", "9" * 5000]


def other_route(rng: random.Random, n: int) -> Case:
    kind = rng.choice(["session_create", "session_end", "retrieve", "retrieve", "forward", "healthz"])
    _, headers = roleplay_headers(rng)
    ident = quote(rng.choice(HOSTILE_IDS), safe="%/=")
    if kind == "session_create":
        body = rng.choice([b"", b"{}", b"[" * 5000, b"\xff"])
        return Case(n, kind, "POST", "/v1/roleplay/sessions", headers, body)
    # HTTP clients resolve "../" before sending: such a path may leave the edge's routes.
    dotted = "/.." in "/" + ident
    if kind == "session_end":
        return Case(n, kind, "DELETE", "/v1/roleplay/sessions/" + ident, headers, roleplay=not dotted)
    if kind == "retrieve":
        session = quote(rng.choice([SESSION, "", "' OR 1=1", "x" * 3000]), safe="")
        query = rng.choice([f"roleplay_session_id={session}",
                            f"roleplay_session_id={session}&roleplay_session_id=other",
                            "roleplay_session_id", f"roleplay_session_id={session}&x=%ff"])
        if rng.random() < 0.4:   # one exchange of a block (§6): every odd shape of N
            query += "&exchange=" + quote(rng.choice(EXCHANGES), safe="")
        return Case(n, kind, "GET", f"/v1/context/pages/{ident}?{query}", headers, roleplay=not dotted)
    if kind == "healthz":
        return Case(n, kind, rng.choice(["GET", "HEAD"]), "/healthz", headers)
    path = rng.choice(["/api/characters?id=7", "/v1/models", "/v1/chat/completions",
                       "/v1/context/pages/" + ident, "/%2e%2e/admin", "/api/x?a=%ff&b"])
    method = rng.choice(["GET", "POST", "PUT", "PATCH", "DELETE"])
    headers = {k: v for k, v in headers.items() if k != "X-Roleplay-Session-ID"}
    body = b"" if method == "GET" else rng.choice([b"", b"\x00\xff", b"[" * 3000, b'{"a":1}'])
    return Case(n, "forward", method, path, headers, body, roleplay=carries_reserved(headers),
                notes=reserved_notes(method, path, headers))


# ---------------------------------------------------------------------------
# The model list (docs/design.md §2): `notes["models"]` is "edge" when the request
# carries a live roleplay key on `GET /v1/models`, else "forward" (unchanged, as
# without a key: unknown and revoked keys alike).
# ---------------------------------------------------------------------------

REVOKED_KEY = "rpk_" + "hostile_revoked_c0de".ljust(43, "0")
MODELS_LISTED = ["fake:rp-huge", "fake:rp-small", "fake:rp-wide", "fake:tiny"]   # every seeded model, sorted
MODEL_PATHS = ["/v1/models", "/v1/models", "/v1/models", "/v1/models?limit=1", "/v1/models?x=%ff&x",
               "/v1/models/", "/v1/models/fake:rp-small", "/v1/models%2F", "/V1/models", "/v1/modelsx"]
MODEL_KEYS = [KEY, KEY, KEY, KEY, OTHER_KEY, OTHER_KEY, REVOKED_KEY, "rpk_nope", "", " ", KEY + " ", " " + KEY, KEY + "x",
              "' OR 1=1 --", "k" * 5000, KEY.upper(), "Bearer " + KEY, "%00"]


def presented_key(headers: dict) -> str | None:
    """The key the edge reads (docs/design.md §2): a Bearer value, else x-api-key, trimmed."""
    auth = headers.get("Authorization")
    if auth and auth[:7].lower() == "bearer " and auth[7:].strip():
        return auth[7:].strip()
    return headers.get("x-api-key", "").strip() or None


def models_case(rng: random.Random, n: int) -> Case:
    path = rng.choice(MODEL_PATHS)
    method = "GET" if rng.random() < 0.85 else rng.choice(["HEAD", "POST", "PUT", "DELETE", "OPTIONS"])
    key = rng.choice(MODEL_KEYS)
    headers = {"Accept": "application/json"}
    how = rng.choice(["bearer", "bearer", "x_api_key", "lower", "basic", "both", "none"])
    if how in ("bearer", "both"):
        headers["Authorization"] = "Bearer " + key
    elif how == "lower":
        headers["Authorization"] = "bearer  " + key
    elif how == "basic":
        headers["Authorization"] = "Basic " + key
    if how in ("x_api_key", "both"):
        headers["x-api-key"] = rng.choice([key, KEY])
    if rng.random() < 0.2:
        headers["X-Roleplay-Session-ID"] = rng.choice([SESSION, "", "' OR 1=1"])
    # As an HTTP client sends it: values trimmed.
    on_edge = (method == "GET" and path.split("?")[0] == "/v1/models"
               and (presented_key({k: v.strip() for k, v in headers.items()}) or "") in LIVE_KEYS)
    body = b"" if method in ("GET", "HEAD", "OPTIONS") else b'{"a":1}'
    reserved = carries_reserved(headers)
    notes = {"models": "edge" if on_edge else "refused" if reserved else "forward"}
    if reserved and not on_edge:
        notes.update(reserved_notes(method, path, headers))
    return Case(n, f"models:{how}", method, path, headers, body, roleplay=on_edge or reserved, notes=notes)


# ---------------------------------------------------------------------------
# Reserved keys (docs/design.md §2, "Reserved key format"): a request carrying a key of
# the admin CLI's format (`rpk_`, any letter case) in a credential header, however
# spelled, never reaches the origin. `notes["reserved"]`: the statuses the edge may
# answer instead — 400 on a roleplay path without its session, else 401 unless the key
# the edge reads is live (403; `GET /v1/models` lists instead).
# ---------------------------------------------------------------------------

RESERVED_TOKEN = re.compile(r"(?<![A-Za-z0-9_\-])rpk_", re.IGNORECASE)   # where a key starts
SESSION_PATHS = (*GENERATION.values(), "/v1/context/search")


def carries_reserved(headers: dict) -> bool:
    """Whether a credential header shows a reserved-format key (a Basic one, encoded,
    only its case knows)."""
    return any(k.lower() in ("authorization", "x-api-key") and RESERVED_TOKEN.search(v)
               for k, v in headers.items())


def reserved_notes(method: str, path: str, headers: dict, carried: bool | None = None) -> dict:
    """`{"reserved": statuses}` for a request the edge would otherwise forward, else {}."""
    if not (carried if carried is not None else carries_reserved(headers)):
        return {}
    bare, _, query = path.partition("?")
    session = any(k.lower() == "x-roleplay-session-id" for k in headers)
    if method == "POST" and bare in SESSION_PATHS:
        return {} if session else {"reserved": (400,)}
    if method == "GET" and bare.startswith("/v1/context/pages/"):
        if "roleplay_session_id" in query:
            return {}
        # An HTTP client resolves "../" first: such a path may leave the edge's routes.
        return {"reserved": (400, 401, 403) if "/.." in bare else (400,)}
    live = (presented_key({k: v.strip() for k, v in headers.items()}) or "") in LIVE_KEYS
    if method == "GET" and bare == "/v1/models" and live:
        return {}                                     # the edge's list (models_case)
    return {"reserved": (403,) if live else (401,)}


RESERVED_KEYS = [KEY, KEY, OTHER_KEY, REVOKED_KEY, "rpk_nope", "RPK_nope", "Rpk_" + "x" * 43]
RESERVED_SPELLINGS = ["Bearer {}", "bearer {}", "BEARER {}", "Bearer\t{}", "Bearer   {}", "{}", "Token {}",
                      "Token key={}", 'Bearer "{}"', "Bearer sk-origin, Bearer {}", "Bearer {}, Bearer sk-origin",
                      "Bearer {},"]
FORWARDED_ROUTES = [
    *(("POST", p) for p in SESSION_PATHS), ("GET", f"/v1/context/pages/cp_{'A' * 43}"),
    ("GET", "/v1/context/pages/cp_x?exchange=1"), ("DELETE", "/v1/context/pages/cp_x"),
    ("GET", "/v1/models"), ("GET", "/v1/models?limit=1"), ("HEAD", "/v1/models"), ("POST", "/v1/models"),
    ("GET", "/v1/models/fake:rp-small"), ("GET", "/v1/chat/completions"), ("DELETE", "/v1/responses/resp_1"),
    ("GET", "/v1/messages/batches/b1"), ("POST", "/v1/files"), ("GET", "/v1/files"), ("POST", "/v1/batches"),
    ("POST", "/v1/messages/batches"), ("OPTIONS", "/v1/chat/completions"), ("OPTIONS", "/api/chat"),
    ("GET", "/api/characters?id=7"), ("POST", "/api/chat"), ("PUT", "/api/x"), ("PATCH", "/"),
    ("GET", "/v1/roleplay/sessions"), ("GET", "/v1/roleplay/sessions/rps_x"), ("GET", "/healthzx")]


def _inside(token: str, char: str, at: int) -> str:
    return token[:at] + char + token[at:]


# A Basic credential, every way Python's default base64.b64decode (Werkzeug's) still reads
# it: characters outside the alphabet skipped (issue 46: a space, a tab, a `.` inside, a
# leading `=`), the scheme in any case, any whitespace after it, the URL-safe alphabet, or
# after another credential in a comma-joined list. (token, rng) → header value (no
# whitespace at either end: HTTP clients refuse it).
BASIC_SPELLINGS = {
    "padded": lambda t, r: f"Basic {t}",
    "unpadded": lambda t, r: "Basic " + t.rstrip("="),
    "space_inside": lambda t, r: "Basic " + _inside(t, " ", r.randrange(1, len(t))),
    "tab_inside": lambda t, r: "Basic " + _inside(t, "\t", r.randrange(1, len(t))),
    "dot_inside": lambda t, r: "Basic " + _inside(t, ".", r.randrange(1, len(t))),
    "leading_equals": lambda t, r: f"Basic ={t}",
    "equals_inside": lambda t, r: "Basic " + _inside(t, "=", 4 * r.randrange(1, len(t) // 4)),
    "junk_everywhere": lambda t, r: "Basic " + "".join(c + r.choice(["", " ", ".", "!", "\t", "*"]) for c in t[:-1]) + t[-1],
    "upper_scheme": lambda t, r: f"BASIC {t}",
    "tab_after_scheme": lambda t, r: f"basic\t{t}",
    "spaces_after_scheme": lambda t, r: f"Basic    {t}",
    "url_safe": lambda t, r: "Basic " + t.replace("+", "-").replace("/", "_"),
    "after_another": lambda t, r: f"Basic bWU6c2stb3JpZ2lu, Basic {t}",
}


def _basic(rng: random.Random, text: str) -> tuple[str, str]:
    how = rng.choice(list(BASIC_SPELLINGS))
    return how, BASIC_SPELLINGS[how](base64.b64encode(text.encode()).decode(), rng)


def reserved_case(rng: random.Random, n: int) -> Case:
    """Every forwarded path, with a live, revoked or unknown key of the format, spelled
    every way a credential header may carry it."""
    key = rng.choice(RESERVED_KEYS)
    how = rng.choice(["authorization", "authorization", "authorization", "x_api_key", "behind_origin_key",
                      "basic", "basic", "basic"])       # ~100 Basic spellings in 10,000 cases
    if how == "authorization":
        headers = {"Authorization": rng.choice(RESERVED_SPELLINGS).format(key)}
    elif how == "x_api_key":
        headers = {"x-api-key": key}
    elif how == "behind_origin_key":
        headers = {"Authorization": "Bearer sk-origin", "x-api-key": key}
    else:
        spelling, value = _basic(rng, rng.choice([f"{key}:", f"me:{key}", f"{key}:{key}", f"é:{key}"]))
        how, headers = f"basic:{spelling}", {"Authorization": value}
    method, path = rng.choice(FORWARDED_ROUTES)
    body = b""
    if path == "/v1/files" and method == "POST" and rng.random() < 0.5:   # a batch upload, not declaring
        headers["Content-Type"] = bt.content_type()
        body = bt.form(bt.jsonl([bt.item(1)]))
    elif path in GENERATION.values():
        body = _dumps(rng, valid_body(rng, {v: k for k, v in GENERATION.items()}[path]))
    elif method in ("POST", "PUT", "PATCH"):
        body = rng.choice([b'{"a":1}', b"", b'{"query":"x"}'])
    notes = reserved_notes(method, path, headers, carried=True)
    if not notes:
        notes = {"models": "edge"}
    return Case(n, f"reserved:{how}", method, path, headers, body, notes=notes)


# ---------------------------------------------------------------------------
# The search route (docs/design.md §6.1): `notes["search"]`, never stores or dispatches.
# ---------------------------------------------------------------------------

SEARCH_PATH = "/v1/context/search"
QUERY_MARK = "Hostileqmark"           # in every generated query: never in a log line
SEARCH_QUERIES = [f"{QUERY_MARK} lantern", f"{QUERY_MARK} flickers Aurore 夜の森", f"{QUERY_MARK}\x00lantern",
                  QUERY_MARK + " " + "x" * 987, QUERY_MARK + " " + "x" * 988, QUERY_MARK + "🎭" * 300,
                  f"{QUERY_MARK} \ud800", f"{QUERY_MARK} \udfff lantern", f"{QUERY_MARK} " + "lantern " * 1000,
                  f"{QUERY_MARK} \u202e\uffff", f"{QUERY_MARK} ' OR 1=1 --", f"{QUERY_MARK} H-u-0001",
                  " ", "", "\t\n\u3000", "\x00"]
SEARCH_LIMITS = [1, 5, 10, 0, 11, -1, True, False, None, 5.0, "5", [5], {"n": 5}, 2 ** 63, 10 ** 30, 1e308]


def search_body(rng: random.Random) -> tuple[str, bytes]:
    doc = {"query": rng.choice(SEARCH_QUERIES)}
    if rng.random() < 0.7:
        doc["limit"] = rng.choice(SEARCH_LIMITS)
    r = rng.random()
    if r < 0.5:
        return "search:valid_shape", _dumps(rng, doc)
    if r < 0.6:
        doc["query"] = rng.choice(HOSTILE_VALUES)
        return "search:query_type", _dumps(rng, doc)
    if r < 0.7:
        return "search:odd_number", _with_hole(rng, {**doc, "limit": HOLE}, rng.choice(ODD_NUMBERS))
    if r < 0.78:
        depth = rng.choice([MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 100_000])
        return "search:deep", _with_hole(rng, {**doc, "extra": HOLE}, depth_bomb(depth, rng.choice([b"[", b'{"a":'])))
    if r < 0.84:
        return "search:huge", _dumps(rng, {**doc, "query": QUERY_MARK + "y" * rng.choice([1001, 16 * 1024, 70_000])})
    if r < 0.9:
        raw = _dumps(rng, doc)
        return "search:duplicate", raw[:-1] + b',"query":' + json.dumps(rng.choice(SEARCH_QUERIES)).encode() + b"}"
    return "search:not_an_object", rng.choice([b"", b"[]", b"null", b'"lantern"', b"\xff\xfe", b"{", b"\x00" * 16,
                                               b'{"query":"\xed\xa0\x80"}', b"\xef\xbb\xbf{}"])


def search_case(rng: random.Random, n: int) -> Case:
    variant, headers = roleplay_headers(rng)
    kind, body = search_body(rng)
    roleplay = rng.random() < 0.9
    if not roleplay:                      # without the session header: the origin's path
        headers = {k: v for k, v in headers.items() if k != "X-Roleplay-Session-ID"}
    method = "POST" if rng.random() < 0.95 else rng.choice(["GET", "PUT"])
    notes = {"search": roleplay and method == "POST"}
    if not notes["search"]:
        notes.update(reserved_notes(method, SEARCH_PATH, headers))
    return Case(n, f"{kind}:{variant}", method, SEARCH_PATH, headers, body,
                roleplay=notes["search"] or carries_reserved(headers), notes=notes)


# ---------------------------------------------------------------------------
# Usage (docs/design.md §4.1): the provider's usage fields, valid or hostile, in each
# format's whole and streamed shapes, with what each figure must count as (None: not a
# figure, so the bytes, estimated); and `GET /v1/roleplay/usage` with every `?days=`.
# ---------------------------------------------------------------------------

FIGURES = [(b"120", 120), (b"0", 0), (b"7", 7), (b"100000000", 100_000_000), (b"-1", None),
           (b"100000001", None), (b"9223372036854775808", None), (b"1e400", None),
           (b"12.0", None), (b'"12"', None), (b"true", None), (b"null", None), (b"NaN", None),
           (b"Infinity", None), (b"[]", None), (b'{"n":1}', None)]
USAGE_KEYS = {"chat": (b"prompt_tokens", b"completion_tokens"),
              "responses": (b"input_tokens", b"output_tokens"),
              "messages": (b"input_tokens", b"output_tokens")}


def _sse(*data: bytes) -> bytes:
    return b"".join(b"data: " + d + b"\n\n" for d in data)


def provider_answer(rng: random.Random, fmt: str) -> tuple:
    # half the figures valid (FIGURES[:4]), half anything
    (i_raw, i), (o_raw, o) = (rng.choice(FIGURES[:4] if rng.random() < 0.5 else FIGURES)
                              for _ in range(2))
    ik, ok = USAGE_KEYS[fmt]
    fields = []
    if rng.random() < 0.9:
        fields.append(b'"' + ik + b'":' + i_raw)
    else:
        i = None
    if rng.random() < 0.9:
        fields.append(b'"' + ok + b'":' + o_raw)
    else:
        o = None
    usage = b"{" + b",".join(fields) + b"}"
    if rng.random() < 0.1:                       # nested wrong: no usage object at all
        usage, i, o = rng.choice([b"[]", b'"usage"', b"null", b"5", b"[" + usage + b"]"]), None, None
    if rng.random() < 0.5:
        body = {"chat": b'{"id":"x","choices":[],"usage":' + usage + b"}",
                "responses": b'{"id":"x","output":[],"usage":' + usage + b"}",
                "messages": b'{"id":"x","content":[],"usage":' + usage + b"}"}[fmt]
        return "application/json", body, 0, (i, o)
    if fmt == "chat":
        body = _sse(b'{"choices":[{"delta":{"content":"Hi"}}]}', b'{"choices":[],"usage":' + usage + b"}",
                    b"[DONE]")
    elif fmt == "responses":
        body = _sse(b'{"type":"response.output_text.delta","delta":"\\"usage\\":{}"}',
                    b'{"type":"response.completed","response":{"id":"x","usage":' + usage + b"}}")
    else:   # input in message_start, output in message_delta
        body = _sse(b'{"type":"message_start","message":{"usage":' + usage + b"}}",
                    b'{"type":"message_delta","delta":{},"usage":{"' + ok + b'":' + o_raw + b"}}")
        o = dict(FIGURES)[o_raw]         # message_delta's output figure, whatever message_start had
    return "text/event-stream", body, rng.choice([0, 1, 3, 17, 64]), (i, o)


USAGE_PATH = "/v1/roleplay/usage"
DAYS = ["7", "1", "90", "0", "91", "-1", "", "1e3", "%C2%B2", "7&days=8", "99999999999999999999",
        "%00", "x" * 3000, "３"]


def usage_case(rng: random.Random, n: int) -> Case:
    key = rng.choice([KEY, KEY, KEY, OTHER_KEY, REVOKED_KEY, "rpk_nope", "", "sk-origin"])
    headers = {}
    if key:
        headers[rng.choice(["Authorization", "x-api-key"])] = key
    if "Authorization" in headers:
        headers["Authorization"] = "Bearer " + key
    query = "" if rng.random() < 0.3 else "?days=" + rng.choice(DAYS)
    method = "GET" if rng.random() < 0.9 else rng.choice(["POST", "DELETE", "HEAD"])
    days = 7 if not query else int(query[6:]) if query[6:].isascii() and query[6:].isdigit() \
        and len(query[6:]) <= 5 and 1 <= int(query[6:]) <= 90 else None
    notes = {"usage": {"days": days, "live": key in (KEY, OTHER_KEY)}}
    if method != "GET":
        notes.update(reserved_notes(method, USAGE_PATH, headers))
    return Case(n, f"usage:{method}", method, USAGE_PATH + query, headers,
                roleplay=carries_reserved(headers), notes=notes)


def cases(seed: int, count: int):
    rng = random.Random(seed)
    for n in range(count):
        if rng.random() < 0.2:
            yield other_route(rng, n)
            continue
        if rng.random() < 0.04:
            yield usage_case(rng, n)
            continue
        if rng.random() < 0.08:
            yield search_case(rng, n)
            continue
        if rng.random() < 0.05:
            yield batch_case(rng, n)
            continue
        if rng.random() < 0.04:
            yield cors_case(rng, n)
            continue
        if rng.random() < 0.04:
            yield models_case(rng, n)
            continue
        if rng.random() < 0.04:
            yield reserved_case(rng, n)
            continue
        fmt = rng.choice(list(GENERATION))
        doc = valid_body(rng, fmt)
        if rng.random() < 0.006:
            kind, body = large_body(rng, fmt, doc)
        elif rng.random() < 0.1:
            kind, body = "valid", _dumps(rng, doc)
        else:
            kind, body = mutate_body(rng, doc)
        variant, headers = roleplay_headers(rng)
        status = 503 if rng.random() < 0.03 else 200
        yield Case(n, f"{fmt}:{kind}:{variant}", "POST", GENERATION[fmt], headers, body,
                   provider_status=status, provider_answer=provider_answer(rng, fmt))


# ---------------------------------------------------------------------------
# Batch uploads and inline batches (docs/design.md §7.1): each case knows whether an
# item really declares the capability (`notes["declares"]`, else None: forwarded).
# ---------------------------------------------------------------------------

from devkit import batches as bt  # noqa: E402

CAP = [bt.CAPABILITY]
MiB = 1 << 20


def _items(rng, count):
    """Items, some declaring; the first declaring line's number (or None)."""
    items, first = [], None
    for n in range(1, count + 1):
        declaring = rng.random() < 0.15
        items.append(bt.item(n, CAP if declaring else rng.choice([None, [], ["other"]])))
        if declaring and first is None:
            first = n
    return items, first


ODD_SHAPES = [bt.CAPABILITY, [CAP], [{"name": bt.CAPABILITY}], {bt.CAPABILITY: True}, [bt.CAPABILITY.upper()]]


def _file(rng, kind):
    """(JSONL bytes, declaring line or None) for one kind of upload."""
    newline = rng.choice([b"\n", b"\r\n"])
    items, first = _items(rng, rng.choice([1, 3, 20]))
    if kind == "odd_shape":
        for it in items:
            it["body"]["capabilities"] = rng.choice(ODD_SHAPES)
        if rng.random() < 0.5:
            items[0]["body"].pop("capabilities")
            items[0]["metadata"] = {"capabilities": CAP}
        return bt.jsonl(items, newline), None
    lines = [json.dumps(it).encode() for it in items]
    if kind == "duplicate_key":
        last = rng.choice([b"[]", b'["multillm_context_retrieve"]'])
        lines.append(b'{"custom_id":"dup","body":{"capabilities":["multillm_context_retrieve"],"capabilities":' + last + b"}}")
        if first is None and last != b"[]":
            first = len(lines)
    elif kind == "escaped":
        lines.append(json.dumps(bt.item(0, CAP)).replace("_context", "\\u005fcontext").encode())
        first = first or len(lines)
    elif kind in ("not_json", "invalid_utf8", "deep"):
        bad = {"not_json": b"{oops", "invalid_utf8": lines[-1][:-2] + b'\xff"}',
               "deep": b'{"body":' + depth_bomb(rng.choice([MAX_DEPTH + 1, 100_000])) + b"}"}[kind]
        lines.insert(rng.randrange(len(lines) + 1), bad)
        first = None
    elif kind == "too_many_lines":
        lines = [json.dumps(bt.item(n)).encode() for n in range(1, 1001)] + [json.dumps(bt.item(0, CAP)).encode()]
        first = None
    data = newline.join(lines) + newline
    if kind == "bom":
        data = b"\xef\xbb\xbf" + data
    elif kind == "too_big":
        data = json.dumps(bt.item(1, CAP)).encode() + b" " * (10 * MiB - len(lines[0])) + b"\n"
        first = None
    return data, first


UPLOAD_KINDS = ["valid", "valid", "bom", "odd_shape", "duplicate_key", "escaped", "not_json", "invalid_utf8",
                "deep", "too_many_lines", "many_parts", "huge_boundary", "missing_boundary", "other_purpose",
                "truncated", "lf_form"]


def upload_case(rng, n, headers) -> Case:
    kind = rng.choice(UPLOAD_KINDS + (["too_big"] if rng.random() < 0.05 else []))
    data, first = _file(rng, kind)
    boundary = bt.BOUNDARY if kind != "huge_boundary" else "b" * rng.choice([71, 5000])
    body = bt.form(data, purpose=b"fine-tune" if kind == "other_purpose" else b"batch", boundary=boundary,
                   crlf=b"\n" if kind == "lf_form" else b"\r\n")
    ctype = bt.content_type(boundary)
    if kind == "many_parts":
        body = b"".join(b"--" + boundary.encode() + b'\r\nContent-Disposition: form-data; name="x%d"\r\n\r\nv\r\n' % i
                        for i in range(rng.choice([1000, 5000]))) + body
    elif kind == "missing_boundary":
        ctype = rng.choice(["multipart/form-data", "multipart/form-data; boundary=", "multipart/form-data; charset=x"])
    elif kind == "truncated":
        body = body[:rng.randrange(len(body) - 4)]
    if kind in ("huge_boundary", "missing_boundary", "other_purpose", "truncated"):
        first = None
    return Case(n, f"upload:{kind}", "POST", "/v1/files", {**headers, "Content-Type": ctype}, body,
                roleplay=False, notes={"declares": first})


def inline_case(rng, n, headers) -> Case:
    kind = rng.choice(["valid", "valid", "odd_shape", "not_json", "deep"])
    params, first = [], None
    for i in range(rng.choice([1, 4, 30])):
        declaring = kind == "valid" and rng.random() < 0.2
        caps = CAP if declaring else (rng.choice(ODD_SHAPES) if kind == "odd_shape" else rng.choice([None, ["x"]]))
        params.append(bt.message_params(caps))
        if declaring and first is None:
            first = i
    body = _dumps(rng, bt.inline(params))
    if kind == "not_json":
        body, first = body[:-1], None
    elif kind == "deep":
        body, first = b'{"requests":' + depth_bomb(rng.choice([MAX_DEPTH + 1, 100_000])) + b"}", None
    return Case(n, f"inline:{kind}", "POST", "/v1/messages/batches", {**headers, "content-type": "application/json"},
                body, roleplay=False, notes={"declares": first})


def batch_case(rng, n) -> Case:
    headers = rng.choice([{"Authorization": "Bearer sk-origin"},
                          {"Authorization": f"Bearer {KEY}", "X-Roleplay-Session-ID": SESSION},
                          {"x-api-key": KEY, "X-Roleplay-Session-ID": SESSION}])
    if rng.random() < 0.15:
        return Case(n, "create_batch", "POST", "/v1/batches", headers,
                    json.dumps({"input_file_id": "file-1", "capabilities": CAP}).encode(),
                    roleplay=carries_reserved(headers),
                    notes={"declares": None, **reserved_notes("POST", "/v1/batches", headers)})
    case = (upload_case if rng.random() < 0.7 else inline_case)(rng, n, headers)
    case.notes.update(reserved_notes(case.method, case.path, headers))
    case.roleplay = carries_reserved(headers)
    return case


# ---------------------------------------------------------------------------
# CORS (docs/design.md §3): preflights and actual requests with odd Origin values, on
# every route family. `notes["cors"]` says what the edge must do: answer the preflight
# itself / add CORS headers ("edge"), else behave as without the setting.
# ---------------------------------------------------------------------------

LISTED = ("http://127.0.0.1:8000", "https://rp.example.com")
CORS_SETTING = f"{LISTED[0]}, https://RP.example.com:443, *, https://bad.example/x, null"
ODD_ORIGINS = ["", "null", "*", LISTED[0] + "/", LISTED[0].upper(), f"{LISTED[0]}, https://evil.example",
               "https://evil.example", "http://127.0.0.1:08000", "http://127.0.0.1", "https://rp.example.com:443",
               "javascript:alert(1)", "http://127.0.0.1:8000.evil.example", "x" * 300, "h" * 4000,
               "http://" + "a." * 2000 + "example", "https://bad.example"]
SENT = "authorization,content-type,x-roleplay-session-id"
ODD_REQUEST_HEADERS = ["", ",,,", "*", "authorization", "X-Roleplay-Session-ID", "x-roleplay-session-idx",
                       "x-a," * 1000 + "x-roleplay-session-id", "content-type , x-roleplay-session-id ,"]
ODD_METHODS = ["", "post", "PUT", "GET, POST", "TRACE", "OPTIONS", "M" * 3000, "DELETE ", "CONNECT"]

# family -> (method, path, the edge answers it given Access-Control-Request-Headers)
_SEARCH_ON_EDGE = lambda acrh: "x-roleplay-session-id" in {h.strip().lower() for h in acrh.split(",")}  # noqa: E731
CORS_FAMILIES = {
    "session_create": ("POST", "/v1/roleplay/sessions", lambda acrh: True),
    "session_end": ("DELETE", "/v1/roleplay/sessions/rps_cors", lambda acrh: True),
    "retrieve": ("GET", f"/v1/context/pages/cp_{'A' * 43}?roleplay_session_id={SESSION}&exchange=1", lambda acrh: True),
    "search": ("POST", SEARCH_PATH, _SEARCH_ON_EDGE),
    "managed_retrieve": ("GET", f"/v1/context/pages/cp_{'A' * 43}", lambda acrh: False),
    "generation": ("POST", "/v1/chat/completions", lambda acrh: False),
    "generation_responses": ("POST", "/v1/responses", lambda acrh: False),
    "generation_messages": ("POST", "/v1/messages", lambda acrh: False),
    "inline_batch": ("POST", "/v1/messages/batches", lambda acrh: False),
    "healthz": ("GET", "/healthz", lambda acrh: False),
    "batch": ("POST", "/v1/files", lambda acrh: False),
    "forward": ("GET", "/v1/models", lambda acrh: False),
}


def cors_case(rng: random.Random, n: int) -> Case:
    family = rng.choice(list(CORS_FAMILIES))
    method, path, on_edge = CORS_FAMILIES[family]
    origin = rng.choice(LISTED * 8 + tuple(ODD_ORIGINS))
    listed = origin in LISTED
    if rng.random() < 0.75 or family not in ("session_create", "session_end", "retrieve", "search", "healthz"):
        requested = method if rng.random() < 0.7 else rng.choice(ODD_METHODS)
        acrh = SENT if rng.random() < 0.6 else rng.choice(ODD_REQUEST_HEADERS)
        headers = {"Origin": origin, "Access-Control-Request-Headers": acrh}
        if requested:
            headers["Access-Control-Request-Method"] = requested
        edge = listed and requested.strip() == method and on_edge(acrh)   # a value's edges are not its own
        return Case(n, f"cors:preflight:{family}", "OPTIONS", path, headers, roleplay=edge,
                    notes={"cors": {"preflight": True, "edge": edge, "origin": origin}})
    # The actual request, as the extension sends it (a search needs the session header).
    headers = {"Origin": origin, "Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    if family == "search" and rng.random() < 0.8:
        headers["X-Roleplay-Session-ID"] = SESSION
    routed = family in ("session_create", "session_end", "retrieve") or "X-Roleplay-Session-ID" in headers
    body = json.dumps({"query": f"{QUERY_MARK} lantern"}).encode() if method == "POST" else b""
    notes = {"cors": {"preflight": False, "edge": listed and routed, "origin": origin},
             "search": family == "search" and routed}
    if not routed and family != "healthz":
        notes.update(reserved_notes(method, path, headers))
    return Case(n, f"cors:actual:{family}", method, path, headers, body, roleplay=True, notes=notes)


# ---------------------------------------------------------------------------
# A session's next turn turning hostile in its new part only (docs/design.md §5.13): the
# isolate resumes from the last turn's bytes, so the edge must refuse it exactly as a
# body it meets for the first time. `resumed_pairs` yields (valid turn, next turn): the
# next one is the valid body in the edge's own encoding (the history first, as
# SillyTavern sends it, or last) with one exchange appended, spoiled there or after.
# ---------------------------------------------------------------------------

def _compact(doc) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def _spoiled(rng: random.Random, new: list) -> tuple[str, bytes]:
    """The appended items, comma-joined, spoiled one way (or left valid)."""
    kind = rng.choice(["swap", "swap", "depth", "number", "surrogate", "bytes", "cut", "valid"])
    if kind == "swap":
        _set(new, rng.choice(list(paths(new))), json.loads(json.dumps(rng.choice(HOSTILE_VALUES))))
    raw = _compact(new)[1:-1]
    if kind in ("depth", "number", "surrogate"):
        value = {"depth": lambda: depth_bomb(rng.choice([MAX_DEPTH - 3, MAX_DEPTH, MAX_DEPTH + 1, 20_000]),
                                             rng.choice([b"[", b"{"])),
                 "number": lambda: rng.choice(ODD_NUMBERS),
                 "surrogate": lambda: rng.choice([b'"\\ud800"', b'"a\\udc00b"', b'{"\\udfff":1}'])}[kind]()
        raw = raw.replace(b'"' + HOLE_TEXT + b'"', value, 1)
    elif kind in ("bytes", "cut"):
        at = rng.randrange(len(raw))
        junk = rng.choice([b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\x00", b'"', b"\\", b"]", b"}", b","])
        raw = raw[:at] if kind == "cut" else raw[:at] + junk + raw[at:]
    return kind, raw


HOLE_TEXT = b"__resumed_hole__"
AFTER = [b',"model":5', b',"max_tokens":-1', b',"capabilities":"x"', b',"messages":[]', b',"input":7',
         b',"tools":{}', b',"model":"fake:tiny"', b',"stream":NaN', b',', b',"x"', b'', b',"models":[1]']


def resumed_pairs(seed: int, count: int):
    rng = random.Random(seed)
    for n in range(count):
        fmt = rng.choice(list(GENERATION))
        doc = valid_body(rng, fmt)
        key = "input" if fmt == "responses" else "messages"
        if type(doc.get(key)) is not list or not doc[key]:
            continue
        if rng.random() < 0.5:                      # the history first, as SillyTavern sends it
            doc = {key: doc.pop(key), **doc}
        headers = roleplay_headers(rng)[1] if rng.random() < 0.2 else \
            {"Authorization": f"Bearer {KEY}", "X-Roleplay-Session-ID": SESSION, "Content-Type": "application/json"}
        valid = _compact(doc)
        new = [{"role": "assistant", "content": HOLE_TEXT.decode()},      # a value some kinds replace
               {"role": "user", "content": rng.choice(RECALL_ASKS)}]
        kind, fragment = _spoiled(rng, new)
        history = _compact(doc[key])
        at = valid.index(history) + len(history) - 1        # the history's closing bracket
        after = rng.choice(AFTER) if rng.random() < 0.3 else b""
        spoiled = valid[:at] + b"," + fragment + valid[at:-1] + after + b"}"
        path = GENERATION[fmt]
        yield (Case(2 * n, f"{fmt}:resumed-first", "POST", path, dict(headers), valid),
               Case(2 * n + 1, f"{fmt}:resumed:{kind}{':after' if after else ''}", "POST", path,
                    dict(headers), spoiled))
