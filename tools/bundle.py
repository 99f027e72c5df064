#!/usr/bin/env python3
"""The deploy bundle, offline (docs/deploy.md).

    python3 tools/bundle.py vendor            lay out python_modules/ as `pywrangler sync` does
    python3 tools/bundle.py check [--outdir DIR]
                                              vendor, `wrangler deploy --dry-run --outdir DIR`,
                                              then check every imported module is uploaded;
                                              without --outdir, in a temporary folder it removes

`check` exits 1 when the Worker imports a module the upload lacks. Run the upload itself
with `EDGE_BUNDLE_DIR=DIR npm run dev`. Needs no network: the wheels come from
.cache/wheels (scripts/setup.sh downloads the pins).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from devkit import bundle  # noqa: E402
from devkit.imports import check_upload  # noqa: E402


def vendor() -> int:
    dest = bundle.vendor(ROOT)
    files = [p for p in dest.rglob("*") if p.is_file()]
    print(f"python_modules/: {len(files)} files from {', '.join(f'{n}=={v}' for n, v in bundle.pins().items())}")
    return 0


def check(outdir: Path, kept: bool = True) -> int:
    bundle.vendor(ROOT)
    upload = bundle.dry_run(ROOT, outdir)
    report = check_upload(ROOT, upload.files())
    w = report.walk
    where = outdir if kept else "a temporary folder (removed after the check; --outdir DIR keeps it)"
    print(f"upload: {len(upload.files())} modules in {where}; Total Upload: {upload.total()}")
    print(f"imported: {len(w.files)} modules of the upload, {len(w.provided)} from Pyodide or the runtime, "
          f"optional and absent: {', '.join(sorted(w.optional)) or 'none'}")
    if not report.ok:
        print(report.describe(), file=sys.stderr)
        return 1
    print("every module the Worker imports is uploaded")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("vendor")
    c = sub.add_parser("check")
    c.add_argument("--outdir", type=Path, help="dry-run output directory (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.command == "vendor":
        return vendor()
    if args.outdir:
        return check(args.outdir)
    with tempfile.TemporaryDirectory(prefix="edge-upload-") as tmp:
        return check(Path(tmp), kept=False)


if __name__ == "__main__":
    sys.exit(main())
