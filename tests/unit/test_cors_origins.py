"""CORS_ALLOWED_ORIGINS parsing (base/cors.py): strict scheme://host[:port], as
browsers serialize an Origin; invalid entries ignored with one warning per isolate."""

import pytest

from multillm_edge.base import cors


@pytest.mark.parametrize("entry,origin", [
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("  https://st.example.com  ", "https://st.example.com"),
    ("HTTPS://ST.Example.COM", "https://st.example.com"),
    ("https://st.example.com:443", "https://st.example.com"),     # default ports left out
    ("http://localhost:80", "http://localhost"),
    ("http://localhost:8080", "http://localhost:8080"),
    ("http://[::1]:8000", "http://[::1]:8000"),
    ("https://xn--nxasmq6b.example", "https://xn--nxasmq6b.example"),
    ("http://a-b.c-d.example:65535", "http://a-b.c-d.example:65535"),
])
def test_valid_entries(entry, origin):
    assert cors.parse_origin(entry) == origin


@pytest.mark.parametrize("entry", [
    "*", "null", "http://*.example.com", "https://st.example.com/", "https://st.example.com/path",
    "https://st.example.com?x=1", "https://st.example.com#f", "https://user@st.example.com",
    "ftp://st.example.com", "chrome-extension://abc", "st.example.com", "//st.example.com",
    "https://", "https://st.example.com:", "https://st.example.com:0", "https://st.example.com:65536",
    "https://st.example.com:0443", "https://-bad.example", "https://bad-.example", "https://a..b",
    "https://st.example.com:80:80", "https://ünïcode.example", "https://st example.com",
    "https://" + "a" * 64 + ".example", "https://" + "a." * 200 + "example", "http://[zz]:1", "",
])
def test_invalid_entries(entry):
    assert cors.parse_origin(entry) is None


def test_a_list_keeps_the_valid_entries_and_says_whether_any_was_invalid():
    assert cors.parse_origins(None) == (frozenset(), False)
    assert cors.parse_origins("") == (frozenset(), False)
    assert cors.parse_origins(" , ,") == (frozenset(), False)     # blank entries: nothing
    assert cors.parse_origins("http://a.test,https://b.test:8443,") == (
        frozenset({"http://a.test", "https://b.test:8443"}), False)
    assert cors.parse_origins("http://a.test, *, https://b.test/x") == (frozenset({"http://a.test"}), True)


def test_parsed_once_per_text_and_warned_once_per_isolate(monkeypatch):
    monkeypatch.setattr(cors, "_parsed", (None, frozenset()))
    monkeypatch.setattr(cors, "_warned", False)
    calls, warnings = [], []
    real = cors.parse_origins
    monkeypatch.setattr(cors, "parse_origins", lambda text: calls.append(text) or real(text))
    for _ in range(3):
        assert cors.allowed_origins("http://a.test, *", warnings.append) == frozenset({"http://a.test"})
    assert cors.allowed_origins("https://secret-host.example/x", warnings.append) == frozenset()
    assert cors.allowed_origins(None, warnings.append) == frozenset()
    assert len(calls) == 3                       # each distinct text parsed once
    assert len(warnings) == 1 and "CORS_ALLOWED_ORIGINS" in warnings[0]
    assert "a.test" not in warnings[0] and "*," not in warnings[0]
