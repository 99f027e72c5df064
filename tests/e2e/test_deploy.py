"""The deploy path, offline (README: Deploy): plain `wrangler deploy` refuses an upload that
would fail at import (wrangler.toml's [build] guard), `npm run deploy` refuses without uv
and otherwise runs pywrangler through the lock, and `npm run cloudflare:setup` writes the
ids the remote commands need into a config the dry run still accepts."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tomllib

import pytest

from devkit import bundle
from devkit.runner import ROOT

pytestmark = pytest.mark.slow


def refused(project, tmp_path) -> str:
    with pytest.raises(RuntimeError) as e:
        bundle.dry_run(project, tmp_path / "upload")
    assert not (tmp_path / "upload" / "entry.py").exists()       # nothing bundled
    return str(e.value)


def test_plain_wrangler_deploy_refuses_without_the_vendored_packages(tmp_path):
    message = refused(bundle.stage(tmp_path / "project", skip=("*",)), tmp_path)
    assert "deploy guard: python_modules/ lacks workers-runtime-sdk==1.9.5, snowballstemmer==3.1.1" in message
    assert "npm run deploy" in message


def test_the_guard_names_a_missing_or_stale_package(tmp_path):
    project = bundle.stage(tmp_path / "project", skip=("snowballstemmer",))
    assert "lacks snowballstemmer==3.1.1:" in refused(project, tmp_path)
    info = project / "python_modules" / "workers_runtime_sdk-1.9.5.dist-info"
    shutil.rmtree(project / "python_modules")
    bundle.vendor(project)
    info.rename(info.with_name("workers_runtime_sdk-1.9.4.dist-info"))   # an older sync
    assert "lacks workers-runtime-sdk==1.9.5:" in refused(project, tmp_path)


def script_project(tmp_path):
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "deploy.sh", project / "scripts" / "deploy.sh")
    return project


def path_without_uv(tmp_path) -> str:
    """PATH with only bash, its tools and node: no uv, wherever one is installed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "cat", "dirname", "node", "env"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_npm_run_deploy_refuses_clearly_without_uv(tmp_path):
    project = script_project(tmp_path)
    proc = subprocess.run(["bash", "scripts/deploy.sh", "--dry-run"], cwd=project, capture_output=True,
                          text=True, env={"PATH": path_without_uv(tmp_path), "HOME": str(tmp_path)})
    assert proc.returncode == 1
    assert proc.stderr.startswith("deploy: `uv` is not installed.")
    assert "python3 -m pip install --user uv" in proc.stderr
    assert sorted(p.name for p in project.iterdir()) == ["scripts"]     # nothing written


def test_npm_run_deploy_runs_pywrangler_through_the_lock(tmp_path):
    project = script_project(tmp_path)
    path = path_without_uv(tmp_path)
    uv = tmp_path / "bin" / "uv"
    uv.write_text('#!/bin/bash\nprintf "%s\\n" "$UV_PROJECT_ENVIRONMENT" "$@" > uv-args\n')
    uv.chmod(uv.stat().st_mode | stat.S_IEXEC)
    proc = subprocess.run(["bash", "scripts/deploy.sh", "--dry-run", "--outdir", "out"], cwd=project,
                          capture_output=True, text=True, env={"PATH": path, "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert (project / "uv-args").read_text().split("\n")[:-1] == [
        ".venv-deploy", "run", "--locked", "--only-group", "dev", "pywrangler", "deploy",
        "--dry-run", "--outdir", "out"]


def test_uv_lock_holds_the_pins_of_pyproject():
    """uv.lock is committed (README: Deploy): `uv run --locked` refuses a stale one, so the
    lock must hold exactly the versions pyproject.toml pins."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    locked = {p["name"]: p["version"] for p in tomllib.loads((ROOT / "uv.lock").read_text())["package"]
              if "version" in p}
    pins = [*project["project"]["dependencies"], *project["dependency-groups"]["dev"]]
    for pin in pins:
        name, version = pin.split("==")
        assert locked.get(name) == version, pin


FAKE_WRANGLER = r'''#!/usr/bin/env python3
import json, pathlib, sys
state = pathlib.Path(sys.argv[0]).with_name("cloud.json")
cloud = json.loads(state.read_text())
args = sys.argv[1:]
with state.with_name("calls.log").open("a") as log:
    log.write(" ".join(args) + "\n")
if args[:2] == ["d1", "list"]:
    print(json.dumps([{"uuid": u, "name": n} for n, u in cloud["d1"].items()]))
elif args[:2] == ["d1", "create"]:
    cloud["d1"][args[2]] = "6f1e2d3c-0000-4000-8000-00000000d1d1"
    print("Successfully created DB")
elif args[:3] == ["r2", "bucket", "info"]:
    sys.exit(0 if args[3] in cloud["r2"] else 1)
elif args[:3] == ["r2", "bucket", "create"]:
    cloud["r2"].append(args[3])
else:
    sys.exit(2)
state.write_text(json.dumps(cloud))
'''


def run_setup(tmp_path, config, *args):
    env = {**os.environ, "WRANGLER": str(tmp_path / "wrangler")}
    return subprocess.run(["python3", str(ROOT / "tools" / "cloudflare_setup.py"), "--config", str(config), *args],
                          capture_output=True, text=True, env=env)


def test_cloudflare_setup_creates_writes_the_ids_and_the_dry_run_takes_them(tmp_path):
    fake = tmp_path / "wrangler"
    fake.write_text(FAKE_WRANGLER)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "cloud.json").write_text(json.dumps({"d1": {}, "r2": ["multillm_media-old"]}))
    project = bundle.stage(tmp_path / "project")
    config = project / "wrangler.toml"
    before = config.read_text()

    first = run_setup(tmp_path, config)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[:2] == [
        "D1 multillm-intelligence: created (6f1e2d3c-0000-4000-8000-00000000d1d1)",
        "R2 multillm-media: created"]
    written = config.read_text()
    assert written == before.replace(              # one line added, every other byte kept
        'binding = "INTELLIGENCE_DB"\n',
        'binding = "INTELLIGENCE_DB"\ndatabase_id = "6f1e2d3c-0000-4000-8000-00000000d1d1"\n', 1)
    again = run_setup(tmp_path, config)
    assert again.returncode == 0 and "already up to date" in again.stdout and config.read_text() == written
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls.count("d1 create multillm-intelligence") == 1 and calls.count("r2 bucket create multillm-media") == 1

    upload = bundle.dry_run(project, tmp_path / "upload")        # the written config deploys
    assert "INTELLIGENCE_DB" in upload.output and "multillm-intelligence" in upload.output
    assert "env.multillm_media (multillm-media)" in upload.output


def test_cloudflare_setup_binds_an_existing_bucket_by_name(tmp_path):
    fake = tmp_path / "wrangler"
    fake.write_text(FAKE_WRANGLER)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "cloud.json").write_text(json.dumps(
        {"d1": {"multillm-intelligence": "0a0b0c0d-0000-4000-8000-000000000001"}, "r2": ["seed-media"]}))
    config = tmp_path / "wrangler.toml"
    shutil.copy2(ROOT / "wrangler.toml", config)
    proc = run_setup(tmp_path, config, "--bucket", "seed-media")
    assert proc.returncode == 0, proc.stderr
    assert "D1 multillm-intelligence: exists (0a0b0c0d-0000-4000-8000-000000000001)" in proc.stdout
    assert "R2 seed-media: exists" in proc.stdout
    doc = tomllib.loads(config.read_text())
    assert doc["r2_buckets"] == [{"binding": "multillm_media", "bucket_name": "seed-media"}]
    assert doc["d1_databases"][0]["database_id"] == "0a0b0c0d-0000-4000-8000-000000000001"
    assert "create" not in (tmp_path / "calls.log").read_text()
    bad = run_setup(tmp_path, config, "--bucket", "multillm_media")     # not an R2 name
    assert bad.returncode == 1 and "is not an R2 bucket name" in bad.stderr
