"""A request waiting for its provider holds its upstream body at most, and that in the
runtime (docs/design.md §7.2): once the bytes are handed to fetch, nothing of the client's
body, its parse or the dispatched plan stays in the Python heap (tracemalloc, CPython;
tests/support/waiting.py). Before, a waiting request held ~2× a paged 0.93 MiB body and
~6× a 7.6 MiB forwarded one."""

from tests.support.waiting import MiB, measure


def test_a_paged_waiting_request_holds_nothing_of_its_body():
    r = measure(0.93, 3)
    assert r["statuses"] == [200]
    assert 0.9 * MiB < r["body"] < 1.0 * MiB and r["sent"] < r["body"]      # paged: less sent
    assert r["held"] < 64 * 1024, r


def test_a_forwarded_waiting_request_holds_nothing_of_its_body():
    r = measure(3.0, 2)
    assert r["statuses"] == [200]
    assert r["sent"] == r["body"]                                           # as received
    assert r["held"] < 64 * 1024, r
