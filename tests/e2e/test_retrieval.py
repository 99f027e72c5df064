"""Roleplay page retrieval through the local runner (docs/design.md §6).

Pages are created by real paged generations (chat format, fake provider); retrieval is
then checked for the exact bytes, every 404 cause (one identical body), 401/403/503,
the one-D1-statement + one-R2-get cost, and forwarding of managed handles.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from dataclasses import dataclass

import pytest

from multillm_edge.core.pages import Lifetime, Owner, PageSigner, canonical_bytes, object_key, r2_key, sha256_hex
from devkit import roleplay as rp
from devkit.fakes import FakeServer, Reply
from devkit.runner import Edge

CHAT_REPLY = Reply(chunks=[b'{"id":"c1","object":"chat.completion","choices":[{"index":0,'
                           b'"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}'])
MODEL = "fake:rp-small"
PAGES = "/v1/context/pages/"
EXPECTED_404 = (b'{"error":{"type":"not_found_error","code":"context_page_not_found",'
                b'"message":"Context page not found."}}')


# ---------------------------------------------------------------------------
# Fixtures: one runner for the module; fresh principals/sessions per test
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def servers():
    with FakeServer(CHAT_REPLY) as provider, FakeServer() as origin:
        yield provider, origin


@pytest.fixture(scope="module")
def edge(servers, tmp_path_factory):
    provider, origin = servers
    with Edge(tmp_path_factory.mktemp("retrieval"), vars=rp.edge_vars(provider.url, origin.url)) as edge:
        rp.set_model(edge, MODEL, 6000, 1000)
        yield edge


@pytest.fixture
def provider(servers):
    servers[0].reply = CHAT_REPLY
    return servers[0]


@pytest.fixture
def origin(servers):
    servers[1].clear()
    servers[1].reply = Reply()
    return servers[1]


@dataclass
class Convo:
    key: str
    principal: str
    sid: str
    tag: str
    sent: list          # the messages exactly as sent (parsed back from the sent bytes)
    pages: list         # response context_pages

    def page(self, min_bytes: int = 0) -> dict:
        return self.pages[-1] if not min_bytes else next(
            p for p in self.pages if p["_bytes"] >= min_bytes)


def paged_convo(edge, n: int = 120, key_principal=None) -> Convo:
    tag = "T" + secrets.token_hex(3)
    key, principal = key_principal or rp.seed_principal(edge)
    sid = rp.open_session(edge, key)
    raw = json.dumps(rp.chat_body(n, tag=tag), ensure_ascii=False).encode()
    r = edge.client.post("/v1/chat/completions", content=raw,
                         headers={"Authorization": f"Bearer {key}", "X-Roleplay-Session-ID": sid,
                                  "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    pages = r.json()["context_pages"]
    assert len(pages) > 3
    rows = {row["page_id"]: row for row in edge.sql(
        "SELECT page_id, byte_length FROM context_pages WHERE session_id = ?1", sid)}
    for p in pages:
        p["_bytes"] = rows[p["page_id"]]["byte_length"]
    return Convo(key, principal, sid, tag, json.loads(raw)["messages"], pages)


def fetch(edge, page_id: str, sid: str | None, key: str | None, **headers):
    h = dict(headers)
    if key is not None:
        h["Authorization"] = f"Bearer {key}"
    params = {} if sid is None else {"roleplay_session_id": sid}
    return edge.client.get(PAGES + page_id, params=params, headers=h)


def assert_no_content(r, convo: Convo | None = None):
    assert "body_base64" not in r.text and "messages" not in r.text
    if convo is not None:
        assert convo.tag not in r.text
    assert "lantern" not in r.text


def assert_404(r, convo=None):
    assert r.status_code == 404, r.text
    assert r.content == EXPECTED_404
    assert r.json()["error"]["code"] == "context_page_not_found"
    assert r.headers["cache-control"] == "no-store"
    assert_no_content(r, convo)


def assert_error(r, status: int, code: str, convo=None):
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    assert_no_content(r, convo)


def find_slice(sent: list, items: list) -> int:
    for i in range(len(sent) - len(items) + 1):
        if sent[i:i + len(items)] == items:
            return i
    raise AssertionError("retrieved messages are not a contiguous run of the sent messages")


def log_after(edge, mark: int, route="retrieve_page", timeout=5.0) -> dict:
    """The first log record of `route` printed after edge.lines[mark] (logs arrive
    asynchronously from the runner's stdout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in edge.lines[mark:]:
            if line.startswith("{") and f'"route":"{route}"' in line:
                return json.loads(line)
        time.sleep(0.02)
    raise AssertionError(f"no {route} log line")


# ---------------------------------------------------------------------------
# 200
# ---------------------------------------------------------------------------


def test_retrieval_returns_the_exact_stored_bytes_and_original_items(edge, provider):
    c = paged_convo(edge)
    before_upstream = len(provider.received)
    for page in (c.page(min_bytes=1000), c.pages[0], c.pages[-1]):  # with tool calls, greeting, newest
        stats0 = edge.stats()
        r = fetch(edge, page["page_id"], c.sid, c.key)
        stats1 = edge.stats()
        assert r.status_code == 200, r.text
        assert r.headers["cache-control"] == "private, no-store"
        assert r.headers["content-type"].startswith("application/json")
        doc = r.json()
        assert set(doc) == {"page_id", "sha256", "expires_at", "exchanges", "messages", "body_base64"}
        stored = rp.stored_page(edge, page["page_id"])
        assert doc["exchanges"] == len(rp.page_exchanges(stored))     # a block holds several
        body = base64.b64decode(doc["body_base64"], validate=True)
        assert body == stored
        assert (doc["page_id"], doc["sha256"], doc["expires_at"]) == \
            (page["page_id"], page["sha256"], page["expires_at"])
        assert sha256_hex(body) == doc["sha256"]
        # The exact original items of that exchange, byte-exact in page form.
        i = find_slice(c.sent, doc["messages"])
        assert i == 1 or c.sent[i]["role"] == "user"       # greeting or a user turn starts it
        assert canonical_bytes(c.sent[i:i + len(doc["messages"])]) == body
        # One D1 statement and one R2 get, nothing else.
        delta = {k: stats1[k] - stats0[k] for k in stats0}
        assert delta == {"d1_statements": 1, "d1_batches": 0, "d1_rows_changed": 0,
                         "d1_rows_written": 0, "r2_puts": 0, "r2_gets": 1, "r2_heads": 0,
                         "r2_deletes": 0, "usage_statements": 0, "usage_rows_written": 0}
    # exchange=N: that exchange alone, byte-exact (what a small window reads back, §6)
    block = max(c.pages, key=lambda p: len(rp.page_exchanges(rp.stored_page(edge, p["page_id"]))))
    parts = rp.page_exchanges(rp.stored_page(edge, block["page_id"]))
    assert len(parts) >= 2
    for n, part in enumerate(parts, 1):
        r = edge.client.get(PAGES + block["page_id"], params={"roleplay_session_id": c.sid, "exchange": n},
                            headers={"Authorization": f"Bearer {c.key}"})
        doc = r.json()
        assert r.status_code == 200 and (doc["exchange"], doc["exchanges"]) == (n, len(parts))
        assert base64.b64decode(doc["body_base64"], validate=True) == part
        assert canonical_bytes(doc["messages"]) == part
    docs = [fetch(edge, p["page_id"], c.sid, c.key).json() for p in c.pages]
    tool_page = next(d for d in docs if any(m.get("tool_calls") for m in d["messages"]))
    assert any(m.get("role") == "tool" for m in tool_page["messages"])
    assert len(provider.received) == before_upstream           # retrieval never calls a provider


def test_x_api_key_header_works_too(edge):
    c = paged_convo(edge)
    r = edge.client.get(PAGES + c.pages[1]["page_id"], params={"roleplay_session_id": c.sid},
                        headers={"x-api-key": c.key})
    assert r.status_code == 200


def test_log_line_has_counts_never_ids_keys_or_content(edge):
    c = paged_convo(edge)
    page = c.pages[2]
    n = len(edge.lines)
    assert fetch(edge, page["page_id"], c.sid, c.key).status_code == 200
    assert fetch(edge, "cp_" + "A" * 43, c.sid, c.key).status_code == 404
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(
            '"route":"retrieve_page"' in line and '"status":404' in line for line in edge.lines[n:]):
        time.sleep(0.02)
    new = "\n".join(edge.lines[n:])
    ok = [json.loads(line) for line in edge.lines[n:]
          if '"route":"retrieve_page"' in line and '"status":200' in line]
    assert ok and ok[0]["page_bytes"] == page["_bytes"]
    for secret in (page["page_id"], c.key, c.sid, c.tag, "lantern", page["sha256"]):
        assert secret not in new


# ---------------------------------------------------------------------------
# 404: one identical body for every cause
# ---------------------------------------------------------------------------


def test_expired_page(edge):
    c = paged_convo(edge)
    pid = c.pages[1]["page_id"]
    try:
        edge.set_clock(3601)
        assert_404(fetch(edge, pid, c.sid, c.key), c)
    finally:
        edge.set_clock(0)
    assert fetch(edge, pid, c.sid, c.key).status_code == 200


def test_foreign_principal_and_foreign_session(edge):
    a = paged_convo(edge)
    b_key, _ = rp.seed_principal(edge)
    b_sid = rp.open_session(edge, b_key)
    pid = a.pages[1]["page_id"]
    assert_404(fetch(edge, pid, b_sid, b_key), a)     # B's own session, A's page
    assert_404(fetch(edge, pid, a.sid, b_key), a)     # A's session with B's key


def test_other_session_of_the_same_principal(edge):
    c = paged_convo(edge)
    sid2 = rp.open_session(edge, c.key)
    assert_404(fetch(edge, c.pages[1]["page_id"], sid2, c.key), c)


def test_unknown_and_empty_session(edge):
    c = paged_convo(edge)
    pid = c.pages[1]["page_id"]
    assert_404(fetch(edge, pid, "rps_" + secrets.token_urlsafe(24), c.key), c)
    assert_404(fetch(edge, pid, "", c.key), c)
    # Two different values for the session parameter: ambiguous, refused.
    r = edge.client.get(f"{PAGES}{pid}?roleplay_session_id={c.sid}&roleplay_session_id=x",
                        headers={"Authorization": f"Bearer {c.key}"})
    assert_404(r, c)


def test_ended_session(edge):
    c = paged_convo(edge)
    pid = c.pages[1]["page_id"]
    assert fetch(edge, pid, c.sid, c.key).status_code == 200
    r = edge.client.delete(f"/v1/roleplay/sessions/{c.sid}", headers={"Authorization": f"Bearer {c.key}"})
    assert r.status_code == 200
    assert_404(fetch(edge, pid, c.sid, c.key), c)


def test_stale_policy_revision(edge):
    c = paged_convo(edge)
    pid = c.pages[1]["page_id"]
    rp.set_policy(edge, c.principal, revision=2)
    assert_404(fetch(edge, pid, c.sid, c.key), c)
    rp.set_policy(edge, c.principal, revision=1)   # the page was never deleted
    assert fetch(edge, pid, c.sid, c.key).status_code == 200


def test_managed_authority_row(edge):
    c = paged_convo(edge)
    pid = c.pages[1]["page_id"]
    edge.sql("UPDATE context_pages SET authority = 'managed' WHERE page_id = ?1", pid)
    try:
        assert_404(fetch(edge, pid, c.sid, c.key), c)
    finally:
        edge.sql("UPDATE context_pages SET authority = 'roleplay' WHERE page_id = ?1", pid)
    assert fetch(edge, pid, c.sid, c.key).status_code == 200


def test_properly_signed_managed_page_is_not_served(edge):
    """A genuine managed row (id and signature valid for authority 'managed', body in R2)
    for this very principal and session is still a 404 on the roleplay route."""
    c = paged_convo(edge)
    body = canonical_bytes([{"role": "user", "content": c.tag + " managed secret lantern"}])
    sign = PageSigner(rp.SIGNING_SECRET)
    now = edge.sql("SELECT CAST(strftime('%s','now') AS INTEGER) AS t")[0]["t"]
    row = sign.make_row(Owner("managed", c.principal, c.sid, 1), sha256_hex(body), len(body),
                        Lifetime(now, 3600))
    assert sign.verify_row(row)
    edge.r2_put(row["r2_key"], body)
    cols = list(row)
    edge.sql(f"INSERT INTO context_pages ({', '.join(cols)}) VALUES "
             f"({', '.join(f'?{i + 1}' for i in range(len(cols)))})", *row.values())
    assert_404(fetch(edge, row["page_id"], c.sid, c.key), c)


def test_forged_and_look_alike_page_ids(edge):
    c = paged_convo(edge)
    real = c.pages[1]["page_id"]
    forged = "cp_" + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()
    mid = 3 + 20
    look_alike = real[:mid] + ("A" if real[mid] != "A" else "B") + real[mid + 1:]
    last = real[:-1] + ("A" if real[-1] != "A" else "E")            # still well formed
    bad_last = real[:-1] + ("B" if real[-1] != "B" else "C")        # non-canonical: malformed
    for pid in (forged, look_alike, last, bad_last, real[:-1], real + "A", real.upper(),
                "cp_", "x", real.replace("cp_", "mp_")):
        assert_404(fetch(edge, pid, c.sid, c.key), c)
    assert_404(fetch(edge, real + "/x", c.sid, c.key), c)
    assert_404(edge.client.get(PAGES, params={"roleplay_session_id": c.sid},
                               headers={"Authorization": f"Bearer {c.key}"}), c)
    assert fetch(edge, real, c.sid, c.key).status_code == 200


def _other_convo_row(edge, c):
    return edge.sql("SELECT * FROM context_pages WHERE session_id = ?1 AND page_id <> ?2 "
                    "ORDER BY page_id LIMIT 1", c.sid, c.pages[1]["page_id"])[0]


@pytest.mark.parametrize("field", ["principal", "session_id", "policy_revision", "sha256",
                                   "byte_length", "r2_key", "r2_offset", "expires_at", "authority",
                                   "signature", "page_id"])
def test_tampered_row_field(edge, field):
    """Each signed field changed in D1 makes the row unservable (and the row signature
    check alone catches it); restoring the field restores the page."""
    c = paged_convo(edge)
    pid = c.pages[1]["page_id"]
    orig = edge.sql(f"SELECT {field} AS v FROM context_pages WHERE page_id = ?1", pid)[0]["v"]
    other = _other_convo_row(edge, c)
    other_sid = rp.open_session(edge, c.key)
    tampered = {
        "principal": lambda: c.principal + "x",
        "session_id": lambda: other_sid,
        "policy_revision": lambda: 2,
        "sha256": lambda: other["sha256"],
        "byte_length": lambda: orig + 1,
        # Pages of one request share their object: point at another well-formed one.
        "r2_key": lambda: object_key([pid]),
        "r2_offset": lambda: other["r2_offset"],
        "expires_at": lambda: orig + 86400,    # extending a page's life needs the secret
        "authority": lambda: "managed",
        "signature": lambda: other["signature"],
        "page_id": lambda: "cp_" + "A" * 43,   # the row moved to another id
    }[field]()
    edge.sql(f"UPDATE context_pages SET {field} = ?1 WHERE page_id = ?2", tampered, pid)
    where = tampered if field == "page_id" else pid
    try:
        mark = len(edge.lines)
        assert_404(fetch(edge, pid, c.sid, c.key), c)
        if field == "page_id":
            assert_404(fetch(edge, tampered, c.sid, c.key), c)
        else:
            miss = log_after(edge, mark).get("miss", "")
            assert "row_signature" in miss.split(","), miss
    finally:
        edge.sql(f"UPDATE context_pages SET {field} = ?1 WHERE page_id = ?2", orig, where)
    assert fetch(edge, pid, c.sid, c.key).status_code == 200


def test_row_moved_to_another_page_id_with_its_valid_signature(edge):
    """Swapping two rows' sha256/r2_key/byte_length/signature (each valid for its own
    row) does not let one page id serve the other's body."""
    c = paged_convo(edge)
    a, b = c.pages[1]["page_id"], c.pages[2]["page_id"]
    cols = ("sha256", "byte_length", "r2_key", "r2_offset", "signature")
    rb = edge.sql(f"SELECT {', '.join(cols)} FROM context_pages WHERE page_id = ?1", b)[0]
    ra = edge.sql(f"SELECT {', '.join(cols)} FROM context_pages WHERE page_id = ?1", a)[0]
    sets = ", ".join(f"{col} = ?{i + 1}" for i, col in enumerate(cols))
    where = f"WHERE page_id = ?{len(cols) + 1}"
    edge.sql(f"UPDATE context_pages SET {sets} {where}", *(rb[k] for k in cols), a)
    try:
        assert_404(fetch(edge, a, c.sid, c.key), c)
    finally:
        edge.sql(f"UPDATE context_pages SET {sets} {where}", *(ra[k] for k in cols), a)
    assert fetch(edge, a, c.sid, c.key).status_code == 200


# ---------------------------------------------------------------------------
# 401 / 403
# ---------------------------------------------------------------------------


def test_no_key_bad_key_revoked_key(edge):
    c = paged_convo(edge)
    pid = c.pages[1]["page_id"]
    stats0 = edge.stats()
    assert_error(fetch(edge, pid, c.sid, None), 401, "invalid_api_key", c)
    assert edge.stats()["d1_statements"] == stats0["d1_statements"]   # no key: no storage
    assert_error(fetch(edge, pid, c.sid, "rpk_not-a-key"), 401, "invalid_api_key", c)
    assert_error(fetch(edge, pid, c.sid, None, Authorization="Basic eDp5"), 401, "invalid_api_key", c)
    edge.sql("UPDATE roleplay_keys SET revoked_at = 1 WHERE principal = ?1", c.principal)
    assert_error(fetch(edge, pid, c.sid, c.key), 401, "invalid_api_key", c)
    assert edge.stats()["r2_gets"] == stats0["r2_gets"]


def test_zero_retention_is_403(edge):
    c = paged_convo(edge)
    rp.set_policy(edge, c.principal, retention="zero")
    stats0 = edge.stats()
    assert_error(fetch(edge, c.pages[1]["page_id"], c.sid, c.key), 403, "retention_zero", c)
    # 403 depends only on the caller's policy: same answer for a forged id / other session.
    assert_error(fetch(edge, "cp_" + "A" * 43, "nope", c.key), 403, "retention_zero", c)
    assert edge.stats()["r2_gets"] == stats0["r2_gets"]


def test_missing_chat_grant_is_403(edge):
    c = paged_convo(edge)
    rp.set_policy(edge, c.principal, grants=("images",))
    assert_error(fetch(edge, c.pages[1]["page_id"], c.sid, c.key), 403, "chat_not_granted", c)
    edge.sql("DELETE FROM principal_policies WHERE principal = ?1", c.principal)
    assert_error(fetch(edge, c.pages[1]["page_id"], c.sid, c.key), 403, "chat_not_granted", c)


# ---------------------------------------------------------------------------
# 503: corrupted or unreadable body
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["flip", "truncate", "shift", "missing", "swap"])
def test_corrupted_body_is_503_never_the_bytes(edge, damage):
    """The page is a byte range of its request's object: damage inside that range, an
    object cut inside it, bytes shifted under it, another page's bytes, or no object."""
    # not the object's first page, and one with another page of its length (the swap);
    # block boundaries follow the (random-tagged) content: a new conversation until one has it
    for _ in range(30):
        c = paged_convo(edge)
        page = next((p for p in c.pages[1:] if p["_bytes"] >= 1000 and any(
            q["_bytes"] == p["_bytes"] and q is not p for q in c.pages)), None)
        if page is not None:
            break
    key, offset, length = rp.page_location(edge, page["page_id"])
    assert offset > 0
    good = edge.r2_get(key)
    end = offset + length
    if damage == "flip":
        bad = bytearray(good)
        bad[offset + length // 2] ^= 0x01
        edge.r2_put(key, bytes(bad))
    elif damage == "truncate":
        edge.r2_put(key, good[:end - 1])
    elif damage == "shift":
        edge.r2_put(key, good[:offset] + b" " + good[offset:])
    elif damage == "swap":       # another valid page body of the same length
        same = next(p for p in c.pages if p["_bytes"] == length and p["page_id"] != page["page_id"])
        edge.r2_put(key, good[:offset] + rp.stored_page(edge, same["page_id"]) + good[end:])
    else:
        edge.r2_delete(key)
    try:
        r = fetch(edge, page["page_id"], c.sid, c.key)
        assert_error(r, 503, "context_page_corrupted", c)
    finally:
        edge.r2_put(key, good)
    assert fetch(edge, page["page_id"], c.sid, c.key).status_code == 200


def make_legacy(edge, c, page) -> bytes:
    """Turn a page's row into one written before shared objects: its body alone in
    context-pages/<page_id>, offset 0, no body time, the v1 signature of that code."""
    body = rp.stored_page(edge, page["page_id"])
    [row] = edge.sql("SELECT * FROM context_pages WHERE page_id = ?1", page["page_id"])
    legacy = dict(row, r2_key=r2_key(page["page_id"]), r2_offset=0, body_written_at=0)
    legacy["signature"] = PageSigner(rp.SIGNING_SECRET).row_signature(legacy)
    edge.r2_put(legacy["r2_key"], body)
    edge.sql("UPDATE context_pages SET r2_key = ?1, r2_offset = 0, body_written_at = 0, signature = ?2 "
             "WHERE page_id = ?3", legacy["r2_key"], legacy["signature"], page["page_id"])
    return body


def test_page_stored_the_old_way_is_still_served(edge):
    c = paged_convo(edge)
    page = c.page(min_bytes=1000)
    body = make_legacy(edge, c, page)
    stats0 = edge.stats()
    r = fetch(edge, page["page_id"], c.sid, c.key)
    assert r.status_code == 200, r.text
    assert base64.b64decode(r.json()["body_base64"]) == body
    assert edge.stats()["r2_gets"] - stats0["r2_gets"] == 1
    # A legacy object is the page itself: read whole, so one grown or cut is caught.
    for bad in (body + b" ", body[:-1]):
        edge.r2_put(r2_key(page["page_id"]), bad)
        assert_error(fetch(edge, page["page_id"], c.sid, c.key), 503, "context_page_corrupted", c)
    edge.r2_put(r2_key(page["page_id"]), body)
    assert fetch(edge, page["page_id"], c.sid, c.key).status_code == 200


def test_r2_read_failure_is_503(edge):
    c = paged_convo(edge)
    edge.inject(r2_get=True)
    try:
        assert_error(fetch(edge, c.pages[1]["page_id"], c.sid, c.key), 503, "storage_failed", c)
    finally:
        edge.inject(r2_get=False)


def test_no_r2_read_before_metadata_checks(edge):
    c = paged_convo(edge)
    other_sid = rp.open_session(edge, c.key)
    stats0 = edge.stats()
    for pid, sid in ((c.pages[1]["page_id"], other_sid), ("cp_" + "A" * 43, c.sid)):
        assert_404(fetch(edge, pid, sid, c.key), c)
    stats1 = edge.stats()
    assert stats1["r2_gets"] == stats0["r2_gets"]
    assert stats1["d1_statements"] - stats0["d1_statements"] == 2


# ---------------------------------------------------------------------------
# Forwarding: managed handles (no roleplay_session_id) go to the origin unchanged
# ---------------------------------------------------------------------------


def test_managed_handle_is_forwarded_unchanged(edge, origin):
    origin.reply = Reply(status=207, headers=[("content-type", "application/json"), ("x-origin", "flask")],
                         chunks=[b'{"managed":', b'"page"}'])
    pid = "cp_" + "m" * 42 + "A"
    r = edge.client.get(f"{PAGES}{pid}?z=1&a=%20b", headers={"Authorization": "Bearer flask-managed-key",
                                                            "X-Request-Id": "rq-1"})
    assert (r.status_code, r.content) == (207, b'{"managed":"page"}')
    assert r.headers["x-origin"] == "flask"
    got = origin.received[-1]
    assert (got.method, got.path) == ("GET", f"{PAGES}{pid}?z=1&a=%20b")
    assert got.headers["authorization"] == "Bearer flask-managed-key"
    assert got.headers["x-request-id"] == "rq-1"


def test_non_get_with_session_param_is_not_handled_here(edge, origin):
    origin.reply = Reply(status=405, headers=[("content-type", "text/plain")], chunks=[b"nope"])
    r = edge.client.post(PAGES + "cp_x?roleplay_session_id=s", content=b"{}",
                         headers={"Authorization": "Bearer k"})
    assert (r.status_code, r.text) == (405, "nope")
    assert origin.received[-1].path == PAGES + "cp_x?roleplay_session_id=s"

# Configuration (flag off, signing secret or bindings missing): tests/handlers/test_configuration.py.


