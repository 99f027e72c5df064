"""The source tree a bench times (``python bench/bench_X.py [SRC]``): the ``src``
directory given as its first argument that is not an option, else this repository's,
put first on ``sys.path`` with the benches' own folder. Two trees are compared by
alternating runs of one bench. Import ``multillm_edge`` right after: the benches it
imports next put this repository's ``src`` on the path too, behind it. Also the clock
and sizes such a bench runs with."""

from __future__ import annotations

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def use() -> str:
    """Put the timed tree's ``src`` (and this folder) first on ``sys.path``; return it."""
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    src = os.path.abspath(args[0] if args else os.path.join(HERE, "..", "src"))
    sys.path[:0] = [src, HERE]
    return src


def clock(runtime: str):
    """CPU time in CPython (a loaded machine shares its cores), else the wall's (Pyodide
    has no CPU clock)."""
    return time.process_time if runtime == "CPython" else time.perf_counter


def sizes(default: tuple) -> list:
    """The sizes ``AB_SIZES`` names (e.g. "200,800"), else ``default``."""
    return [int(s) for s in os.environ.get("AB_SIZES", "").split(",") if s] or list(default)
