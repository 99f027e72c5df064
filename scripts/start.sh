#!/usr/bin/env bash
# `npm start`: install what the Worker needs (not the test tiers), create .dev.vars and
# the demo credentials once (reused by later starts), run the Worker locally; with no
# provider key configured, the runner also serves the stand-in model (devkit/standin.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -z "${EDGE_VARS_FILE:-}" ] && [ ! -f .dev.vars ]; then   # EDGE_VARS_FILE (tests) replaces it
  cp .dev.vars.example .dev.vars
  echo "MEDIA_SIGNING_SECRET=$(.venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(32))')" >> .dev.vars
  echo "created .dev.vars from .dev.vars.example (add your provider keys there)"
fi
creds=$(.venv/bin/python tools/demo_credentials.py)
field() { .venv/bin/python -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$creds" "$1"; }
if [ "$(field reused)" = True ]; then made="reused from .wrangler/demo-credentials.json"; else made="created now, kept in .wrangler/demo-credentials.json"; fi
standin=$(field standin)
cat <<TXT

Demo credentials (principal "demo"; $made):
  roleplay key:  $(field key)
  session id:    $(field session_id)
The README's local commands read them from \$KEY and \$SESSION; paste into your shell:
  export KEY=$(field key) SESSION=$(field session_id)${PORT:+ EDGE_URL=http://localhost:$PORT}
TXT
if [ "$standin" != None ]; then
  cat <<TXT
No provider key in .dev.vars: this runner also serves the stand-in model $standin (no key,
no tokens; its reply says what reached it). A chat long enough to page (README: Quick start):
  python3 tools/long_chat.py
TXT
  export EDGE_STANDIN=1
else
  echo "A provider key is set in .dev.vars: no stand-in model (GET /v1/models lists yours)."
fi
cat <<TXT
Edits to .dev.vars take effect at the next start (Ctrl-C, then npm start again).
Check:  curl -s localhost:${PORT:-8787}/healthz

TXT
exec node runner/dev.mjs
