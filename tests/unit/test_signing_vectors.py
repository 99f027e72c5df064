"""Known page ids and row signatures, computed with the signer as it was before the
per-request fast path (issue 13). Rows and handles already stored must keep verifying,
and new ones must come out byte-identical, whatever the signer does internally."""

import hashlib

import pytest

from multillm_edge.core import pages
from multillm_edge.core.pages import Lifetime, Location, Owner, PageSigner

SECRET = b"vector-secret-13"
OBJ = "context-pages/obj_" + "Q" * 42 + "w"
NOW, TTL, WRITTEN, LENGTH, OFFSET = 1_800_000_000, 3600, 1_799_999_000, 999, 4321
LIFE = Lifetime(NOW, TTL)

# (authority, principal, session_id, revision, sha256) -> page id, v1 signature, v2 signature
VECTORS = [
    (("roleplay", "alice", "rps_1", 3, "ab" * 32),
     "cp_TRM_69l2wSXSmhGu6E5hMCsHBIFs4mEAdVudoeYUIZ0",
     "gHDK1VuJQbJRYmo2g-5fiBRX0xMVSWYCN0dVLYhO8rA", "qPULbd8iUqpZltRYSc5yZRu-H8nAF8kgKDFBEqK_Elw"),
    (("roleplay", "0f" * 32, "rps_Zz-9", 0, hashlib.sha256(b"x").hexdigest()),
     "cp_rkR0vxerA3FyYz2oI2XA8__DQVY9G6XtSBtEBJOR7d8",
     "go4Tve3q-e4zLZxgonvHQerf7x3L2GJ7ykijaeA2_rw", "93f31enCj8pZxe-5Z3I29ZLNA4R8hsznfbv-sS9OGXk"),
    (("managed", "bob", "s", 2 ** 40, "0" * 64),
     "cp_Rcyqdapd85Oh16gTmN19RrLNlEmbzTH0XEq60luH1gE",
     "oZhdXFZ8f1m7zF4MLCGOKZFyBk_5cO1ht8Yq0NeQdQ0", "zaHz6wyph9e73XbNuYImbzZJXupugiFAbZHb0LOfmUM"),
    (("roleplay", 'ünï "q" \\ \u2028\x01', "sess/é", 17, "f" * 64),
     "cp_Mggf251rMUqp4tZsw9t2H4_pfIx1fwKw9k2U8tuoG2M",
     "k4DVGctI8E_8rQR7sIVPHHMBhDoIyGcDjj5u2JGZu7o", "SFznceCLCxEdUHuYCj_qxTm2eCk_sDyOsSaZu8lnWJA"),
]
SURROGATE = (("roleplay", "x\ud800y", "rps_\U0001F600", 1, hashlib.sha256(b"y").hexdigest()),
             "cp_Dz55gbAUB0654OB3OIl7w_46KNLQPdzWtuvGre6wjaQ")
IDS = [(fields, pid) for fields, pid, _, _ in VECTORS] + [SURROGATE]


@pytest.mark.parametrize("fields,pid", IDS)
def test_page_id_vectors(fields, pid):
    for s in (PageSigner(SECRET), PageSigner(SECRET, b"old-secret")):
        assert s.page_id(*fields) == pid
        assert s.verify_page_id(pid, *fields)
    assert PageSigner(b"old-secret", SECRET).verify_page_id(pid, *fields)   # rotated out
    assert not PageSigner(b"old-secret").verify_page_id(pid, *fields)


@pytest.mark.parametrize("fields,pid,v1,v2", VECTORS)
def test_row_signature_vectors(fields, pid, v1, v2):
    s = PageSigner(SECRET)
    legacy = s.make_row(Owner(*fields[:4]), fields[4], LENGTH, LIFE)
    shared = s.make_row(Owner(*fields[:4]), fields[4], LENGTH, LIFE, Location(OBJ, OFFSET, WRITTEN))
    assert (legacy["page_id"], legacy["signature"]) == (pid, v1)
    assert (shared["page_id"], shared["signature"]) == (pid, v2)
    for row in (legacy, shared):
        assert s.verify_row(row)
        assert PageSigner(b"new-secret", SECRET).verify_row(row)
        assert not s.verify_row(dict(row, expires_at=row["expires_at"] + 1))


@pytest.mark.parametrize("fields,pid", IDS)
def test_per_request_page_ids_are_the_same_ids(fields, pid):
    *fixed, sha = fields
    assert PageSigner(SECRET, b"old-secret").page_ids(*fixed)(sha) == pid


def test_per_request_page_ids_refuse_what_they_cannot_frame():
    ids = PageSigner(SECRET).page_ids("roleplay", "alice", "rps_1", 3)
    for bad in ("ab" * 31, "ab" * 33, '"' + "a" * 63, "a" * 62 + '"]', "é" + "a" * 63, "a\\" + "a" * 62):
        with pytest.raises(ValueError):
            ids(bad)
    for fixed in (("other", "a", "b", 0), ("roleplay", "a", "b", True), ("roleplay", 1, "b", 0)):
        with pytest.raises((TypeError, ValueError)):
            PageSigner(SECRET).page_ids(*fixed)


@pytest.mark.parametrize("fields,pid,v1,v2", VECTORS)
def test_rows_from_a_plans_page_id_are_the_same_rows(fields, pid, v1, v2):
    s = PageSigner(SECRET)
    given = s.make_row(Owner(*fields[:4]), fields[4], LENGTH, LIFE, Location(OBJ, OFFSET, WRITTEN),
                       page_id=pid)
    assert given == s.make_row(Owner(*fields[:4]), fields[4], LENGTH, LIFE,
                               Location(OBJ, OFFSET, WRITTEN))
    assert (given["page_id"], given["signature"]) == (pid, v2)
    assert s.make_row(Owner(*fields[:4]), fields[4], LENGTH, LIFE, page_id=pid)["signature"] == v1


def test_the_hmac_from_pads_is_rfc_2104s_and_gives_the_pinned_vectors(monkeypatch):
    """The HMAC from precomputed pads (and a prefix hashed once) is RFC 2104's, whatever
    the key length and with or without OpenSSL (Pyodide has none)."""
    import hmac
    for key in (b"", b"k", b"x" * 32, b"y" * 64, b"z" * 65, bytes(range(200))):
        mac = pages._mac_for(key)
        assert mac(b"message") == hmac.new(key, b"message", hashlib.sha256).digest()
        assert mac(b"") == hmac.new(key, b"", hashlib.sha256).digest()
        for prefix in (b"x" * 70, b"h"):        # 70: the prefix spans a block boundary
            inner, outer = pages._hmac_states(key, prefix)     # as page_ids applies them
            for _ in range(2):                                  # the states are reusable
                h = inner.copy()
                h.update(b"tail")
                o = outer.copy()
                o.update(h.digest())
                assert o.digest() == hmac.new(key, prefix + b"tail", hashlib.sha256).digest()
    monkeypatch.setattr(hmac, "_hashopenssl", None)
    s = PageSigner(SECRET, b"old-secret")
    for fields, pid, v1, v2 in VECTORS:
        assert s.page_id(*fields) == s.page_ids(*fields[:4])(fields[4]) == pid
        assert s.make_row(Owner(*fields[:4]), fields[4], LENGTH, LIFE)["signature"] == v1
        row = s.make_row(Owner(*fields[:4]), fields[4], LENGTH, LIFE, Location(OBJ, OFFSET, WRITTEN))
        assert row["signature"] == v2 and s.verify_row(row) and s.verify_page_id(pid, *fields)
