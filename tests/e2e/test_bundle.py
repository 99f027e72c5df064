"""The upload is complete (docs/deploy.md): with python_modules/ laid out as `pywrangler
sync` does, `wrangler deploy --dry-run --outdir` holds every module the Worker imports,
and the check says so when one is missing."""

from __future__ import annotations

import importlib.util
import tempfile

import pytest

from devkit import bundle
from devkit.imports import RUNTIME_PROVIDED, check_upload

pytestmark = pytest.mark.slow


def test_the_upload_holds_every_module_the_worker_imports(deploy_bundle):
    project, upload = deploy_bundle
    report = check_upload(project, upload.files())
    assert report.ok, report.describe()
    files = set(report.walk.files.values())
    assert {"entry.py", "multillm_edge/app.py", "python_modules/workers/__init__.py",
            "python_modules/snowballstemmer/english_stemmer.py"} <= files
    # The C stemmer is tried first and may be absent: not a failure, not required.
    assert "Stemmer" in report.walk.optional and "Stemmer" not in report.walk.missing
    runtime = {n.split(".")[0] for n, origin in report.walk.provided.items() if origin == "runtime"}
    assert {"js", "_cloudflare_compat_flags", "_pyodide_entrypoint_helper"} <= runtime <= set(RUNTIME_PROVIDED)
    assert report.walk.provided["pyodide.ffi"] == "pyodide-stdlib"
    assert report.walk.provided["math"] == "pyodide-builtin"


def test_everything_vendored_and_every_src_module_is_uploaded(deploy_bundle):
    project, upload = deploy_bundle
    vendored = {"python_modules/" + p.relative_to(project / "python_modules").as_posix()
                for p in (project / "python_modules").rglob("*") if p.is_file()}
    uploaded = {f for f in upload.files() if f.startswith("python_modules/")}
    assert uploaded == vendored
    assert "python_modules/.synced" in uploaded and "python_modules/pyvenv.cfg" in uploaded
    src = {p.relative_to(project / "src").as_posix() for p in (project / "src").rglob("*.py")}
    assert upload.files() - uploaded == src
    assert upload.total().endswith("KiB") and "gzip" in upload.total()
    assert "deploy guard: python_modules/ holds every pinned package" in upload.output


def test_a_dependency_left_out_of_python_modules_is_reported(tmp_path):
    project = bundle.stage(tmp_path / "project", skip=("snowballstemmer",), guard=False)
    upload = bundle.dry_run(project, tmp_path / "upload")
    assert not any(f.startswith("python_modules/snowballstemmer") for f in upload.files())
    report = check_upload(project, upload.files())
    assert not report.ok
    assert report.walk.missing == {"snowballstemmer": "multillm_edge.search.stems"}
    assert "missing module 'snowballstemmer'" in report.describe()


def test_a_module_the_upload_lacks_is_reported(deploy_bundle):
    project, upload = deploy_bundle
    dropped = "python_modules/snowballstemmer/greek_stemmer.py"
    report = check_upload(project, upload.files() - {dropped})
    assert report.not_uploaded == {dropped} and not report.ok


def test_check_removes_its_temporary_folder(tmp_path, monkeypatch, capsys):
    """`tools/bundle.py check` without --outdir leaves nothing in the temporary folder
    (issue 39: /tmp/edge-upload-* stayed behind); with --outdir the upload is kept."""
    spec = importlib.util.spec_from_file_location("bundle_tool", bundle.ROOT / "tools" / "bundle.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    monkeypatch.setattr(tool, "ROOT", bundle.stage(tmp_path / "project"))
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    assert tool.main(["check"]) == 0
    assert "every module the Worker imports is uploaded" in capsys.readouterr().out
    assert list(temp.iterdir()) == []
    assert tool.main(["check", "--outdir", str(tmp_path / "kept")]) == 0
    assert (tmp_path / "kept" / "entry.py").is_file()
