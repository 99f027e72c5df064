"""The isolate's memory budget (docs/design.md §7.2): the weighted semaphore (Go's
x/sync/semaphore.Weighted: FIFO, a waiter whose deadline passes gives its place back, a
large request is not starved) and the caches that give way to requests."""

from __future__ import annotations

import asyncio

import pytest

from multillm_edge.base.errors import EdgeBusy
from multillm_edge.base.weighted import Ticket, Weighted
from multillm_edge.search.state import Memo
from multillm_edge.service.budget import Budget


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_units_are_taken_and_given_back():
    async def go():
        sem = Weighted(10)
        assert await sem.acquire(6, 1) and sem.cur == 6
        assert not sem.try_acquire(5)
        assert not await sem.acquire(5, 0.01)          # its time ran out
        assert sem.cur == 6 and sem.waiting() == 0      # and it left the queue
        sem.release(6)
        assert sem.cur == 0 and await sem.acquire(10, 0)
        assert not await sem.acquire(11, 5)             # can never fit: at once
        with pytest.raises(RuntimeError):
            sem.release(11)
    run(go())


def test_waiters_are_served_first_come_first_served_and_a_large_one_is_not_starved():
    async def go():
        sem = Weighted(10)
        assert await sem.acquire(8, 1)
        order = []

        async def want(name, n):
            assert await sem.acquire(n, 5)
            order.append(name)

        big = asyncio.ensure_future(want("big", 10))    # waits for all ten
        await asyncio.sleep(0)
        small = asyncio.ensure_future(want("small", 1))  # fits now, but comes after big
        await asyncio.sleep(0.01)
        assert order == [] and sem.waiting() == 2 and sem.cur == 8
        sem.release(8)
        await asyncio.sleep(0.01)
        assert order == ["big"] and sem.cur == 10
        sem.release(10)
        await asyncio.wait_for(asyncio.gather(big, small), 1)
        assert order == ["big", "small"] and sem.cur == 1
    run(go())


def test_a_waiter_whose_deadline_passes_gives_its_place_back():
    async def go():
        sem = Weighted(10)
        assert await sem.acquire(5, 1)
        got = []

        async def want(name, n, timeout):
            got.append((name, await sem.acquire(n, timeout)))

        head = asyncio.ensure_future(want("head", 10, 0.05))   # never fits while 5 are held
        await asyncio.sleep(0)
        behind = asyncio.ensure_future(want("behind", 3, 5))   # fits, but queued behind head
        await asyncio.sleep(0.01)
        assert got == []
        await asyncio.wait_for(asyncio.gather(head, behind), 1)
        assert got == [("head", False), ("behind", True)] and sem.cur == 8
    run(go())


def test_a_cancelled_waiter_leaves_the_queue():
    """A client gone while its request waits: its place is given back, nothing held."""
    async def go():
        sem = Weighted(4)
        assert await sem.acquire(4, 1)
        waiter = asyncio.ensure_future(sem.acquire(2, 5))
        await asyncio.sleep(0)
        assert sem.waiting() == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert sem.waiting() == 0
        sem.release(4)
        assert sem.cur == 0
    run(go())


def test_a_ticket_grows_lowers_and_releases_once():
    async def go():
        sem = Weighted(100)
        assert await sem.acquire(10, 1)
        t = Ticket(sem, 10, asyncio.get_running_loop().time() + 1)
        assert await t.grow(50) and t.held == 60 and sem.cur == 60
        assert not await Ticket(sem, 0, asyncio.get_running_loop().time() + 0.01).grow(50)
        t.lower_to(20)
        assert t.held == 20 and sem.cur == 20
        t.lower_to(30)                  # never raised by lowering
        assert t.held == 20
        t.release()
        t.release()
        assert sem.cur == 0 and t.held == 0
        assert await Ticket().grow(10**9)   # a ticket of no budget holds nothing
    run(go())


def test_a_growing_ticket_goes_before_the_requests_waiting_for_it():
    """An admitted request that grows (its parse needs more) is not queued behind a
    waiter that can only be served once it is done: it takes free room at once, and
    when there is none it is the next served (issue 43: the first of three 7.6 MiB
    requests waited behind the second until its deadline, and both were shed)."""
    async def go():
        sem = Weighted(100)
        loop = asyncio.get_running_loop()
        assert await sem.acquire(53, 1)
        t = Ticket(sem, 53, loop.time() + 5)
        second = asyncio.ensure_future(sem.acquire(53, 5))     # fits once t is lowered
        await asyncio.sleep(0)
        assert sem.waiting() == 1
        assert await asyncio.wait_for(t.grow(4), 0.5) and sem.cur == 57     # at once
        assert await Ticket(sem, 0, loop.time() + 0.01).grow(50) is False   # no room: timed out
        grow = asyncio.ensure_future(t.grow(50))        # no room: first in the queue
        await asyncio.sleep(0)
        assert sem.waiting() == 2 and sem._waiters[0][0] == 50
        third = asyncio.ensure_future(sem.acquire(1, 5))
        await asyncio.sleep(0)
        t.lower_to(0)           # t gave back 57 (its grow, 50, is still wanted): served first
        await asyncio.sleep(0.01)
        assert grow.done() and grow.result() and not second.done() and not third.done()
        assert sem.cur == 50 and t.held == 50
        t.release()
        assert await asyncio.wait_for(second, 1) and await asyncio.wait_for(third, 1)
        assert sem.cur == 54
    run(go())


class Sized:
    """A cache stand-in: ``held`` bytes, shrinking as asked."""

    def __init__(self, held: int, max_bytes: int):
        self.held, self.max_bytes, self.shrunk = held, max_bytes, []

    def held_bytes(self):
        return self.held

    def shrink(self, to):
        self.shrunk.append(to)
        self.held = min(self.held, to)

    def clear(self):
        self.held = 0


def test_the_caches_give_way_least_valuable_first_and_get_their_room_back():
    cheap, dear = Sized(30, 40), Sized(50, 60)
    budget = Budget(100, lambda: [("cheap", cheap), ("dear", dear)])

    async def go():
        budget.fit()
        assert (cheap.max_bytes, dear.max_bytes) == (40, 60) and cheap.held == 30
        t = await budget.admit(30)          # 70 left: the dear cache keeps its 60, cheap 10
        assert (cheap.max_bytes, dear.max_bytes) == (10, 60) and cheap.held == 10 and dear.held == 50
        t2 = await budget.admit(30)         # 40 left: cheap gives way whole, dear shrinks
        assert (cheap.max_bytes, dear.max_bytes) == (0, 40) and cheap.held == 0 and dear.held == 40
        with pytest.raises(EdgeBusy) as busy:
            await budget.admit(50, timeout=0.01)
        assert busy.value.status == 503 and busy.value.retry_after > 0
        assert budget.cur == 60 and budget.waiting() == 0     # a refused request holds nothing
        t.release()
        t2.release()
        assert budget.cur == 0 and (cheap.max_bytes, dear.max_bytes) == (40, 60)
    run(go())


def test_a_request_the_budget_holds_only_alone_waits_for_it_and_caches_empty():
    memo = Memo(100, 1000)
    for i in range(10):
        memo.keep(i, "x" * 20)
    budget = Budget(1000, lambda: [("memo", memo)])

    async def go():
        t = await budget.admit(5000)     # more than the budget: admitted alone, clamped
        assert t.held == 1000 and not memo and memo.max_bytes == 0
        memo.keep("k", "v")             # kept nowhere while there is no room
        assert not memo
        t.release()
        assert memo.max_bytes == 1000
    run(go())


def test_the_reserve_is_never_lent_to_caches_and_is_let_go_for_a_large_body():
    """Contiguous room for large bodies (docs/design.md §7.2): one block the isolate's
    first request takes, out of what requests and caches count on; a large body is
    admitted counting on it, lets the block go only when its own blocks are made
    (``room_for``), and it is taken again once the body is handed over — after a yield."""
    cache = Sized(0, 200)
    budget = Budget(100, lambda: [("cache", cache)], reserve=30)

    async def go():
        t = await budget.admit(10)
        assert len(budget._block) == 30 and budget.size == 70 and budget.full == 100
        assert cache.max_bytes == 60                    # 100 - 30 kept - 10 reserved
        with pytest.raises(EdgeBusy):
            await budget.admit(65, timeout=0.01)        # not large: the reserve is not its room
        assert budget._block is not None and budget.size == 70
        big = await budget.admit(85, large=True)        # large: admitted counting on the reserve
        assert budget.size == 100 and big.held == 85 and cache.max_bytes == 5   # 100 - 10 - 85
        assert len(budget._block) == 30                 # the block is held while it reads
        await budget.room_for(big)                      # its blocks are about to be made
        assert budget._block is None
        t.release()
        budget.return_reserve(t)                        # not a borrower: nothing changes
        await asyncio.sleep(0)
        assert budget._block is None
        big.lower_to(20)                                # waiting on its provider, its blocks gone
        budget.return_reserve(big)
        assert budget._block is None                    # not yet: fetch takes its bytes first
        await asyncio.sleep(0)
        assert len(budget._block) == 30 and budget.size == 70 and cache.max_bytes == 50
        other = await budget.admit(5, large=True)       # it can be lent again
        assert budget.size == 100 and budget._block is not None
        budget.return_reserve(other)                    # never read: counted out again
        other.release()
        budget.return_reserve(other)                    # twice: once given back
        await asyncio.sleep(0)
        assert budget._block is not None and budget.size == 70
        big.release()
        assert budget.cur == 0
    run(go())


def test_one_large_body_at_a_time_fills_the_hole_the_next_waits_for_it_or_is_turned_away():
    """Two large bodies read at once: the second's blocks wait until the first's are the
    runtime's and the block is held again, so each lands in the hole; one whose deadline
    passes first is turned away (503 edge_busy) and nothing of the hole changes."""
    budget = Budget(100, lambda: [], reserve=30)

    async def go():
        first = await budget.admit(20, large=True)
        second = await budget.admit(20, large=True)
        await budget.room_for(first)
        assert budget._block is None and budget._using is first
        waiting = asyncio.ensure_future(budget.room_for(second))
        await asyncio.sleep(0.01)
        assert not waiting.done()                       # the hole is the first's
        budget.return_reserve(first)                    # its bytes handed to fetch
        await asyncio.wait_for(waiting, 1)
        assert budget._using is second and budget._block is None   # taken again, let go for it
        late = await budget.admit(20, timeout=1, large=True)
        late.deadline = asyncio.get_running_loop().time() + 0.02
        with pytest.raises(EdgeBusy):
            await budget.room_for(late)
        assert budget._using is second and not budget._room_waiters
        for t in (second, late):
            budget.return_reserve(t)
            t.release()
        await asyncio.sleep(0)
        assert len(budget._block) == 30 and budget.size == 70 and budget._using is None
    run(go())


def test_a_large_body_turned_away_gives_the_reserve_back():
    budget = Budget(100, lambda: [], reserve=30)

    async def go():
        t = await budget.admit(60)
        assert budget._block is not None
        with pytest.raises(EdgeBusy):
            await budget.admit(90, timeout=0.01, large=True)   # 40 free even without it
        assert budget._block is not None and budget.size == 70 and not budget._borrowers
        t.release()
    run(go())


def test_memo_counts_its_bytes_and_shrinks_oldest_first():
    memo = Memo(100, 10_000)
    for i in range(20):
        memo.keep(f"key{i}", "v" * 100)
    held = memo.held_bytes()
    assert memo.held == sum(memo.size(k, v) for k, v in memo.items())
    memo.shrink(held // 2)
    assert memo.held_bytes() <= held // 2 and "key0" not in memo and "key19" in memo
    memo.shrink(0)
    assert not memo and memo.held == 0
