"""Configuration and reachability, in-process: flag off or invalid, signing secret and
bindings missing, origin unset or down, every provider unreachable. Each used to start
a runner of its own; the platform's part (a binding the runner removes, a refused
connection) is still proven through the runner in tests/e2e/test_runner_fidelity.py."""

import json

import pytest

from multillm_edge.core import config
from tests.handlers.conftest import KEY, MODEL, SESSION
from devkit import roleplay as rp
from tests.support.inprocess import LocalEdge

EXPECTED_404 = (b'{"error":{"type":"not_found_error","code":"context_page_not_found",'
                b'"message":"Context page not found."}}')
PAGE = "/v1/context/pages/cp_" + "A" * 43 + "?roleplay_session_id=" + SESSION


def local_edge(upstream=None, unbound=(), **vars):
    base = rp.edge_vars("http://provider.test", "http://origin.test")
    merged = {k: v for k, v in {**base, **vars}.items() if v is not None}
    edge = LocalEdge(merged, upstream, unbound=unbound) if upstream else LocalEdge(merged, unbound=unbound)
    edge.seed_player("p_config", KEY, SESSION)
    edge.set_model(MODEL, 6000, 1000)
    return edge


def auth(**extra):
    return {"Authorization": f"Bearer {KEY}", "X-Roleplay-Session-ID": SESSION, **extra}


def error(r):
    return r.status, r.json()["error"]["code"]


@pytest.mark.parametrize("flag", ["false", "yes-please-FLAGVALUE"])
def test_flag_off_or_invalid_writes_nothing_and_dispatches_as_received(flag):
    config._flag_warned = False  # a new isolate
    raw = json.dumps(rp.chat_body(3, tag="FL")).encode()
    with local_edge(CONTEXT_PAGING_ENABLED=flag) as edge:
        for _ in range(2):
            assert edge.request("POST", "/v1/chat/completions", auth(), raw).status == 200
        assert [s.body for s in edge.sent] == [raw, raw]
        assert edge.page_rows() == 0 and edge.bucket.ops["put"] == 0
        warnings = [r for r in edge.logs if "CONTEXT_PAGING_ENABLED" in r.get("message", "")]
        assert len(warnings) == (1 if flag != "false" else 0)
        assert "FLAGVALUE" not in json.dumps(edge.logs)


def test_retrieval_with_paging_disabled_is_the_same_404_without_storage():
    with local_edge(CONTEXT_PAGING_ENABLED="false") as edge:
        edge.executor.failing = True            # any storage call would turn this into a 503
        r = edge.request("GET", PAGE, {"Authorization": f"Bearer {KEY}"})
        assert r.status == 404 and r.body == EXPECTED_404
        assert error(edge.request("GET", PAGE, {})) == (401, "invalid_api_key")
        assert edge.bucket.ops == {"put": 0, "get": 0, "delete": 0}


def test_missing_signing_secret_is_503_on_retrieval_and_paged_generation():
    with local_edge(MEDIA_SIGNING_SECRET=None) as edge:
        r = edge.request("GET", PAGE, {"Authorization": f"Bearer {KEY}"})
        assert error(r) == (503, "signing_not_configured")
        assert "MEDIA_SIGNING_SECRET" in r.json()["error"]["message"]     # what to set
        r = edge.request("POST", "/v1/chat/completions", auth(), rp.chat_body(30))
        assert error(r) == (503, "signing_not_configured")
        assert edge.sent == [] and edge.page_rows() == 0


@pytest.mark.parametrize("binding", ["multillm_media", "INTELLIGENCE_DB"])
def test_missing_binding_is_503_storage_unavailable(binding):
    with local_edge(unbound=(binding,)) as edge:
        assert error(edge.request("GET", PAGE, {"Authorization": f"Bearer {KEY}"})) == \
            (503, "storage_unavailable")
        r = edge.request("POST", "/v1/chat/completions", auth(), rp.chat_body(30))
        assert error(r) == (503, "storage_unavailable")
        assert edge.sent == []


def test_origin_unset_is_503_json():
    with local_edge(FLASK_ORIGIN="") as edge:
        r = edge.request("POST", "/v1/chat/completions", {}, {"model": "x"})   # no roleplay header
        assert error(r) == (503, "origin_not_configured") and edge.sent == []


def refuse(sent):
    return ConnectionRefusedError("connection refused")


def test_origin_down_is_502_json():
    with local_edge(upstream=refuse) as edge:
        assert error(edge.request("GET", "/anything", {})) == (502, "origin_unreachable")


def test_every_candidate_unreachable_is_502():
    with local_edge(upstream=refuse) as edge:
        r = edge.request("POST", "/v1/chat/completions", auth(), rp.chat_body(3))
        assert error(r) == (502, "upstream_unreachable")
        assert len(edge.sent) == 1


def test_healthz_in_process_reports_each_missing_part():
    with local_edge(unbound=("multillm_media",), MEDIA_SIGNING_SECRET=None) as edge:
        r = edge.request("GET", "/healthz", {})
        assert r.status == 503 and r.json() == {"ok": False, "d1_tables": True, "r2_binding": False,
                                                "signing_configured": False, "paging_enabled": True,
                                                "config_errors": [], "missing_providers": []}


def warnings(edge, name):
    return [r for r in edge.logs if r.get("level") == "warning" and name in r.get("message", "")]


@pytest.mark.parametrize("value", ["{SECRETVALUE", '{"fake": {"base_url": "SECRETVALUE"}}',
                                   '{"fake": {"base_url": "http://provider.test/v1", "formats": ["chat"], '
                                   '"api_key_secret": "FAKE_API_KEY", "cache_breakpoints": "SECRETVALUE"}}'])
def test_invalid_providers_is_a_healthz_error_and_one_warning(value):
    config._warned.clear(), config._PROVIDERS_CACHE.clear()   # a new isolate
    with local_edge(PROVIDERS=value) as edge:
        health = edge.request("GET", "/healthz", {})
        assert health.status == 503 and health.json()["config_errors"] == ["PROVIDERS"]
        for _ in range(2):
            r = edge.request("POST", "/v1/chat/completions", auth(), rp.chat_body(3))
            assert error(r) == (503, "providers_misconfigured")
        assert edge.sent == [] and len(warnings(edge, "PROVIDERS")) == 1
        assert "SECRETVALUE" not in json.dumps(edge.logs) + health.body.decode()
    config._warned.clear()


def test_providers_as_a_toml_table_serves_requests():
    """wrangler.toml `PROVIDERS = { fake = { … } }` reaches the platform as an object, not
    a string: the same providers as its JSON text (it used to be dropped silently)."""
    table = json.loads(rp.edge_vars("http://provider.test")["PROVIDERS"])
    with local_edge(PROVIDERS=table) as edge:
        assert edge.request("GET", "/healthz", {}).json()["config_errors"] == []
        r = edge.request("POST", "/v1/chat/completions", auth(), rp.chat_body(3))
        assert r.status == 200 and len(edge.sent) == 1


def test_a_model_naming_an_unknown_provider_is_reported_and_warned_once():
    config._warned.clear()
    with local_edge() as edge:
        edge.set_model("ghost:model-1", 6000, 1000)
        health = edge.request("GET", "/healthz", {})
        assert health.status == 200 and health.json()["missing_providers"] == ["ghost"]
        for _ in range(2):
            r = edge.request("POST", "/v1/chat/completions", auth(), {**rp.chat_body(3), "model": "ghost:model-1"})
            assert error(r) == (400, "unknown_model")
        assert len(warnings(edge, "PROVIDERS does not define")) == 1
    config._warned.clear()


def test_a_short_signing_secret_is_refused_clearly():
    config._warned.clear()
    with local_edge(MEDIA_SIGNING_SECRET="only-31-bytes-SECRETVALUE-xxxxx") as edge:
        health = edge.request("GET", "/healthz", {})
        assert health.status == 503
        assert health.json()["signing_configured"] is False
        assert health.json()["config_errors"] == ["MEDIA_SIGNING_SECRET"]
        r = edge.request("GET", PAGE, {"Authorization": f"Bearer {KEY}"})
        assert error(r) == (503, "signing_not_configured")
        assert "MEDIA_SIGNING_SECRET is shorter than 32 bytes" in r.json()["error"]["message"]
        r = edge.request("POST", "/v1/chat/completions", auth(), rp.chat_body(30))
        assert error(r) == (503, "signing_not_configured") and edge.sent == []
        assert len(warnings(edge, "MEDIA_SIGNING_SECRET")) == 1
        assert "SECRETVALUE" not in json.dumps(edge.logs)
    config._warned.clear()
