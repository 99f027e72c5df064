"""Which modules the Worker imports, and where each comes from in production.

Walks the imports (`ast`) from the entry module and from `python_modules/*.pth` (workerd
processes them with `site.addsitedir`) through every module found in the upload's code
roots, in workerd's sys.path order: the Worker's own modules, then Pyodide's standard
library, then `python_modules/`. What no root holds must be Pyodide's (a built-in module,
its stdlib zip, an unvendored stdlib module of pyodide-lock.json) or on RUNTIME_PROVIDED;
anything else is missing. Imports that may fail by design are not required: those in the
body of a `try` whose handler catches ImportError, and those under `if TYPE_CHECKING:`.
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYODIDE = ROOT / "node_modules" / "pyodide"

# Modules no file provides: Pyodide registers `js` (the JS global scope) and `pyodide_js`;
# workerd creates the other three before the Worker loads (the SDK's .pyi stubs name two;
# `_cloudflare` holds its import patch manager). The runner shims the workerd ones.
RUNTIME_PROVIDED = {
    "js": "Pyodide: the JavaScript global scope",
    "pyodide_js": "Pyodide: its JavaScript API",
    "_cloudflare_compat_flags": "workerd: the Worker's compatibility flags",
    "_pyodide_entrypoint_helper": "workerd: entrypoint and env helpers for the SDK",
    "_cloudflare": "workerd: internal package (import patch manager)",
}
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


@dataclass
class Walk:
    """The result: module name -> file (relative to its root, prefixed with the root's
    upload name) for code found in the roots, name -> origin for the rest, and missing."""
    files: dict[str, str] = field(default_factory=dict)
    provided: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)        # name -> first importer
    optional: set[str] = field(default_factory=set)


# --- Pyodide's own modules ----------------------------------------------------------

def zip_modules(path: Path) -> set[str]:
    """Dotted names of the modules and packages in a stdlib zip."""
    out = set()
    for name in zipfile.ZipFile(path).namelist():
        if name.endswith("/__init__.py"):
            out.add(name[: -len("/__init__.py")].replace("/", "."))
        elif name.endswith(".py"):
            out.add(name[:-3].replace("/", "."))
        elif name.endswith("/"):
            out.add(name.rstrip("/").replace("/", "."))            # namespace dirs too
    return out


def lock_imports(path: Path) -> dict[str, set[str]]:
    """pyodide-lock.json: top-level import names by package type. `cpython_module`s are
    stdlib parts Pyodide ships apart; `package`s are only importable once vendored."""
    out: dict[str, set[str]] = {}
    for pkg in json.loads(path.read_text())["packages"].values():
        out.setdefault(pkg["package_type"], set()).update(pkg.get("imports", []))
    return out


@functools.lru_cache(maxsize=1)
def builtin_modules() -> frozenset[str]:
    """Pyodide's compiled-in modules (sys, _json, math…): asked of Pyodide itself."""
    script = ('const {loadPyodide} = await import("pyodide"); const p = await loadPyodide();'
              'console.log(p.runPython("import sys, json; json.dumps(sys.builtin_module_names)"));')
    r = subprocess.run(["node", "--input-type=module", "-e", script], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, check=True)
    return frozenset(json.loads(r.stdout.strip().splitlines()[-1]))


@functools.lru_cache(maxsize=1)
def pyodide_modules() -> dict[str, str]:
    """Top-level or dotted name -> origin, for what Pyodide provides without vendoring."""
    out = {n: "pyodide-builtin" for n in builtin_modules()}
    out.update({n: "pyodide-stdlib" for n in zip_modules(PYODIDE / "python_stdlib.zip")})
    out.update({n: "pyodide-stdlib" for n in lock_imports(PYODIDE / "pyodide-lock.json").get("cpython_module", ())})
    return out


def pyodide_packages() -> set[str]:
    return lock_imports(PYODIDE / "pyodide-lock.json").get("package", set())


# --- finding a module's file -----------------------------------------------------------

def module_file(root: Path, name: str) -> Path | None:
    """The file (or namespace dir) of `name` under `root`, as the path finder looks."""
    base = root.joinpath(*name.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return base if base.is_dir() else None


def is_package(path: Path) -> bool:
    return path.is_dir() or path.name == "__init__.py"


# --- reading one module's imports ---------------------------------------------------------

def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in IMPORT_ERRORS for n in names)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _Imports(ast.NodeVisitor):
    """(module, names, level, optional) for every import statement, any depth: a lazy
    import inside a function runs too when that function does."""

    def __init__(self):
        self.found: list[tuple[str, list[str], int, bool]] = []
        self.guarded = 0

    def visit_Import(self, node):
        for alias in node.names:
            self.found.append((alias.name, [], 0, self.guarded > 0))

    def visit_ImportFrom(self, node):
        self.found.append((node.module or "", [a.name for a in node.names], node.level, self.guarded > 0))

    def visit_Try(self, node):
        guard = any(_catches_import_error(h) for h in node.handlers)
        self.guarded += guard
        for stmt in node.body:
            self.visit(stmt)
        self.guarded -= guard
        for stmt in [*node.handlers, *node.orelse, *node.finalbody]:
            self.visit(stmt)

    visit_TryStar = visit_Try

    def visit_If(self, node):
        if _is_type_checking(node.test):           # never runs
            for stmt in node.orelse:
                self.visit(stmt)
            return
        self.generic_visit(node)


def imports_of(path: Path) -> list[tuple[str, list[str], int, bool]]:
    visitor = _Imports()
    visitor.visit(ast.parse(path.read_bytes(), str(path)))
    return visitor.found


def pth_imports(directory: Path) -> list[str]:
    """Modules imported by the `import …` lines of the .pth files site.addsitedir runs."""
    out = []
    for pth in sorted(directory.glob("*.pth")):
        for line in pth.read_text().splitlines():
            if line.startswith(("import ", "import\t")):
                visitor = _Imports()
                visitor.visit(ast.parse(line))
                out.extend(name for name, _, _, _ in visitor.found)
    return out


# --- the walk ------------------------------------------------------------------------------

def _absolute(module: str, level: int, importer: str, package: bool) -> str:
    if not level:
        return module
    parts = (importer if package else importer.rpartition(".")[0]).split(".")
    if level - 1 >= len(parts) or not parts[0]:
        return "." * level + module          # beyond the top-level package: never resolves
    base = ".".join(parts[: len(parts) - (level - 1)])
    return f"{base}.{module}" if module else base


def _parents(name: str) -> list[str]:
    if name.startswith("."):
        return [name]                          # unresolvable relative import, reported as is
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


class Walker:
    """`roots`: (upload prefix, directory) pairs in sys.path order; the Worker's own code
    is searched before Pyodide's stdlib, python_modules/ after it (workerd's order)."""

    def __init__(self, roots: list[tuple[str, Path]], pyodide: dict[str, str] | None = None):
        self.roots = roots
        self.pyodide = pyodide_modules() if pyodide is None else pyodide
        self.result = Walk()
        self.located: dict[str, tuple[str, Path] | str | None] = {}

    def locate(self, name: str):
        """(prefix, path) for code in a root, an origin string, or None."""
        if name not in self.located:
            self.located[name] = self._locate(name)
        return self.located[name]

    def _locate(self, name: str):
        if name.startswith("."):
            return None
        top, _, rest = name.partition(".")
        if rest:
            parent = self.locate(name.rpartition(".")[0])
            if not isinstance(parent, tuple):
                return parent                  # inside Pyodide's or the runtime's: trusted
            if not is_package(parent[1]):
                return None
            root = dict((p, d) for p, d in self.roots)[parent[0]]
            path = module_file(root, name)
            return (parent[0], path) if path else None
        if top in self.pyodide and self.pyodide[top] == "pyodide-builtin":
            return "pyodide-builtin"
        for i, (prefix, root) in enumerate(self.roots):
            if i == 1 and top in self.pyodide:  # the stdlib zip sits before python_modules/
                return self.pyodide[top]
            path = module_file(root, top)
            if path:
                return (prefix, path)
        if top in self.pyodide:
            return self.pyodide[top]
        if top in RUNTIME_PROVIDED:
            return "runtime"
        return None

    def run(self, entry: str, also: list[str] = ()) -> Walk:
        queue = [(entry, "<entry>", False), *((m, "<.pth>", False) for m in also)]
        done: dict[str, bool] = {}              # name -> visited as optional only
        while queue:
            name, importer, optional = queue.pop(0)
            if name in done and (optional or not done[name]):
                continue                        # a required visit redoes an optional one
            done[name] = optional
            queue.extend(self._visit(name, importer, optional))
        return self.result

    def _visit(self, name: str, importer: str, optional: bool):
        where = self.locate(name)
        if where is None:
            if optional:
                self.result.optional.add(name)
            else:
                self.result.optional.discard(name)
                self.result.missing.setdefault(name, importer)
            return []
        if isinstance(where, str):
            self.result.provided[name] = where
            return []
        prefix, path = where
        if path.is_dir():                       # a namespace package: no code of its own
            return []
        root = dict(self.roots)[prefix]
        self.result.files[name] = prefix + path.relative_to(root).as_posix()
        return self._requirements(name, path, optional)

    def _requirements(self, name: str, path: Path, guarded: bool):
        """What importing `name` imports; all optional when `name`'s own import is
        (an ImportError anywhere below it is caught where it was guarded)."""
        out = []
        for module, names, level, optional in imports_of(path):
            optional = optional or guarded
            target = _absolute(module, level, name, is_package(path))
            out.extend((n, name, optional) for n in _parents(target))
            for sub in names:
                if sub != "*" and isinstance(self.locate(f"{target}.{sub}"), tuple):
                    out.append((f"{target}.{sub}", name, optional))
        return out


def walk_project(project: Path) -> Walk:
    """The Worker as wrangler would upload it: src/ (main = src/entry.py) and python_modules/."""
    vendored = project / "python_modules"
    walker = Walker([("", project / "src"), ("python_modules/", vendored)])
    return walker.run("entry", pth_imports(vendored) if vendored.is_dir() else [])


@dataclass
class Report:
    walk: Walk
    not_uploaded: set[str]          # files the Worker imports that the upload lacks
    unvendored: set[str]            # missing names that are Pyodide packages (need a pin)

    @property
    def ok(self) -> bool:
        return not (self.walk.missing or self.not_uploaded)

    def describe(self) -> str:
        lines = [f"missing module {n!r} (imported by {i})" + (" — a Pyodide package: pin it in "
                 "[project].dependencies so pywrangler vendors it" if n.split(".")[0] in self.unvendored else "")
                 for n, i in sorted(self.walk.missing.items())]
        lines += [f"imported but not in the upload: {f}" for f in sorted(self.not_uploaded)]
        return "\n".join(lines)


def check_upload(project: Path, uploaded: set[str]) -> Report:
    """Every module the Worker imports resolves, and every file it imports is uploaded."""
    walk = walk_project(project)
    packages = pyodide_packages()
    return Report(walk, set(walk.files.values()) - uploaded,
                  {n.split(".")[0] for n in walk.missing} & packages)
