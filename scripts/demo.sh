#!/usr/bin/env bash
# `npm run demo`: install, then show reversible context paging end to end with only
# local parts (stand-in provider, local runner, local D1/R2). See tools/demo.py.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "Installing (scripts/setup.sh tests)…"
bash scripts/setup.sh tests
exec .venv/bin/python tools/demo.py "$@"
