#!/usr/bin/env bash
# Install what the Worker and its local runner need: npm packages (wrangler, Pyodide),
# a Python venv for the admin CLI and the examples (requirements-examples.txt), and the
# pinned wheels the runner loads into Pyodide.
# `setup.sh tests` adds the test dependencies (requirements-test.txt); the browser tier's
# Chromium and SillyTavern are scripts/setup-browser.sh (`npm run setup:browser`).
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
want=$(stamp requirements-examples.txt)
if [ "$(cat .venv/.examples-from 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-examples.txt
  echo "$want" > .venv/.examples-from
fi
if [ "${1:-}" = tests ]; then
  want=$(stamp requirements-test.txt requirements-examples.txt)
  if [ "$(cat .venv/.installed-from 2>/dev/null)" != "$want" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
    echo "$want" > .venv/.installed-from
  fi
fi
# The pure wheels the runner loads into Pyodide (the pins in pyproject.toml): the runtime
# SDK and the search's stemmer.
for project in workers-runtime-sdk snowballstemmer; do
  v=$(sed -n "s/.*\"$project==\([^\"]*\)\".*/\1/p" pyproject.toml)
  [ -f ".cache/wheels/${project//-/_}-$v-py3-none-any.whl" ] || \
    .venv/bin/python -m pip download --quiet --no-deps --only-binary=:all: -d .cache/wheels "$project==$v"
done
