"""Settings given as TOML values in wrangler.toml reach the Worker in Pyodide as JS values,
not strings (docs/design.md §3): `PROVIDERS = { fake = { … } }` and
`CONTEXT_PAGING_ENABLED = true` configure the edge as their string forms do. A table used
to be dropped silently: /healthz said ok and every request answered unknown_model."""

import json
import re

from devkit import roleplay as rp
from devkit.fakes import FakeServer, Reply
from devkit.runner import ROOT

CHAT = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "The fox runs."}}]}


def toml_config(path, provider_url):
    text = (ROOT / "wrangler.toml").read_text()
    table = ('PROVIDERS = { fake = { base_url = "%s/v1", formats = ["chat"], '
             'api_key_secret = "FAKE_API_KEY" } }' % provider_url)
    text, n = re.subn(r'(?m)^PROVIDERS = .*$', lambda m: table, text)
    text, k = re.subn(r'(?m)^CONTEXT_PAGING_ENABLED = .*$', "CONTEXT_PAGING_ENABLED = true", text)
    assert n == k == 1
    path.write_text(text)
    return path


def test_toml_table_providers_and_boolean_flag_serve_a_paged_turn(start_edge, tmp_path):
    with FakeServer(lambda rec: Reply(chunks=[json.dumps(CHAT).encode()])) as provider:
        vars = {k: v for k, v in rp.edge_vars(provider.url).items()
                if k not in ("PROVIDERS", "CONTEXT_PAGING_ENABLED")}
        edge = start_edge(vars, extra_env={"EDGE_CONFIG": str(toml_config(tmp_path / "w.toml", provider.url))})
        health = edge.client.get("/healthz").json()
        assert health["ok"] and health["paging_enabled"] and health["config_errors"] == []
        rp.set_model(edge, "fake:rp-small", 6000, 1000)
        player = rp.new_player(edge)
        r = edge.client.post("/v1/chat/completions", json=rp.chat_body(40), headers=player.headers())
        assert r.status_code == 200, r.text
        assert r.json()["context_pages"] and len(provider.received) == 1
        assert not [x for x in edge.logs() if x.get("level") == "warning"]
