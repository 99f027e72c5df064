"""`GET /v1/roleplay/usage` (docs/design.md §2, §4.1), in-process: the principal's days,
today first, summed over models; its limits and what is left of each, null where none is
set; `?days=N` bounded; 401 / 403 / 503 as the other roleplay routes; CORS for a listed
origin; one D1 statement."""

import json

import pytest

from tests.handlers.conftest import KEY, SESSION
from tests.support.inprocess import LocalEdge
from devkit import roleplay as rp

PRINCIPAL = "p_handlers"
NOW = 1_800_000_000          # 2027-01-15 08:00:00 UTC (LocalEdge's clock)
TODAY, YESTERDAY = "2027-01-15", "2027-01-14"
PATH = "/v1/roleplay/usage"
NULLS = {"requests_per_minute": None, "tokens_per_day": None, "sessions_per_day": None,
         "active_bytes": None}


def auth(key=KEY):
    return {"Authorization": f"Bearer {key}"}


def seed_usage(edge, principal, day, model, requests, inp, cached, written, out, estimated=0):
    edge.sql("INSERT INTO principal_usage VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
             principal, day, model, requests, inp, cached, written, out, estimated)
    edge.conn.commit()


def day(date, inp=0, cached=0, written=0, out=0, requests=0, estimated=False):
    return {"date": date, "input_tokens": inp, "cached_input_tokens": cached,
            "cache_write_tokens": written, "output_tokens": out, "requests": requests,
            "estimated": estimated}


def test_a_new_principal_sees_seven_empty_days_and_no_limits(edge):
    r = edge.request("GET", PATH, auth())
    assert r.status == 200 and r.header("cache-control") == "private, no-store"
    doc = r.json()
    assert [d["date"] for d in doc["days"]] == ["2027-01-15", "2027-01-14", "2027-01-13", "2027-01-12",
                                                "2027-01-11", "2027-01-10", "2027-01-09"]
    assert doc["days"][0] == day(TODAY)
    assert doc["limits"] == NULLS and doc["remaining"] == NULLS


def test_days_summed_over_models_with_limits_and_what_is_left(edge):
    seed_usage(edge, PRINCIPAL, TODAY, "fake:a", 3, 300_000, 200_000, 0, 12_000)
    seed_usage(edge, PRINCIPAL, TODAY, "fake:b", 2, 100_000, 0, 5_000, 8_000, estimated=1)
    seed_usage(edge, PRINCIPAL, YESTERDAY, "fake:a", 1, 10, 0, 0, 2)
    seed_usage(edge, PRINCIPAL, "2027-01-01", "fake:a", 9, 9, 9, 9, 9)        # outside 7 days
    seed_usage(edge, "someone_else", TODAY, "fake:a", 50, 5_000_000, 0, 0, 5)  # not theirs
    edge.sql("INSERT INTO principal_limits VALUES (?1, 10, 1000000, 5, NULL, 0)", PRINCIPAL)
    edge.sql("INSERT INTO principal_requests VALUES (?1, ?2), (?1, ?3), (?1, ?4)",
             PRINCIPAL, NOW - 10, NOW - 59, NOW - 61)                    # two in the last minute
    edge.sql("INSERT INTO roleplay_sessions (session_id, principal, created_at) VALUES "
             "('rps_t1', ?1, ?2), ('rps_t2', ?1, ?3)", PRINCIPAL, NOW - 3600, NOW - 9 * 3600)
    edge.conn.commit()
    doc = edge.request("GET", PATH, auth()).json()
    assert doc["days"][0] == day(TODAY, 400_000, 200_000, 5_000, 20_000, 5, True)
    assert doc["days"][1] == day(YESTERDAY, 10, 0, 0, 2, 1, False)
    assert all(d == day(d["date"]) for d in doc["days"][2:])
    assert doc["limits"] == {"requests_per_minute": 10, "tokens_per_day": 1_000_000,
                             "sessions_per_day": 5, "active_bytes": None}
    # tokens: input + output today; sessions: created since 00:00 UTC (the seeded one at 0 is not)
    assert doc["remaining"] == {"requests_per_minute": 8, "tokens_per_day": 580_000,
                                "sessions_per_day": 4, "active_bytes": None}


def test_over_a_limit_nothing_is_left_never_negative(edge, headers):
    seed_usage(edge, PRINCIPAL, TODAY, "fake:a", 1, 900, 0, 0, 200)
    # a turn that pages, then limits lowered below what is used (a lowered limit is
    # not enforced backwards: design §4.1), so both are over
    assert edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(30, tag="OV")).status == 200
    edge.sql("INSERT INTO principal_limits VALUES (?1, NULL, 1000, NULL, 100, 0)", PRINCIPAL)
    edge.conn.commit()
    doc = edge.request("GET", PATH, auth()).json()
    assert doc["remaining"]["tokens_per_day"] == 0 and doc["remaining"]["active_bytes"] == 0
    assert doc["days"][0]["requests"] == 2


def test_the_turns_usage_shows_on_the_route(edge, headers):
    usage = {"prompt_tokens": 700, "completion_tokens": 30}
    from tests.support.inprocess import Answer
    edge.upstream = lambda s: Answer(body=json.dumps({"choices": [], "usage": usage}).encode())
    edge.request("POST", "/v1/chat/completions", headers, rp.chat_body(1, tag="RT"))
    assert edge.request("GET", PATH, {"x-api-key": KEY}).json()["days"][0] == day(TODAY, 700, 0, 0, 30, 1)


@pytest.mark.parametrize("query,status,count", [
    ("?days=1", 200, 1), ("?days=90", 200, 90), ("?days=007", 200, 7),
    ("?days=0", 400, None), ("?days=91", 400, None), ("?days=-1", 400, None), ("?days=", 400, None),
    ("?days=1e3", 400, None), ("?days=%C2%B2", 400, None), ("?days=7&days=8", 400, None),
    ("?days=99999999999999999999", 400, None), ("?other=1", 200, 7),
])
def test_days_is_bounded_by_the_retention(edge, query, status, count):
    r = edge.request("GET", PATH + query, auth())
    assert r.status == status
    if count is None:
        assert r.json()["error"] == {"type": "invalid_request_error", "code": "invalid_request",
                                     "message": "`days` must be a whole number from 1 to 90.",
                                     "param": "days"}
    else:
        assert len(r.json()["days"]) == count


def test_the_retention_var_bounds_days(edge):
    edge.vars["USAGE_RETENTION_DAYS"] = "3"
    assert len(edge.request("GET", PATH, auth()).json()["days"]) == 3       # the default, capped
    assert edge.request("GET", PATH + "?days=4", auth()).status == 400


def test_refusals_as_the_other_roleplay_routes(edge):
    assert edge.request("GET", PATH).json()["error"]["code"] == "invalid_api_key"
    assert edge.request("GET", PATH, auth("rpk_unknown")).status == 401
    edge.sql("INSERT INTO roleplay_keys (key_sha256, principal, created_at, revoked_at) "
             "VALUES ('%s', 'p_rev', 0, 1)" % __import__("hashlib").sha256(b"rpk_revoked").hexdigest())
    edge.conn.commit()
    assert edge.request("GET", PATH, auth("rpk_revoked")).status == 401
    edge.seed_player("p_nochat", "rpk_nochat", "rps_nochat", grants=("other",))
    assert edge.request("GET", PATH, auth("rpk_nochat")).json()["error"]["code"] == "chat_not_granted"
    edge.executor.failing = True
    r = edge.request("GET", PATH, auth())
    edge.executor.failing = False
    assert (r.status, r.json()["error"]["code"]) == (503, "storage_failed")
    assert edge.request("POST", PATH, auth()).status != 200          # GET only: POST is forwarded
    assert edge.request("GET", PATH + "?days=0").status == 401       # the key first


def test_no_d1_binding_is_503():
    with LocalEdge(rp.edge_vars("http://provider.test"), unbound=("INTELLIGENCE_DB",)) as edge:
        r = edge.request("GET", PATH, auth())
        assert (r.status, r.json()["error"]["code"]) == (503, "storage_unavailable")


def test_one_statement_and_cors_for_a_listed_origin(edge):
    edge.vars["CORS_ALLOWED_ORIGINS"] = "http://localhost:8000"
    seen = []
    inner = edge.executor._cursor
    edge.executor._cursor = lambda sql, params: (seen.append(sql), inner(sql, params))[1]
    r = edge.request("GET", PATH, {**auth(), "Origin": "http://localhost:8000"})
    assert r.status == 200 and len(seen) == 1
    assert r.header("access-control-allow-origin") == "http://localhost:8000"
    pre = edge.request("OPTIONS", PATH, {"Origin": "http://localhost:8000",
                                         "Access-Control-Request-Method": "GET",
                                         "Access-Control-Request-Headers": "authorization"})
    assert pre.status == 204 and pre.header("access-control-allow-methods") == "GET"
    r = edge.request("GET", PATH, {**auth(), "Origin": "http://evil.test"})
    assert r.header("access-control-allow-origin") is None
