"""The in-process platform: what `bindings.WorkersPlatform` gives the app, in CPython.

D1 is sqlite3 with the real migrations (the same SQL as production, through
`devkit.sqlite.SqliteExecutor`), R2 an in-memory bucket with fault injection, the upstream a
scripted function that records exactly what reached it. `app.handle` runs on it
unchanged, so handler logic and hostile input are tested without Node or Pyodide;
what depends on Pyodide, real local D1/R2, streaming or the SDKs is tested through the
runner (tests/e2e, tests/clients).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
from dataclasses import dataclass, field
from typing import Callable

from devkit.sqlite import SqliteExecutor, migrated_connection
from multillm_edge import app
from multillm_edge.base.errors import EdgeError, StorageError
from multillm_edge.base.http import Handoff, Incoming

BODY_CHUNK = 16 * 1024          # how a request body arrives here, in pieces
SETTLE_BYTES = 64 * 1024        # mirrors platform.bindings.SETTLE_BYTES



class MemoryBucket:
    """R2 page bodies in a dict; `faults` holds the operations that must fail."""

    def __init__(self):
        self.objects: dict[str, bytes] = {}
        self.faults: set[str] = set()
        self.ops = {"put": 0, "get": 0, "delete": 0}

    async def put(self, key: str, data: bytes) -> None:
        self.ops["put"] += 1
        if "put" in self.faults:
            raise StorageError("r2")
        assert isinstance(data, bytes)
        self.objects[key] = data

    async def get(self, key: str, offset: int | None = None, length: int | None = None) -> bytes | None:
        self.ops["get"] += 1
        if "get" in self.faults:
            raise StorageError("r2")
        data = self.objects.get(key)
        if data is None or offset is None:
            return data
        return data[offset:offset + length]

    async def delete(self, key: str) -> None:
        self.ops["delete"] += 1
        if "delete" in self.faults:
            raise StorageError("r2")
        self.objects.pop(key, None)


class FaultyExecutor(SqliteExecutor):
    """sqlite3 with the production SQL. A failing statement is a StorageError, as
    bindings.D1Executor makes of D1's; every call fails while `failing` is set, and
    every statement containing `fail_sql`."""

    failing = False
    fail_sql: str | None = None

    def _cursor(self, sql, params):
        if self.failing or (self.fail_sql and self.fail_sql in sql):
            raise StorageError("d1")
        try:
            return super()._cursor(sql, params)
        except sqlite3.Error as e:
            raise StorageError("d1") from e


@dataclass
class Sent:
    """One outbound request, as the platform's fetch received it."""
    url: str
    method: str
    headers: list[tuple[str, str]]
    body: bytes

    def json(self):
        return json.loads(self.body)


@dataclass
class Answer:
    """A scripted upstream answer (the `Upstream` interface of bindings.py)."""
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=lambda: [("content-type", "application/json")])
    body: bytes = b'{"ok":true}'
    discarded: bool = False
    chunk: int = 0          # > 0: the body is relayed in reads of this many bytes

    @property
    def stream(self):
        return [self.body]

    def relay(self, prefix: bytes = b"", idle=None, idle_tail=None, watch=None, done=None):
        """The body as the Worker's relay yields it: `prefix`, then its reads, each seen
        by `watch` as it passes, then `watch.end()`; ``done()`` once it has been read, or
        closed, or dropped unread (the runtime cancels a stream nobody reads)."""
        return _Relayed(self._reads(prefix, watch), done)

    def _reads(self, prefix: bytes, watch):
        if prefix:
            yield prefix
        size = self.chunk or max(1, len(self.body))
        for at in range(0, len(self.body), size):
            part = self.body[at:at + size]
            if watch is not None:
                watch.feed(part)
            yield part
        if watch is not None:
            watch.end()

    async def read(self, idle=None, limit=None) -> bytes | None:
        return None if limit is not None and len(self.body) > limit else self.body

    async def discard(self) -> None:
        self.discarded = True


class _Relayed:
    """A relayed body: iterated as it is read; ``done()`` once when it ends, is closed,
    or is dropped unread (an unstarted generator's ``finally`` would never run)."""

    def __init__(self, reads, done):
        self._reads, self._done = reads, done

    def __iter__(self):
        try:
            yield from self._reads
        finally:
            self.close()

    def close(self):
        done, self._done = self._done, None
        if done is not None:
            done()

    def __del__(self):
        self.close()


def _body_bytes(body) -> bytes:
    if body is None:
        return b""
    if isinstance(body, Handoff):
        return body.take()
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    return b"".join(body)


class InProcessPlatform:
    """One request's platform: vars, storage, the body to read, scripted fetch."""

    def __init__(self, edge: "LocalEdge", body: bytes, headers: list[tuple[str, str]]):
        self._edge = edge
        self._body = body
        self._headers = headers

    def var(self, name: str):
        return self._edge.vars.get(name)

    @property
    def db(self):
        return None if "INTELLIGENCE_DB" in self._edge.unbound else self._edge.executor

    @property
    def page_bodies(self):
        return None if "multillm_media" in self._edge.unbound else self._edge.bucket

    def now(self) -> int:
        return self._edge.clock

    def log(self, record: dict) -> None:
        self._edge.logs.append(json.loads(json.dumps(record)))

    def memory_exhausted(self) -> None:
        self._edge.exhausted = getattr(self._edge, "exhausted", 0) + 1   # CPython's heap has no cap

    async def read_body(self, limit: int, grow=None, room=None) -> bytes:
        """As the Worker's: the body arrives in BODY_CHUNK pieces, ``grow`` awaited
        before each is kept, ``room`` after the last."""
        declared = dict(self._headers).get("content-length")
        if (declared and declared.isdigit() and int(declared) > limit) or len(self._body) > limit:
            raise EdgeError(413, "request_too_large", f"Request body exceeds {limit} bytes.")
        if grow is not None:
            for start in range(0, len(self._body), BODY_CHUNK):
                await grow(min(BODY_CHUNK, len(self._body) - start))
        if room is not None:
            self._edge.rooms = getattr(self._edge, "rooms", 0) + 1
            await room()
        return self._body

    async def buffer_body(self, limit: int, settled=None, grow=None):
        """As the Worker's: the body arrives in BODY_CHUNK pieces; `settled` sees each
        head up to SETTLE_BYTES; ``grow`` is awaited for each piece a buffered body keeps."""
        declared = dict(self._headers).get("content-length")
        if (declared and declared.isdigit() and int(declared) > limit) or len(self._body) > limit:
            self._edge.streamed += 1
            return None, [self._body]
        if settled is not None:
            for end in range(BODY_CHUNK, min(len(self._body), SETTLE_BYTES) + BODY_CHUNK, BODY_CHUNK):
                if settled(self._body[:end]):
                    self._edge.streamed += 1
                    return None, [self._body]
        if grow is not None:
            for start in range(0, len(self._body), BODY_CHUNK):
                await grow(min(BODY_CHUNK, len(self._body) - start))
        return self._body, None

    def wait_until(self, work) -> None:
        """Kept, and run once the answer has been read whole (`LocalEdge.request`),
        as the runtime runs `ctx.waitUntil` work after the response."""
        self._edge.waits.append(work)

    async def fetch(self, url, method, headers, body=None, timeout=None):
        sent = Sent(url, method, list(headers), _body_bytes(body))
        self._edge.sent.append(sent)
        answer = self._edge.upstream(sent)
        if isinstance(answer, BaseException):
            raise answer
        return answer


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str):
        return next((v for k, v in self.headers if k == name), None)

    def json(self):
        return json.loads(self.body)


async def _settled(work):
    try:
        await work
    except Exception as e:  # noqa: BLE001 — reported to the test, as the runner logs it
        return e
    return None


def default_upstream(sent: Sent) -> Answer:
    return Answer(body=json.dumps({"id": "x", "choices": [], "content": [], "output": []}).encode())


class LocalEdge:
    """The edge app on the in-process platform, with its own sqlite D1 and R2."""

    def __init__(self, vars: dict[str, str], upstream: Callable = default_upstream,
                 unbound: tuple = (), clock: int = 1_800_000_000):
        self.vars = dict(vars)
        self.upstream = upstream
        self.unbound = set(unbound)
        self.clock = clock
        self.conn = migrated_connection()
        self.executor = FaultyExecutor(self.conn)
        self.bucket = MemoryBucket()
        self.sent: list[Sent] = []
        self.streamed = 0             # bodies buffer_body handed on unread (over its limit)
        self.logs: list[dict] = []
        self.waits: list = []         # wait_until work not yet run
        self.hold_waits = False       # True: leave it for `drain` (after-the-answer tests)
        self.loop = asyncio.new_event_loop()

    def close(self):
        for work in self.waits:
            work.close()          # never run (held): no "never awaited" warning
        self.loop.close()
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def request(self, method: str, path: str, headers=None, body: bytes | str | dict = b"") -> Response:
        if isinstance(body, dict):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode("utf-8", "surrogatepass")
        pairs = [(k.lower(), v) for k, v in (headers.items() if isinstance(headers, dict) else headers or [])]
        req = Incoming(method, "https://edge.test" + path, pairs, stream=body if body else None)
        platform = InProcessPlatform(self, body, pairs)
        out = self.loop.run_until_complete(app.handle(req, platform))
        payload = out.body if out.stream is None else _body_bytes(out.stream)
        if not self.hold_waits:
            self.drain()
        return Response(out.status, out.headers, payload)

    def drain(self) -> list:
        """Run the wait_until work left (after the answer, as the runtime does) → each
        one's exception or None."""
        waits, self.waits = self.waits, []
        return [self.loop.run_until_complete(_settled(w)) for w in waits]

    # -- seeding and inspection (the real SQL where the edge has it) -------------
    def sql(self, sql: str, *params) -> list[dict]:
        return self.loop.run_until_complete(self.executor.all(sql, list(params)))

    def seed_player(self, principal: str, key: str, session: str, retention="standard",
                    grants=("chat",), revision=1):
        digest = hashlib.sha256(key.encode()).hexdigest()
        self.sql("INSERT INTO roleplay_keys (key_sha256, principal, created_at) VALUES (?1, ?2, 0)",
                 digest, principal)
        self.sql("INSERT INTO principal_policies (principal, revision, grants, retention, updated_at) "
                 "VALUES (?1, ?2, ?3, ?4, 0)", principal, revision, json.dumps(list(grants)), retention)
        self.sql("INSERT INTO roleplay_sessions (session_id, principal, created_at) VALUES (?1, ?2, 0)",
                 session, principal)
        self.conn.commit()

    def set_model(self, model: str, input_tokens: int, max_output_tokens: int = 1000):
        self.sql("INSERT OR REPLACE INTO models (model, input_tokens, max_output_tokens) "
                 "VALUES (?1, ?2, ?3)", model, input_tokens, max_output_tokens)
        self.conn.commit()

    def page_rows(self) -> int:
        return self.sql("SELECT COUNT(*) AS n FROM context_pages")[0]["n"]
