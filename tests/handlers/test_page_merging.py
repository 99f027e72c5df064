"""A session grown one exchange per turn keeps its pages in few R2 objects (merging,
docs/design.md §5.9): a search reads ≤ 16 objects at every size, each storing turn
still makes exactly one put, and every active page stays retrievable byte for byte."""

import base64
import json

from devkit import roleplay as rp
from multillm_edge.core.pages import PageSigner
from tests.handlers.conftest import KEY, SESSION

BIG = "fake:rp-32k"
SIGNER = PageSigner(rp.SIGNING_SECRET)


def active_rows(edge):
    return edge.sql("SELECT * FROM context_pages WHERE session_id = ?1 AND expires_at > ?2",
                    SESSION, edge.clock)


def body_at(edge, row) -> bytes:
    return edge.bucket.objects[row["r2_key"]][row["r2_offset"]:row["r2_offset"] + row["byte_length"]]


def test_a_growing_session_stays_in_few_objects_and_every_page_retrieves(edge, headers):
    edge.set_model(BIG, 32768, 1024)
    first: dict = {}                  # page_id -> (bytes, object) when first stored
    moved_turns = 0
    for n in range(16, 176):
        puts = edge.bucket.ops["put"]
        r = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(n, model=BIG, size=900))
        assert r.status == 200
        log = edge.logs[-1]
        bodies = log.get("rows_written", 0) - log.get("rows_refreshed", 0)
        assert edge.bucket.ops["put"] - puts == (1 if bodies else 0)
        moved_turns += bool(log.get("pages_moved"))
        rows = active_rows(edge)
        assert len({row["r2_key"] for row in rows}) <= 16          # what a search reads
        for row in rows:
            first.setdefault(row["page_id"], (body_at(edge, row), row["r2_key"]))
        edge.clock += 5
    assert moved_turns >= 30 and len(first) > 150
    # the same request again: nothing new or due, nothing written at all
    puts, before = edge.bucket.ops["put"], edge.sql("SELECT * FROM context_pages ORDER BY page_id")
    assert edge.request("POST", "/v1/chat/completions", headers,
                        rp.chat_body(175, model=BIG, size=900)).status == 200
    assert edge.bucket.ops["put"] == puts and "rows_written" not in edge.logs[-1]
    assert edge.sql("SELECT * FROM context_pages ORDER BY page_id") == before
    rows = active_rows(edge)
    assert sum(row["r2_key"] != first[row["page_id"]][1] for row in rows) > 100   # moved pages
    for row in rows:
        assert SIGNER.verify_row(row)
        got = edge.request("GET", f"/v1/context/pages/{row['page_id']}?roleplay_session_id={SESSION}",
                           {"Authorization": f"Bearer {KEY}"})
        assert got.status == 200, got.body
        body = base64.b64decode(got.json()["body_base64"])
        assert body == first[row["page_id"]][0] and json.loads(body) == got.json()["messages"]
