"""The SillyTavern extension's sliding window (clients/sillytavern/window.js) under
`node --test`: pure functions, no SillyTavern or browser needed."""

from __future__ import annotations

import subprocess

from devkit.runner import ROOT


def test_window_logic_under_node():
    r = subprocess.run(["node", "--test", str(ROOT / "tests" / "browser" / "window.test.mjs")],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "# fail 0" in r.stdout and "# pass 7" in r.stdout


def test_stream_head_reading_under_node():
    """The leading SSE comments (pages, figures, recalled moments) read whole however
    the stream is cut (clients/sillytavern/stream.js)."""
    r = subprocess.run(["node", "--test", str(ROOT / "tests" / "browser" / "stream.test.mjs")],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "# fail 0" in r.stdout and "# pass 4" in r.stdout
