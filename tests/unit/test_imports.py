"""The import walk behind the upload check (devkit.imports): what counts as required,
optional or provided, on small module trees."""

from __future__ import annotations

from pathlib import Path

from devkit import imports
from devkit.imports import Walker

# A stand-in for Pyodide's own modules (the real list needs Node; the e2e tier uses it).
PYODIDE = {"sys": "pyodide-builtin", "json": "pyodide-stdlib", "typing": "pyodide-stdlib"}


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def walk(tmp_path, src: dict[str, str], vendored: dict[str, str] = {}):
    s, v = tree(tmp_path / "src", src), tree(tmp_path / "python_modules", vendored)
    return Walker([("", s), ("python_modules/", v)], pyodide=PYODIDE).run("entry")


def test_relative_and_submodule_imports_resolve_to_files(tmp_path):
    w = walk(tmp_path, {"entry.py": "from app import core\nimport json\n",
                        "app/__init__.py": "from .util import x\n", "app/util.py": "x = 1\n",
                        "app/core.py": "from . import util\nfrom .sub import mod\n",
                        "app/sub/__init__.py": "", "app/sub/mod.py": "from ..util import x\nfrom ... import up\n"})
    assert set(w.files.values()) == {"entry.py", "app/__init__.py", "app/util.py", "app/core.py",
                                     "app/sub/__init__.py", "app/sub/mod.py"}
    assert w.provided == {"json": "pyodide-stdlib"}
    assert w.missing == {"...": "app.sub.mod"}          # beyond the top-level package


def test_vendored_modules_come_from_python_modules_and_their_imports_are_walked(tmp_path):
    w = walk(tmp_path, {"entry.py": "import lib\n"},
             {"lib/__init__.py": "from lib import deep\n", "lib/deep.py": "import nowhere\n"})
    assert w.files == {"entry": "entry.py", "lib": "python_modules/lib/__init__.py",
                       "lib.deep": "python_modules/lib/deep.py"}
    assert w.missing == {"nowhere": "lib.deep"}


def test_a_guarded_import_is_optional_but_its_fallback_is_required(tmp_path):
    w = walk(tmp_path, {"entry.py": (
        "try:\n    import Fast\nexcept ImportError:\n    import slow\n"
        "try:\n    import Other\nexcept (ValueError, ModuleNotFoundError):\n    pass\n")})
    assert w.optional == {"Fast", "Other"}
    assert w.missing == {"slow": "entry"}


def test_what_a_guarded_import_imports_is_optional_until_imported_unguarded(tmp_path):
    w = walk(tmp_path, {"entry.py": "try:\n    import extra\nexcept ImportError:\n    pass\n",
                        "extra.py": "import plugin\n"})
    assert w.optional == {"plugin"} and not w.missing
    w = walk(tmp_path, {"entry.py": "try:\n    import extra\nexcept ImportError:\n    pass\n"
                                    "import user\n", "user.py": "import plugin\n"})
    assert w.missing == {"plugin": "user"} and not w.optional


def test_an_import_guarded_by_another_error_is_required(tmp_path):
    w = walk(tmp_path, {"entry.py": "try:\n    import gone\nexcept KeyError:\n    pass\n"})
    assert w.missing == {"gone": "entry"}


def test_type_checking_imports_never_run_and_lazy_imports_do(tmp_path):
    w = walk(tmp_path, {"entry.py": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import stubs_only\n"
        "def later():\n    import needed_later\n")})
    assert w.missing == {"needed_later": "entry"}


def test_runtime_modules_are_an_explicit_allow_list(tmp_path):
    w = walk(tmp_path, {"entry.py": "import js\nfrom _cloudflare_compat_flags import x\nimport _cloudflare2\n"})
    assert w.provided["js"] == "runtime" and w.provided["_cloudflare_compat_flags"] == "runtime"
    assert w.missing == {"_cloudflare2": "entry"}


def test_the_worker_shadows_the_stdlib_and_the_stdlib_shadows_python_modules(tmp_path):
    w = walk(tmp_path, {"entry.py": "import json\nimport typing\n", "json.py": ""},
             {"typing.py": ""})
    assert w.files["json"] == "json.py" and w.provided["typing"] == "pyodide-stdlib"


def test_pth_lines_are_roots(tmp_path):
    d = tree(tmp_path, {"a.pth": "import boot\n# comment\n/some/path\n"})
    assert imports.pth_imports(d) == ["boot"]


def test_pyodides_lists_are_read_offline():
    zipped = imports.zip_modules(imports.PYODIDE / "python_stdlib.zip")
    assert {"json", "json.decoder", "asyncio", "pyodide.ffi", "hashlib"} <= zipped
    locked = imports.lock_imports(imports.PYODIDE / "pyodide-lock.json")
    assert {"ssl", "sqlite3"} <= locked["cpython_module"] and "numpy" in locked["package"]
    assert "snowballstemmer" not in locked["package"]
