#!/usr/bin/env bash
# Install everything the Worker, the runner and the tests need (npm + a Python venv).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -f package-lock.json ]; then npm ci --no-audit --no-fund --loglevel=error; else npm install --no-audit --no-fund --loglevel=error; fi
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
# The runtime SDK wheel the runner loads into Pyodide (the pin in pyproject.toml).
sdk=$(sed -n 's/.*"workers-runtime-sdk==\([^"]*\)".*/\1/p' pyproject.toml)
[ -f ".cache/wheels/workers_runtime_sdk-$sdk-py3-none-any.whl" ] || \
  .venv/bin/python -m pip download --quiet --no-deps --only-binary=:all: -d .cache/wheels "workers-runtime-sdk==$sdk"
