"""Unit tier: put src/ on sys.path (pyproject's pythonpath does too; this keeps
`python -m pytest tests/unit` working from any rootdir)."""

import sys
from pathlib import Path

_SRC = str(Path(__file__).resolve().parents[2] / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)
