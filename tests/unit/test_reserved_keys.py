"""The reserved key format (docs/design.md §2, "Reserved key format"): what counts as a
roleplay-format key in a credential header, as properties over spellings."""

import base64

from hypothesis import given, strategies as st

from multillm_edge.base.http import Incoming
from multillm_edge.service.reserved_keys import carries_roleplay_key, reserved

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
