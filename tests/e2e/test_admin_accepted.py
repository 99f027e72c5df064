"""Credentials made by the admin CLI are the ones the Worker accepts (same local D1)."""

import json
import subprocess
import sys

import pytest

from devkit import roleplay as rp
from devkit.runner import ROOT, Edge


def admin(state, *args) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "tools/admin.py"), "--local", "--persist-to",
                          str(state), "--json", *args], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout)


@pytest.mark.slow
def test_cli_key_policy_session_and_model_work_in_the_worker(tmp_path, provider):
    state = tmp_path / "state"
    key = admin(state, "key", "create", "--principal", "cli-user")["key"]
    admin(state, "--no-migrate", "policy", "set", "--principal", "cli-user", "--revision", "1",
          "--grants", "chat", "--retention", "standard")
    session = admin(state, "--no-migrate", "session", "create", "--principal", "cli-user")["session_id"]
    admin(state, "--no-migrate", "model", "set", "fake:rp-small", "--input-tokens", "6000",
          "--max-output-tokens", "1000")
    with Edge(state, vars=rp.edge_vars(provider.url)) as edge:
        r = edge.client.post("/v1/chat/completions", json=rp.chat_body(30),
                             headers={"Authorization": f"Bearer {key}", "X-Roleplay-Session-ID": session})
        assert r.status_code == 200, r.text
        assert r.json()["context_pages"]
        assert len(provider.received) == 1
        # Only the key's digest is stored.
        assert key not in json.dumps(edge.sql("SELECT * FROM roleplay_keys"))
