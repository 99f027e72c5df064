"""Batch routes on the in-process platform (docs/design.md §7.1): a declaring item is
refused with nothing reaching the origin; everything else reaches it byte for byte."""

import json

import pytest

from devkit import batches as b
from devkit import roleplay as rp
from multillm_edge.routes import batch
from tests.handlers.conftest import KEY, SESSION
from tests.support.inprocess import Answer, LocalEdge

ORIGIN = "http://origin.test"
CAP = [b.CAPABILITY]
UPLOAD = {"Content-Type": b.content_type(), "Authorization": "Bearer sk-origin-key", "X-Trace": "t1"}


ANSWER = b'{"id":"file-abc","object":"file","purpose":"batch"}'


def make_edge(flag="true"):
    return LocalEdge(rp.edge_vars("http://provider.test", ORIGIN, CONTEXT_PAGING_ENABLED=flag),
                     lambda sent: Answer(body=ANSWER))


@pytest.fixture
def edge():
    with make_edge() as e:
        yield e


def test_upload_declaring_a_line_is_refused_and_nothing_forwarded(edge):
    body = b.form(b.jsonl([b.item(1), b.item(2, CAP)]))
    r = edge.request("POST", "/v1/files", UPLOAD, body)
    assert r.status == 400 and edge.sent == []
    err = r.json()["error"]
    assert err == {"type": "invalid_request_error", "code": "context_paging_unsupported",
                   "message": err["message"], "param": "file", "line": 2, "custom_id": "req-2"}
    assert "Line 2" in err["message"] and r.header("cache-control") == "no-store"


def test_upload_without_it_reaches_the_origin_byte_identical(edge):
    body = b.form(b.jsonl([b.item(1, ["other"]), b.item(2)]))
    headers = {**UPLOAD, "Content-Length": str(len(body))}
    r = edge.request("POST", "/v1/files?x=1", headers, body)
    assert r.status == 200 and r.body == ANSWER
    [sent] = edge.sent
    assert sent.url == ORIGIN + "/v1/files?x=1" and sent.method == "POST" and sent.body == body
    assert sent.headers == [(k.lower(), v) for k, v in headers.items()]


def test_accepted_chunked_upload_gets_its_content_length(edge):
    body = b.form(b.jsonl([b.item(1)]))
    edge.request("POST", "/v1/files", UPLOAD, body)
    [sent] = edge.sent
    assert ("content-length", str(len(body))) in sent.headers and sent.body == body


@pytest.mark.parametrize("body", [
    b.form(b.jsonl([b.item(1, CAP)]), purpose=b"fine-tune"),
    b.form(b.jsonl([b.item(1, CAP)]) + b"{oops\n"),
    b.form(b.jsonl([b.item(1, CAP)]))[:-30],
    b"\x00\xff" * 100])
def test_what_it_cannot_prove_is_forwarded_unchanged(edge, body):
    r = edge.request("POST", "/v1/files", UPLOAD, body)
    assert r.status == 200 and [s.body for s in edge.sent] == [body]


def test_over_the_buffer_bound_streams_unjudged(edge):
    body = b.form(b.jsonl([b.item(1, CAP)]) + b" " * batch.MAX_BUFFERED)
    r = edge.request("POST", "/v1/files", UPLOAD, body)
    assert r.status == 200 and edge.streamed == 1 and edge.sent[0].body == body


def test_other_files_calls_stream_as_before(edge):
    for method, path in (("GET", "/v1/files"), ("GET", "/v1/files/file-1/content"), ("DELETE", "/v1/files/file-1")):
        assert edge.request(method, path, {"Authorization": "Bearer sk"}).status == 200
    assert edge.streamed == 0 and [s.url for s in edge.sent] == [
        ORIGIN + "/v1/files", ORIGIN + "/v1/files/file-1/content", ORIGIN + "/v1/files/file-1"]
    json_upload = json.dumps({"purpose": "batch"}).encode()
    edge.request("POST", "/v1/files", {"Content-Type": "application/json"}, json_upload)
    assert edge.sent[-1].body == json_upload


def test_inline_batch_declaring_is_refused_in_anthropics_envelope(edge):
    doc = b.inline([b.message_params(), b.message_params(CAP)])
    r = edge.request("POST", "/v1/messages/batches", {"x-api-key": "sk-ant", "anthropic-version": "2023-06-01"}, doc)
    assert r.status == 400 and edge.sent == []
    got = r.json()
    assert got["type"] == "error"
    assert got["error"] | {"message": ""} == {"type": "invalid_request_error", "code": "context_paging_unsupported",
                                             "message": "", "param": "requests[1].params.capabilities",
                                             "custom_id": "msg-1"}
    assert "requests[1].params.capabilities" in got["error"]["message"]


def test_inline_batch_without_it_is_forwarded_unchanged(edge):
    raw = json.dumps(b.inline([b.message_params(), b.message_params(["x"])]), indent=1).encode()
    headers = {"x-api-key": "sk-ant", "anthropic-version": "2023-06-01", "content-type": "application/json"}
    r = edge.request("POST", "/v1/messages/batches", headers, raw)
    assert r.status == 200
    [sent] = edge.sent
    assert sent.body == raw and sent.headers == list(headers.items()) + [("content-length", str(len(raw)))]


def test_create_batch_is_forwarded_unchanged(edge):
    raw = json.dumps({"input_file_id": "file-1", "endpoint": "/v1/chat/completions",
                      "completion_window": "24h", "capabilities": CAP}).encode()
    headers = {"authorization": "Bearer sk", "content-type": "application/json"}
    assert edge.request("POST", "/v1/batches", headers, raw).status == 200
    [sent] = edge.sent
    assert sent.body == raw and sent.headers == list(headers.items())


ROLEPLAY = {"Authorization": f"Bearer {KEY}", "x-api-key": KEY, "X-Roleplay-Session-ID": SESSION}


def test_roleplay_requests_are_refused_alike(edge):
    r = edge.request("POST", "/v1/files", {**ROLEPLAY, "Content-Type": b.content_type()},
                     b.form(b.jsonl([b.item(1, CAP)])))
    assert (r.status, r.json()["error"]["line"]) == (400, 1)
    r = edge.request("POST", "/v1/messages/batches", ROLEPLAY, b.inline([b.message_params(CAP)]))
    assert (r.status, r.json()["error"]["code"]) == (400, "context_paging_unsupported")
    assert edge.sent == []


FORWARDED_BATCHES = [
    ("/v1/files", b.form(b.jsonl([b.item(1)])), b.content_type()),
    ("/v1/files", b"{}", "application/json"),
    ("/v1/messages/batches", json.dumps(b.inline([b.message_params()])).encode(), "application/json"),
    ("/v1/batches", b'{"input_file_id":"file-1"}', "application/json")]
# Roleplay traffic whose keys are not of the reserved format (§2): forwarded without them.
SESSION_ONLY = {"Authorization": "Bearer sk-other", "x-api-key": "sk-other", "X-Roleplay-Session-ID": SESSION}


@pytest.mark.parametrize("path,body,ctype", FORWARDED_BATCHES)
def test_forwarded_roleplay_requests_go_without_their_key(edge, path, body, ctype):
    assert edge.request("POST", path, {**SESSION_ONLY, "Content-Type": ctype}, body).status == 200
    [sent] = edge.sent
    names = [k for k, _ in sent.headers]
    assert "authorization" not in names and "x-api-key" not in names
    assert "sk-other" not in repr(sent.headers) and sent.body == body
    assert ("x-roleplay-session-id", SESSION) in sent.headers


@pytest.mark.parametrize("flag", ["true", "false"])
@pytest.mark.parametrize("path,body,ctype", FORWARDED_BATCHES)
def test_a_roleplay_key_is_never_forwarded_with_a_batch(path, body, ctype, flag):
    """A key of the reserved format is refused where the request would be forwarded
    (docs/design.md §2): 403 for a live key, 401 for any other; the origin sees nothing."""
    with make_edge(flag) as edge:
        edge.seed_player("p_batch", KEY, SESSION)
        for headers, status in [(ROLEPLAY, 403), ({"x-api-key": KEY}, 403),
                                ({"Authorization": "Bearer rpk_unknown"}, 401)]:
            r = edge.request("POST", path, {**headers, "Content-Type": ctype}, body)
            assert r.status == status and edge.sent == [], (headers, r.body)
            expected = "roleplay_key_not_accepted" if status == 403 else "invalid_api_key"
            assert r.json()["error"]["code"] == expected


def test_flag_off_forwards_everything_as_before():
    with make_edge("false") as edge:
        cases = [("/v1/files", {**SESSION_ONLY, "Content-Type": b.content_type()},
                  b.form(b.jsonl([b.item(1, CAP)]))),
                 ("/v1/messages/batches", SESSION_ONLY, json.dumps(b.inline([b.message_params(CAP)])).encode()),
                 ("/v1/batches", SESSION_ONLY, b"{}")]
        for path, headers, body in cases:
            assert edge.request("POST", path, headers, body).status == 200
            sent = edge.sent[-1]
            assert sent.body == body and sent.headers == [(k.lower(), v) for k, v in headers.items()]


def test_another_purpose_streams_on_once_its_field_is_read(edge):
    # `purpose` comes first (as the SDKs send it): the rest of a fine-tune upload is
    # never buffered, whatever its size under the bound, and reaches the origin whole.
    body = b.form(b.jsonl([b.item(i, CAP) for i in range(2000)]), purpose=b"fine-tune")
    r = edge.request("POST", "/v1/files", UPLOAD, body)
    assert r.status == 200 and edge.streamed == 1 and [s.body for s in edge.sent] == [body]


def test_a_batch_purpose_is_still_judged_whole(edge):
    body = b.form(b.jsonl([b.item(i) for i in range(900)] + [b.item(9, CAP)]))
    r = edge.request("POST", "/v1/files", UPLOAD, body)
    assert r.status == 400 and edge.streamed == 0 and edge.sent == []
