"""POST /v1/context/search in-process (docs/design.md §6.1): the authority of retrieval,
every row checked before it is ranked, every body checked before it is quoted."""

import json
from types import SimpleNamespace

import pytest

from devkit import roleplay as rp
from multillm_edge.core.pages import ROLEPLAY, PageSigner, canonical_bytes, pack, r2_key, sha256_hex
from multillm_edge.search import page_texts
from tests.handlers.conftest import KEY, SESSION
from tests.handlers.test_roundtrip import EXPECTED_404, retrieve

PRINCIPAL = "p_handlers"
SIGNER = PageSigner(rp.SIGNING_SECRET)
PATH = "/v1/context/search"


def search(edge, body, headers=None, key=KEY, session=SESSION):
    h = {"Authorization": f"Bearer {key}", "X-Roleplay-Session-ID": session} if headers is None else headers
    return edge.request("POST", PATH, h, body)


def exchange(user: str, assistant: str) -> list:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def row_for(body: bytes, key: str, offset: int, created: int, session=SESSION, revision=1,
            principal=PRINCIPAL, expires=None, **override) -> dict:
    sha = sha256_hex(body)
    row = {"page_id": SIGNER.page_id(ROLEPLAY, principal, session, revision, sha),
           "authority": ROLEPLAY, "principal": principal, "session_id": session,
           "policy_revision": revision, "sha256": sha, "byte_length": len(body), "r2_key": key,
           "r2_offset": offset, "body_written_at": created, "created_at": created,
           "expires_at": expires or created + 3600}
    row.update(override)
    row["signature"] = SIGNER.row_signature(row)
    return row


def insert(edge, row: dict) -> None:
    cols = list(row)
    edge.sql(f"INSERT INTO context_pages ({', '.join(cols)}) VALUES "
             f"({', '.join(f'?{i + 1}' for i in range(len(cols)))})", *row.values())
    edge.conn.commit()


def store_object(edge, pages: list, created=None, **override) -> list:
    """One shared object holding `pages` (lists of items), its rows signed: the rows."""
    created = edge.clock if created is None else created
    bodies = [canonical_bytes(items) for items in pages]
    objs = [SimpleNamespace(page_id=SIGNER.page_id(ROLEPLAY, PRINCIPAL, SESSION, 1, sha256_hex(b)), body=b)
            for b in bodies]
    key, data, offsets = pack(objs)
    edge.bucket.objects[key] = data
    rows = [row_for(o.body, key, offsets[o.page_id], created, **override) for o in objs]
    for row in rows:
        insert(edge, row)
    return rows


def quotes_verbatim(edge, hit) -> bool:
    """The excerpt (ellipses aside) is a substring of one message text of its page, as
    retrieval serves the page."""
    page = retrieve(edge, hit["page_id"]).json()["messages"]
    text = hit["excerpt"]["text"].strip("\u2026")
    return any(text in t and role == hit["excerpt"]["role"] for role, t in page_texts(page))


FILLER = [exchange(f"We walk the road, day {i}. The weather holds.", f"*The road goes on, day {i}.*")
          for i in range(8)]
NEEDLE = exchange("Ilsabeth promises to guard the silver lantern at the bridge.",
                  "*Ilsabeth kneels at the bridge, the silver lantern in her hands.* \"I swear it.\"")


@pytest.fixture
def stored(edge):
    return store_object(edge, FILLER[:4] + [NEEDLE] + FILLER[4:])


# -- 200 ----------------------------------------------------------------------------

def test_the_needle_page_is_found_and_quoted_verbatim(edge, stored):
    sent = len(edge.sent)
    r = search(edge, {"query": "the lantern Ilsabeth guarded"})
    assert r.status == 200 and r.header("cache-control") == "private, no-store"
    doc = r.json()
    assert doc["object"] == "list" and doc["pages_searched"] == len(stored)
    top = doc["data"][0]
    needle_row = stored[4]
    assert (top["page_id"], top["sha256"], top["expires_at"]) == \
        (needle_row["page_id"], needle_row["sha256"], needle_row["expires_at"])
    assert set(top) == {"page_id", "sha256", "expires_at", "score", "exchange", "excerpt"}
    assert top["exchange"] == 1                  # a page of one exchange
    assert isinstance(top["score"], float) and top["score"] > 0
    assert "Ilsabeth" in top["excerpt"]["text"] and len(top["excerpt"]["text"]) <= 400
    assert edge.bucket.ops["get"] == 1          # one object, one get
    assert len(edge.sent) == sent              # no provider, no origin
    assert all(quotes_verbatim(edge, h) for h in doc["data"])


def test_a_paged_turn_is_searchable(edge, headers):
    r = edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(30, tag="PT"))
    pages = r.json()["context_pages"]
    doc = search(edge, {"query": "PT-u-0003", "limit": 10}).json()
    assert doc["pages_searched"] == len(pages) and doc["data"]
    assert {h["page_id"] for h in doc["data"]} <= {p["page_id"] for p in pages}
    assert all(quotes_verbatim(edge, h) for h in doc["data"])


def test_limit(edge, stored):
    for limit, most in ((1, 1), (None, 5), (10, 9)):
        body = {"query": "road day weather lantern"} | ({} if limit is None else {"limit": limit})
        data = search(edge, body).json()["data"]
        assert len(data) == most
    assert len(search(edge, {"query": "road", "limit": None}).json()["data"]) == 5


def test_no_match_and_no_pages(edge):
    doc = search(edge, {"query": "dragon"}).json()
    assert doc == {"object": "list", "data": [], "pages_searched": 0, "exchanges_searched": 0}
    store_object(edge, FILLER)
    assert search(edge, {"query": "dragon"}).json() == {"object": "list", "data": [], "pages_searched": 8,
                                                        "exchanges_searched": 8}


def test_ties_break_newest_first(edge):
    # each griffin between two fillers of equal length: equal windows, equal scores
    old = store_object(edge, [FILLER[0] + exchange("A griffin, one.", "Noted.") + FILLER[1]], created=edge.clock - 20)
    new = store_object(edge, [FILLER[4] + exchange("A griffin, two.", "Noted.") + FILLER[5]], created=edge.clock - 10)
    mid = store_object(edge, [FILLER[2] + exchange("A griffin, six.", "Noted.") + FILLER[3]], created=edge.clock - 15)
    data = search(edge, {"query": "griffin"}).json()["data"]
    assert len({h["score"] for h in data}) == 1 and {h["exchange"] for h in data} == {2}
    assert [h["page_id"] for h in data] == [r[0]["page_id"] for r in (new, mid, old)]


def test_the_hit_is_an_exchange_and_one_stored_twice_is_answered_once(edge):
    # Distinct exchanges quoting the same message are distinct hits; the same exchange
    # in two pages is one, named by the newest page holding it.
    old = store_object(edge, [exchange("A griffin here.", "Noted, one.")], created=edge.clock - 20)
    new = store_object(edge, [exchange("A griffin here.", "Noted, two.")], created=edge.clock - 10)
    again = store_object(edge, [FILLER[0] + exchange("A griffin here.", "Noted, one.")], created=edge.clock - 5)
    other = store_object(edge, [exchange("B griffin here.", "Noted, six.")], created=edge.clock - 30)
    doc = search(edge, {"query": "griffin"}).json()
    assert doc["pages_searched"] == 4 and doc["exchanges_searched"] == 4     # 3 + a filler
    assert sorted((h["page_id"], h["exchange"]) for h in doc["data"]) == sorted([
        (again[0]["page_id"], 2), (new[0]["page_id"], 1), (other[0]["page_id"], 1)])
    assert old[0]["page_id"] not in json.dumps(doc)


def test_several_exchanges_of_one_page_are_hits(edge):
    [row] = store_object(edge, [FILLER[0] + exchange("A griffin here.", "ok") + FILLER[1]
                                + exchange("Two griffin there.", "ok") + FILLER[2]])
    data = search(edge, {"query": "griffin"}).json()["data"]
    assert sorted((h["page_id"], h["exchange"]) for h in data) == [(row["page_id"], 2), (row["page_id"], 4)]


def test_a_block_page_and_the_page_of_its_exchange_are_quoted_once(edge):
    single = store_object(edge, [NEEDLE], created=edge.clock - 100)
    block = store_object(edge, [FILLER[0] + NEEDLE + FILLER[1]])
    data = search(edge, {"query": "Ilsabeth silver lantern bridge", "limit": 10}).json()["data"]
    texts = [h["excerpt"]["text"] for h in data]
    assert len(texts) == len(set(texts))
    assert {h["page_id"] for h in data} <= {single[0]["page_id"], block[0]["page_id"]}


def test_a_legacy_per_page_object_is_read_whole(edge):
    body = canonical_bytes(NEEDLE)
    pid = SIGNER.page_id(ROLEPLAY, PRINCIPAL, SESSION, 1, sha256_hex(body))
    edge.bucket.objects[r2_key(pid)] = body
    insert(edge, row_for(body, r2_key(pid), 0, edge.clock))
    store_object(edge, FILLER)
    data = search(edge, {"query": "Ilsabeth"}).json()["data"]
    assert [h["page_id"] for h in data] == [pid]
    assert edge.bucket.ops["get"] == 2


def test_each_object_is_read_once_with_one_ranged_get(edge):
    for i in range(8):
        store_object(edge, [FILLER[i], exchange(f"Tale {i} of the bridge.", "ok")], created=edge.clock - i)
    gets = []
    real_get = edge.bucket.get

    async def get(key, offset=None, length=None):
        gets.append((key, offset, length))
        return await real_get(key, offset, length)
    edge.bucket.get = get
    doc = search(edge, {"query": "bridge tale", "limit": 10}).json()
    assert doc["pages_searched"] == 16 and len(doc["data"]) == 8
    assert len(gets) == 8 and len({k for k, _, _ in gets}) == 8
    assert all(o == 0 and n == len(edge.bucket.objects[k]) for k, o, n in gets)


def test_at_most_six_gets_at_a_time(edge):
    import asyncio
    for i in range(8):
        store_object(edge, [exchange(f"Tale {i} of the bridge.", "ok")], created=edge.clock - i)
    flight, most = [0], [0]
    real_get = edge.bucket.get

    async def get(key, offset=None, length=None):
        flight[0] += 1
        most[0] = max(most[0], flight[0])
        await asyncio.sleep(0)
        flight[0] -= 1
        return await real_get(key, offset, length)
    edge.bucket.get = get
    assert len(search(edge, {"query": "bridge"}).json()["data"]) == 5
    assert most[0] == 6


def test_one_d1_statement(edge, stored):
    calls = []
    for name in ("first", "all", "run"):
        real = getattr(edge.executor, name)

        async def counted(sql, params, _real=real):
            calls.append(sql)
            return await _real(sql, params)
        setattr(edge.executor, name, counted)
    assert search(edge, {"query": "lantern"}).status == 200
    assert len(calls) == 1


# -- rows that do not pass retrieval's checks are not ranked ---------------------------

def test_forged_and_foreign_rows_are_never_quoted(edge, stored):
    def forged(i, **override):
        body = canonical_bytes([exchange(f"The forged zeppelin secret {i}.", "zeppelin")])
        key = "context-pages/obj_" + "BCDEFG"[i] * 43
        edge.bucket.objects[key] = body
        return row_for(body, override.pop("r2_key", key), 0, edge.clock, **override)
    rows = [dict(forged(0), signature="A" * 43),                     # row signature
            forged(1, session="rps_elsewhere", session_id=SESSION),  # page id of another session
            forged(2, revision=0, policy_revision=1),                # page id of another revision
            forged(3, r2_key="elsewhere/x")]                         # a location the edge never writes
    for row in rows:
        insert(edge, row)
    # a row of another principal's session, and an expired one of this session
    edge.seed_player("p_other", "rpk_other", "rps_other")
    insert(edge, forged(4, session="rps_other", principal="p_other"))
    expired = forged(5)
    expired.update(expires_at=edge.clock)
    expired["signature"] = SIGNER.row_signature(expired)
    insert(edge, expired)
    doc = search(edge, {"query": "zeppelin"}).json()
    assert doc == {"object": "list", "data": [], "pages_searched": len(stored),
                   "exchanges_searched": len(stored)}
    assert "zeppelin" not in json.dumps(edge.logs)
    assert edge.logs[-1]["rows_left_out"] == 4


def test_a_corrupted_body_is_503_and_nothing_quoted(edge, stored):
    [key] = {r["r2_key"] for r in stored}
    data = bytearray(edge.bucket.objects[key])
    at = stored[2]["r2_offset"] + 5
    data[at] = ord("X") if data[at] != ord("X") else ord("Y")
    edge.bucket.objects[key] = bytes(data)
    r = search(edge, {"query": "lantern"})
    assert r.status == 503 and r.json()["error"]["code"] == "context_page_corrupted"
    assert b"lantern" not in r.body and b"Ilsabeth" not in r.body


def test_a_missing_or_short_object_is_503(edge, stored):
    [key] = {r["r2_key"] for r in stored}
    edge.bucket.objects[key] = edge.bucket.objects[key][:-1]
    assert search(edge, {"query": "lantern"}).json()["error"]["code"] == "context_page_corrupted"
    del edge.bucket.objects[key]
    assert search(edge, {"query": "lantern"}).json()["error"]["code"] == "context_page_corrupted"


def test_an_unparsable_body_with_a_matching_row_is_503(edge):
    body = b"[not json"
    key = "context-pages/obj_" + "Q" * 43
    edge.bucket.objects[key] = body
    insert(edge, row_for(body, key, 0, edge.clock))
    r = search(edge, {"query": "json"})
    assert (r.status, r.json()["error"]["code"]) == (503, "context_page_corrupted")


def test_r2_failure_is_503(edge, stored):
    edge.bucket.faults.add("get")
    r = search(edge, {"query": "lantern"})
    assert (r.status, r.json()["error"]["code"]) == (503, "storage_failed")


# -- statuses, in retrieval's order ---------------------------------------------------

def test_401_without_or_with_a_bad_key(edge, stored):
    r = search(edge, {"query": "x"}, headers={"X-Roleplay-Session-ID": SESSION})
    assert r.status == 401
    assert search(edge, {"query": "x"}, key="rpk_wrong").status == 401


def test_400_empty_session_header(edge):
    r = search(edge, {"query": "x"}, session="  ")
    assert (r.status, r.json()["error"]["code"]) == (400, "invalid_request")


@pytest.mark.parametrize("body, param", [
    ({}, "query"), ({"query": 5}, "query"), ({"query": ""}, "query"), ({"query": " \n\t"}, "query"),
    ({"query": "x" * 1001}, "query"), ({"query": ["x"]}, "query"), ({"query": None}, "query"),
    ('{"query": "a\\ud800"}', "query"),
    ({"query": "x", "limit": 0}, "limit"), ({"query": "x", "limit": 11}, "limit"),
    ({"query": "x", "limit": True}, "limit"), ({"query": "x", "limit": 5.0}, "limit"),
    ({"query": "x", "limit": "5"}, "limit"), ({"query": "x", "limit": [5]}, "limit"),
])
def test_400_names_the_field(edge, stored, body, param):
    r = search(edge, body)
    assert r.status == 400 and r.json()["error"]["param"] == param
    assert len(edge.sent) == 0


@pytest.mark.parametrize("raw", [b"", b"[]", b'"q"', b"{", b'{"query": NaN}', b"\xff",
                                 b"[" * 300 + b"]" * 300, b'{"query": "x", "limit": 1e999}'])
def test_400_not_a_json_object(edge, raw):
    r = search(edge, raw)
    assert r.status == 400 and r.json()["error"]["code"] in ("invalid_json", "invalid_request")


def test_a_query_of_1000_characters_with_nul_is_searched(edge, stored):
    assert search(edge, {"query": "lantern\u0000" + "é" * 992}).status == 200
    assert search(edge, {"query": "x" * 1000}).json()["data"] == []


def test_413_over_16_kib(edge):
    r = search(edge, {"query": "x", "pad": "y" * 16 * 1024})
    assert r.status == 413 and r.json()["error"]["code"] == "request_too_large"


def test_404_paging_off_is_retrieval_404(edge, stored):
    edge.vars["CONTEXT_PAGING_ENABLED"] = "false"
    r = search(edge, {"query": "lantern"})
    assert (r.status, r.body) == (404, EXPECTED_404)
    assert edge.bucket.ops["get"] == 0
    # whatever the body: with the feature off the route does not exist (as retrieval)
    for body in ({"query": ""}, {"query": "x", "limit": 99}, [1]):
        assert (search(edge, body).status, search(edge, body).body) == (404, EXPECTED_404)


@pytest.mark.parametrize("session", ["rps_unknown", "rps_foreign", "ended"])
def test_404_session_unknown_foreign_ended_is_retrieval_404(edge, stored, session):
    edge.seed_player("p_foreign", "rpk_foreign", "rps_foreign")
    if session == "ended":
        edge.request("DELETE", f"/v1/roleplay/sessions/{SESSION}", {"Authorization": f"Bearer {KEY}"})
        session = SESSION
    r = search(edge, {"query": "lantern"}, session=session)
    assert (r.status, r.body) == (404, EXPECTED_404)
    assert retrieve(edge, stored[4]["page_id"], session=session).body == r.body
    assert edge.bucket.ops["get"] == 0


def test_403_no_grant_and_zero_retention(edge):
    edge.seed_player("p_nogrant", "rpk_nogrant", "rps_nogrant", grants=())
    edge.seed_player("p_zero", "rpk_zero", "rps_zero", retention="zero")
    r = search(edge, {"query": "x"}, key="rpk_nogrant", session="rps_nogrant")
    assert (r.status, r.json()["error"]["code"]) == (403, "chat_not_granted")
    r = search(edge, {"query": "x"}, key="rpk_zero", session="rps_zero")
    assert (r.status, r.json()["error"]["code"]) == (403, "retention_zero")
    # the 403 does not depend on the session sent
    assert search(edge, {"query": "x"}, key="rpk_zero", session="rps_nope").status == 403


@pytest.mark.parametrize("unbind, code", [("MEDIA_SIGNING_SECRET", "signing_not_configured"),
                                          ("INTELLIGENCE_DB", "storage_unavailable"),
                                          ("multillm_media", "storage_unavailable")])
def test_503_bindings(edge, stored, unbind, code):
    if unbind == "MEDIA_SIGNING_SECRET":
        edge.vars.pop(unbind)
    else:
        edge.unbound.add(unbind)
    r = search(edge, {"query": "lantern"})
    assert (r.status, r.json()["error"]["code"]) == (503, code)


def test_503_d1_failure(edge, stored):
    edge.executor.failing = True
    r = search(edge, {"query": "lantern"})
    assert (r.status, r.json()["error"]["code"]) == (503, "storage_failed")


def test_without_the_session_header_the_path_goes_to_the_origin(edge):
    r = edge.request("POST", PATH, {"Authorization": "Bearer sk-origin"}, {"query": "x"})
    assert r.status == 200
    [sent] = edge.sent
    assert sent.url == "http://origin.test" + PATH and sent.json() == {"query": "x"}
    assert ("authorization", "Bearer sk-origin") in sent.headers


def test_a_roleplay_key_without_the_session_header_is_told_to_send_it(edge):
    """Never forwarded (docs/design.md §2): 400 naming the header and how to get a session."""
    r = edge.request("POST", PATH, {"Authorization": f"Bearer {KEY}"}, {"query": "x"})
    err = r.json()["error"]
    assert (r.status, err["code"], err["param"]) == (400, "roleplay_session_required", "X-Roleplay-Session-ID")
    assert "POST /v1/roleplay/sessions" in err["message"] and not edge.sent


def test_get_is_not_the_search_route(edge):
    r = edge.request("GET", PATH, {"Authorization": "Bearer sk-origin", "X-Roleplay-Session-ID": SESSION})
    assert edge.sent and edge.sent[-1].url.endswith(PATH) and r.status == 200
    r = edge.request("GET", PATH, {"Authorization": f"Bearer {KEY}", "X-Roleplay-Session-ID": SESSION})
    assert (r.status, r.json()["error"]["code"]) == (403, "roleplay_key_not_accepted") and len(edge.sent) == 1


# -- logs --------------------------------------------------------------------------

def test_logs_hold_counts_only(edge, stored):
    query = "Ilsabeth silver lantern"
    doc = search(edge, {"query": query}).json()
    log = edge.logs[-1]
    assert log["route"] == "search_pages" and log["status"] == 200
    assert (log["pages"], log["objects_read"], log["hits"]) == (len(stored), 1, len(doc["data"]))
    assert log["bytes_read"] == sum(r["byte_length"] for r in stored)
    assert all(k.startswith("cpu_") for k in log if k.endswith("_ms") and k not in ("ms", "d1_ms", "r2_ms"))
    text = json.dumps(edge.logs)
    for secret in ("Ilsabeth", "lantern", SESSION, KEY, stored[4]["page_id"],
                   doc["data"][0]["excerpt"]["text"][:20]):
        assert secret not in text


def test_a_hit_names_the_exchange_of_a_block_page_that_retrieval_reads(edge, headers):
    # A paged turn whose pages are blocks of exchanges (docs/design.md §5.7): the hit says
    # which exchange matched, and `exchange=N` of retrieval answers exactly that one.
    body = rp.chat_body(160, tag="HX")
    r = edge.request("POST", "/v1/chat/completions", headers, body)
    assert r.status == 200
    needle = body["messages"][-40]["content"]            # a paged user turn, late in a block
    words = " ".join(needle.split()[:6])
    hit = search(edge, {"query": words, "limit": 1}).json()["data"][0]
    got = edge.request("GET", f"/v1/context/pages/{hit['page_id']}?roleplay_session_id={SESSION}"
                       f"&exchange={hit['exchange']}", {"Authorization": f"Bearer {KEY}"}).json()
    assert got["exchanges"] > 1 and got["exchange"] == hit["exchange"] > 1
    texts = [m["content"] for m in got["messages"] if isinstance(m.get("content"), str)]
    assert any(hit["excerpt"]["text"].strip("\u2026") in t for t in texts)


def test_a_body_that_is_json_but_no_list_of_items_is_corrupted_for_search_and_retrieval(edge):
    # The edge stores only lists of items (§5.8): anything else under a matching row is
    # a corrupted body, a 503 on both routes (retrieval's exchange=N included), never served.
    body = b'{"role":"user","content":"json"}'
    key = "context-pages/obj_" + "R" * 43
    edge.bucket.objects[key] = body
    row = row_for(body, key, 0, edge.clock)
    insert(edge, row)
    r = search(edge, {"query": "json"})
    assert (r.status, r.json()["error"]["code"]) == (503, "context_page_corrupted")
    for query in ("", "&exchange=1"):
        got = edge.request("GET", f"/v1/context/pages/{row['page_id']}?roleplay_session_id={SESSION}{query}",
                           {"Authorization": f"Bearer {KEY}"})
        assert (got.status, got.json()["error"]["code"]) == (503, "context_page_corrupted")
