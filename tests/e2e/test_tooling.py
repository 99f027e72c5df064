"""Deploy and migration tooling work offline from the repository as it is."""

import json
import subprocess
import sys

import pytest

from devkit.runner import ROOT

WRANGLER = ["node", str(ROOT / "node_modules/wrangler/bin/wrangler.js")]


def wrangler(*args, cwd=ROOT):
    return subprocess.run([*WRANGLER, *args], cwd=cwd, capture_output=True, text=True, timeout=180,
                          env={"CI": "true", "WRANGLER_SEND_METRICS": "false",
                               "PATH": __import__("os").environ["PATH"]})


@pytest.mark.slow
def test_deploy_dry_run_bundles_the_python_worker(deploy_bundle):
    """The repository's wrangler.toml, once python_modules/ is vendored (plain `wrangler
    deploy` refuses without it: tests/e2e/test_deploy.py), binds the D1 database and the
    R2 bucket by name, with no placeholder id (README: Deploy)."""
    project, upload = deploy_bundle
    out = upload.output
    assert "env.INTELLIGENCE_DB (multillm-intelligence)" in out and "env.multillm_media (multillm-media)" in out
    assert "database_id" not in (project / "wrangler.toml").read_text().split("[[d1_databases]]")[1].split("[")[0]
    assert (upload.outdir / "entry.py").exists()


@pytest.mark.slow
def test_migrations_apply_on_fresh_state_then_are_a_no_op(tmp_path):
    state = str(tmp_path / "state")
    first = wrangler("d1", "migrations", "apply", "INTELLIGENCE_DB", "--local", "--persist-to", state)
    assert first.returncode == 0, first.stderr
    assert "0001_init.sql" in first.stdout
    second = wrangler("d1", "migrations", "apply", "INTELLIGENCE_DB", "--local", "--persist-to", state)
    assert second.returncode == 0 and "No migrations to apply" in second.stdout


def fake_tools(tmp_path):
    """npm and python3 stand-ins that log their arguments (setup scripts, offline)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for name in ("npm", "python3", "apt-get"):
        script = bin_dir / name
        body = f'echo "{name} $*" >> {log}\n'
        if name == "npm":
            body += 'if [ "$1" = ci ]; then mkdir -p node_modules; fi\n'
        if name == "python3":   # `python3 -m venv .venv` makes a .venv/bin/python that logs too
            body += ('if [ "$1" = -m ] && [ "$2" = venv ]; then mkdir -p "$3/bin"; '
                     f'cp "$0" "$3/bin/python"; fi\n')
        script.write_text("#!/bin/bash\n" + body)
        script.chmod(0o755)
    return bin_dir, log


def run_setup(tmp_path, script, *args):
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    for name in ("package.json", "package-lock.json", "pyproject.toml", "requirements-test.txt",
                 "requirements-examples.txt", "scripts/setup.sh", "scripts/setup-browser.sh"):
        (project / name).write_bytes((ROOT / name).read_bytes())
    bin_dir, log = fake_tools(tmp_path)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "SILLYTAVERN_DIR": str(tmp_path / "st")}
    r = subprocess.run(["bash", f"scripts/{script}", *args], cwd=project, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return log.read_text()


def test_npm_start_setup_installs_the_worker_and_the_examples_only(tmp_path):
    """`npm start` installs what the examples import (README: Examples), not the test tiers."""
    calls = run_setup(tmp_path, "setup.sh")
    assert "npm ci" in calls and "-m pip download" in calls and "snowballstemmer==" in calls
    assert "-m pip install --quiet --disable-pip-version-check -r requirements-examples.txt" in calls
    assert "requirements-test.txt" not in calls and "sillytavern" not in calls and "apt-get" not in calls


def test_the_test_and_browser_setup_adds_the_tiers(tmp_path):
    calls = run_setup(tmp_path, "setup-browser.sh")
    assert "-r requirements-test.txt" in calls and "install --no-audit --no-fund --loglevel=error --no-save sillytavern@1.19.0" in calls


def demo_credentials(state, provider_key=""):
    """tools/demo_credentials.py on `state`, the vars `.dev.vars.example` with `provider_key`
    as the OpenAI key."""
    vars_file = state.parent / "vars.env"
    vars_file.write_text((ROOT / ".dev.vars.example").read_text().replace(
        "OPENAI_API_KEY=\n", f"OPENAI_API_KEY={provider_key}\n"))
    env = {**__import__("os").environ, "EDGE_STATE_DIR": str(state), "EDGE_VARS_FILE": str(vars_file)}
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "demo_credentials.py")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.slow
def test_npm_start_makes_the_demo_key_once_and_reuses_it(tmp_path):
    state = tmp_path / "state"
    first = demo_credentials(state)
    assert first["reused"] is False and first["key"].startswith("rpk_")
    assert first["standin"] == "standin:roleplay"              # no provider key: the stand-in serves
    assert demo_credentials(state) == {**first, "reused": True}
    def standin_model():
        done = wrangler("d1", "execute", "INTELLIGENCE_DB", "--local", "--persist-to", str(state), "--json",
                        "--command", "SELECT input_tokens FROM models WHERE model = 'standin:roleplay'")
        return json.loads(done.stdout)[0]["results"]
    assert standin_model() == [{"input_tokens": 8000}]
    # A provider key set: no stand-in, and its model goes (else /healthz: missing_providers).
    assert demo_credentials(state, provider_key="sk-real")["standin"] is None and standin_model() == []
    keys = wrangler("d1", "execute", "INTELLIGENCE_DB", "--local", "--persist-to", str(state), "--json",
                    "--command", "SELECT COUNT(*) AS n FROM roleplay_keys")
    assert json.loads(keys.stdout)[0]["results"] == [{"n": 1}]               # one key, not one per start
    wrangler("d1", "execute", "INTELLIGENCE_DB", "--local", "--persist-to", str(state),
             "--command", "UPDATE roleplay_keys SET revoked_at = 1")
    third = demo_credentials(state)                                          # revoked: a new one
    assert third["reused"] is False and third["key"] != first["key"]
