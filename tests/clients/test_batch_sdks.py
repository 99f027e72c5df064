"""Batch routes through the runner with the official SDKs (docs/design.md §7.1): an
item declaring `multillm_context_retrieve` is a BadRequestError with the contract's code
and reaches no origin; the rest reaches the origin byte for byte."""

from __future__ import annotations

import io
import json

import anthropic
import openai
import pytest

from devkit import batches as bt
from devkit import roleplay as rp
from devkit.fakes import FakeServer, Reply
from devkit.runner import Edge

pytestmark = pytest.mark.slow
CAP = [bt.CAPABILITY]
FILE = {"id": "file-abc123", "object": "file", "bytes": 1, "created_at": 1764460800,
        "filename": "batch.jsonl", "purpose": "batch", "status": "processed"}
BATCH = {"id": "msgbatch_01", "type": "message_batch", "processing_status": "in_progress",
         "request_counts": {"processing": 1, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0},
         "ended_at": None, "created_at": "2026-12-01T00:00:00Z", "expires_at": "2026-12-02T00:00:00Z",
         "cancel_initiated_at": None, "results_url": None, "archived_at": None}


def origin_reply(rec):
    doc = BATCH if rec.path.startswith("/v1/messages/batches") else FILE
    return Reply(chunks=[json.dumps(doc).encode()])


@pytest.fixture(scope="module")
def origin():
    with FakeServer(origin_reply) as server:
        yield server


@pytest.fixture(scope="module")
def edge(origin, tmp_path_factory):
    with Edge(tmp_path_factory.mktemp("batch-sdks"), vars=rp.edge_vars("http://127.0.0.1:9", origin.url)) as edge:
        yield edge


@pytest.fixture
def openai_client(edge, origin):
    origin.clear()
    with openai.OpenAI(api_key="sk-origin", base_url=edge.url + "/v1", max_retries=0, timeout=60) as c:
        yield c


@pytest.fixture
def anthropic_client(edge, origin):
    origin.clear()
    with anthropic.Anthropic(api_key="sk-ant-origin", base_url=edge.url, max_retries=0, timeout=60) as c:
        yield c


def test_openai_batch_upload_declaring_paging_is_a_bad_request(openai_client, origin):
    data = bt.jsonl([bt.item(1), bt.item(2, CAP)])
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.files.create(file=("batch.jsonl", io.BytesIO(data)), purpose="batch")
    err = info.value
    assert err.status_code == 400 and err.code == "context_paging_unsupported" and err.param == "file"
    assert err.body["line"] == 2 and err.body["custom_id"] == "req-2"
    assert origin.received == []


def test_openai_batch_upload_without_it_reaches_the_origin_byte_for_byte(openai_client, origin):
    data = bt.jsonl([bt.item(1, ["other"]), bt.item(2)], newline=b"\r\n")
    got = openai_client.files.create(file=("batch.jsonl", io.BytesIO(data)), purpose="batch")
    assert got.id == "file-abc123"
    [rec] = origin.received
    assert rec.path == "/v1/files" and data in rec.body
    assert rec.headers["content-length"] == str(len(rec.body))
    assert rec.headers["authorization"] == "Bearer sk-origin"
    assert rec.headers["content-type"].startswith("multipart/form-data; boundary=")


def test_anthropic_inline_batch_declaring_paging_is_a_bad_request(anthropic_client, origin):
    requests = [{"custom_id": "ok-0", "params": bt.message_params()},
                {"custom_id": "rp-1", "params": bt.message_params(CAP)}]
    with pytest.raises(anthropic.BadRequestError) as info:
        anthropic_client.messages.batches.create(requests=requests)
    body = info.value.body
    assert info.value.status_code == 400 and body["type"] == "error"
    assert body["error"]["code"] == "context_paging_unsupported"
    assert body["error"]["param"] == "requests[1].params.capabilities" and body["error"]["custom_id"] == "rp-1"
    assert origin.received == []


def test_anthropic_inline_batch_without_it_reaches_the_origin(anthropic_client, origin):
    requests = [{"custom_id": "ok-0", "params": bt.message_params()}]
    got = anthropic_client.messages.batches.create(requests=requests)
    assert got.id == "msgbatch_01"
    [rec] = origin.received
    assert rec.path == "/v1/messages/batches" and rec.json() == {"requests": requests}
    # the caller's own key (this SDK version sends it as a bearer token) reaches the origin
    assert "sk-ant-origin" in (rec.headers.get("x-api-key"), rec.headers.get("authorization", "")[7:])
