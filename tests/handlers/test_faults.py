"""Storage and configuration faults, in-process: 503 before dispatch, no page row, no
object left behind. (A real R2 put fault and a real D1 failure after the put are also
run through the runner: tests/e2e/test_generation.py.)"""

import json

import pytest

from tests.handlers.conftest import KEY, MODEL, SESSION
from devkit import roleplay as rp
from tests.support.inprocess import LocalEdge


@pytest.mark.parametrize("fault,code", [
    ("no_table", "storage_failed"), ("no_r2", "storage_unavailable"),
    ("no_secret", "signing_not_configured"), ("r2_put", "storage_failed"),
    ("d1_upsert", "storage_failed"), ("d1_upsert_and_r2_delete", "storage_failed"),
    ("no_provider_key", "provider_key_missing"),
])
def test_faults_are_503_before_dispatch(fault, code):
    vars = rp.edge_vars("http://provider.test")
    vars.pop("MEDIA_SIGNING_SECRET") if fault == "no_secret" else None
    vars.pop("FAKE_API_KEY") if fault == "no_provider_key" else None
    with LocalEdge(vars, unbound=("multillm_media",) if fault == "no_r2" else ()) as edge:
        edge.seed_player("p_faults", KEY, SESSION)
        edge.set_model(MODEL, 6000, 1000)
        if fault == "no_table":
            edge.sql("DROP TABLE context_pages")
        if fault == "r2_put":
            edge.bucket.faults.add("put")
        if fault.startswith("d1_upsert"):              # D1 fails after the object was put
            edge.executor.fail_sql = "INSERT INTO context_pages"
        if fault.endswith("r2_delete"):
            edge.bucket.faults.add("delete")
        r = edge.request("POST", "/v1/chat/completions",
                         {"Authorization": f"Bearer {KEY}", "X-Roleplay-Session-ID": SESSION},
                         rp.chat_body(30))
        assert r.status == 503, r.body
        assert r.json()["error"]["code"] == code
        assert edge.sent == []
        edge.executor.fail_sql = None
        if fault != "no_table":
            assert edge.page_rows() == 0
        if fault == "no_provider_key":
            assert edge.bucket.ops["put"] == 0
        if fault in ("r2_put", "d1_upsert"):          # nothing left behind
            assert edge.bucket.ops["put"] == 1 and edge.bucket.objects == {}
        if fault == "d1_upsert_and_r2_delete":        # best effort: counted, the key never logged
            [obj] = edge.bucket.objects
            [log] = [rec for rec in edge.logs if rec.get("route") == "generate"]
            assert log["r2_delete_failed"] == 1 and log["status"] == 503
            assert obj.split("/")[-1] not in json.dumps(edge.logs)


@pytest.mark.parametrize("value", [None, "", "sk-bad\r\nX-Evil: 1"])
def test_a_missing_provider_key_names_its_secret_and_where_to_set_it(value):
    """docs/design.md §8: the secret the provider's PROVIDERS entry reads, .dev.vars with a
    restart locally, `wrangler secret put` deployed; never the value."""
    vars = rp.edge_vars("http://provider.test")
    if value is None:
        vars.pop("FAKE_API_KEY")
    else:
        vars["FAKE_API_KEY"] = value
    with LocalEdge(vars) as edge:
        edge.seed_player("p_faults", KEY, SESSION)
        edge.set_model(MODEL, 6000, 1000)
        r = edge.request("POST", "/v1/chat/completions",
                         {"Authorization": f"Bearer {KEY}", "X-Roleplay-Session-ID": SESSION}, rp.chat_body(3))
        err = r.json()["error"]
        assert (r.status, err["code"]) == (503, "provider_key_missing")
        for part in ("provider fake", "secret FAKE_API_KEY", "api_key_secret", ".dev.vars",
                     "restart the runner", "npx wrangler secret put FAKE_API_KEY"):
            assert part in err["message"], part
        assert "sk-bad" not in r.body.decode() and "sk-bad" not in json.dumps(edge.logs)


def test_an_unknown_model_says_where_to_look():
    with LocalEdge(rp.edge_vars("http://provider.test")) as edge:
        edge.seed_player("p_faults", KEY, SESSION)
        edge.set_model("nobody:m", 6000, 1000)                 # registered, no provider
        for model in ("fake:not-registered", "nobody:m"):
            r = edge.request("POST", "/v1/chat/completions",
                             {"Authorization": f"Bearer {KEY}", "X-Roleplay-Session-ID": SESSION},
                             rp.chat_body(3, model=model))
            err = r.json()["error"]
            assert (r.status, err["code"]) == (400, "unknown_model")
            assert "GET /v1/models" in err["message"] and "npm run admin -- model set" in err["message"]
            assert edge.sent == []
