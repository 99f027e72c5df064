import base64
import hashlib
import json

import pytest
from hypothesis import given, strategies as st

from multillm_edge.core import pages
from multillm_edge.core.pages import Lifetime, Location, Owner, PageSigner, canonical_bytes, is_well_formed_page_id, r2_key, sha256_hex

SHA = hashlib.sha256(b"x").hexdigest()


def _row(signer, **over):
    row = {"authority": "roleplay", "principal": "alice", "session_id": "rps_1",
           "policy_revision": 3, "sha256": SHA, "byte_length": 1234,
           "created_at": 100, "expires_at": 3700}
    row.update(over)
    pid = signer.page_id(row["authority"], row["principal"], row["session_id"],
                         row["policy_revision"], row["sha256"])
    row.update(page_id=pid, r2_key=r2_key(pid))
    row["signature"] = signer.row_signature(row)
    return row


def test_canonical_bytes_contract():
    items = [{"role": "user", "content": "héllo \u2028 \"q\"  spaces", "x": [1, 2.5, None, True]}]
    b = canonical_bytes(items)
    assert b == json.dumps(items, ensure_ascii=False, separators=(",", ":")).encode()
    assert json.loads(b) == items
    assert "é".encode() in b
    assert sha256_hex(b) == hashlib.sha256(b).hexdigest()


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda c: st.lists(c) | st.dictionaries(st.text(), c), max_leaves=20))
def test_canonical_bytes_roundtrip(items):
    try:
        b = canonical_bytes(items)
    except UnicodeEncodeError:  # lone surrogates: rejected upstream at parse
        return
    assert json.loads(b) == items


def test_r2_key():
    assert r2_key("cp_abc") == "context-pages/cp_abc"


def test_page_id_shape_and_determinism():
    s = PageSigner(b"secret")
    pid = s.page_id("roleplay", "alice", "rps_1", 1, SHA)
    assert pid.startswith("cp_") and len(pid) == pages.PAGE_ID_LENGTH == 46
    assert is_well_formed_page_id(pid)
    assert pid == s.page_id("roleplay", "alice", "rps_1", 1, SHA)
    assert PageSigner("secret").page_id("roleplay", "alice", "rps_1", 1, SHA) == pid
    digest = base64.urlsafe_b64decode(pid[3:] + "=")
    assert len(digest) == 32


@pytest.mark.parametrize("field,value", [
    ("authority", "managed"), ("principal", "bob"), ("session_id", "rps_2"),
    ("revision", 2), ("sha256", hashlib.sha256(b"y").hexdigest()),
])
def test_page_id_binds_every_field(field, value):
    s = PageSigner(b"secret")
    args = {"authority": "roleplay", "principal": "alice", "session_id": "rps_1",
            "revision": 1, "sha256": SHA}
    pid = s.page_id(**args)
    changed = dict(args, **{field: value})
    assert s.page_id(**changed) != pid
    assert s.verify_page_id(pid, **args)
    assert not s.verify_page_id(pid, **changed)


def test_no_concatenation_ambiguity():
    s = PageSigner(b"secret")
    a = s.page_id("roleplay", "ab", "c", 1, SHA)
    b = s.page_id("roleplay", "a", "bc", 1, SHA)
    c = s.page_id("roleplay", "a\",\"b", "c", 1, SHA)
    assert len({a, b, c}) == 3


def test_authority_is_signed_roleplay_handle_not_managed():
    s = PageSigner(b"secret")
    pid = s.page_id("roleplay", "alice", "rps_1", 1, SHA)
    assert not s.verify_page_id(pid, "managed", "alice", "rps_1", 1, SHA)


def test_wrong_secret_and_rotation():
    old = PageSigner(b"old")
    pid = old.page_id("roleplay", "alice", "rps_1", 1, SHA)
    row = _row(old)
    assert not PageSigner(b"new").verify_page_id(pid, "roleplay", "alice", "rps_1", 1, SHA)
    assert not PageSigner(b"new").verify_row(row)
    rotated = PageSigner(b"new", previous=b"old")
    assert rotated.verify_page_id(pid, "roleplay", "alice", "rps_1", 1, SHA)
    assert rotated.verify_row(row)
    # new ids are made with the current secret
    assert rotated.page_id("roleplay", "alice", "rps_1", 1, SHA) == \
        PageSigner(b"new").page_id("roleplay", "alice", "rps_1", 1, SHA) != pid
    assert "new" not in repr(rotated) and "old" not in repr(rotated)


def test_domain_separation_id_vs_row_and_raw_secret():
    import hmac as _hmac
    s = PageSigner(b"secret")
    pid = s.page_id("roleplay", "alice", "rps_1", 1, SHA)
    raw = _hmac.new(b"secret", json.dumps(["v1", "roleplay", "alice", "rps_1", 1, SHA],
                                          separators=(",", ":")).encode(), hashlib.sha256).digest()
    assert pid[3:] != base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    assert s._id_keys[0] != s._row_keys[0]


def test_row_signature_covers_fields():
    s = PageSigner(b"secret")
    row = _row(s)
    assert s.verify_row(row)
    for field, value in [("expires_at", 999999), ("byte_length", 1), ("r2_key", "context-pages/x"),
                         ("principal", "bob"), ("session_id", "rps_2"), ("policy_revision", 4),
                         ("sha256", "0" * 64), ("authority", "managed")]:
        assert not s.verify_row(dict(row, **{field: value})), field
    other = _row(s, principal="bob")
    assert not s.verify_row(dict(row, page_id=other["page_id"]))
    # created_at is informational, unsigned
    assert s.verify_row(dict(row, created_at=5))
    # D1 may return integral floats
    assert s.verify_row(dict(row, expires_at=float(row["expires_at"])))


@pytest.mark.parametrize("mutate", [
    lambda r: r.pop("signature"), lambda r: r.pop("expires_at"),
    lambda r: r.__setitem__("signature", None), lambda r: r.__setitem__("signature", "A" * 43),
    lambda r: r.__setitem__("signature", r["signature"] + "="),
    lambda r: r.__setitem__("expires_at", True), lambda r: r.__setitem__("expires_at", "3700"),
    lambda r: r.__setitem__("page_id", "cp_short"),
])
def test_verify_row_malformed(mutate):
    s = PageSigner(b"secret")
    row = _row(s)
    mutate(row)
    assert s.verify_row(row) is False


def test_well_formed_page_id_strict():
    s = PageSigner(b"k")
    pid = s.page_id("roleplay", "a", "b", 0, SHA)
    assert is_well_formed_page_id(pid)
    bad = [None, 5, b"cp_", "", pid + "A", pid[:-1], "CP_" + pid[3:], "cp-" + pid[3:],
           pid[:10] + "+" + pid[11:], pid[:10] + "/" + pid[11:], pid[:-1] + "=",
           pid[:-1] + "B",  # non-canonical final char (low bits set)
           pid[:10] + "\u0430" + pid[11:],  # Cyrillic look-alike
           pid + "\n", " " + pid[1:], "cp_" + "A" * 42 + "\uff21"]
    for b in bad:
        assert not is_well_formed_page_id(b), repr(b)
        assert not s.verify_page_id(b, "roleplay", "a", "b", 0, SHA)


def test_invalid_inputs():
    with pytest.raises(ValueError):
        PageSigner(b"")
    s = PageSigner(b"k")
    with pytest.raises(ValueError):
        s.page_id("other", "a", "b", 0, SHA)
    with pytest.raises(ValueError):
        s.page_id("roleplay", "a", "b", 0, "ABC")
    with pytest.raises(TypeError):
        s.page_id("roleplay", "a", "b", True, SHA)
    assert not s.verify_page_id(s.page_id("roleplay", "a", "b", 0, SHA), "roleplay", "a", "b", "0", SHA)
    # unicode principals are fine, including lone surrogates
    assert s.verify_page_id(s.page_id("roleplay", "ünï\ud800", "b", 0, SHA), "roleplay", "ünï\ud800", "b", 0, SHA)


def test_make_row():
    s = PageSigner(b"k")
    row = s.make_row(Owner("roleplay", "alice", "rps_1", 2), SHA, 77, Lifetime(1000, 3600))
    assert row["page_id"] == s.page_id("roleplay", "alice", "rps_1", 2, SHA)
    assert row["r2_key"] == "context-pages/" + row["page_id"] and row["r2_offset"] == 0
    assert (row["created_at"], row["expires_at"], row["byte_length"]) == (1000, 4600, 77)
    assert row["body_written_at"] == 1000
    assert s.verify_row(row)
    assert set(row) == {"page_id", "authority", "principal", "session_id", "policy_revision",
                        "sha256", "byte_length", "r2_key", "r2_offset", "body_written_at",
                        "created_at", "expires_at", "signature"}
    shared = s.make_row(Owner("roleplay", "alice", "rps_1", 2), SHA, 77, Lifetime(1000, 3600),
                        Location(OBJ, 123, 900))
    assert (shared["r2_key"], shared["r2_offset"], shared["body_written_at"]) == (OBJ, 123, 900)
    assert s.verify_row(shared) and shared["signature"] != row["signature"]


# -- row signatures: v1 (legacy per-page object) and v2 (range of a shared object) ------

OBJ = "context-pages/obj_" + "A" * 42 + "E"
VECTOR_SECRET = b"vector-secret"
# A row exactly as the edge wrote it before shared objects (no r2_offset/body_written_at
# columns), with the signature that code produced: it must keep verifying.
V1_ROW = {"page_id": "cp_CfQiVdY80yYFDbdXhp-XWbnulKfUZGdn1wjCgLI7Khs", "authority": "roleplay",
          "principal": "alice", "session_id": "rps_1", "policy_revision": 3, "sha256": "ab" * 32,
          "byte_length": 1234, "r2_key": "context-pages/cp_CfQiVdY80yYFDbdXhp-XWbnulKfUZGdn1wjCgLI7Khs",
          "created_at": 1700000000, "expires_at": 1700003600,
          "signature": "3-ZECY898OCa7WxXbZbIo3qi9XtFECHU8dH8CLYecRU"}
V2_SIGNATURE = "pr_wCFKBaPenpZLESJUmE1ZzCKiiu3K6Vaz2MZwb840"


def test_v1_vector_still_made_and_verified():
    s = PageSigner(VECTOR_SECRET)
    made = s.make_row(Owner("roleplay", "alice", "rps_1", 3), "ab" * 32, 1234, Lifetime(1_700_000_000, 3600))
    assert made["page_id"] == V1_ROW["page_id"] and made["signature"] == V1_ROW["signature"]
    assert s.verify_row(V1_ROW)
    # As D1 returns it after migration 0002: the added columns at their defaults.
    assert s.verify_row(dict(V1_ROW, r2_offset=0, body_written_at=0))
    assert not s.verify_row(dict(V1_ROW, expires_at=V1_ROW["expires_at"] + 1))


def test_v2_vector():
    s = PageSigner(VECTOR_SECRET)
    row = s.make_row(Owner("roleplay", "alice", "rps_1", 3), "ab" * 32, 1234, Lifetime(1_700_000_000, 3600),
                     Location(OBJ, 5678, 1_699_990_000))
    assert row["signature"] == V2_SIGNATURE
    assert s.verify_row(row)
    assert s.verify_row(dict(row, body_written_at=1, created_at=2))   # informational, unsigned


def test_v2_signature_covers_key_offset_and_length():
    s = PageSigner(b"secret")
    row = s.make_row(Owner("roleplay", "alice", "rps_1", 3), SHA, 1234, Lifetime(100, 3600), Location(OBJ, 40, 100))
    for field, value in [("r2_offset", 41), ("r2_offset", 0), ("byte_length", 1233),
                         ("r2_key", OBJ[:-1] + "I"), ("expires_at", row["expires_at"] + 60)]:
        assert not s.verify_row(dict(row, **{field: value})), field
    # A v2 row moved to the legacy location is checked as v1, which it never signed.
    assert not s.verify_row(dict(row, r2_key=r2_key(row["page_id"]), r2_offset=0))
    # A v1 row given an offset is checked as v2, which it never signed.
    v1 = s.make_row(Owner("roleplay", "alice", "rps_1", 3), SHA, 1234, Lifetime(100, 3600))
    assert s.verify_row(v1) and not s.verify_row(dict(v1, r2_offset=7))
    for bad in (True, "40", -1.5, None):
        assert not s.verify_row(dict(row, r2_offset=bad)), bad


def test_object_key_is_derived_from_the_pages_in_order():
    a, b = "cp_" + "a" * 42 + "A", "cp_" + "b" * 42 + "A"
    k = pages.object_key([a, b])
    assert k == pages.object_key([a, b]) and k.startswith("context-pages/obj_")
    assert len({k, pages.object_key([b, a]), pages.object_key([a]), pages.object_key([b])}) == 4
    assert pages.is_valid_location({"page_id": a, "r2_key": k, "r2_offset": 0})


def test_pack_concatenates_bodies_at_their_offsets():
    class P:
        def __init__(self, pid, body):
            self.page_id, self.body = pid, body
    ps = [P("cp_" + c * 42 + "A", body) for c, body in (("a", b"[1]"), ("b", "[\"é\"]".encode()), ("c", b"[]"))]
    key, data, offsets = pages.pack(ps)
    assert key == pages.object_key([p.page_id for p in ps])
    for p in ps:
        assert data[offsets[p.page_id]:offsets[p.page_id] + len(p.body)] == p.body
    assert len(data) == sum(len(p.body) for p in ps) and offsets[ps[0].page_id] == 0


def test_valid_locations():
    pid = "cp_" + "a" * 42 + "A"
    ok = [{"page_id": pid, "r2_key": r2_key(pid), "r2_offset": 0},
          {"page_id": pid, "r2_key": r2_key(pid)},
          {"page_id": pid, "r2_key": OBJ, "r2_offset": 0},
          {"page_id": pid, "r2_key": OBJ, "r2_offset": 99}]
    bad = [{"page_id": pid, "r2_key": r2_key(pid), "r2_offset": 5},          # legacy objects are whole
           {"page_id": pid, "r2_key": r2_key("cp_" + "b" * 42 + "A"), "r2_offset": 0},
           {"page_id": pid, "r2_key": "context-pages/obj_x", "r2_offset": 0},
           {"page_id": pid, "r2_key": "media/" + OBJ, "r2_offset": 0},
           {"page_id": pid, "r2_key": OBJ, "r2_offset": -1},
           {"page_id": pid, "r2_key": OBJ, "r2_offset": True},
           {"page_id": pid, "r2_key": None, "r2_offset": 0}]
    assert all(pages.is_valid_location(r) for r in ok)
    assert not any(pages.is_valid_location(r) for r in bad)


def test_the_signers_page_ids_have_the_length_they_declare():
    """The plan sizes its markers from `page_ids(...).length` before making any page."""
    from multillm_edge.core import paging
    ids = PageSigner(b"s" * 32, b"old").page_ids("roleplay", "a3" * 32, "rps_len", 4)
    assert ids.length == pages.PAGE_ID_LENGTH
    for i in range(500):
        pid = ids(hashlib.sha256(str(i).encode()).hexdigest())
        assert len(pid) == ids.length and paging._id_len(pid) == ids.length


@given(st.sampled_from(["old", "new", "other"]), st.sampled_from([SHA, "A" * 64, "a" * 63, 5, None]),
       st.sampled_from(["rps_1", "rps_2"]), st.booleans())
def test_page_id_verifier_agrees_with_verify_page_id(secret, sha, session, mangle):
    signer = PageSigner(b"new", previous=b"old")
    pid = PageSigner(secret.encode()).page_id("roleplay", "alice", "rps_1", 1, SHA)
    if mangle:
        pid = pid[:-2] + ("AA" if pid[-2:] != "AA" else "BA")
    verify = signer.page_id_verifier("roleplay", "alice", session, 1)
    assert verify(pid, sha) == signer.verify_page_id(pid, "roleplay", "alice", session, 1, sha)
    assert verify(pid, SHA) == (secret != "other" and session == "rps_1" and not mangle)
