"""Run an example of examples/ as its README line does: a process of its own, from the
repository root, the roleplay key in its environment."""

from __future__ import annotations

import os
import subprocess
import sys

from devkit.runner import ROOT


def run_example(module: str, *args: str, key: str | None = None, as_file: bool = False,
                timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m examples.<module> args…` (``as_file``: `python examples/<module>.py`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("ROLEPLAY_KEY", "EDGE_URL", "PYTHONPATH")}
    if key is not None:
        env["ROLEPLAY_KEY"] = key
    target = [str(ROOT / "examples" / f"{module}.py")] if as_file else ["-m", f"examples.{module}"]
    return subprocess.run([sys.executable, *target, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def reported(stdout: str) -> tuple[str, dict]:
    """An example's output → (the reply's text, its `# name: value` lines)."""
    text, notes = [], {}
    for line in stdout.splitlines():
        if line.startswith("# ") and ": " in line:
            name, value = line[2:].split(": ", 1)
            notes.setdefault(name, []).append(value)
        else:
            text.append(line)
    return "\n".join(text), notes
