#!/usr/bin/env bash
# `npm run deploy [-- <wrangler deploy options>]`: vendor the Worker's pinned Python
# packages into python_modules/ and upload, as Cloudflare's Python examples do
# (`uv run pywrangler deploy`). pywrangler needs uv; without it this refuses, before
# anything is written.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v uv >/dev/null 2>&1; then
  cat >&2 <<'TXT'
deploy: `uv` is not installed. The deploy runs pywrangler (workers-py, pinned in
pyproject.toml), which vendors the Worker's Python packages with uv before wrangler
uploads them; plain `wrangler deploy` would upload a Worker that fails at import.
Install uv (https://docs.astral.sh/uv/getting-started/installation/, or
`python3 -m pip install --user uv`), then run `npm run deploy` again.
Offline, `python3 tools/bundle.py check` dry-runs the same upload from the pinned wheels.
TXT
  exit 1
fi
# The deploy tooling gets its own venv, locked by uv.lock; .venv stays the tests'.
export UV_PROJECT_ENVIRONMENT="${UV_PROJECT_ENVIRONMENT:-.venv-deploy}"
exec uv run --locked --only-group dev pywrangler deploy "$@"
