"""The isolate's memory budget (docs/design.md §7.2): requests are admitted by the bytes
they will hold, and the caches give way to them first.

Workers kill an isolate whose JavaScript heap and WebAssembly memory pass 128 MB, with
every request in flight; Pyodide's wasm memory grows and never shrinks. The budget is
that limit less the isolate's baseline (Pyodide and the Worker loaded, measured) less
an allowance for the JS side. Python-side accounting: a request reserves what it will
hold before it reads its body (by Content-Length, or chunk by chunk as it is read),
lowers it to its upstream body before the fetch, and releases it when done (a stream,
when its relay ends). The caches (``LAST_TURNS`` and every part of ``search.STATE``
with ``held_bytes``: the recall corpora join by registering there) hold what the
requests leave free: their bounds are lowered, least valuable first, when requests
need the room, and raised again when they are done. A cache miss costs CPU only.
"""

from __future__ import annotations

import asyncio

from ..base.errors import EdgeBusy
from ..base.http import Incoming
from ..base.weighted import Ticket, Weighted
from ..core.last_turns import LAST_TURNS
from ..search.state import STATE

MIB = 1 << 20
#: Workers' limit per isolate: JS heap + wasm memory
LIMIT_BYTES = 128 * MIB
#: Pyodide 0.28 with the Worker imported, before any request (measured through the
#: runner's /__runner/memory: 28.8 MiB of wasm heap; production cannot be read here)
BASELINE_BYTES = 29 * MIB
#: The JS side: request and response objects, the bytes crossing into JS (an upstream
#: body's Uint8Array), the relays' chunks
JS_ALLOWANCE_BYTES = 16 * MIB
BUDGET_BYTES = LIMIT_BYTES - BASELINE_BYTES - JS_ALLOWANCE_BYTES

#: What any request holds besides its body: headers, the D1 row, a page read, the log
REQUEST_BYTES = 256 * 1024
#: What a generation holds per byte of its body at its peak (the body, its parse, the
#: groups' bytes, the plan's pages and the upstream bytes; measured with tracemalloc on
#: roleplay chats, bench/bench_memory.py: 6.4, the last turn kept included), and per
#: bracket byte its parse counted (an object or array is ~200 bytes parsed: a dense
#: chat of tiny messages or ``[{}]`` content holds up to ~20 per body byte)
BODY_FACTOR = 7
BRACKET_BYTES = 100
#: What a judged batch request holds per byte of its body (the body, its lines, one
#: line parsed at a time)
BATCH_FACTOR = 3
#: What a request waiting on its provider holds per byte of the upstream body when its
#: answer will be read whole and annotated (a turn that paged or compacted): the bytes
#: (the runtime's until written) and an answer of the same order. An answer relayed as
#: it comes holds STREAM_BYTES, within REQUEST_BYTES: such a request holds the bytes alone.
UPSTREAM_FACTOR = 2
#: What a relayed stream holds until it ends (one chunk at a time)
STREAM_BYTES = 64 * 1024
#: How long a request waits for others to release before it is turned away
WAIT_SECONDS = 5.0
RETRY_AFTER_SECONDS = 2
#: A relay that never ends (its response never read) gives its bytes back after this
RELAY_SECONDS = 900

#: Contiguous room kept for large bodies: a body's bytes and its Latin-1 view are one
#: block each (up to MAX_REQUEST_BYTES, 8 MiB), and the heap the caches and requests
#: give back is in pieces (measured through the runner after 16 sessions' paged,
#: waiting and streamed turns, the caches then emptied: 70.3 MiB free, none of it in a
#: piece larger than the heap's free top, 18.7 MiB). One block of RESERVE_BYTES is held
#: while no large body is read or parsed — room the caches are never lent. A large body
#: is admitted counting on it, and lets the block go at the one moment its blocks are
#: made: after its last chunk is read, before they are joined; nothing else runs between,
#: so its bytes, the brackets' pass and its view land in the hole (dlmalloc serves a large
#: block from the best-fitting free chunk before the heap's top). One large body at a
#: time uses the hole; the block is taken again, in the same place, once that body's
#: bytes are the runtime's (its fetch took them) — never while they are still held.
RESERVE_BYTES = 16 * MIB
#: A body at least this long (its Content-Length) borrows the reserve
LARGE_BODY_BYTES = 1 * MIB

#: The caches by value, least valuable first: the first to give way (docs/design.md
#: §7.2). A cache not named here is counted among the least valuable.
ORDER = ("simple characters", "cuts by bytes", "cuts by characters", "irregular forms by stem",
         "exchange starts", "vocabularies", "analyses", "corpora", "last turns")


def caches() -> list:
    """``[(name, cache)]``, least valuable first: every part of ``search.STATE`` that
    counts what it holds, and the last turns."""
    found = {**STATE.caches(), "last turns": LAST_TURNS}
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(found.items(), key=lambda kv: rank.get(kv[0], -1))


class Budget(Weighted):
    """The isolate's bytes for requests (``cur`` reserved) and caches (the rest)."""

    def __init__(self, size: int = BUDGET_BYTES, find=caches, reserve: int = RESERVE_BYTES):
        super().__init__(size)
        self._find = find
        self._own: dict = {}        # id(cache) -> its own max_bytes, before any lowering
        self.full = size            # ``size`` is less the reserve while it is kept
        self.reserve = reserve
        self._block = None          # the reserve, while held
        self._borrowers: set = set()     # the large bodies' tickets that count on it
        self._using = None          # the one large body whose blocks fill its hole
        self._room_waiters: list = []    # large bodies waiting for the hole

    def keep_reserve(self) -> bool:
        """Hold the block, and count it out of ``size`` once no large body counts on it
        and the room is free; a heap that cannot give one block that large (MemoryError)
        holds none for now."""
        if not self.reserve or self._using is not None:
            return False
        counted = not self._borrowers
        if counted and (self.size - self.cur < self.reserve or self._waiters):
            return False
        if self._block is None:
            try:
                self._block = bytearray(self.reserve)
            except MemoryError:
                return False
        if counted and self.size == self.full:
            self.size = self.full - self.reserve
            self.fit()
        return True

    def lend_reserve(self, borrower) -> None:
        """``borrower`` (a large body's ticket, or a placeholder while it waits) counts on
        the reserve's room: its bytes are the budget's again (the block itself is let go
        in ``room_for``, when the body's blocks are made)."""
        self._borrowers.add(borrower)
        if self.size != self.full:
            self.size = self.full
            self._notify()

    def return_reserve(self, borrower) -> None:
        """``borrower`` is done with its large blocks (its body handed to fetch, or never
        read): the block is taken again once the current task yields — by then fetch has
        taken the body's bytes and they are free (docs/design.md §7.2)."""
        if borrower not in self._borrowers and self._using is not borrower:
            return
        self._borrowers.discard(borrower)
        if self._using is borrower:
            self._using = None
        try:
            asyncio.get_running_loop().call_soon(self._retake)
        except RuntimeError:
            self._retake()

    def _retake(self) -> None:
        self.keep_reserve()
        if self._using is None:
            self._wake_room()       # the hole is nobody's: a large body waiting may go on

    async def room_for(self, ticket: Ticket) -> None:
        """A large body's blocks are about to be made: wait (until its deadline, else
        EdgeBusy) while another large body uses the hole, then let the block go. The
        caller makes its blocks right after, with no await between."""
        loop = asyncio.get_running_loop()
        while self._using is not None and self._using is not ticket:
            left = ticket.deadline - loop.time()
            waiter = loop.create_future()
            self._room_waiters.append(waiter)
            try:
                await asyncio.wait((waiter,), timeout=max(left, 0))
            finally:
                if waiter in self._room_waiters:
                    self._room_waiters.remove(waiter)
            if not waiter.done() and self._using is not None:
                raise EdgeBusy(RETRY_AFTER_SECONDS)
        self._using, self._block = ticket, None

    def _wake_room(self) -> None:
        waiters, self._room_waiters = self._room_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(True)

    def held(self) -> int:
        """What the caches hold now."""
        return sum(c.held_bytes() for _, c in self._find())

    def fit(self, wanted: int = 0) -> None:
        """Give the caches what requests leave free (and ``wanted`` more, for a request
        about to be admitted): each its own bound while room remains, the most valuable
        first; each one over its bound now shrinks to it."""
        room = self.size - self.cur - wanted
        for _, cache in reversed(self._find()):
            own = self._own.setdefault(id(cache), cache.max_bytes)
            cache.max_bytes = max(0, min(own, room))
            room -= cache.max_bytes
            if cache.held_bytes() > cache.max_bytes:
                cache.shrink(cache.max_bytes)

    def release(self, n: int) -> None:
        super().release(n)
        self.fit(self._head())

    async def acquire(self, n: int, timeout: float, first: bool = False) -> bool:
        """``Weighted.acquire``, the caches shrunk first to leave the room."""
        self.fit(n + self._head())
        got = await super().acquire(n, timeout, first)
        self.fit(self._head())
        return got

    def _head(self) -> int:
        return self._waiters[0][0] if self._waiters else 0

    async def admit(self, n: int, timeout: float | None = None, large: bool = False) -> Ticket:
        """A ticket for ``n`` bytes, the caches shrunk to make the room; waits at most
        ``timeout`` (WAIT_SECONDS) for other requests to release, else EdgeBusy (503).
        ``large``: its body borrows the reserve (``return_reserve(ticket)`` gives it back)."""
        loop = asyncio.get_running_loop()
        timeout = WAIT_SECONDS if timeout is None else timeout
        self.keep_reserve()     # the isolate's first request takes it (§7.2)
        n = max(1, min(n, self.full))   # a body the budget can hold only alone waits for it
        waiting = object()
        if large:
            self.lend_reserve(waiting)
        try:
            got = await self.acquire(n, timeout)
        finally:
            self._borrowers.discard(waiting)
        if not got:
            self.keep_reserve()
            raise EdgeBusy(RETRY_AFTER_SECONDS)
        ticket = Ticket(self, n, loop.time() + timeout)
        if large:
            self._borrowers.add(ticket)
        return ticket

    def clear_caches(self) -> None:
        """Every cache emptied (after a MemoryError): what they held is free again."""
        for _, cache in self._find():
            cache.clear()


#: The isolate's one budget
BUDGET = Budget()


def declared_length(req: Incoming) -> int | None:
    value = req.header("content-length")
    return int(value) if value is not None and value.isdigit() else None


def large(req: Incoming, body_factor: float) -> bool:
    """Whether ``req`` declares a body large enough to borrow the reserve."""
    declared = declared_length(req)
    return bool(body_factor) and declared is not None and declared >= LARGE_BODY_BYTES


#: What other requests may hold while a small one's MemoryError still means the heap
#: cannot serve (nothing they release would make the room)
STUCK_BYTES = 8 * MIB


def room(req: Incoming, body_factor: float):
    """For a large body, the async callable its read awaits after the last chunk and
    before joining them: the reserve's block let go for its blocks (``Budget.room_for``);
    None for any other."""
    if not large(req, body_factor):
        return None
    ticket = req.ticket
    return lambda: BUDGET.room_for(ticket)


def stuck(req: Incoming, body_factor: float) -> bool:
    """After a MemoryError, the caches emptied: whether the heap failed a request that is
    not large while the others hold almost nothing — a heap too fragmented to serve, not
    work that will release its room (docs/design.md §7.2)."""
    return (not large(req, body_factor)
            and BUDGET.cur - req.ticket.held < STUCK_BYTES)


def wanted(req: Incoming, body_factor: float) -> int:
    """What ``req`` reserves before it is read: its headers' share, and its declared
    body × ``body_factor`` (what its route holds per body byte; 0: never read)."""
    declared = declared_length(req)
    return REQUEST_BYTES + int((declared or 0) * body_factor)


def reading(req: Incoming, body_factor: float):
    """For a body with no Content-Length, an async callable the platform calls with
    each chunk's length as it reads: the ticket grows by ``chunk × body_factor`` or the
    request is turned away (EdgeBusy) before anything is stored or dispatched. None
    when the reservation was made by the declared length."""
    if declared_length(req) is not None or not body_factor:
        return None
    ticket = req.ticket

    async def grow(chunk: int) -> None:
        if not await ticket.grow(int(chunk * body_factor)):
            raise EdgeBusy(RETRY_AFTER_SECONDS)
    return grow


async def parsed(req: Incoming, size: int, brackets: int) -> None:
    """After the parse, the reservation grown to what the body's structure needs (its
    bracket bytes counted): a dense body waits or is turned away (EdgeBusy) before
    anything is stored or dispatched."""
    ticket = req.ticket
    if ticket.sem is None:
        return
    need = min(REQUEST_BYTES + BODY_FACTOR * size + BRACKET_BYTES * min(brackets, size), ticket.sem.size)
    if need > ticket.held and not await ticket.grow(need - ticket.held):
        raise EdgeBusy(RETRY_AFTER_SECONDS)


def waiting_on_upstream(req: Incoming, size: int, read_whole: bool = True) -> None:
    """Before the fetch: the request holds its upstream body from now on (and, when
    ``read_whole``, an answer of its order), not its parse and plans (docs/design.md §7.2)."""
    req.ticket.lower_to(REQUEST_BYTES + (UPSTREAM_FACTOR if read_whole else 1) * size)
    BUDGET.return_reserve(req.ticket)       # its body and parse are let go (or kept for a fallback)


def hand_to_relay(req: Incoming):
    """The callable a relay calls when it ends (end, error, cancel): the request's
    reservation, lowered to STREAM_BYTES now, goes with it; a relay never read gives it
    back after RELAY_SECONDS."""
    ticket = req.ticket
    ticket.handed = True
    try:
        handle = asyncio.get_running_loop().call_later(RELAY_SECONDS, ticket.release)
    except RuntimeError:
        handle = None

    def done() -> None:
        ticket.release()
        if handle is not None:
            try:
                handle.cancel()
            except Exception:   # noqa: BLE001 — a runtime that cannot clear it: it releases nothing more
                pass
    return done


def finished(req: Incoming) -> None:
    """The handler returned or raised: release, or hold STREAM_BYTES for a relay."""
    ticket = req.ticket
    if ticket.handed:
        ticket.lower_to(STREAM_BYTES)
    else:
        ticket.release()
    BUDGET.return_reserve(ticket)
