"""A weighted semaphore and the reservation it hands out (docs/design.md §7.2).

``Weighted`` is Go's ``golang.org/x/sync/semaphore.Weighted`` for one asyncio loop: a
request acquires ``n`` units (bytes) and waits, first come first served, until they are
free; a large request at the head of the queue is never overtaken by smaller ones, so
it is not starved. A ticket that grows (a request already admitted, reading or
parsing its body) goes before every waiter: it waits for nobody who waits for it to
finish (docs/design.md §7.2). A waiter whose time runs out, or that is cancelled (its
client went away), leaves the queue and gives its place back: when it was at the head,
the waiters behind it that now fit are woken. ``Ticket`` is what one request holds.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Weighted:
    """At most ``size`` units held at once; ``cur`` held now."""

    def __init__(self, size: int):
        self.size = size
        self.cur = 0
        self._waiters: deque = deque()     # [n, future], first come first

    def waiting(self) -> int:
        return len(self._waiters)

    def try_acquire(self, n: int, first: bool = False) -> bool:
        """Take ``n`` units now if they are free and nobody waits before (``first``:
        whoever waits)."""
        if self.size - self.cur >= n and (first or not self._waiters):
            self.cur += n
            return True
        return False

    async def acquire(self, n: int, timeout: float, first: bool = False) -> bool:
        """Take ``n`` units, waiting at most ``timeout`` seconds: True once taken, False
        when the time ran out (or ``n`` can never fit). ``first``: ahead of every waiter
        (a ticket growing). Cancelled while waiting, its place is given back and the
        cancellation goes on."""
        if self.try_acquire(n, first):
            return True
        if n > self.size or timeout <= 0:
            return False
        waiter = [n, asyncio.get_running_loop().create_future()]
        if first:
            self._waiters.appendleft(waiter)
        else:
            self._waiters.append(waiter)
        try:
            await asyncio.wait((waiter[1],), timeout=timeout)
        except BaseException:
            self._give_back(waiter)
            raise
        if waiter[1].done():
            return True
        self._give_back(waiter)
        return False

    def release(self, n: int) -> None:
        if n <= 0:
            return
        self.cur -= n
        if self.cur < 0:
            raise RuntimeError("released more than held")
        self._notify()

    def _give_back(self, waiter: list) -> None:
        """A waiter leaves: granted meanwhile, it returns its units; else it leaves the
        queue, and when it was first the ones behind it may fit now."""
        n, fut = waiter
        if fut.done():
            if not fut.cancelled():
                self.release(n)
            return
        fut.cancel()
        first = self._waiters and self._waiters[0] is waiter
        self._waiters.remove(waiter)
        if first:
            self._notify()

    def _notify(self) -> None:
        waiters = self._waiters
        while waiters:
            n, fut = waiters[0]
            if self.size - self.cur < n:
                break       # first come first served: nobody overtakes the head
            waiters.popleft()
            self.cur += n
            fut.set_result(True)


class Ticket:
    """What one request holds of a ``Weighted``: ``held`` units. ``grow`` takes more
    (a body read as it comes), ``lower_to`` gives back what it no longer needs,
    ``release`` the rest (again: nothing). A ticket of no semaphore holds nothing."""
    __slots__ = ("sem", "held", "deadline", "handed")

    def __init__(self, sem: Weighted | None = None, held: int = 0, deadline: float = 0.0):
        self.sem, self.held, self.deadline = sem, held, deadline
        self.handed = False     # its release handed to a relay that ends later

    async def grow(self, n: int) -> bool:
        """Hold ``n`` more units, waiting until the ticket's deadline, ahead of every
        request not yet admitted (those wait for this one to finish)."""
        if self.sem is None or n <= 0:
            return True
        timeout = self.deadline - asyncio.get_running_loop().time()
        if not await self.sem.acquire(n, timeout, first=True):
            return False
        self.held += n
        return True

    def lower_to(self, n: int) -> None:
        """Hold at most ``n`` units from now on."""
        if self.sem is not None and self.held > n:
            give, self.held = self.held - max(n, 0), max(n, 0)
            self.sem.release(give)

    def release(self) -> None:
        self.lower_to(0)
