"""Search and recall cache an exchange's analysis under one key, (its page's SHA-256,
its first item's offset in the page): a key never names two exchanges, so a search
after a recalling turn ranks each exchange by its own words."""

from multillm_edge.core import paging
from multillm_edge.core.pages import PageSigner
from multillm_edge.search import rank
from multillm_edge.search.docs import CACHE, analyze
from multillm_edge.routes import search as search_route
from devkit import roleplay as rp


def test_search_and_recall_key_the_same_exchange_the_same_way():
    CACHE.clear()
    body = rp.chat_body(40, capabilities=["multillm_context_retrieve", "multillm_context_recall"],
                        new_turn="Where is the X-u-0012 lantern that flickers?")
    ids = PageSigner(b"k" * 32).page_ids("roleplay", "p", "s", 1)
    (plan,) = paging.plan_candidates("chat", body, [9000], ids, strip=paging.EDGE_FIELDS, recalling=True)
    recall_keys = set(CACHE.entries)
    assert recall_keys
    rows = [{"sha256": p.sha256, "page_id": p.page_id} for p in plan.pages]
    docs, keys, where = search_route._exchange_docs(rows, [p.items for p in plan.pages])
    by_key = dict(zip(keys, docs))
    for key in recall_keys & set(keys):      # the same key: the same exchange's words
        cached = CACHE.entries[key].text
        assert cached == analyze(by_key[key]).text
    assert recall_keys & set(keys)
    # and a search after that turn quotes what it scored
    for hit in rank("X-u-0012", docs, 3, keys=keys):
        assert "0012" in hit.text
