#!/usr/bin/env bash
# `npm start`: install, create demo credentials in the local state, run the Worker locally.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ ! -f .dev.vars ]; then
  cp .dev.vars.example .dev.vars
  echo "MEDIA_SIGNING_SECRET=$(.venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(32))')" >> .dev.vars
  echo "created .dev.vars from .dev.vars.example (add your provider keys there)"
fi
admin() { .venv/bin/python tools/admin.py --local --json "$@"; }
key=$(admin key create --principal demo | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["key"])')
admin --no-migrate policy set --principal demo --revision 1 --grants chat --retention standard >/dev/null
session=$(admin --no-migrate session create --principal demo | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["session_id"])')
admin --no-migrate model set openai:gpt-4o-mini --input-tokens 128000 --max-output-tokens 16384 >/dev/null
admin --no-migrate model set anthropic:claude-sonnet-4-5 --input-tokens 200000 --max-output-tokens 64000 >/dev/null
cat <<TXT

Demo credentials (principal "demo"; the key is shown only now):
  roleplay key:  $key
  session id:    $session
Try:  curl -s localhost:${PORT:-8787}/healthz

TXT
exec node runner/dev.mjs
