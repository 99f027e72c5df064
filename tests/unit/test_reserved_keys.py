"""The reserved key format (docs/design.md §2, "Reserved key format"): what counts as a
roleplay-format key in a credential header, as properties over spellings."""

import base64
import binascii
import time

import pytest
from hypothesis import event, given, settings, strategies as st

from multillm_edge.base.http import Incoming
from multillm_edge.service.reserved_keys import carries_roleplay_key, lenient_b64decode, reserved
from tests.support.werkzeug_basic import origin_reads_a_key

URLSAFE = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=60)
# What may stand before a key in a header value: nothing, a scheme, odd spacing, a list.
BEFORE = st.sampled_from(["", "Bearer ", "bearer ", "BEARER\t", "  Bearer   ", "Token ", "Token key=",
                          'Bearer "', "Bearer sk-origin, Bearer ", "Bearer sk-origin,", "x "])
AFTER = st.sampled_from(["", " ", "\t", '"', ", Bearer sk-origin", ";"])


@given(BEFORE, st.sampled_from(["rpk_", "RPK_", "Rpk_", "rPK_"]), URLSAFE, AFTER)
def test_a_key_of_the_format_is_found_in_any_spelling(before, prefix, rest, after):
    assert reserved(before + prefix + rest + after)


@given(st.sampled_from(["", "me", "rpk"]), URLSAFE, st.booleans(), st.booleans())
def test_a_basic_credential_is_decoded(user, rest, in_user, padded):
    pair = f"rpk_{rest}:{user}" if in_user else f"{user}:rpk_{rest}"
    token = base64.b64encode(pair.encode()).decode()
    assert reserved("Basic " + (token if padded else token.rstrip("=")))


@given(BEFORE, URLSAFE.filter(lambda k: "rpk_" not in k.lower()), AFTER)
def test_a_key_without_the_prefix_is_not(before, key, after):
    assert not reserved(before + key + after)


@given(URLSAFE, st.sampled_from(["sk-", "x", "a_", "-", "0"]))
def test_the_prefix_inside_a_key_is_not_its_start(rest, lead):
    assert not reserved(f"Bearer {lead}rpk_{rest}")


def test_only_credential_headers_count():
    def req(*headers):
        return Incoming("GET", "https://edge.test/x", list(headers))
    assert carries_roleplay_key(req(("x-api-key", "rpk_a")))
    assert carries_roleplay_key(req(("authorization", "Bearer sk"), ("authorization", "Bearer rpk_a")))
    assert not carries_roleplay_key(req(("x-roleplay-session-id", "rpk_a"), ("cookie", "k=rpk_a")))


# -- a Basic credential, read as the origin reads it (issue 46) ------------------------
#
# Werkzeug (Flask) reads `Authorization: Basic …` with Python's default base64.b64decode,
# which skips characters outside the alphabet: the guard must see a key wherever the
# origin's decode yields `user:rpk_…` or `rpk_…:…` (tests/support/werkzeug_basic.py).

KEY = "rpk_" + "k7Rw-9_xQ2" * 4 + "abc"
PAIR = st.sampled_from([f"me:{KEY}", f"{KEY}:", f"{KEY}:secret", f"é:{KEY}", f"üser:{KEY}", f"me:{KEY.upper()}"])
# What a client may put inside a token that Python's decoder skips or reads past.
JUNK = st.text(" \t.=,;:!*-_~\x00\x0b\x1f\x7f\x85\xa0éÿ€😀", min_size=1, max_size=3)
SCHEME = st.sampled_from(["Basic ", "basic ", "BASIC ", "bAsIc ", "Basic  ", "Basic\t", " Basic ", "Basic \t "])


@st.composite
def basic_values(draw) -> str:
    """A Basic credential of a key, then mangled: junk inserted anywhere, padding cut,
    the URL-safe alphabet, text after it."""
    token = base64.b64encode(draw(PAIR).encode()).decode()
    if draw(st.booleans()):
        token = token.rstrip("=")
    if draw(st.booleans()):
        token = token.replace("+", "-").replace("/", "_")
    chars = list(token)
    for _ in range(draw(st.integers(0, 6))):
        chars.insert(draw(st.integers(0, len(chars))), draw(JUNK))
    return draw(SCHEME) + "".join(chars) + draw(st.sampled_from(["", " ", "\t", ", Bearer sk-origin", "=", "A"]))


@settings(max_examples=3000)
@given(st.one_of(basic_values(), st.builds(lambda s, t: s + t, SCHEME, st.text(max_size=80))))
def test_the_guard_sees_every_key_the_origin_reads_in_a_basic_credential(value):
    read = origin_reads_a_key(value)
    event(f"origin reads a key: {read}")
    assert not read or reserved(value), value


@settings(max_examples=3000)
@given(st.one_of(st.text(max_size=60), st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=",
                                               max_size=60),
                 st.builds(lambda b: base64.b64encode(b).decode(), st.binary(max_size=40))))
def test_the_decoder_is_pythons_default_and_pads_what_it_refuses(text):
    """Wherever base64.b64decode(…, validate=False) decodes, the same bytes; where it
    refuses the end (padding), every byte of the complete quads still."""
    data = text.encode("ascii", "ignore")
    got = lenient_b64decode(data)
    try:
        assert got == base64.b64decode(data, validate=False)
    except binascii.Error:
        alphabet = bytes(c for c in data if c in ALPHABET)
        if b"=" not in alphabet:
            assert got.startswith(base64.b64decode(alphabet[:len(alphabet) // 4 * 4]))


ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


def spelled(token: str) -> dict:
    half = len(token) // 2
    return {"space_inside": f"Basic {token[:half]} {token[half:]}", "tab_inside": f"Basic {token[:half]}\t{token[half:]}",
            "dot_inside": f"Basic {token[:half]}.{token[half:]}", "leading_equals": f"Basic ={token}"}


@pytest.mark.parametrize("pair", [f"me:{KEY}", f"{KEY}:"])
def test_the_four_spellings_of_issue_46_are_keys_the_origin_reads_and_the_guard_sees(pair):
    for name, value in spelled(base64.b64encode(pair.encode()).decode()).items():
        assert origin_reads_a_key(value), name     # the origin reads the key in each…
        assert reserved(value), name                # …and the guard sees it


def test_a_basic_credential_without_a_key_is_forwarded():
    for value in ["Basic " + base64.b64encode(b"me:sk-origin").decode(), "Basic bWU6 c2st.b3JpZ2lu",
                  "Basic " + base64.b64encode(b"rpk:x").decode(), "Basic " + base64.b64encode(b"me:xrpk_1").decode(),
                  "Basic", "Basic ", "Basic ====", "Basic \x00", "Basic é"]:
        assert not reserved(value), value


def test_many_basics_cost_no_more_than_one_long_value():
    """Each `basic` in a comma-joined list decodes to its comma, and only the first to
    the value's end: 20,000 of them are decoded in a few passes, not 20,000."""
    token = base64.b64encode(f"me:{KEY}".encode()).decode()
    joined, spaced = "Basic eA, " * 20_000 + "Basic " + token, "basic " * 20_000 + token
    started = time.perf_counter()
    assert reserved(joined)                                  # the last of the list
    assert reserved(spaced) or not origin_reads_a_key(spaced)
    assert time.perf_counter() - started < 0.5
