"""The examples as a newcomer runs them after `npm start` (README: Examples), against
the runner's stand-in model: `--history FILE` continues one chat in one session, a
failed run stores nothing and leaves no session open, and an HTTP or connection error
is one line with its status, code and message — never a traceback. So is the quick
start's tools/long_chat.py."""

import json
import os
import subprocess
import sys

import pytest

from devkit import roleplay as rp
from devkit import standin
from devkit.runner import ROOT, Edge
from tests.support.examples import reported, run_example

EXAMPLES = [("context_tools",), ("retrieve_loop",), ("context_tools_sdks", "--api", "messages"),
            ("context_tools_sdks", "--api", "responses")]


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    vars = {"CONTEXT_PAGING_ENABLED": "true", "MEDIA_SIGNING_SECRET": rp.SIGNING_SECRET}
    with Edge(tmp_path_factory.mktemp("examples"), vars=vars, extra_env={"EDGE_STANDIN": "1"}) as e:
        rp.set_model(e, standin.MODEL, standin.WINDOW_TOKENS, standin.MAX_OUTPUT_TOKENS)
        yield e


def sessions(edge, principal: str) -> list[dict]:
    return edge.sql("SELECT session_id, ended_at FROM roleplay_sessions WHERE principal = ?1", principal)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e[-1])
def test_history_continues_the_chat_in_one_session(edge, tmp_path, example):
    key, principal = rp.seed_principal(edge)
    history = tmp_path / "chat.json"
    args = (*example, "--edge-url", edge.url, "--model", standin.MODEL, "--history", str(history))
    first = run_example(*args, "Hello, Aurore.", key=key)
    second = run_example(*args, "Where to now?", key=key)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    [one] = sessions(edge, principal)                     # one session served both runs
    assert reported(first.stdout)[1]["session"] == reported(second.stdout)[1]["session"] == [one["session_id"]]
    # The second turn carried the first: the stand-in saw both user messages and its reply.
    assert reported(second.stdout)[0] == \
        '[stand-in] 3 messages reached me; no marker; 0 recalled moments; latest user message: "Where to now?".'
    saved = json.loads(history.read_text())
    assert saved["session_id"] == one["session_id"] and [m["role"] for m in saved["messages"]] == [
        "user", "assistant", "user", "assistant"]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e[-1])
def test_a_failed_run_is_one_line_and_leaves_no_session(edge, tmp_path, example):
    key, principal = rp.seed_principal(edge)
    history = tmp_path / "chat.json"
    done = run_example(*example, "--edge-url", edge.url, "--model", "nowhere:model",
                       "--history", str(history), "Hello?", key=key)
    assert done.returncode == 1 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("error: 400 unknown_model: ") and "Traceback" not in done.stderr
    assert not history.exists()
    # The session the run opened is ended: failed runs do not pile sessions up.
    assert [s["ended_at"] is not None for s in sessions(edge, principal)] == [True]


def test_an_unreachable_edge_is_one_line(tmp_path):
    done = run_example("context_tools", "--edge-url", "http://127.0.0.1:9", "--model", standin.MODEL,
                       "Hello?", key="rpk_unused")
    assert done.returncode == 1 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("error: cannot reach the edge: ConnectError:")


def test_a_refused_key_is_one_line(edge):
    done = run_example("retrieve_loop", "--edge-url", edge.url, "--model", standin.MODEL, "Hello?",
                       key="rpk_not_a_key_the_edge_knows")
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("error: 4") and "Traceback" not in done.stderr


def test_the_quick_starts_chat_says_what_is_missing_in_one_line(tmp_path):
    """tools/long_chat.py (README: Quick start): no credentials, or no edge, is one line."""
    env = {k: v for k, v in os.environ.items() if k not in ("KEY", "SESSION", "EDGE_URL")}
    command = [sys.executable, str(ROOT / "tools" / "long_chat.py")]
    bare = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert bare.returncode == 2 and "set KEY and SESSION (npm start prints them)" in bare.stderr
    env.update(KEY="rpk_x", SESSION="rps_x", EDGE_URL="http://127.0.0.1:9")
    away = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert away.returncode == 1 and away.stdout == "" and not (tmp_path / "answer.json").exists()
    assert away.stderr.splitlines() == ["error: cannot reach the edge: [Errno 111] Connection refused"]
