"""The runner presents real local D1 and R2 to real Pyodide the way workerd does."""

import http.client
import os
import time
from urllib.parse import urlsplit

import pytest

from devkit.fakes import FakeServer


def sql(edge, sql, params=(), run=False):
    return edge.client.post("/sql", json={"sql": sql, "params": list(params), "run": run})


def test_sql_null_binds_and_reads_back_as_none(fidelity_edge):
    assert sql(fidelity_edge, "CREATE TABLE IF NOT EXISTS fidelity (k TEXT PRIMARY KEY, v)", run=True).status_code == 200
    assert sql(fidelity_edge, "INSERT OR REPLACE INTO fidelity VALUES (?1, ?2)", ["n", None], run=True).json() == {"changes": 1}
    rows = sql(fidelity_edge, "SELECT v, typeof(v) AS t FROM fidelity WHERE k = ?1", ["n"]).json()["rows"]
    assert rows == [{"v": None, "t": "null"}]


def test_failing_statement_is_a_python_exception_the_worker_handles(fidelity_edge):
    r = sql(fidelity_edge, "SELECT * FROM no_such_table")
    assert r.status_code == 503
    assert r.json() == {"storage_error": "d1"}


def test_migrations_applied_at_start(fidelity_edge):
    rows = sql(fidelity_edge, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").json()["rows"]
    names = {r["name"] for r in rows}
    assert {"context_pages", "roleplay_keys", "roleplay_sessions", "principal_policies", "models"} <= names


def test_r2_round_trips_every_byte_value(fidelity_edge):
    data = bytes(range(256)) * 3
    assert fidelity_edge.client.put("/r2", params={"key": "all-bytes"}, content=data).status_code == 200
    r = fidelity_edge.client.get("/r2", params={"key": "all-bytes"})
    assert r.status_code == 200 and r.content == data


def test_r2_round_trips_one_mebibyte(fidelity_edge):
    data = os.urandom(1 << 20)
    assert fidelity_edge.client.put("/r2", params={"key": "mib"}, content=data).status_code == 200
    assert fidelity_edge.client.get("/r2", params={"key": "mib"}).content == data


def test_r2_ranged_read_and_delete(fidelity_edge):
    """One ranged get reads exactly a page's bytes out of a request's object (fewer when
    the object ends early); delete removes the object."""
    data = bytes(range(256)) * 4
    c = fidelity_edge.client
    assert c.put("/r2", params={"key": "ranged"}, content=data).status_code == 200
    r = c.get("/r2", params={"key": "ranged", "offset": 300, "length": 77})
    assert r.status_code == 200 and r.content == data[300:377]
    assert c.get("/r2", params={"key": "ranged", "offset": 1000, "length": 50}).content == data[1000:]
    assert c.delete("/r2", params={"key": "ranged"}).json() == {"deleted": True}
    assert c.get("/r2", params={"key": "ranged"}).status_code == 404
    assert c.get("/r2", params={"key": "ranged", "offset": 0, "length": 1}).status_code == 404


def test_r2_missing_object_is_none(fidelity_edge):
    assert fidelity_edge.client.get("/r2", params={"key": "never-written"}).status_code == 404


def test_worker_exception_is_a_500_json_and_runner_keeps_serving(fidelity_edge):
    r = fidelity_edge.client.put("/r2", content=b"x")       # no ?key= → KeyError in the Worker
    assert r.status_code == 500
    assert r.json()["error"]["code"] == "worker_exception"
    assert sql(fidelity_edge, "SELECT 1 AS one").json() == {"rows": [{"one": 1}]}


def test_healthz_names_what_is_missing(start_edge):
    edge = start_edge({}, unbind=["multillm_media"])
    r = edge.client.get("/healthz")
    assert r.status_code == 503
    assert r.json() == {"ok": False, "d1_tables": True, "r2_binding": False,
                        "signing_configured": False, "paging_enabled": False,
                        "config_errors": [], "missing_providers": []}
    edge.sql("DROP TABLE models")
    assert edge.client.get("/healthz").json()["d1_tables"] is False


def test_idle_keep_alive_connection_outlives_client_expiry(fidelity_edge):
    """httpx (and so both SDKs) reuses idle connections for 5 s; Node's default server
    closes them at 5 s, and a request sent into that moment is reset. The runner keeps
    them open longer, so a connection idle past 5 s still serves the next request."""
    conn = http.client.HTTPConnection(urlsplit(fidelity_edge.url).netloc, timeout=30)
    try:
        conn.request("GET", "/r2?key=never-written")
        first = conn.getresponse()
        first.read()
        keep_alive = dict(p.strip().split("=") for p in first.getheader("keep-alive", "").split(",") if "=" in p)
        assert int(keep_alive["timeout"]) > 60
        time.sleep(5.5)
        conn.request("GET", "/r2?key=never-written")     # same socket; RemoteDisconnected if closed
        second = conn.getresponse()
        assert second.status == 404 and second.read()
    finally:
        conn.close()


# --- outbound fetch: what the Worker set, nothing more ------------------------------

#: What the transport itself adds to any request, in workerd as in Node: not the Worker's.
TRANSPORT = {"host", "content-length", "transfer-encoding", "connection"}


@pytest.mark.parametrize("body", [None, "{\"a\":1}"])
def test_outbound_fetch_sends_exactly_the_headers_the_worker_set(fidelity_edge, body):
    """Node's fetch adds accept, accept-language, accept-encoding, sec-fetch-mode and
    user-agent; workerd's does not. The recording server must see the Worker's set."""
    given = [["content-type", "application/json"], ["authorization", "Bearer sk-test"],
             ["x-trace", "t-1"], ["anthropic-version", "2023-06-01"]]
    with FakeServer() as recorder:
        doc = {"url": recorder.url + "/v1/chat/completions", "headers": given}
        if body is not None:
            doc["body"] = body
        r = fidelity_edge.client.post("/fetch", json=doc)
        assert r.status_code == 200 and r.json() == {"status": 200, "body": '{"ok":true}'}
        (got,) = recorder.received
    received = [(k, v) for k, v in got.raw_headers if k not in TRANSPORT]
    assert sorted(received) == sorted(tuple(h) for h in given)
    if body is not None:
        assert got.body == body.encode() and got.headers["content-length"] == str(len(body))


# --- the platform proxy: lost, noticed, restarted -------------------------------------

def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command name) of every process below `pid`, from /proc."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            parents[int(entry)] = (int(stat[stat.rindex(")") + 2:].split()[1]), name)
    out, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [(p, name) for p, (pp, name) in parents.items() if pp == parent]
        out += kids
        frontier += [p for p, _ in kids]
    return out


def test_lost_platform_proxy_is_logged_and_restarted(start_edge):
    edge = start_edge({}, extra_env={"EDGE_PROXY_PROBE_MS": "250"})
    assert edge.client.get("/healthz").json()["d1_tables"] is True
    workerd = [pid for pid, name in descendants(edge.proc.pid) if "workerd" in name]
    assert workerd, descendants(edge.proc.pid)
    for pid in workerd:
        os.kill(pid, 9)
    restarted = edge.wait_for_log(lambda r: r.get("runner") == "platform_proxy_restarted", timeout=30)
    assert restarted, edge.output()[-2000:]
    assert edge.wait_for_log(lambda r: r.get("runner") == "platform_proxy_lost")
    assert edge.client.get("/healthz").json()["d1_tables"] is True   # D1 answers again
    assert edge.proc.poll() is None


def test_a_gzip_origin_reaches_the_client_as_valid_gzip(start_edge):
    """workerd's fetch decodes a gzip response for JavaScript and keeps its
    Content-Encoding; the Response relayed with it is encoded again on the way out
    (docs/design.md §9). The client gets gzip bytes that decode to the origin's body,
    a streamed one included."""
    import gzip
    from devkit.fakes import Reply
    plain = b'{"origin":"gzip","text":"' + "夜の森 ".encode() * 2000 + b'"}'
    sse = [b"data: one\n\n", b"data: two\n\n"]

    def reply(rec):
        if rec.path == "/stream":
            z = [gzip.compress(b"".join(sse))]
            return Reply(headers=[("content-type", "text/event-stream"), ("content-encoding", "gzip")], chunks=z)
        return Reply(headers=[("content-type", "application/json"), ("content-encoding", "gzip")],
                     chunks=[gzip.compress(plain)], length=True)

    with FakeServer(reply) as origin:
        edge = start_edge(vars={"FLASK_ORIGIN": origin.url})
        for path, expected in (("/api/big", plain), ("/stream", b"".join(sse))):
            parts = urlsplit(edge.url)
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
            conn.request("GET", path, headers={"Accept-Encoding": "gzip"})
            resp = conn.getresponse()
            raw = resp.read()
            conn.close()
            assert resp.status == 200 and resp.getheader("content-encoding") == "gzip"
            assert gzip.decompress(raw) == expected
            assert resp.getheader("content-length") in (None, str(len(raw)))


def test_wait_until_runs_after_the_answer_and_a_failure_is_logged_by_kind(fidelity_edge):
    """`Platform.wait_until` is the request's `ctx.waitUntil` (docs/design.md §4.1): the
    answer does not wait for the work, the runner keeps it alive and runs it to the end,
    and a failure is one line naming its kind, never its message."""
    started = time.monotonic()
    r = fidelity_edge.client.get("/wait", params={"tag": "after"})
    assert r.json() == {"answered": True} and time.monotonic() - started < 0.3
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = sql(fidelity_edge, "SELECT tag FROM fidelity_waits")
        if r.status_code == 200 and r.json().get("rows") == [{"tag": "after"}]:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the work after the answer never ran")
    since = len(fidelity_edge.lines)
    assert fidelity_edge.client.get("/wait", params={"fail": "1"}).json() == {"answered": True}
    logged = fidelity_edge.wait_for_log(lambda rec: rec.get("runner") == "wait_until_failed", since=0)
    assert logged and logged[-1] == {"runner": "wait_until_failed", "error": "ValueError"}
    assert all("secret text" not in line for line in fidelity_edge.lines[since:])
