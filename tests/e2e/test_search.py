"""Search through the local runner (docs/design.md §6.1): Pyodide with the pinned
Snowball stemmer, real local D1 and R2 (ranged reads), pages stored by real paged turns."""

from __future__ import annotations

import pytest

from devkit import roleplay as rp
from devkit.fakes import FakeServer, Reply
from devkit.runner import Edge
from multillm_edge.search import page_texts

CHAT_REPLY = Reply(chunks=[b'{"id":"c1","object":"chat.completion","choices":[{"index":0,'
                           b'"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}'])
MODEL = "fake:rp-small"
NEEDLE = "Ilsabeth promised to guard the silver lanterns while the bridges burned."


@pytest.fixture(scope="module")
def servers():
    with FakeServer(CHAT_REPLY) as provider, FakeServer() as origin:
        yield provider, origin


@pytest.fixture(scope="module")
def edge(servers, tmp_path_factory):
    provider, origin = servers
    with Edge(tmp_path_factory.mktemp("search"), vars=rp.edge_vars(provider.url, origin.url)) as edge:
        rp.set_model(edge, MODEL, 6000, 1000)
        yield edge


def paged_session(edge) -> tuple[rp.Player, list]:
    """Two paged turns (two R2 objects); the needle in an early user message."""
    player = rp.new_player(edge)
    body = rp.chat_body(40, tag="E2E")
    body["messages"][4]["content"] = NEEDLE
    pages = []
    for extra in (0, 6):
        turn = dict(body, messages=body["messages"] + rp.chat_history(extra, tag="MORE")[2:])
        r = edge.client.post("/v1/chat/completions", json=turn, headers=player.headers())
        assert r.status_code == 200, r.text
        pages += r.json()["context_pages"]
    return player, pages


def search(edge, player, body, headers=None):
    return edge.client.post("/v1/context/search", json=body, headers=headers or player.headers())


def test_a_stemmed_query_finds_the_page_verbatim_with_one_read_per_object(edge, servers):
    provider, origin = servers
    player, pages = paged_session(edge)
    rows = edge.sql("SELECT page_id, r2_key FROM context_pages WHERE session_id = ?1", player.session)
    n_sent, n_origin, stats0 = len(provider.received), len(origin.received), edge.stats()
    since = len(edge.logs())
    r = search(edge, player, {"query": "promise to guard a lantern", "limit": 3})
    stats = edge.stats()
    assert r.status_code == 200 and r.headers["cache-control"] == "private, no-store"
    doc = r.json()
    assert doc["pages_searched"] == len(rows) and 0 < len(doc["data"]) <= 3
    top = doc["data"][0]
    assert top["excerpt"] == {"role": "user", "text": NEEDLE}
    assert top["page_id"] in {p["page_id"] for p in pages}
    got = edge.client.get(f"/v1/context/pages/{top['page_id']}",
                          params={"roleplay_session_id": player.session}, headers=player.headers())
    assert got.json()["sha256"] == top["sha256"]
    assert ("user", NEEDLE) in page_texts(got.json()["messages"])
    # one D1 statement, one (ranged) get per object, nothing dispatched or forwarded
    assert stats["d1_statements"] - stats0["d1_statements"] == 1
    assert stats["r2_gets"] - stats0["r2_gets"] == len({r["r2_key"] for r in rows}) >= 2
    assert (len(provider.received), len(origin.received)) == (n_sent, n_origin)
    log = edge.wait_for_log(lambda x: x.get("route") == "search_pages", since=since)[-1]
    assert log["pages"] == len(rows) and log["cpu_rank_ms"] >= 0
    text = repr(edge.logs())
    assert "Ilsabeth" not in text and "lantern" not in text and top["page_id"] not in text


def test_a_corrupted_object_is_503_and_no_header_goes_to_the_origin(edge, servers):
    _, origin = servers
    player, _ = paged_session(edge)
    [row] = edge.sql("SELECT r2_key FROM context_pages WHERE session_id = ?1 LIMIT 1", player.session)
    data = bytearray(edge.r2_get(row["r2_key"]))
    data[10] ^= 1
    edge.r2_put(row["r2_key"], bytes(data))
    r = search(edge, player, {"query": "Ilsabeth lantern"})
    assert r.status_code == 503 and r.json()["error"]["code"] == "context_page_corrupted"
    assert b"Ilsabeth" not in r.content
    n = len(origin.received)
    headers = {"Authorization": player.headers()["Authorization"]}
    r = edge.client.post("/v1/context/search", json={"query": "x"}, headers=headers)
    # without the header, a roleplay key is told to send it, never forwarded (§2)
    assert (r.status_code, r.json()["error"]["code"]) == (400, "roleplay_session_required")
    assert len(origin.received) == n
    r = edge.client.post("/v1/context/search", json={"query": "x"}, headers={"Authorization": "Bearer sk-origin"})
    assert len(origin.received) == n + 1 and origin.received[-1].path == "/v1/context/search"
