"""python_modules/ laid out offline from the pinned wheels, as `pywrangler sync` lays it
out (devkit.bundle; docs/deploy.md)."""

from __future__ import annotations

import re
import shutil
import zipfile

import pytest

from devkit import bundle


@pytest.fixture
def project(tmp_path):
    for name in ("pyproject.toml", "wrangler.toml"):
        shutil.copy(bundle.ROOT / name, tmp_path / name)
    return tmp_path


def pinned(text: str, project: str) -> str:
    """A pin as scripts/setup.sh reads it (the wheels it downloads)."""
    return re.search(rf'"{project}==([^"]+)"', text)[1]


def test_pins_are_the_projects_dependencies_with_the_runtime_sdk():
    text = (bundle.ROOT / "pyproject.toml").read_text()
    assert bundle.pins() == {p: pinned(text, p) for p in ("workers-runtime-sdk", "snowballstemmer")}
    assert bundle.tooling_version() == pinned(text, "workers-py")


def test_an_unpinned_or_sdk_less_dependency_list_is_refused(project):
    text = (project / "pyproject.toml").read_text()
    (project / "pyproject.toml").write_text(text.replace('"snowballstemmer==3.1.1"', '"snowballstemmer>=3"'))
    with pytest.raises(ValueError, match="exact pin"):
        bundle.pins(project / "pyproject.toml")
    (project / "pyproject.toml").write_text(text.replace('"workers-runtime-sdk==1.9.5", ', ""))
    with pytest.raises(ValueError, match="workers-runtime-sdk"):
        bundle.pins(project / "pyproject.toml")


def test_the_layout_is_the_wheels_installed_plus_what_uv_and_sync_add(project):
    dest = bundle.vendor(project)
    got = {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    expected = {".synced", "pyvenv.cfg"}
    for name, version in bundle.pins().items():
        with zipfile.ZipFile(bundle.wheel_file(name, version)) as zf:
            dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
            for member in zf.namelist():
                expected.add(member)
                if member != f"{dist_info}/RECORD":          # the installer appends to it
                    assert got[member] == zf.read(member), member
        expected |= {f"{dist_info}/INSTALLER", f"{dist_info}/REQUESTED"}
        assert got[f"{dist_info}/INSTALLER"] == b"uv"
        record = got[f"{dist_info}/RECORD"].decode().splitlines()
        assert record[-1] == f"{dist_info}/RECORD,,"
        assert any(line.startswith(f"{dist_info}/INSTALLER,sha256=") for line in record)
    assert set(got) == expected                       # no __pycache__, no .pyc, nothing else
    assert got[".synced"] == bundle.tooling_version().encode() and got["pyvenv.cfg"] == b""


def test_a_second_run_replaces_the_directory_and_skip_leaves_a_wheel_out(project):
    dest = bundle.vendor(project)
    (dest / "stale.py").write_text("x = 1\n")
    bundle.vendor(project, skip=("snowballstemmer",))
    assert not (dest / "stale.py").exists() and not (dest / "snowballstemmer").exists()
    assert (dest / "workers" / "__init__.py").is_file()


def test_a_wheel_not_in_the_cache_fails_before_touching_python_modules(project, tmp_path):
    dest = bundle.vendor(project)
    with pytest.raises(FileNotFoundError, match="scripts/setup.sh"):
        bundle.vendor(project, wheels=tmp_path / "empty")
    assert (dest / "snowballstemmer" / "__init__.py").is_file()
