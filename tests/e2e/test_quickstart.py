"""The README's quick start, as printed: `npm start` (scripts/start.sh) with no provider
key serves the stand-in model and prints the line to paste; then each command of the
section runs in a shell and its output must match the expected lines the README prints
under it (`…` stands for anything). The doc cannot drift from what the edge does."""

import json
import os
import re
import subprocess
import threading
import time
from urllib.parse import urlparse

import httpx
import pytest

from devkit.runner import ROOT, stop_process
from devkit.roleplay import SIGNING_SECRET

SECTION = "## Quick start: page a chat with no provider key"
README_EXPORT = "export KEY=rpk_… SESSION=rps_…"


def quickstart_steps(readme: str) -> list[tuple[str, list[str]]]:
    """The section's `sh` blocks → [(command, the `# ` lines printed under it)]."""
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    steps: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        for line in block.splitlines():
            if line.startswith("# "):
                steps[-1][1].append(line[2:])
            elif line.strip():
                steps.append((line, []))
    return steps


def pattern(expected: str) -> re.Pattern:
    return re.compile(".*?".join(re.escape(part) for part in expected.split("…")))


def unmatched(expected: list[str], output: str) -> list[str]:
    """The expected lines that no output line matches whole, in order."""
    lines, missing, at = output.splitlines(), [], 0
    for want in expected:
        hit = next((k for k in range(at, len(lines)) if pattern(want).fullmatch(lines[k])), None)
        if hit is None:
            missing.append(want)
        else:
            at = hit + 1
    return missing


class Started:
    """`bash scripts/start.sh` in the background, its output collected."""

    def __init__(self, env: dict):
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.proc = subprocess.Popen(["bash", "scripts/start.sh"], cwd=ROOT, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if '"runner":"listening"' in line:
                self.ready.set()

    def json_line(self, kind: str, value: str) -> dict:
        return next(json.loads(line) for line in self.lines
                    if line.startswith("{") and json.loads(line).get(kind) == value)


@pytest.fixture
def started(tmp_path):
    """`npm start` on a free port, isolated state, `.dev.vars.example` as the vars (no
    provider key, as on a fresh clone)."""
    vars_file = tmp_path / "vars.env"
    vars_file.write_text((ROOT / ".dev.vars.example").read_text() + f"\nMEDIA_SIGNING_SECRET={SIGNING_SECRET}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGE_") and k not in ("KEY", "SESSION")}
    env.update(PORT="0", EDGE_STATE_DIR=str(tmp_path / "state"), EDGE_VARS_FILE=str(vars_file))
    run = Started(env)
    try:
        assert run.ready.wait(300), "\n".join(run.lines[-30:])
        yield run
    finally:
        stop_process(run.proc)


@pytest.mark.slow
def test_the_quick_start_runs_as_the_readme_prints_it(started, tmp_path):
    printed = "\n".join(started.lines)
    url = started.json_line("runner", "listening")["url"]
    standin_url = started.json_line("runner", "standin")["url"]
    assert "stand-in model standin:roleplay" in printed and "\n  python3 tools/long_chat.py\n" in printed
    [export] = [line.strip() for line in started.lines if line.strip().startswith("export KEY=rpk_")]
    export = export.replace("http://localhost:0", url)      # PORT=0: the port the runner took
    creds = dict(part.split("=", 1) for part in export.split()[1:])
    # The demo key lists the stand-in (README: Quick start).
    models = httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {creds['KEY']}"}).json()
    assert "standin:roleplay" in [m["id"] for m in models["data"]]

    steps = quickstart_steps((ROOT / "README.md").read_text())
    assert steps[0] == (README_EXPORT, [])
    assert len(steps) >= 6          # the export line, then one command per step (and the tool loop)
    (tmp_path / "tools").symlink_to(ROOT / "tools")          # the commands run from the root
    failed = []
    for command, expected in steps[1:]:
        line = command.replace("localhost:8787", urlparse(url).netloc)
        done = subprocess.run(["bash", "-c", f"{export}; {line}"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
        missing = unmatched(expected, done.stdout)
        if done.returncode != 0 or missing or not expected:
            failed.append(f"$ {command}\nexit {done.returncode}; expected {missing}\ngot:\n{done.stdout}{done.stderr}")
    assert not failed, "\n\n".join(failed)

    started.proc.terminate()
    started.proc.wait(30)
    time.sleep(0.5)
    with pytest.raises(httpx.TransportError):                  # the stand-in went with the runner
        httpx.get(standin_url + "/v1/chat/completions", timeout=5)
