"""What a turn writes for its plan's pages (page_writes): new, stale-bodied, due, reused."""

import hashlib

from multillm_edge.core import page_writes
from multillm_edge.core.pages import Lifetime, Owner, PageSigner, object_key
from multillm_edge.core.paging import Page
from multillm_edge.core.rows import ActivePage

SIGN = PageSigner(b"k")
NOW, TTL, HORIZON = 1_000_000, 3600, 86400
OWNER = Owner("roleplay", "alice", "rps", 1)
OLD_OBJ = "context-pages/obj_" + "Q" * 42 + "A"


def page(text: str) -> Page:
    body = f'[{{"role":"user","content":"{text}"}}]'.encode()
    sha = hashlib.sha256(body).hexdigest()
    return Page(SIGN.page_id("roleplay", "alice", "rps", 1, sha), sha, body)


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


# -- merging (docs/design.md §5.9) ----------------------------------------------------

from multillm_edge.core.page_writes import MergeRule, choose, tier  # noqa: E402

OBJ = ["context-pages/obj_" + c * 42 + "A" for c in "BCDEFGHIJKLMNOPQRSTUVWXYZ"]


def test_tiers_are_powers_of_the_fanout_over_the_base():
    assert [tier(b) for b in (0, 1, 12287, 12288, 36863, 36864, 1 << 20)] == [0, 0, 0, 1, 1, 2, 5]
    assert (tier(4096 * 3 ** 5 - 1), tier(4096 * 3 ** 5)) == (4, 5)


def test_nothing_written_merges_nothing():
    assert choose({OBJ[0]: 100, OBJ[1]: 100, OBJ[2]: 100}, 0) == []
    assert choose({k: 100 for k in OBJ[:20]}, 0) == []


def test_a_full_tier_is_folded_in_and_the_counter_carries():
    assert choose({OBJ[0]: 2000}, 2000) == []                       # one besides the write: wait
    assert choose({OBJ[0]: 2000, OBJ[1]: 2100}, 1900) == [OBJ[0], OBJ[1]]
    sizes = {OBJ[0]: 5000, OBJ[1]: 5000, OBJ[2]: 15000, OBJ[3]: 16000, OBJ[4]: 200000}
    # tier 0 (2 objects) → 13,000 bytes: tier 1 holds 2 more → 44,000: tier 2 is empty
    assert choose(sizes, 3000) == [OBJ[0], OBJ[1], OBJ[2], OBJ[3]]


def test_unmovable_objects_are_never_chosen():
    assert choose({OBJ[0]: 2000, OBJ[1]: 2000}, 2000, unmovable={OBJ[0]}) == []
    sizes = {k: 1000 for k in OBJ[:14]}
    sizes.update({OBJ[14]: 20000, OBJ[15]: 50000, OBJ[16]: 150000})
    chosen = choose(sizes, 1000, unmovable=set(OBJ[:14]))
    assert chosen == [OBJ[14], OBJ[15], OBJ[16]]           # the cap takes what it can


def test_the_cap_folds_the_smallest_movable_objects():
    sizes = {OBJ[0]: 2000, OBJ[1]: 20000, OBJ[2]: 50000, OBJ[3]: 150000, OBJ[4]: 500000}
    assert choose(sizes, 1000, rule=MergeRule(cap=4)) == [OBJ[0], OBJ[1]]
    assert choose(sizes, 1000, rule=MergeRule(cap=6)) == []
    # equal sizes: the object whose rows are due anyway goes first
    assert choose({OBJ[0]: 2000, OBJ[1]: 2000}, 20000, rule=MergeRule(cap=2),
                  due={OBJ[1]: 1}) == [OBJ[1]]


def located(key, offset, expires_in=TTL, length=10):
    return ActivePage(NOW + expires_in, NOW - 60, key, offset, length)


def test_merge_moves_whole_reproducible_objects_only():
    new, a, b, c, gone, s = (page(t) for t in ("new", "a", "b", "c", "gone", "sup"))
    known = {a.page_id: located(OBJ[0], 0, length=len(a.body)),
             s.page_id: located(OBJ[0], 20, expires_in=900, length=len(s.body)),
             b.page_id: located(OBJ[1], 0, expires_in=TTL // 2 - 1, length=len(b.body)),   # due
             c.page_id: located(OBJ[2], 0, length=len(c.body)),
             gone.page_id: located(OBJ[2], 30, length=len(gone.body))}    # not in this body
    asked = []

    def superseded(lengths):
        asked.append(lengths)
        return [s] if len(s.body) in lengths else []

    plan = [new, a, b, c]
    w = page_writes.classify(plan, known, NOW, TTL, HORIZON)
    page_writes.merge(w, known, NOW, plan, superseded, MergeRule(cap=2))
    assert asked and {m[0].page_id for m in w.moved} == {a.page_id, s.page_id, b.page_id}
    assert w.refresh == []                                    # b moves instead of a refresh
    key, data, rows = page_writes.rows(w, SIGN, OWNER, Lifetime(NOW, TTL))
    assert w.packed[0] is new and key == object_key([p.page_id for p in w.packed])
    by_id = {r["page_id"]: r for r in rows}
    assert set(by_id) == {new.page_id, a.page_id, s.page_id, b.page_id}
    for p in (new, a, s, b):
        r = by_id[p.page_id]
        assert r["r2_key"] == key and data[r["r2_offset"]:r["r2_offset"] + r["byte_length"]] == p.body
        assert r["body_written_at"] == NOW and SIGN.verify_row(r)
    assert by_id[a.page_id]["expires_at"] == by_id[b.page_id]["expires_at"] == NOW + TTL
    assert by_id[s.page_id]["expires_at"] == NOW + 900        # superseded: dies on time
    assert by_id[s.page_id]["moved_from"] == (OBJ[0], 20)
    assert "moved_from" not in by_id[new.page_id]


def test_merge_needs_an_object_written_anyway():
    a, b, due = page("a"), page("b"), page("due")
    known = {a.page_id: located(OBJ[0], 0), b.page_id: located(OBJ[1], 0),
             due.page_id: located(OBJ[2], 0, expires_in=10)}

    def superseded(lengths):
        raise AssertionError("no merge is considered")

    w = page_writes.classify([a, b, due], known, NOW, TTL, HORIZON)
    page_writes.merge(w, known, NOW, [a, b, due], superseded, MergeRule(cap=1))
    assert w.moved == [] and len(w.refresh) == 1
    assert page_writes.rows(w, SIGN, OWNER, Lifetime(NOW, TTL))[0] is None
    # a write with nothing calling for a merge does not make superseded pages either
    new, one = page("new"), {a.page_id: known[a.page_id]}
    w = page_writes.classify([new, a], one, NOW, TTL, HORIZON)
    page_writes.merge(w, one, NOW, [new, a], superseded)
    assert w.moved == []
    off = page_writes.classify([new, a, b], known, NOW, TTL, HORIZON)
    page_writes.merge(off, known, NOW, [new, a, b], superseded, MergeRule(cap=1, enabled=False))
    assert off.moved == []
