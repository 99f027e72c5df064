#!/usr/bin/env python3
"""`npm start`'s demo credentials in the local D1, made once and reused.

The first start creates principal `demo` (a key, a policy granting chat, a session) and
registers two models; it keeps the key and session in .wrangler/demo-credentials.json
(git-ignored, local state only; in EDGE_STATE_DIR when set). Later starts check both are still valid in the local
D1 (one statement) and reuse them; a wiped state or a revoked key makes new ones.
With no provider key configured, `npm start` serves the stand-in provider
(devkit/standin.py): its model is registered too, on any start that lacks it, and
removed by a start that finds a provider key.
Prints the credentials as JSON on stdout, `standin` the stand-in's model id (or null).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
import admin  # noqa: E402
from devkit import standin  # noqa: E402

# EDGE_STATE_DIR: the runner's local state (tests: an isolated one), else wrangler's default.
STATE = os.environ.get("EDGE_STATE_DIR") or None
CREDENTIALS = (Path(STATE) if STATE else admin.REPO_ROOT / ".wrangler") / "demo-credentials.json"
PRINCIPAL = "demo"
MODELS = (("openai:gpt-4o-mini", 128000, 16384), ("anthropic:claude-sonnet-4-5", 200000, 64000))

SQL_STILL_VALID = """
SELECT (SELECT COUNT(*) FROM roleplay_keys WHERE key_sha256 = ?1 AND principal = ?3
          AND revoked_at IS NULL)
     + (SELECT COUNT(*) FROM roleplay_sessions WHERE session_id = ?2 AND principal = ?3
          AND ended_at IS NULL) AS valid,
       (SELECT COUNT(*) FROM models WHERE model = ?4) AS standin
"""
STANDIN_MODEL = (standin.MODEL, standin.WINDOW_TOKENS, standin.MAX_OUTPUT_TOKENS)
# Once a provider key is set the stand-in is not served: its model goes, or /healthz
# would name `standin` under missing_providers.
SQL_DROP_STANDIN = "DELETE FROM models WHERE model = ?1"


def _args():
    return type("Args", (), {"principal": PRINCIPAL, "remote": False, "revision": 1,
                             "grants": ["chat"], "retention": "standard"})()


async def set_models(db, models) -> None:
    args = _args()
    for args.model, args.input_tokens, args.max_output_tokens in models:
        await admin.cmd_model_set(db, args)


async def still_valid(db, creds: dict) -> tuple[bool, bool]:
    """(the key and session still hold, the stand-in's model is registered)."""
    row = await db.first(SQL_STILL_VALID, [admin.hashlib.sha256(creds["key"].encode()).hexdigest(),
                                           creds["session_id"], PRINCIPAL, standin.MODEL])
    return bool(row) and row["valid"] == 2, bool(row) and row["standin"] > 0


async def create(db, models) -> dict:
    args = _args()
    await admin.cmd_policy_set(db, args)
    key = (await admin.cmd_key_create(db, args))[0]["key"]
    session = (await admin.cmd_session_create(db, args))[0]["session_id"]
    await set_models(db, models)
    return {"key": key, "session_id": session}


async def credentials(with_standin: bool) -> tuple[dict, bool]:
    """(the credentials, whether they were reused)."""
    db = admin.WranglerExecutor(persist_to=STATE)
    try:
        creds = json.loads(CREDENTIALS.read_text())
        valid, registered = await still_valid(db, creds)
        if valid:
            if with_standin and not registered:
                await set_models(db, [STANDIN_MODEL])
            elif registered and not with_standin:
                await db.run(SQL_DROP_STANDIN, [standin.MODEL])
            return creds, True
    except (OSError, ValueError, KeyError, TypeError):
        pass
    creds = await create(db, MODELS + ((STANDIN_MODEL,) if with_standin else ()))
    CREDENTIALS.parent.mkdir(parents=True, exist_ok=True)
    CREDENTIALS.write_text(json.dumps(creds))
    return creds, False


def main() -> int:
    try:
        admin.apply_local_migrations(STATE)
        served = standin.wanted(admin.REPO_ROOT, Path(os.environ["EDGE_VARS_FILE"])
                                if os.environ.get("EDGE_VARS_FILE") else None)
        creds, reused = asyncio.run(credentials(served))
    except admin.AdminError as e:
        print(f"demo credentials: {e}", file=sys.stderr)
        return 1
    print(json.dumps({**creds, "reused": reused, "standin": standin.MODEL if served else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
