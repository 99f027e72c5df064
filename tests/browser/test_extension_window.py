"""The SillyTavern extension's pure modules (clients/sillytavern/window.js, stream.js,
usage.js) under `node --test`: no SillyTavern or browser needed."""

from __future__ import annotations

import json
import subprocess

from devkit.runner import ROOT
from examples.context_tools import WINDOW_STEP, slide_window


def node_test(name: str, tests: int) -> None:
    """Runs tests/browser/<name> under `node --test`: every one of its `tests` passes."""
    r = subprocess.run(["node", "--test", str(ROOT / "tests" / "browser" / name)],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "# fail 0" in r.stdout and f"# pass {tests}" in r.stdout


def test_window_logic_under_node():
    node_test("window.test.mjs", 10)


def test_stream_head_reading_under_node():
    """The leading SSE comments (pages, figures, recalled moments) read whole however
    the stream is cut (clients/sillytavern/stream.js)."""
    node_test("stream.test.mjs", 4)


def test_usage_reading_under_node():
    """The provider's cache usage in its four shapes, from whole answers and from streams
    cut anywhere; nothing when it says nothing; a stream asks for it unless the player's
    include body already says (clients/sillytavern/usage.js)."""
    node_test("usage.test.mjs", 7)


def test_spending_and_limit_toasts_under_node():
    """The panel's usage line from `GET /v1/roleplay/usage` and the toast of a 429 naming
    its limit and when it frees (clients/sillytavern/spending.js, docs/design.md §4.1)."""
    node_test("spending.test.mjs", 5)


SLIDE = """
import { slideWindow, windowStep, WINDOW_STEP } from './clients/sillytavern/window.js';
let text = '';
for await (const chunk of process.stdin) text += chunk;
const { messages, cases } = JSON.parse(text);
const out = cases.map(([budget, step]) => slideWindow(messages, budget, step));
console.log(JSON.stringify({ out, step: windowStep(100000), share: WINDOW_STEP }));
"""


def test_the_extension_and_the_python_recipe_cut_the_same_messages():
    """README's sliding-window recipe is one rule: examples/context_tools.py and the
    extension's window.js leave out the same messages of the same chat (non-ASCII
    text, tool calls, a system note inside the history) at every budget and step."""
    messages = [{"role": "system", "content": "card: Aurore 🌙"}, {"role": "assistant", "content": "ночь"}]
    for t in range(40):
        messages.append({"role": "user", "content": f"u{t} " + "é" * (50 + 17 * t % 90)})
        if t % 7 == 3:
            messages += [{"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{t}", "type": "function", "function": {"name": "multillm_context_search",
                                                                 "arguments": "{\"query\":\"ford\"}"}}]},
                         {"role": "tool", "tool_call_id": f"c{t}", "content": "cp_x «ford»"}]
        if t % 11 == 5:
            messages.append({"role": "system", "content": "note \u2028 line"})
        messages.append({"role": "assistant", "content": f"a{t} " + "y" * (80 + 29 * t % 120)})
    cases = [(b, s) for b in range(0, 12000, 450) for s in (0, 1, 500, max(1, int(WINDOW_STEP * b)), 4000)]
    r = subprocess.run(["node", "--input-type=module", "-e", SLIDE], input=json.dumps({"messages": messages, "cases": cases}),
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["share"] == WINDOW_STEP and doc["step"] == int(WINDOW_STEP * 100000)
    moved = set()
    for (budget, step), js in zip(cases, doc["out"], strict=True):
        sent, dropped = slide_window(messages, budget, step)
        assert (js["messages"], js["dropped"]) == (sent, dropped), (budget, step)
        moved.add(dropped)
    assert len(moved) > 10         # the cases cut in many places, not all at one
