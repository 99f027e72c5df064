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
# The pure wheels the runner loads into Pyodide (the pins in pyproject.toml): the runtime
# SDK and the search's stemmer.
for project in workers-runtime-sdk snowballstemmer; do
  v=$(sed -n "s/.*\"$project==\([^\"]*\)\".*/\1/p" pyproject.toml)
  [ -f ".cache/wheels/${project//-/_}-$v-py3-none-any.whl" ] || \
    .venv/bin/python -m pip download --quiet --no-deps --only-binary=:all: -d .cache/wheels "$project==$v"
done
# Browser tier (tests/browser): Debian's Chromium, driven by Playwright's Python package
# (requirements-test.txt; Playwright's own browser download is not used), and
# SillyTavern pinned from npm into a cache outside node_modules (SILLYTAVERN_DIR).
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null
  else
    echo "setup: /usr/bin/chromium is missing; install Debian's chromium package (the browser tier needs it)" >&2
  fi
fi
st_version=1.19.0
st_dir="${SILLYTAVERN_DIR:-.cache/sillytavern}"
if ! grep -qs "\"version\": \"$st_version\"" "$st_dir/node_modules/sillytavern/package.json"; then
  mkdir -p "$st_dir"
  echo '{"private": true}' > "$st_dir/package.json"
  (cd "$st_dir" && npm install --no-audit --no-fund --loglevel=error --no-save "sillytavern@$st_version")
fi
