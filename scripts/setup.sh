#!/usr/bin/env bash
# Install everything the Worker, the runner and the tests need (npm + a Python venv).
# Idempotent: each step is skipped while what it installed matches its lock file, so a
# second run (the demo test runs this script inside the suite) costs nothing and never
# empties a node_modules another process is using.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp() { sha256sum "$@" | sha256sum | cut -c1-64; }
want=$(stamp package.json package-lock.json)
if [ "$(cat node_modules/.installed-from 2>/dev/null)" != "$want" ]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$want" > node_modules/.installed-from
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
want=$(stamp requirements-test.txt)
if [ "$(cat .venv/.installed-from 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
  echo "$want" > .venv/.installed-from
fi
# The runtime SDK wheel the runner loads into Pyodide (the pin in pyproject.toml).
sdk=$(sed -n 's/.*"workers-runtime-sdk==\([^"]*\)".*/\1/p' pyproject.toml)
[ -f ".cache/wheels/workers_runtime_sdk-$sdk-py3-none-any.whl" ] || \
  .venv/bin/python -m pip download --quiet --no-deps --only-binary=:all: -d .cache/wheels "workers-runtime-sdk==$sdk"
