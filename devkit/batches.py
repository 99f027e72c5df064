"""Batch uploads and inline batches for tests (docs/design.md §7.1)."""

from __future__ import annotations

import json

CAPABILITY = "multillm_context_retrieve"
BOUNDARY = "batchBoundary7f3e"


def item(n: int, capabilities=None, url="/v1/chat/completions") -> dict:
    body = {"model": "fake:rp-small", "messages": [{"role": "user", "content": f"line {n}"}]}
    if capabilities is not None:
        body["capabilities"] = capabilities
    return {"custom_id": f"req-{n}", "method": "POST", "url": url, "body": body}


def jsonl(items, newline=b"\n") -> bytes:
    return b"".join(json.dumps(i).encode() + newline for i in items)


def form(file: bytes, purpose: bytes = b"batch", boundary: str = BOUNDARY, crlf: bytes = b"\r\n",
         filename: str = "batch.jsonl") -> bytes:
    """A multipart/form-data body as the SDKs send it: `purpose`, then `file`."""
    b = boundary.encode()
    return (b"--" + b + crlf + b'Content-Disposition: form-data; name="purpose"' + crlf + crlf
            + purpose + crlf + b"--" + b + crlf
            + b'Content-Disposition: form-data; name="file"; filename="' + filename.encode() + b'"' + crlf
            + b"Content-Type: application/octet-stream" + crlf + crlf
            + file + crlf + b"--" + b + b"--" + crlf)


def content_type(boundary: str = BOUNDARY) -> str:
    return f"multipart/form-data; boundary={boundary}"


def inline(params_list) -> dict:
    return {"requests": [{"custom_id": f"msg-{i}", "params": p} for i, p in enumerate(params_list)]}


def message_params(capabilities=None) -> dict:
    p = {"model": "fake:rp-small", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    if capabilities is not None:
        p["capabilities"] = capabilities
    return p
