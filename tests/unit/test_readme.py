"""README.md is checked like code: its code fences balance, and every npm command it
prints names a script package.json has (the quick start and the deploy checklist among
them)."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# CommonMark: up to three spaces, then three or more backticks or tildes.
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# `npm run NAME` (`-s` / `--silent` before it too), `npm start`, `npm test`; a command may
# wrap onto the next line inside prose.
NPM = re.compile(r"\bnpm\s+(?:run(?:-script)?\s+(?:(?:-s|--silent)\s+)?([A-Za-z0-9:_.-]+)|(start|test)\b)")


def fence_errors(text: str) -> list[str]:
    """Each fence line must open a block (outside one) or close it (inside: the same
    character, at least as long, nothing after it); the text must end outside."""
    errors, open_at, opener = [], None, ""
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m is None:
            continue
        fence, rest = m.groups()
        if open_at is None:
            if fence[0] == "`" and "`" in rest:
                errors.append(f"line {n}: an opening fence's info string holds a backtick")
            open_at, opener = n, fence
        elif fence[0] == opener[0] and len(fence) >= len(opener) and not rest.strip():
            open_at = None
        else:
            errors.append(f"line {n}: a fence line inside the block opened at line {open_at} "
                          f"neither closes it nor is plain text: {line[:60]!r}")
    if open_at is not None:
        errors.append(f"line {open_at}: a block never closed")
    return errors


def test_the_readmes_code_fences_balance():
    assert fence_errors(README) == []


def test_the_fence_check_finds_what_broke_the_readme():
    """The open fence issue 39 found: text after a closing fence keeps the block open."""
    assert fence_errors("```json\n{}\n``` If the provider goes\nsilent\n") != []
    assert fence_errors("```sh\nx\n```\n\n~~~\n```\n~~~\n") != []      # every fence line opens or closes
    assert fence_errors("```sh\nx\n```\ntext ``` inline\n````\ny\n`````\n") == []
    assert fence_errors("```\nx\n") == ["line 1: a block never closed"]


def test_every_npm_command_names_a_script():
    scripts = json.loads((ROOT / "package.json").read_text())["scripts"]
    named = [a or b for a, b in NPM.findall(README)]
    assert {"start", "test", "admin", "deploy", "cloudflare:setup"} <= set(named)
    assert sorted({n for n in named if n not in scripts}) == []
