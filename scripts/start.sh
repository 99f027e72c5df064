#!/usr/bin/env bash
# `npm start`: install what the Worker needs (not the test tiers), create .dev.vars and
# the demo credentials once (reused by later starts), run the Worker locally.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ ! -f .dev.vars ]; then
  cp .dev.vars.example .dev.vars
  echo "MEDIA_SIGNING_SECRET=$(.venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(32))')" >> .dev.vars
  echo "created .dev.vars from .dev.vars.example (add your provider keys there)"
fi
creds=$(.venv/bin/python tools/demo_credentials.py)
field() { .venv/bin/python -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$creds" "$1"; }
if [ "$(field reused)" = True ]; then made="reused from .wrangler/demo-credentials.json"; else made="created now, kept in .wrangler/demo-credentials.json"; fi
cat <<TXT

Demo credentials (principal "demo"; $made):
  roleplay key:  $(field key)
  session id:    $(field session_id)
Try:  curl -s localhost:${PORT:-8787}/healthz

TXT
exec node runner/dev.mjs
