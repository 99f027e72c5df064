"""The platform seam (docs/architecture.md): what a handler may ask of the runtime.

`platform.bindings.WorkersPlatform` (workerd) and `tests/support/inprocess.InProcessPlatform`
(CPython tests) both implement `Platform`; `tests/unit/test_platform_seam.py` checks both
against these Protocols, member by member. Handlers receive a platform as an argument and
never import one.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Awaitable, Callable, Optional, Protocol


#: The wasm heap an isolate's Python may grow to (docs/design.md §7.2). Workers kill an
#: isolate whose JS heap and wasm memory pass 128 MiB; Pyodide's heap grows in steps of
#: 1.2 × (Emscripten's ``_emscripten_resize_heap``) — through the runner … 86.2, 103.5,
#: 124.2 MiB — and never shrinks. 103.5 MiB is the largest step that leaves the JS side
#: its 16 MiB allowance (128 - 16 = 112): a heap that needs a byte more grows to 124.2.
HEAP_CEILING_BYTES = 103 * (1 << 20) + (1 << 19)


class Database(Protocol):
    """D1 in production, sqlite3 in tests: numbered ``?N`` statements (storage/store.py)."""
    async def first(self, sql: str, params: list) -> Optional[dict]: ...
    async def all(self, sql: str, params: list) -> list[dict]: ...
    async def run(self, sql: str, params: list) -> int: ...   # rows changed
    # ONE round trip: the statements in order, as one transaction → each one's rows
    async def batch(self, statements: list) -> list[list[dict]]: ...


class Bucket(Protocol):
    """R2 page bodies: one put per storing request, ranged gets (docs/design.md §5.9)."""
    async def put(self, key: str, data: bytes) -> None: ...
    async def get(self, key: str, offset: Optional[int] = None,
                  length: Optional[int] = None) -> Optional[bytes]: ...
    async def delete(self, key: str) -> None: ...


class Watch(Protocol):
    """What sees a relayed body go by (formats/usage.py `Meter`): each read's bytes,
    then `end` once, however the body ended (complete, failed, idle, cancelled)."""
    def feed(self, chunk: bytes) -> None: ...
    def end(self) -> None: ...


class UpstreamResponse(Protocol):
    """A provider's or the origin's answer: status and headers, the body left unread."""
    status: int
    headers: list
    @property
    def stream(self) -> Any: ...
    def relay(self, prefix: bytes = b"", idle: Optional[float] = None,
              idle_tail: Optional[bytes] = None, watch: Optional[Watch] = None,
              done: Optional[Callable[[], None]] = None) -> Any: ...
    async def read(self, idle: Optional[float] = None, limit: Optional[int] = None) -> Optional[bytes]: ...
    async def discard(self) -> None: ...


class Platform(Protocol):
    """One request's runtime: vars, bindings, clock, log, its body, outbound fetch."""
    def var(self, name: str) -> Optional[str]: ...
    @property
    def db(self) -> Optional[Database]: ...
    @property
    def page_bodies(self) -> Optional[Bucket]: ...
    def now(self) -> int: ...
    def log(self, record: dict) -> None: ...
    # a MemoryError was answered for a request that is not large, the caches emptied and
    # nothing else holding room: the runtime may lift what bounds the heap when that
    # keeps happening (docs/design.md §7.2)
    def memory_exhausted(self) -> None: ...
    async def read_body(self, limit: int,
                        grow: Optional[Callable[[int], Awaitable[None]]] = None,
                        room: Optional[Callable[[], Awaitable[None]]] = None) -> bytes: ...
    async def buffer_body(self, limit: int, settled: Optional[Callable[[bytes], bool]] = None,
                          grow: Optional[Callable[[int], Awaitable[None]]] = None
                          ) -> tuple[Optional[bytes], Optional[AsyncIterator]]: ...
    async def fetch(self, url: str, method: str, headers: list, body: Any = None,
                    timeout: Optional[float] = None) -> UpstreamResponse: ...
    # ``body``: bytes, a ``base.http.Handoff`` (taken once, its bytes let go) or a stream
    # `work` runs after the answer (the request's `ctx.waitUntil`): the runtime keeps the
    # request alive for it without delaying the response (docs/design.md §4.1).
    def wait_until(self, work: Awaitable) -> None: ...


def var_text(value, stringify: Callable[[object], str]):
    """A var as the core reads it: a string as it is; a var wrangler.toml gives as JSON (a
    TOML table or array, a number, a boolean) as its JSON text, through ``stringify`` for
    a runtime object. None stays None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, dict, list)):
        return json.dumps(value)
    return stringify(value)
