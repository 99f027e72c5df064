"""Batch items never page (docs/design.md §7.1): the edge refuses, before anything is
forwarded, a batch upload or inline batch whose item declares
`multillm_context_retrieve`, and forwards everything else byte for byte.

The verdicts are pure functions of the bytes (`upload_refusal`, `inline_refusal`); the
handlers only buffer, decide and forward. The edge refuses only what it can prove: a
form, file or body it cannot read the way the origin would is forwarded unchanged, and
the origin gives its own answer (docs/design.md §7.1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..service.access import SESSION_HEADER, paging_enabled
from ..base.errors import EdgeError
from ..service import budget
from ..service.origin import forward
from ..base.http import Incoming, Outgoing
from ..core.validation import parse_json
from ..formats import RETRIEVE_CAPABILITY as CAPABILITY
from ..base.multipart import delimiter, form_boundary, form_parts, header_params, part

#: The origin's limits for a batch input file (docs/design.md §7.1).
MAX_FILE_BYTES = 10 * 1024 * 1024
MAX_FILE_LINES = 1000
#: What a form holds besides the file (boundaries, part headers, `purpose`): a body
#: longer than the file's limit plus this is forwarded without being judged.
FORM_SLACK = 64 * 1024
#: The most the edge buffers of one batch request (docs/design.md §7.1).
MAX_BUFFERED = MAX_FILE_BYTES + FORM_SLACK
#: Keys the origin does not know: not passed on with roleplay traffic (§7.1).
ROLEPLAY_KEYS = ("authorization", "x-api-key")


@dataclass(frozen=True)
class Refusal:
    index: int                  # 1-based line of the file, or 0-based request index
    custom_id: object           # the item's custom_id as sent (None if not a string)


def _field(headers: dict) -> str | None:
    """"purpose" for the purpose field, "file" for a file part, else None (a part the
    origin's form parser does not read as either)."""
    kind, params = header_params(headers.get("content-disposition", ""))
    if kind != "form-data" or headers.get("content-transfer-encoding", "binary").lower() \
            not in ("binary", "8bit", "7bit"):
        return None
    if params.get("name") == "purpose" and "filename" not in params:
        return "purpose"
    if params.get("name") == "file" and "filename" in params:
        return "file"
    return None


def not_a_batch_upload(head: bytes, boundary: bytes) -> bool:
    """True once the first bytes of a form prove it is no batch upload the edge could
    refuse: a complete `purpose` field other than `batch`, or a second one (the form
    then never passes `batch_file`). Such an upload streams on unread (§7.1); only
    parts closed by a delimiter inside `head` are read."""
    purposes, start = 0, None
    for m in delimiter(boundary).finditer(head):
        if m.end() == len(head):        # a delimiter the next bytes may still extend
            break
        if start is not None:
            found = part(head[start:m.start()])
            if found is not None and _field(found[0]) == "purpose":
                purposes += 1
                if found[1] != b"batch" or purposes > 1:
                    return True
        if m.group(1):
            break
        start = m.end()
    return False


def batch_file(body: bytes, content_type: str) -> bytes | None:
    """The JSONL file of a batch upload: exactly one `purpose` field equal to `batch` and
    exactly one `file` part with a filename, no transfer encoding. Else None (another
    purpose, or a form the edge will not second-guess)."""
    boundary = form_boundary(content_type)
    parts = form_parts(body, boundary) if boundary else None
    if parts is None:
        return None
    purposes, files = [], []
    for headers, content in parts:
        field = _field(headers)
        if field == "purpose":
            purposes.append(content)
        elif field == "file":
            files.append(content)
    if purposes != [b"batch"] or len(files) != 1:
        return None
    return files[0]


# ---------------------------------------------------------------------------
# Verdicts
# ---------------------------------------------------------------------------

def _may_declare(raw: bytes) -> bool:
    # JSON can spell the name only literally or with \u escapes: bytes holding neither
    # declare nothing, and need no parse.
    return CAPABILITY.encode() in raw or b"\\u" in raw


def declares(params) -> bool:
    """`capabilities` of a generation body is a list naming the capability (as the
    origin's parser reads it: the last of a repeated key)."""
    caps = params.get("capabilities") if isinstance(params, dict) else None
    return isinstance(caps, list) and CAPABILITY in caps


def _custom_id(item: dict):
    value = item.get("custom_id")
    return value if isinstance(value, str) else None


def jsonl_refusal(data: bytes) -> Refusal | None:
    """The first line (1-based) whose `body` declares the capability, if every non-blank
    line parses within the generation depth guard and there are at most MAX_FILE_LINES
    of them within MAX_FILE_BYTES; else None (the origin answers)."""
    if len(data) > MAX_FILE_BYTES or not _may_declare(data):
        return None
    lines = data.split(b"\n")
    if lines and lines[0].startswith(b"\xef\xbb\xbf"):
        lines[0] = lines[0][3:]       # a BOM is not part of the first item
    items = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if len(items) == MAX_FILE_LINES:
            return None
        try:
            items.append((number, parse_json(line.removesuffix(b"\r"))))
        except EdgeError:
            return None
    for number, item in items:
        if isinstance(item, dict) and declares(item.get("body")):
            return Refusal(number, _custom_id(item))
    return None


def upload_refusal(body: bytes, content_type: str) -> Refusal | None:
    """Verdict on a `POST /v1/files` body: a refusal, or None to forward it."""
    data = batch_file(body, content_type)
    return None if data is None else jsonl_refusal(data)


def inline_refusal(body: bytes) -> Refusal | None:
    """Verdict on a `POST /v1/messages/batches` body: the first `requests[i]` whose
    `params` declares the capability; None to forward it (not JSON included)."""
    if not _may_declare(body):
        return None
    try:
        doc = parse_json(body)
    except EdgeError:
        return None
    requests = doc.get("requests") if isinstance(doc, dict) else None
    if not isinstance(requests, list):
        return None
    for i, item in enumerate(requests):
        if isinstance(item, dict) and declares(item.get("params")):
            return Refusal(i, _custom_id(item))
    return None


def _unsupported(message: str, **details) -> EdgeError:
    return EdgeError(400, "context_paging_unsupported", message, **details)


def line_error(r: Refusal) -> EdgeError:
    return _unsupported(f"Line {r.index} declares {CAPABILITY}: batch items cannot page "
                        "context (stored batch work never holds the caller's key).",
                        param="file", line=r.index, custom_id=r.custom_id)


def request_error(r: Refusal) -> EdgeError:
    param = f"requests[{r.index}].params.capabilities"
    return _unsupported(f"`{param}` declares {CAPABILITY}: batch items cannot page context "
                        "(stored batch work never holds the caller's key).",
                        param=param, custom_id=r.custom_id)


# ---------------------------------------------------------------------------
# Handlers
# ---------------------------------------------------------------------------

def _origin_headers(req: Incoming) -> list[tuple[str, str]]:
    """Roleplay traffic's headers minus its key, which the origin does not know."""
    if req.header(SESSION_HEADER) is None:
        return req.headers
    return [(k, v) for k, v in req.headers if k not in ROLEPLAY_KEYS]


async def _judged(req: Incoming, platform, verdict, error, settled=None) -> Outgoing:
    """Buffer the body (at most MAX_BUFFERED), refuse on `verdict`, else forward the
    same bytes with their Content-Length, or the stream unjudged when longer or once
    `settled(head)` says its first bytes decide it is not to be judged."""
    headers = _origin_headers(req)
    body, stream = await platform.buffer_body(MAX_BUFFERED, settled,   # 503 edge_busy (§7.2)
                                              budget.reading(req, budget.BATCH_FACTOR))
    if body is None:
        return await forward(req, platform, headers=headers, body=stream)
    refusal = verdict(body)
    if refusal is not None:
        req.notes["refused"] = refusal.index
        raise error(refusal)
    headers = [(k, v) for k, v in headers if k != "content-length"]
    headers.append(("content-length", str(len(body))))
    return await forward(req, platform, headers=headers, body=body)


async def upload_file(req: Incoming, platform) -> Outgoing:
    """`POST /v1/files`: a multipart upload is judged (its purpose is in the form)."""
    if not paging_enabled(platform):
        return await forward(req, platform)          # flag off: exactly as before
    content_type = req.header("content-type") or ""
    boundary = form_boundary(content_type)
    if boundary is None:
        return await forward(req, platform, headers=_origin_headers(req))
    return await _judged(req, platform, lambda b: upload_refusal(b, content_type), line_error,
                         lambda head: not_a_batch_upload(head, boundary))


async def inline_batch(req: Incoming, platform) -> Outgoing:
    """`POST /v1/messages/batches`: items inline, judged."""
    if not paging_enabled(platform):
        return await forward(req, platform)
    return await _judged(req, platform, inline_refusal, request_error)


async def create_batch(req: Incoming, platform) -> Outgoing:
    """`POST /v1/batches` names a stored file: forwarded (its items are checked where
    they run), without a roleplay key."""
    if not paging_enabled(platform):
        return await forward(req, platform)
    return await forward(req, platform, headers=_origin_headers(req))
