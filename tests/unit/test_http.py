"""Which headers the edge forwards (docs/design.md §7): all but the true hop-by-hop ones."""

import pytest

from multillm_edge.core.config import seconds
from multillm_edge.base.http import forwardable


def test_end_to_end_headers_are_kept_content_length_included():
    headers = [("content-type", "application/json"), ("content-length", "2048"),
               ("authorization", "Bearer k"), ("x-custom", "1"), ("cookie", "a=1")]
    assert forwardable(headers) == headers


@pytest.mark.parametrize("name", ["connection", "keep-alive", "te", "trailer", "transfer-encoding",
                                  "upgrade", "proxy-authorization", "proxy-authenticate",
                                  "proxy-connection", "proxy-anything", "host"])
def test_hop_by_hop_headers_are_dropped(name):
    assert forwardable([(name, "v"), ("x-kept", "1")]) == [("x-kept", "1")]


def test_headers_named_by_connection_are_dropped():
    headers = [("connection", "close, X-Named"), ("x-named", "1"), ("x-kept", "2")]
    assert forwardable(headers) == [("x-kept", "2")]


@pytest.mark.parametrize("value,expected", [
    (None, 120.0), ("", 120.0), ("2", 2.0), (" 2.5 ", 2.5), ("0", 120.0), ("-1", 120.0),
    ("abc", 120.0), ("1e3", 120.0), ("3600", 3600.0), ("3601", 120.0), ("nan", 120.0),
])
def test_upstream_seconds_fall_back_to_the_default(value, expected):
    assert seconds(value, 120.0) == expected
