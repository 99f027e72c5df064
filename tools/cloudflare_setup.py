#!/usr/bin/env python3
"""`npm run cloudflare:setup [-- --bucket NAME]`: the Cloudflare resources the Worker binds.

Finds the D1 database named by wrangler.toml's `database_name` (creating it when the
account has none by that name) and writes its `database_id` into wrangler.toml: remote
migrations and the admin CLI (`wrangler d1 … --remote`) need the id. Finds the R2 bucket
named by `bucket_name` (creating it when absent); `--bucket NAME` binds an existing bucket
of another name instead and writes that name. Running it again changes nothing.
Needs `npx wrangler login` (or CLOUDFLARE_API_TOKEN) first. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
D1_BINDING, R2_BINDING = "INTELLIGENCE_DB", "multillm_media"
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]\Z")


class SetupError(Exception):
    pass


def wrangler_cmd() -> list[str]:
    """WRANGLER (tests: a stand-in), else the project's wrangler."""
    if os.environ.get("WRANGLER"):
        return [os.environ["WRANGLER"]]
    return ["node", str(ROOT / "node_modules" / "wrangler" / "bin" / "wrangler.js")]


def wrangler(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "WRANGLER_SEND_METRICS": "false"}
    proc = subprocess.run([*wrangler_cmd(), *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise SetupError(f"wrangler {' '.join(args)} failed:\n" + "\n".join(tail))
    return proc


def _block(config: dict, table: str, binding: str) -> dict:
    found = [b for b in config.get(table, []) if b.get("binding") == binding]
    if len(found) != 1:
        raise SetupError(f"wrangler.toml must declare one [[{table}]] with binding = \"{binding}\"")
    return found[0]


def find_database(name: str) -> str | None:
    out = wrangler("d1", "list", "--json").stdout
    dbs = json.loads(out[out.index("["):])
    return next((db["uuid"] for db in dbs if db.get("name") == name), None)


def ensure_database(name: str) -> tuple[str, bool]:
    """(its id, whether it was created now)."""
    uuid = find_database(name)
    if uuid:
        return uuid, False
    wrangler("d1", "create", name)
    uuid = find_database(name)
    if not uuid:
        raise SetupError(f"wrangler d1 create {name} did not make a database of that name")
    return uuid, True


def ensure_bucket(name: str) -> bool:
    """Whether the bucket was created now."""
    if wrangler("r2", "bucket", "info", name, check=False).returncode == 0:
        return False
    wrangler("r2", "bucket", "create", name)
    return True


def write_field(toml: str, table: str, binding: str, field: str, value: str) -> str:
    """`toml` with `field = "value"` set in the [[table]] block of `binding` (added after
    its binding line when absent); every other byte kept."""
    blocks = list(re.finditer(rf"(?m)^\[\[{table}\]\]\n(?:(?!^\[).*\n?)*", toml))
    for m in blocks:
        block = m.group(0)
        if not re.search(rf'(?m)^binding\s*=\s*"{re.escape(binding)}"', block):
            continue
        line = f'{field} = "{value}"'
        if re.search(rf"(?m)^{field}\s*=", block):
            new = re.sub(rf"(?m)^{field}\s*=.*$", lambda _: line, block, count=1)
        else:
            new = re.sub(r'(?m)^(binding\s*=.*)$', lambda b: b.group(1) + "\n" + line, block, count=1)
        return toml[:m.start()] + new + toml[m.end():]
    raise SetupError(f"wrangler.toml has no [[{table}]] with binding = \"{binding}\"")


def setup(config_path: Path, bucket: str | None) -> list[str]:
    """Ensure both resources; write what changed into `config_path`. Returns the report."""
    text = config_path.read_text()
    config = tomllib.loads(text)
    d1, r2 = _block(config, "d1_databases", D1_BINDING), _block(config, "r2_buckets", R2_BINDING)
    report = []
    uuid, created = ensure_database(d1["database_name"])
    report.append(f"D1 {d1['database_name']}: {'created' if created else 'exists'} ({uuid})")
    if d1.get("database_id") not in (None, uuid):
        raise SetupError(f"wrangler.toml's database_id is another database's than "
                         f"{d1['database_name']} ({uuid}): fix one of them by hand")
    text = write_field(text, "d1_databases", D1_BINDING, "database_id", uuid)
    name = bucket or r2["bucket_name"]
    if not _BUCKET_NAME.match(name):
        raise SetupError(f"{name!r} is not an R2 bucket name (lowercase letters, digits, hyphens)")
    created = ensure_bucket(name)
    report.append(f"R2 {name}: {'created' if created else 'exists'}")
    text = write_field(text, "r2_buckets", R2_BINDING, "bucket_name", name)
    if text != config_path.read_text():
        config_path.write_text(text)
        report.append(f"wrangler.toml: database_id = \"{uuid}\", bucket_name = \"{name}\" written")
    else:
        report.append("wrangler.toml: already up to date")
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bucket", help="an existing R2 bucket to bind instead of bucket_name")
    parser.add_argument("--config", type=Path, default=ROOT / "wrangler.toml", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        for line in setup(args.config, args.bucket):
            print(line)
    except SetupError as e:
        print(f"cloudflare:setup: {e}", file=sys.stderr)
        return 1
    print("next: npx wrangler d1 migrations apply INTELLIGENCE_DB --remote")
    return 0


if __name__ == "__main__":
    sys.exit(main())
