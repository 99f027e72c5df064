"""Deploy and migration tooling work offline from the repository as it is."""

import subprocess

import pytest

from devkit.runner import ROOT

WRANGLER = ["node", str(ROOT / "node_modules/wrangler/bin/wrangler.js")]


def wrangler(*args, cwd=ROOT):
    return subprocess.run([*WRANGLER, *args], cwd=cwd, capture_output=True, text=True, timeout=180,
                          env={"CI": "true", "WRANGLER_SEND_METRICS": "false",
                               "PATH": __import__("os").environ["PATH"]})


@pytest.mark.slow
def test_deploy_dry_run_bundles_the_python_worker(tmp_path):
    r = wrangler("deploy", "--dry-run", "--outdir", str(tmp_path / "out"))
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "env.INTELLIGENCE_DB" in out and "env.multillm_media" in out
    assert (tmp_path / "out").exists()


@pytest.mark.slow
def test_migrations_apply_on_fresh_state_then_are_a_no_op(tmp_path):
    state = str(tmp_path / "state")
    first = wrangler("d1", "migrations", "apply", "INTELLIGENCE_DB", "--local", "--persist-to", state)
    assert first.returncode == 0, first.stderr
    assert "0001_init.sql" in first.stdout
    second = wrangler("d1", "migrations", "apply", "INTELLIGENCE_DB", "--local", "--persist-to", state)
    assert second.returncode == 0 and "No migrations to apply" in second.stdout
