#!/usr/bin/env bash
# `npm run setup:browser` (and `npm test`): the browser tier (tests/browser). Debian's
# Chromium, driven by Playwright's Python package (requirements-test.txt; Playwright's own
# browser download is not used), and SillyTavern pinned from npm into a cache outside
# node_modules (SILLYTAVERN_DIR, default .cache/sillytavern; ~430 MB, once). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh tests
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
