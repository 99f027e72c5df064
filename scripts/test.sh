#!/usr/bin/env bash
# `npm test`: install (the Worker's needs, the test dependencies, the browser tier's
# Chromium and SillyTavern), then run every tier (hostile, unit, handlers, end to end,
# clients, browser).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-browser.sh
exec .venv/bin/python -m pytest "$@"
