"""The platform layer: the only module that touches `js`, `pyodide` and `workers`.

It adapts the runtime to the edge's small interfaces: D1 as a `store.Executor`, R2 as a
byte store, outbound `fetch`, the clock and the log, and converts requests/responses.
Bytes crossing into JS are converted explicitly (Uint8Array), as workerd requires.
"""

from __future__ import annotations

import asyncio
import time

import js
from pyodide.ffi import JsException, create_once_callable, create_proxy, to_js
from workers import Request, Response

from ..base.errors import EdgeError, StorageError
from ..base.http import Handoff, Incoming, Outgoing
from ..base.jsonbytes import compact_text
from ..base.platform import HEAP_CEILING_BYTES, var_text

#: How much of a body `buffer_body` lets `settled` see: a decision from the head only.
SETTLE_BYTES = 64 * 1024


def _js_bytes(data: bytes):
    arr = js.Uint8Array.new(len(data))
    arr.assign(data)
    return arr


def _py_bytes(buf) -> bytes:
    if isinstance(buf, (bytes, bytearray, memoryview)):
        return bytes(buf)
    return js.Uint8Array.new(buf).to_bytes()


def _json_text(value) -> str | None:
    """A JS value's JSON text; None for what JSON cannot hold (a binding, a function)."""
    text = js.JSON.stringify(value)
    return text if isinstance(text, str) else None


def _headers(js_headers) -> list[tuple[str, str]]:
    return [(str(k), str(v)) for k, v in js_headers.entries()]


def _js_headers(pairs: list[tuple[str, str]]):
    headers = js.Headers.new()
    for k, v in pairs:
        headers.append(k, v)
    return headers


class D1Executor:
    """`store.Executor` over the D1 binding (as the SDK wraps it)."""

    def __init__(self, d1):
        self._d1 = d1

    def _stmt(self, sql, params):
        stmt = self._d1.prepare(sql)
        return stmt.bind(*params) if params else stmt

    async def first(self, sql: str, params: list) -> dict | None:
        try:
            row = await self._stmt(sql, params).first()
        except JsException as e:
            raise StorageError("d1") from e
        return None if row is None else dict(row)

    async def all(self, sql: str, params: list) -> list[dict]:
        try:
            res = await self._stmt(sql, params).all()
        except JsException as e:
            raise StorageError("d1") from e
        return [dict(r) for r in res["results"]]

    async def run(self, sql: str, params: list) -> int:
        try:
            res = await self._stmt(sql, params).run()
        except JsException as e:
            raise StorageError("d1") from e
        return int(res["meta"]["changes"])

    async def batch(self, statements: list) -> list[list[dict]]:
        """D1's `batch`: one round trip, the statements in order as one transaction."""
        try:
            results = await self._d1.batch([self._stmt(sql, params) for sql, params in statements])
        except JsException as e:
            raise StorageError("d1") from e
        return [[dict(r) for r in res["results"]] for res in results]


class R2PageStore:
    """Page bodies in the R2 bucket, as exact bytes."""

    def __init__(self, bucket):
        self._bucket = bucket

    async def put(self, key: str, data: bytes) -> None:
        # An ArrayBuffer, not a Uint8Array: the SDK's binding wrapper walks any iterable
        # argument element by element in Python (a type check per byte, ~1 s of CPU for
        # a 0.3 MB object in Pyodide); an ArrayBuffer is not iterable, it passes as is.
        try:
            await self._bucket.put(key, _js_bytes(data).buffer)
        except JsException as e:
            raise StorageError("r2") from e

    async def get(self, key: str, offset: int | None = None, length: int | None = None) -> bytes | None:
        """The object's bytes, or with offset and length only that range (one ranged
        read; fewer bytes if the object ends early). None if the object is absent."""
        try:
            if offset is None:
                obj = await self._bucket.get(key)
            else:
                obj = await self._bucket.get(key, {"range": {"offset": offset, "length": length}})
            if obj is None:
                return None
            return _py_bytes(await obj.arrayBuffer())
        except JsException as e:
            raise StorageError("r2") from e

    async def delete(self, key: str) -> None:
        try:
            await self._bucket.delete(key)
        except JsException as e:
            raise StorageError("r2") from e


class Upstream:
    def __init__(self, js_response, abort=None):
        self._resp = js_response
        self._abort = abort or (lambda: None)     # aborts the request this answers
        self.status = int(js_response.status)
        self.headers = _headers(js_response.headers)
        self._reader = None
        self._held = b""        # what `read` took from the body before giving up on it

    def _body_reader(self):
        if self._reader is None:
            self._reader = self._resp.body.getReader()
        return self._reader

    @property
    def stream(self):
        return self._resp.body

    def relay(self, prefix: bytes = b"", idle: float | None = None, idle_tail: bytes | None = None,
              watch=None, done=None):
        """The body as a new stream: `prefix`, then the upstream's chunks as they come.
        A silence over `idle` seconds ends it (after `idle_tail`, else as an error);
        a reader that cancels (the client went away) aborts the upstream request.
        `watch` (base.platform.Watch) sees the body's bytes as they pass, then its end;
        `done()` is called once when it ends, however it ends."""
        held, prefix = self._held, prefix + self._held
        if watch is not None and held:
            watch.feed(held)
        if self._resp.body is None:
            if watch is not None:
                watch.end()
            if done is not None:
                done()
            return _js_bytes(prefix) if prefix else None
        return _Relay(self._body_reader(), prefix, idle, idle_tail, self._abort, watch, done).stream

    async def read(self, idle: float | None = None, limit: int | None = None) -> bytes | None:
        """The whole body, or None once it is longer than `limit` bytes (what was read
        is kept: `relay` sends it first, then the rest). A silence over `idle` seconds
        between chunks → TimeoutError (the request is aborted)."""
        if self._resp.body is None:
            return b""
        reader, chunks, size = self._body_reader(), [], 0
        while True:
            try:
                part = await asyncio.wait_for(reader.read(), idle)
            except TimeoutError:
                try:
                    await reader.cancel()
                except JsException:
                    pass
                self._abort()
                raise
            if part.done:
                return b"".join(chunks)
            chunks.append(part.value.to_bytes())
            size += len(chunks[-1])
            if limit is not None and size > limit:
                self._held = b"".join(chunks)
                return None

    async def discard(self) -> None:
        """Release an answer that will not be relayed (a fallback is tried instead), so
        it does not hold one of the runtime's few concurrent connections."""
        if self._resp.body is not None:
            try:
                await self._resp.body.cancel()
            except JsException:
                pass
        self._abort()


class _Relay:
    """A pull-driven ReadableStream over an upstream body: one chunk per pull, so
    backpressure reaches the provider and nothing is buffered whole."""

    def __init__(self, reader, prefix: bytes, idle, idle_tail, abort, watch=None, done=None):
        self._reader = reader
        self._prefix, self._idle, self._tail, self._abort = prefix, idle, idle_tail, abort
        self._watch, self._done = watch, done
        self._pull, self._cancel = create_proxy(self.pull), create_proxy(self.cancel)
        source = js.Object.new()
        source.pull, source.cancel = self._pull, self._cancel
        self.stream = js.ReadableStream.new(source)

    async def pull(self, controller):
        if self._prefix:
            controller.enqueue(_js_bytes(self._prefix))
            self._prefix = b""
            return
        try:
            part = await asyncio.wait_for(self._reader.read(), self._idle)
        except TimeoutError:
            await self._end_idle(controller)
            return
        except JsException as e:
            if self._pull is not None:
                self._release()
                controller.error(e)
            return
        if self._pull is None:            # cancelled while waiting: the stream is gone
            return
        if part.done:
            self._release()
            controller.close()
        else:
            if self._watch is not None:    # a copy for the usage meter (§4.1), bounded there
                self._watch.feed(part.value.to_bytes())
            controller.enqueue(part.value)

    async def _end_idle(self, controller):
        await self.cancel(None)
        if self._tail is None:
            controller.error(js.Error.new("upstream idle timeout"))
        else:
            controller.enqueue(_js_bytes(self._tail))
            controller.close()

    async def cancel(self, reason):
        try:
            await self._reader.cancel()
        except JsException:
            pass
        self._abort()
        self._release()

    def _release(self):
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.end()
        for proxy in (self._pull, self._cancel):
            if proxy is not None:
                proxy.destroy()
        self._pull = self._cancel = None
        done, self._done = self._done, None
        if done is not None:
            done()


#: What ``cap_heap`` did in this isolate: None until the first request, then its report
HEAP_CAP: dict | None = None
#: Below this much room between the heap's break and the ceiling, no cap is set: a
#: runtime whose baseline is not the runner's must not be left unable to allocate at all
MIN_HEAP_ROOM_BYTES = 32 * (1 << 20)
#: MemoryErrors this close together, the caches emptied after each, mean the capped heap
#: is too fragmented to serve: the cap is lifted (an isolate refusing every request is
#: worse than one that may grow into the limit and be replaced by a fresh one)
EXHAUSTED_TIMES, EXHAUSTED_SECONDS = 3, 10.0
_exhausted: list = []


def lift_heap_cap() -> None:
    """The allocator's limit removed (``cap_heap`` undone); nothing where it was not set."""
    global HEAP_CAP
    if not (HEAP_CAP or {}).get("capped"):
        return
    try:
        import pyodide_js
        pyodide_js._module._malloc_set_footprint_limit(-1)   # dlmalloc: -1 is no limit
        HEAP_CAP = {**HEAP_CAP, "capped": False, "reason": "lifted"}
    except Exception:  # noqa: BLE001 — it was set through the same module: nothing to undo
        pass


def cap_heap(ceiling: int = HEAP_CEILING_BYTES) -> dict:
    """Tell Pyodide's allocator (dlmalloc) never to take the wasm heap past ``ceiling``
    bytes (docs/design.md §7.2): past it ``malloc`` fails and Python raises MemoryError,
    which the app answers 503 ``edge_busy`` (the caches emptied), instead of the heap
    growing into the isolate's limit and the isolate dying with every request in flight.
    The allocator is reached through ``pyodide_js._module`` (the Emscripten module):
    verified under the runner's Pyodide 0.28.3; a runtime that does not expose it is
    left as it is (``{"capped": False}``), and the budget's accounting alone applies; so
    is one whose heap already sits within MIN_HEAP_ROOM_BYTES of the ceiling."""
    try:
        import pyodide_js
        module = pyodide_js._module
        top, footprint = int(module._sbrk(0)), int(module._malloc_footprint())
        if ceiling - top < MIN_HEAP_ROOM_BYTES:
            return {"capped": False, "reason": "no_room", "heap_bytes": int(module.HEAPU8.length)}
        module._malloc_set_footprint_limit(footprint + ceiling - top)
        return {"capped": True, "ceiling_bytes": ceiling, "heap_bytes": int(module.HEAPU8.length),
                "footprint_limit_bytes": int(module._malloc_footprint_limit())}
    except Exception as exc:  # noqa: BLE001 — not exposed here: nothing is changed
        return {"capped": False, "reason": type(exc).__name__}


class WorkersPlatform:
    def __init__(self, env, request: Request, ctx=None):
        global HEAP_CAP
        if HEAP_CAP is None:        # once per isolate, before its first request runs
            HEAP_CAP = cap_heap()
        self._env = env
        self.request = request
        self._ctx = ctx         # the invocation's ExecutionContext (waitUntil)

    def var(self, name: str) -> str | None:
        """A var or secret as text. wrangler.toml may give a var as JSON (a TOML table such
        as `PROVIDERS = { … }`, a number, a boolean): the runtime hands those over as JS
        values, read here as their JSON text (docs/design.md §3)."""
        return var_text(getattr(self._env, name, None), _json_text)

    def binding(self, name: str):
        return getattr(self._env, name, None)

    @property
    def db(self) -> D1Executor | None:
        d1 = self.binding("INTELLIGENCE_DB")
        return D1Executor(d1) if d1 is not None else None

    @property
    def page_bodies(self) -> R2PageStore | None:
        bucket = self.binding("multillm_media")
        return R2PageStore(bucket) if bucket is not None else None

    def now(self) -> int:
        return int(time.time())

    def log(self, record: dict) -> None:
        print(compact_text(record, ascii=True))

    def memory_exhausted(self) -> None:
        """A MemoryError was answered: the third within EXHAUSTED_SECONDS lifts the cap."""
        now = time.monotonic()
        _exhausted[:] = [t for t in _exhausted if now - t < EXHAUSTED_SECONDS] + [now]
        if len(_exhausted) >= EXHAUSTED_TIMES and (HEAP_CAP or {}).get("capped"):
            lift_heap_cap()
            self.log({"level": "warning", "message": "The heap stayed exhausted under its cap: cap lifted.",
                      "heap_cap": "lifted"})

    async def read_body(self, limit: int, grow=None, room=None) -> bytes:
        """The request body, refusing (413) anything over `limit` bytes without buffering
        it; `grow(n)` is awaited before each chunk of `n` bytes is kept (what the
        request reserves as it reads, docs/design.md §7.2: it may refuse, 503); `room()`
        after the last chunk, right before they are joined into one block (§7.2)."""
        declared = self.request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise EdgeError(413, "request_too_large", f"Request body exceeds {limit} bytes.")
        body = self.request.js_object.body
        if body is None:
            return b""
        reader = body.getReader()
        chunks, total = [], 0
        while True:
            part = await reader.read()
            if part.done:
                if room is not None:
                    await room()
                return b"".join(chunks)     # no await since room(): the block is its
            chunk = part.value.to_bytes()
            total += len(chunk)
            if total > limit:
                await reader.cancel()
                raise EdgeError(413, "request_too_large", f"Request body exceeds {limit} bytes.")
            if grow is not None:
                try:
                    await grow(len(chunk))
                except BaseException:
                    await reader.cancel()
                    raise
            chunks.append(chunk)

    async def buffer_body(self, limit: int, settled=None, grow=None):
        """`(body, None)` when the request body is at most `limit` bytes, else
        `(None, stream)`: a stream of the whole body (what was read, then the rest) to
        forward unread. A declared Content-Length over `limit` reads nothing; so does
        the rest once `settled(head)` is true of the first bytes (checked while they are
        at most SETTLE_BYTES: the head's decision, not the whole body's). `grow(n)` is
        awaited before each chunk of `n` bytes is kept (docs/design.md §7.2)."""
        body = self.request.js_object.body
        declared = self.request.headers.get("content-length")
        if body is None:
            return b"", None
        if declared and declared.isdigit() and int(declared) > limit:
            return None, body
        reader = body.getReader()
        chunks, total = [], 0
        while True:
            part = await reader.read()
            if part.done:
                return b"".join(chunks), None
            chunk = part.value.to_bytes()
            if grow is not None and total + len(chunk) <= limit:
                try:
                    await grow(len(chunk))
                except BaseException:
                    await reader.cancel()
                    raise
            chunks.append(chunk)
            total += len(chunk)
            if total > limit or (settled is not None and total <= SETTLE_BYTES
                                 and settled(b"".join(chunks))):
                return None, _Relay(reader, b"".join(chunks), None, None, lambda: None).stream

    async def fetch(self, url: str, method: str, headers: list[tuple[str, str]], body=None,
                    timeout: float | None = None) -> Upstream:
        """Outbound HTTP; `body` is bytes, a `Handoff` (its bytes copied to a Uint8Array once
        and let go: the runtime holds the request body, not Python) or a runtime stream.
        No response headers within
        `timeout` seconds → TimeoutError; network failure → OSError; the client gone →
        EdgeError 499. The request is aborted with the client's, and by `Upstream`."""
        controller = js.AbortController.new()
        init = {"method": method, "headers": _js_headers(headers), "redirect": "manual",
                "signal": self._signal(controller)}
        if isinstance(body, Handoff):
            init["body"] = _js_bytes(body.take())
        elif isinstance(body, bytes):
            init["body"] = _js_bytes(body)
        elif body is not None:
            init["body"] = body
            init["duplex"] = "half"   # required by the fetch spec for streams; workerd ignores it
        body = None
        expired = []
        on_timeout = create_proxy(lambda: (expired.append(True), controller.abort()))
        timer = js.setTimeout(on_timeout, int(timeout * 1000)) if timeout else None
        try:
            pending = js.fetch(url, to_js(init, dict_converter=js.Object.fromEntries))
            del init        # the body is the runtime's now: freed once written (§7.2)
            resp = await pending
        except JsException as e:
            if self.client_gone():
                raise EdgeError(499, "client_closed_request", "The client closed the request.") from None
            if expired:
                raise TimeoutError("upstream header timeout") from None
            raise OSError("fetch failed") from e
        finally:
            if timer is not None:
                js.clearTimeout(timer)
            on_timeout.destroy()
        return Upstream(resp, lambda: controller.abort())

    def wait_until(self, work) -> None:
        """Run `work` as a task the runtime waits for after the response (`ctx.waitUntil`
        with a JS promise settled by the task: no proxy outlives it). Its failure rejects
        the promise with the exception's type only (never a message: no content)."""
        task = asyncio.ensure_future(work)
        if self._ctx is None:
            return

        def settle(resolve, reject):
            def done(t):
                failed = None if t.cancelled() else t.exception()
                if failed is None:
                    resolve(None)
                else:
                    reject(js.Error.new(type(failed).__name__))
            task.add_done_callback(done)

        self._ctx.waitUntil(js.Promise.new(create_once_callable(settle)))

    def _signal(self, controller):
        """The request's own abort signal joined to the client's: workerd aborts the
        incoming request's signal when the client disconnects, and so does the runner."""
        client = getattr(self.request.js_object, "signal", None)
        if client is None or not hasattr(js.AbortSignal, "any"):
            return controller.signal
        return js.AbortSignal.any(to_js([controller.signal, client]))

    def client_gone(self) -> bool:
        client = getattr(self.request.js_object, "signal", None)
        return bool(client is not None and client.aborted)


def incoming(request: Request) -> Incoming:
    return Incoming(str(request.method), str(request.url), _headers(request.js_object.headers),
                    stream=request.js_object.body)


def to_response(out: Outgoing) -> Response:
    headers = _js_headers(out.headers)
    if out.stream is not None:
        body = out.stream
    else:
        body = _js_bytes(out.body) if out.body else None
    init = to_js({"status": out.status, "headers": headers}, dict_converter=js.Object.fromEntries)
    return Response(js.Response.new(body, init))
