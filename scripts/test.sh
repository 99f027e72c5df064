#!/usr/bin/env bash
# `npm test`: install, then run every tier (unit, end to end, clients).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
