#!/usr/bin/env python3
"""The deploy guard: wrangler.toml's `[build] command`, run by every `wrangler deploy`
(and `--dry-run`, `versions upload`) before it bundles.

Plain `wrangler deploy` uploads `src/` and whatever `python_modules/` holds: without the
pinned packages vendored there (`workers`, `snowballstemmer`), the Worker it uploads fails
at import. `npm run deploy` (pywrangler) vendors them first; this refuses an upload whose
`python_modules/` lacks any pin of `[project].dependencies`, or holds another version.
Standard library only: it runs from the project root with the deployer's `python3`.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(pyproject: Path) -> dict[str, str]:
    out = {}
    for req in tomllib.loads(pyproject.read_text())["project"]["dependencies"]:
        m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.+!-]+)\s*", req)
        if m:
            out[canonical(m[1])] = m[2]
    return out


def vendored(modules: Path) -> dict[str, str]:
    """name -> version of each distribution installed in `modules` (its .dist-info)."""
    found = {}
    for info in modules.glob("*.dist-info") if modules.is_dir() else ():
        name, _, version = info.name[: -len(".dist-info")].rpartition("-")
        found[canonical(name)] = version
    return found


def missing(project: Path) -> list[str]:
    have = vendored(project / "python_modules")
    return [f"{n}=={v}" for n, v in pins(project / "pyproject.toml").items() if have.get(n) != v]


def main() -> int:
    lacking = missing(Path.cwd())
    if not lacking:
        print("deploy guard: python_modules/ holds every pinned package")
        return 0
    print(f"deploy guard: python_modules/ lacks {', '.join(lacking)}: the Worker would fail at "
          "import. Deploy with `npm run deploy` (pywrangler vendors the pins, then runs wrangler "
          "deploy); offline, `python3 tools/bundle.py vendor` lays them out.", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
