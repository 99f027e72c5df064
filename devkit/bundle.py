"""The deploy bundle, offline: `python_modules/` laid out as `pywrangler sync` does, then
wrangler's dry run of the upload (docs/deploy.md).

`pywrangler sync` (workers-py 1.17.9, `pywrangler/sync.py`) resolves `[project].dependencies`
plus `workers-runtime-sdk` for Pyodide, `uv pip install`s them into an emptied Pyodide venv,
then replaces `python_modules/` with a copy of that venv's site-packages, touches
`python_modules/pyvenv.cfg` and writes its sync token `python_modules/.synced` (the
workers-py version). It keeps `.dist-info`, compiles no bytecode (so no `__pycache__`) and
excludes nothing; wrangler then uploads every file under `python_modules/` but `**/*.pyc`
(its `python_modules.exclude` default). Here the same wheels come from `.cache/wheels`
(scripts/setup.sh downloads the pins), so no network is needed.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / ".cache" / "wheels"
SDK = "workers-runtime-sdk"          # pywrangler always adds it (resolve.MANAGED_SDK_PACKAGE)
TOOLING = "workers-py"               # its version is what sync writes to .synced
INSTALLER = b"uv"                    # uv marks what it installs: INSTALLER and REQUESTED
WRANGLER = ROOT / "node_modules" / "wrangler" / "bin" / "wrangler.js"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def exact_pins(requirements: list[str]) -> dict[str, str]:
    """name -> version for requirements that must each be `name==version`."""
    pins = {}
    for req in requirements:
        m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.+!-]+)\s*", req)
        if not m:
            raise ValueError(f"{req!r}: offline vendoring needs an exact pin (name==version)")
        pins[canonical(m[1])] = m[2]
    return pins


def pins(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """What sync installs: `[project].dependencies`, which must pin the runtime SDK too
    (pywrangler adds it unpinned, i.e. the newest, when the project does not)."""
    found = exact_pins(tomllib.loads(pyproject.read_text())["project"]["dependencies"])
    if SDK not in found:
        raise ValueError(f"pyproject.toml must pin {SDK}: production and the runner run the same SDK")
    return found


def tooling_version(pyproject: Path = ROOT / "pyproject.toml") -> str:
    groups = tomllib.loads(pyproject.read_text()).get("dependency-groups", {})
    return exact_pins([r for r in groups.get("dev", []) if canonical(r).startswith(TOOLING)])[TOOLING]


def wheel_file(name: str, version: str, wheels: Path = WHEELS) -> Path:
    path = wheels / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    if not path.is_file():
        raise FileNotFoundError(f"{path.name} is not in {wheels}: run scripts/setup.sh (it downloads the pins)")
    return path


def _record_line(rel: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}\n"


def install_wheel(wheel: Path, site: Path) -> str:
    """Unpack a pure wheel into `site` as an installer does; returns its .dist-info name."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        if any(".data/" in n for n in names):
            raise ValueError(f"{wheel.name}: .data/ (scripts, headers) is not handled here")
        if any(n.endswith(".pyc") for n in names):
            raise ValueError(f"{wheel.name}: ships bytecode, which wrangler would not upload")
        zf.extractall(site)
    [dist_info] = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
    added = {"INSTALLER": INSTALLER, "REQUESTED": b""}
    record = site / dist_info / "RECORD"
    lines = record.read_text().splitlines(keepends=True)
    for fname, data in added.items():
        (site / dist_info / fname).write_bytes(data)
        lines.insert(-1 if lines and lines[-1].startswith(f"{dist_info}/RECORD,") else len(lines),
                     _record_line(f"{dist_info}/{fname}", data))
    record.write_text("".join(lines))
    return dist_info


def vendor(project: Path = ROOT, skip: tuple[str, ...] = (), wheels: Path = WHEELS) -> Path:
    """Replace `project/python_modules` with the pinned wheels installed (`skip`: leave
    some out, for tests proving the check notices; "*": none). No network."""
    wanted = {n: v for n, v in pins(project / "pyproject.toml").items()
              if n not in skip and "*" not in skip}
    files = {n: wheel_file(n, v, wheels) for n, v in wanted.items()}      # fail before deleting
    dest = project / "python_modules"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir()
    for wheel in files.values():
        install_wheel(wheel, dest)
    (dest / "pyvenv.cfg").touch()
    (dest / ".synced").write_text(tooling_version(project / "pyproject.toml"))
    return dest


def stage(dest: Path, skip: tuple[str, ...] = (), guard: bool = True) -> Path:
    """A copy of the deployable project (config, pins, src/, the deploy guard) with
    python_modules/ laid out, so a test never writes python_modules/ into the working
    tree. `guard=False` drops wrangler.toml's `[build]` table (the guard), for tests of
    what the import check reports about an incomplete upload."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "tools").mkdir(exist_ok=True)
    for name in ("wrangler.toml", "pyproject.toml", "tools/deploy_guard.py"):
        shutil.copy2(ROOT / name, dest / name)
    if not guard:
        toml = (dest / "wrangler.toml").read_text()
        (dest / "wrangler.toml").write_text(re.sub(r"(?ms)^\[build\]\n.*?(?=^\[)", "", toml))
    shutil.copytree(ROOT / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__"))
    vendor(dest, skip=skip)
    return dest


@dataclass
class DryRun:
    outdir: Path
    output: str            # wrangler's table and its "Total Upload" line

    def files(self) -> set[str]:
        """Every module the upload holds, by its name in the upload (wrangler's README
        in the outdir is not one)."""
        out = {p.relative_to(self.outdir).as_posix() for p in self.outdir.rglob("*") if p.is_file()}
        return out - {"README.md"}

    def total(self) -> str:
        m = re.search(r"Total Upload: ([^\n]+)", self.output)
        return m[1].strip() if m else ""


def dry_run(project: Path, outdir: Path) -> DryRun:
    """`wrangler deploy --dry-run --outdir`: writes what deploy would upload, uploads nothing."""
    env = {"CI": "true", "WRANGLER_SEND_METRICS": "false", "PATH": os.environ["PATH"],
           "HOME": os.environ.get("HOME", str(project))}
    r = subprocess.run(["node", str(WRANGLER), "deploy", "--dry-run", "--outdir", str(outdir)],
                       cwd=project, env=env, capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        raise RuntimeError(f"wrangler deploy --dry-run failed:\n{r.stdout}\n{r.stderr}")
    return DryRun(outdir, r.stdout)
