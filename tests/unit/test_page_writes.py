"""What a turn writes for its plan's pages (page_writes): new, stale-bodied, due, reused."""

import hashlib

from multillm_edge.storage import page_writes
from multillm_edge.core.pages import Lifetime, Owner, PageSigner, object_key
from multillm_edge.core.paging import Page
from multillm_edge.storage.store import ActivePage

SIGN = PageSigner(b"k")
NOW, TTL, HORIZON = 1_000_000, 3600, 86400
OWNER = Owner("roleplay", "alice", "rps", 1)
OLD_OBJ = "context-pages/obj_" + "Q" * 42 + "A"


def page(text: str) -> Page:
    body = f'[{{"role":"user","content":"{text}"}}]'.encode()
    sha = hashlib.sha256(body).hexdigest()
    return Page(SIGN.page_id("roleplay", "alice", "rps", 1, sha), sha, body, [])


def active(expires_in=TTL, written_ago=0, offset=0):
    return ActivePage(NOW + expires_in, NOW - written_ago, OLD_OBJ, offset)


def test_each_page_gets_what_it_needs():
    new, expired, stale, due, fresh = (page(t) for t in "abcde")
    known = {expired.page_id: active(expires_in=0),
             stale.page_id: active(written_ago=HORIZON),            # exactly the horizon: rewritten
             due.page_id: active(expires_in=TTL // 2 - 1, written_ago=HORIZON - 1),
             fresh.page_id: active(expires_in=TTL // 2, written_ago=10)}
    w = page_writes.classify([new, expired, stale, due, fresh, new], known, NOW, TTL, HORIZON)
    assert [p.page_id for p in w.bodies] == [new.page_id, expired.page_id, stale.page_id]
    assert w.new_pages == 2 and w.new_bytes == len(new.body) + len(expired.body)
    assert [(p.page_id, a) for p, a in w.refresh] == [(due.page_id, known[due.page_id])]
    assert w.reused == {fresh.page_id: known[fresh.page_id]}
    assert not w.empty


def test_a_steady_turn_writes_nothing():
    pages = [page(t) for t in "xyz"]
    known = {p.page_id: active(expires_in=TTL - 60, written_ago=60) for p in pages}
    w = page_writes.classify(pages, known, NOW, TTL, HORIZON)
    assert w.empty and w.new_bytes == 0 and set(w.reused) == set(known)
    assert page_writes.rows(w, SIGN, OWNER, Lifetime(NOW, TTL)) == (None, b"", [])


def test_rows_point_into_one_object_and_refreshed_rows_stay_put():
    a, b, due = page("a"), page("bb"), page("due")
    known = {due.page_id: active(expires_in=100, written_ago=500, offset=77)}
    w = page_writes.classify([a, due, b], known, NOW, TTL, HORIZON)
    key, data, rows = page_writes.rows(w, SIGN, OWNER, Lifetime(NOW, TTL))
    assert key == object_key([a.page_id, b.page_id])
    by_id = {r["page_id"]: r for r in rows}
    for p in (a, b):
        r = by_id[p.page_id]
        assert r["r2_key"] == key and data[r["r2_offset"]:r["r2_offset"] + r["byte_length"]] == p.body
        assert (r["body_written_at"], r["expires_at"]) == (NOW, NOW + TTL)
    r = by_id[due.page_id]
    assert (r["r2_key"], r["r2_offset"], r["body_written_at"], r["expires_at"]) == \
        (OLD_OBJ, 77, NOW - 500, NOW + TTL)
    assert all(SIGN.verify_row(r) for r in rows)


def test_only_refreshes_means_no_object():
    due = page("due")
    w = page_writes.classify([due], {due.page_id: active(expires_in=10)}, NOW, TTL, HORIZON)
    key, data, rows = page_writes.rows(w, SIGN, OWNER, Lifetime(NOW, TTL))
    assert key is None and data == b"" and len(rows) == 1
