"""`npm run demo` end to end: install, stand-in provider, runner, admin CLI, a paged
roleplay through the openai SDK, one page retrieved and verified byte for byte, a search
and a recalled moment."""

import os
import subprocess

import pytest

from devkit.runner import ROOT

# Each step of the demo prints one of these after a ✓ when its check passed.
EXPECTED = [
    "listening on http://127.0.0.1:",
    "runner listening on http://127.0.0.1:",
    "roleplay key created for demo-player",
    "policy revision 1: grants chat, retention standard",
    "session rps_",
    "model standin:rp-demo: input window 6000 tokens",
    "40 exchanges played through the edge with the openai SDK: 40 replies",
    "the conversation overflowed the 6000-token window and was paged",
    "marker message(s) (role user) in place of the paged exchanges",
    "the multillm_context_retrieve tool schema was added",
    "unchanged; capabilities stripped",
    "the provider got its own key, never the roleplay key",
    "the system prompt and the latest exchange travelled unchanged",
    "pages in context_pages and x-multillm-context-pages",
    "the client finds a paged exchange (one with a dice roll)",
    "HTTP 200 from the edge",
    "Cache-Control: private, no-store",
    "body_base64 decodes to exactly the compact JSON of exchange",
    "matches (client, context_pages, retrieval)",
    "messages equal the original exchange",
    "retrieval made no provider call",
    "search named the exchange that spoke of the spiral stones",
    "earlier moment(s) quoted verbatim before the latest turn, named in context_recall",
    "one provider call for the turn, none for recall",
]


@pytest.mark.slow
def test_npm_run_demo_passes_every_check():
    env = {k: v for k, v in os.environ.items() if k not in ("PORT", "EDGE_STATE_DIR", "EDGE_VARS_FILE")}
    env["NO_COLOR"] = "1"
    proc = subprocess.run(["npm", "run", "--silent", "demo"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
    ticks = [line.strip()[2:] for line in out.splitlines() if line.strip().startswith("✓ ")]
    for phrase in EXPECTED:
        assert any(phrase in t for t in ticks), f"no ✓ line with {phrase!r}:\n{out[-4000:]}"
    assert not any(line.strip().startswith("✗") for line in out.splitlines())
    assert "checks passed." in out
    assert "runner stopped" in out
