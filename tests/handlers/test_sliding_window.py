"""Issue 19, item 2, in-process: a roleplay grown turn by turn well past the session's
1 MiB allowance (1,500 exchanges of ~1.9 KB, a 32k window) goes on for 50 more turns with
no 413 reaching the player, through the sliding-window recipe exactly as
examples/context_tools.py runs it (its `run_turn`: `slide_window`, a new session once on a
413 `context_session_limit_exceeded`), with the official `openai` SDK over an httpx
transport into the in-process edge. Every exchange a request still sends is paged
byte-exact: the pages named upstream, read back from storage, are the client's items in
compact JSON and restore exactly what it sent; a sample comes back through the retrieval
handler. Past the allowance the client's cut moves in steps and the edge pages in steps
(`multillm_context_prompt_cache`), so most turns send the provider the last turn's bytes
up to its window's end (issue 33)."""

from __future__ import annotations

import base64
import json

import httpx
import openai

from devkit import roleplay as rp
from devkit.plans import is_recall, marker_content, marker_ids
from examples.context_tools import Session, _size, open_session, run_turn
from multillm_edge.core import config
from tests.handlers.conftest import KEY, MODEL, SESSION
from tests.support.inprocess import Answer

WINDOW, RESERVED = 32_000, 1024
GROWN, BATCH, MORE = 1500, 30, 50
EDGE = "https://edge.test"


def compact(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


class Chat:
    """The client's side: the SDK and the plain HTTP client, both into the edge."""

    def __init__(self, edge):
        self.edge, self.sent = edge, []          # generation bodies as the client sent them
        transport = httpx.MockTransport(self.handle)
        self.http = httpx.Client(transport=transport)
        self.client = openai.OpenAI(api_key=KEY, base_url=EDGE + "/v1", max_retries=0,
                                    http_client=httpx.Client(transport=transport))
        self.statuses = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.raw_path.decode()
        if path == "/v1/chat/completions":
            self.sent.append(json.loads(request.content))
        r = self.edge.request(request.method, path, list(request.headers.items()), request.content)
        if path == "/v1/chat/completions":
            self.statuses.append(r.status)
        return httpx.Response(r.status, headers=r.headers, content=r.body)


def answer_of(i: int):
    doc = {"id": f"chatcmpl-{i}", "object": "chat.completion", "created": 0, "model": "rp-small",
           "choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": rp.long_answer(i)}}]}
    return lambda sent: Answer(body=json.dumps(doc).encode())


def stored(edge, page_id: str) -> bytes:
    [row] = edge.sql("SELECT r2_key, r2_offset, byte_length FROM context_pages WHERE page_id = ?1", page_id)
    return edge.bucket.objects[row["r2_key"]][row["r2_offset"]:row["r2_offset"] + row["byte_length"]]


def stable_prefix(sent: bytes) -> bytes:
    """The upstream bytes up to the window's end: the body up to its messages, then every
    message before recall's and the latest turn (docs/design.md §5.7, prompt cache)."""
    items = json.loads(sent)["messages"]
    end = len(items) - 1
    end -= 1 if end and is_recall(items[end - 1]) else 0
    return sent[:sent.index(b'"messages":[') + 12] + b",".join(compact(m) for m in items[:end])


def check_paged_exactly(edge, client_body: dict, upstream: dict, session_id: str, retrieve: bool) -> int:
    """The upstream messages with each marker replaced by its stored pages are exactly the
    client's; each page's bytes are the compact JSON of the client's items it replaced.
    Returns how many of the client's messages went as pages (a page may hold a block)."""
    restored, paged = [], 0
    for m in upstream["messages"]:
        ids = marker_ids(marker_content(m))
        if ids is None:
            if not is_recall(m):       # recall's message stands before the latest turn
                restored.append(m)
            continue
        for n, pid in enumerate(ids):
            body = stored(edge, pid)
            items = client_body["messages"][len(restored):len(restored) + len(json.loads(body))]
            assert body == compact(items)
            restored.extend(items)
            paged += len(items)
            if retrieve and n in (0, len(ids) // 2, len(ids) - 1):
                r = edge.request("GET", f"/v1/context/pages/{pid}?roleplay_session_id={session_id}",
                                 {"Authorization": f"Bearer {KEY}"})
                assert r.status == 200 and base64.b64decode(r.json()["body_base64"]) == compact(items)
                assert r.json()["messages"] == items
    assert restored == client_body["messages"]
    return paged


def test_a_chat_past_the_allowance_goes_on_with_no_413_and_every_sent_exchange_paged(edge):
    edge.set_model(MODEL, WINDOW, RESERVED)
    chat = Chat(edge)
    session = Session(SESSION)
    messages = [{"role": "system", "content": rp.CARD}]
    sessions, windowed_at = {SESSION}, None

    def turn(i: int):
        messages.append(rp.long_turn(i))
        edge.upstream = answer_of(i)
        reply = run_turn(chat.client, chat.http, EDGE, KEY, session, messages, model=MODEL,
                         max_tokens=RESERVED)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        sessions.add(session.id)
        return [p["page_id"] for p in (reply.model_extra or {}).get("context_pages", [])]

    # Grown to 1,500 exchanges, BATCH at a time (each request sends the whole chat so far).
    i = 0
    while i < GROWN:
        for j in range(i, i + BATCH - 1):
            messages.extend(rp.long_exchange(j))
        i += BATCH - 1
        turn(i)
        i += 1
        if windowed_at is None and session.left_out:
            windowed_at = i
    history = sum(_size(m) for m in messages[1:])
    assert len(messages) == 1 + 2 * GROWN and history > 2.5 * config.SESSION_ALLOWANCE_BYTES
    assert windowed_at is not None and len(sessions) > 1      # the window started; sessions were renewed
    # 50 more single-exchange turns, each checked.
    last, cuts, cached = None, set(), 0
    for k in range(MORE):
        before = len(chat.sent)
        ids = turn(GROWN + k)
        client_body, upstream = chat.sent[-1], edge.sent[-1].json()
        # The client's cut moves in steps (README: the sliding-window recipe): between
        # them it sends the last request's messages and this turn's; the edge, declared
        # the prompt cache, keeps its marker between its own steps. Then the provider gets
        # the last request's bytes up to its window's end: its prefix cache holds.
        here = (session.id, session.left_out, ids, edge.sent[-1].body)
        cuts.add(session.left_out)
        if last and last[:3] == here[:3]:
            assert here[3].startswith(stable_prefix(last[3]))
            cached += 1
        last = here
        assert chat.statuses[-1] == 200
        assert len(chat.sent) - before in (1, 2)           # at most one refused and sent again
        assert session.left_out > 0 and session.figures["active_bytes"] <= session.figures["limit_bytes"]
        assert client_body["messages"][0] == {"role": "system", "content": rp.CARD}
        assert client_body["messages"][-1] == rp.long_turn(GROWN + k)
        assert sum(_size(m) for m in client_body["messages"][1:]) <= 0.75 * config.SESSION_ALLOWANCE_BYTES
        paged = check_paged_exactly(edge, client_body, upstream, session.id, retrieve=k % 10 == 0)
        assert paged > 600                                 # most of the sent chat is paged
    # 50 exchanges of ~1.9 KB are less than one step of the window (20 % of 786 KB): the
    # cut moved at most once (it is the messages' own, whatever the session); most turns,
    # those between the edge's own steps (20 % of its budget), kept the provider's cache.
    print(f"\n{MORE} turns past the allowance: {len(cuts)} cuts, {cached} kept the last prefix, "
          f"{len(sessions)} sessions")
    assert len(cuts) <= 2 and cached >= MORE // 2, (cuts, cached)
    # What the player saw: every request answered; each refusal (a 413, never shown) was
    # followed by the same turn in a new session.
    refused = [n for n, s in enumerate(chat.statuses) if s != 200]
    assert all(chat.statuses[n] == 413 and chat.statuses[n + 1] == 200 for n in refused)
    assert len(refused) == len(sessions) - 1
    assert len(messages) == 1 + 2 * (GROWN + MORE)
