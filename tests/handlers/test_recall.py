"""Recall (docs/design.md §6.2): a paged request that declares `multillm_context_recall`
carries the stored exchanges that best match its latest user text, verbatim, in a
message right before its latest user turn; the answer says what was recalled. Without
it, nothing changes."""

import base64
import hashlib
import json

import pytest

from devkit import roleplay as rp
from devkit.plans import is_recall, marker_content, marker_ids
from multillm_edge import formats
from multillm_edge.core import recall
from multillm_edge.search import EXCERPT_MAX
from tests.handlers.conftest import MODEL

WINDOW = 12000      # a room of 15 % of the budget holds a moment of two ~400-character lines
BUDGET = WINDOW - 200 - 256


@pytest.fixture(autouse=True)
def roomy(edge):
    edge.set_model(MODEL, WINDOW, 1000)

RETRIEVE, RECALL = formats.TOOL_NAME, formats.RECALL_CAPABILITY
NEEDLE = "We buried the silver compass beneath the third stone of the old mill."
ASK = "Where did we bury the silver compass, by the old mill?"
PATHS = {"/v1/chat/completions": (rp.chat_body, "messages"),
         "/v1/responses": (rp.responses_body, "input"),
         "/v1/messages": (rp.messages_body, "messages")}


def with_needle(path: str, ask: str = ASK, caps=(RETRIEVE, RECALL), at: int = 4,
                tail: str = "") -> dict:
    """A 30-exchange history whose exchange `at` says NEEDLE (then `tail`), the latest
    turn `ask`."""
    make, key = PATHS[path]
    body = make(30, capabilities=list(caps))
    items = body[key]
    users = [i for i, m in enumerate(items) if m.get("role") == "user" and isinstance(m.get("content"), str)]
    items[users[at]] = {**items[users[at]], "content": NEEDLE + " " + tail + items[users[at]]["content"]}
    items[-1] = {**items[-1], "content": ask}
    return body


def marker_texts(sent: bytes, key: str) -> list:
    return [marker_content(m) for m in json.loads(sent)[key] if marker_ids(marker_content(m))]


def recall_text(sent: bytes, key: str) -> str:
    """Recall's message: the one before the latest user turn, after the window."""
    items = json.loads(sent)[key]
    [at] = [i for i, m in enumerate(items) if is_recall(m)]
    assert at == len(items) - 2 and items[-1]["content"] == ASK
    assert not any(recall.INTRO in t for t in marker_texts(sent, key))   # markers stay stable
    return items[at]["content"]


@pytest.mark.parametrize("path", list(PATHS))
def test_the_moment_is_quoted_verbatim_before_the_latest_turn_and_named_in_the_answer(
        edge, headers, path):
    r = edge.request("POST", path, headers, with_needle(path))
    assert r.status == 200
    doc, sent = r.json(), edge.sent[-1].body
    assert len(sent) <= BUDGET          # the plan's size includes the moments
    [moment] = doc["context_recall"]
    assert set(moment) == {"page_id", "exchange", "score"} and moment["score"] > 0
    assert moment["page_id"] in [p["page_id"] for p in doc["context_pages"]]
    assert r.header("x-multillm-context-recall-count") == "1"
    text = recall_text(sent, PATHS[path][1])
    head = f"[page_id {moment['page_id']}, exchange {moment['exchange']}]"
    assert recall.INTRO in text and head in text and "user: " + NEEDLE in text
    assert NEEDLE not in [m.get("content") for m in json.loads(sent)[PATHS[path][1]]]
    # the named exchange, retrieved, is the one that said it
    got = edge.request("GET", f"/v1/context/pages/{moment['page_id']}?roleplay_session_id="
                              f"{headers['X-Roleplay-Session-ID']}&exchange={moment['exchange']}", headers)
    assert NEEDLE in base64.b64decode(got.json()["body_base64"]).decode()


def test_each_quoted_message_is_cut_to_the_excerpt_length(edge, headers):
    long = "The mill wheel turns slowly in the rain. " * 12
    r = edge.request("POST", "/v1/chat/completions", headers,
                     with_needle("/v1/chat/completions", tail=long))
    text = recall_text(edge.sent[-1].body, "messages")
    quoted = text.split(recall.INTRO, 1)[1].split("\n")
    lines = [q for q in quoted if q.startswith(("user: ", "assistant: ", "tool: "))]
    assert lines and all(len(q.split(": ", 1)[1]) <= EXCERPT_MAX for q in lines)
    assert any(q.endswith("\u2026") for q in lines)          # the needle's message: cut
    assert r.json()["context_recall"]


@pytest.mark.parametrize("ask", ["*I nod.*", "Yes.", "and then what?"])
def test_a_turn_without_substance_recalls_nothing_and_sends_what_it_sent_before(edge, headers, ask):
    plain = with_needle("/v1/chat/completions", ask=ask, caps=(RETRIEVE,))
    edge.request("POST", "/v1/chat/completions", headers, plain)
    before = edge.sent[-1].body
    r = edge.request("POST", "/v1/chat/completions", headers,
                     with_needle("/v1/chat/completions", ask=ask))
    assert r.json()["context_recall"] == [] and r.header("x-multillm-context-recall-count") == "0"
    assert edge.sent[-1].body == before


@pytest.mark.parametrize("path", list(PATHS))
def test_without_the_capability_nothing_changes(edge, headers, path):
    body = with_needle(path, caps=(RETRIEVE,))
    r = edge.request("POST", path, headers, body)
    assert "context_recall" not in r.json() and r.header("x-multillm-context-recall-count") is None
    assert recall.INTRO not in edge.sent[-1].body.decode()


def test_recall_alone_pages_nothing(edge, headers):
    r = edge.request("POST", "/v1/chat/completions", headers,
                     with_needle("/v1/chat/completions", caps=(RECALL,)))
    assert "context_pages" not in r.json() and "context_recall" not in r.json()
    assert edge.bucket.objects == {} and recall.INTRO not in edge.sent[-1].body.decode()


def test_a_body_that_fits_is_not_paged_for_recall(edge, headers):
    body = rp.chat_body(2, capabilities=[RETRIEVE, RECALL], new_turn=ASK)
    r = edge.request("POST", "/v1/chat/completions", headers, body)
    assert r.status == 200 and "context_pages" not in r.json()


def test_recall_never_causes_a_413(edge, headers):
    # protected content so large that the budget less the recall room cannot hold it
    body = with_needle("/v1/chat/completions")
    big = BUDGET - 3350     # fits the budget, not the budget less the recall room
    body["messages"][0]["content"] = "S" * big
    r = edge.request("POST", "/v1/chat/completions", headers, body)
    assert r.status == 200 and r.json()["context_recall"] == []
    assert len(edge.sent[-1].body) <= BUDGET


def test_a_stream_leads_with_the_recalled_moments(edge, headers):
    from tests.support.inprocess import Answer
    edge.upstream = lambda sent: Answer(headers=[("content-type", "text/event-stream")],
                                        body=b"data: {}\n\n")
    r = edge.request("POST", "/v1/chat/completions", headers,
                     with_needle("/v1/chat/completions", caps=(RETRIEVE, RECALL)) | {"stream": True})
    lines = r.body.split(b"\n")
    [line] = [ln for ln in lines if ln.startswith(b": multillm-context-recall")]
    page_id, exchange = line.split(b" ", 2)[2].decode().split(":")
    assert page_id.startswith("cp_") and int(exchange) >= 1
    assert r.header("x-multillm-context-recall-count") == "1"
    assert lines.index(line) < lines.index(b"data: {}")


def test_each_fallback_decides_its_own_recall(edge, headers):
    edge.set_model("fake:rp-tiny", 8000, 1000)
    calls = []

    def upstream(sent):
        from tests.support.inprocess import Answer
        calls.append(sent.body)
        return Answer(status=503) if len(calls) == 1 else Answer()
    edge.upstream = upstream
    body = with_needle("/v1/chat/completions") | {"models": ["fake:rp-tiny"]}
    r = edge.request("POST", "/v1/chat/completions", headers, body)
    assert r.status == 200 and len(calls) == 2
    big, tiny = calls
    assert recall.INTRO in big.decode() and recall.INTRO in tiny.decode()
    # the smaller window quotes within its own, smaller room
    assert len(tiny) <= 8000 - 200 - 256 < len(big)
    assert hashlib.sha256(tiny).hexdigest() != hashlib.sha256(big).hexdigest()
