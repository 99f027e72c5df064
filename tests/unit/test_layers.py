"""The package's folders are its layers (docs/architecture.md): imports only go down,
no module-level cycle, and what the edge knows about a wire format lives in formats/."""

import ast
import pathlib

import pytest

from multillm_edge.formats import registry as formats

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
PKG = SRC / "multillm_edge"

#: folder -> the folders its modules may import (its own included). A folder not
#: listed here fails the test: every module belongs to a layer.
MAY_IMPORT = {
    "base": {"base"},
    "formats": {"base", "formats"},
    "core": {"base", "formats", "core"},
    "storage": {"base", "formats", "core", "storage"},
    "service": {"base", "formats", "core", "storage", "service"},
    "routes": {"base", "formats", "core", "storage", "service", "routes"},
    "app": {"base", "formats", "core", "storage", "service", "routes"},
    "platform": {"base", "platform"},
}
#: pure packages that sit with the core: imported like it, importing no more than it
PURE_CORE = {"search"}


def layer(module: str) -> str:
    """`multillm_edge.core.paging` -> "core"; the package itself counts as the bottom."""
    parts = module.split(".")
    if len(parts) == 1:
        return "base"
    top = parts[1]
    return "core" if top in PURE_CORE else top


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """The multillm_edge modules an ImportFrom names (a name may be a submodule)."""
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")
        keep = len(parts) - node.level + (1 if is_package else 0)
        base = ".".join(parts[:keep] + ([node.module] if node.module else []))
    if not base.startswith("multillm_edge"):
        return []
    out = []
    for a in node.names:
        sub = f"{base}.{a.name}"
        out.append(sub if _exists(sub) else base)
    return out


def _exists(module: str) -> bool:
    p = SRC.joinpath(*module.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def imports(path: pathlib.Path, top_level_only: bool) -> set[str]:
    module, tree = module_name(path), ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    out = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            out.update(resolve(module, path.name == "__init__.py", node))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("multillm_edge"))
    out.discard(module)
    return out


MODULES = sorted(PKG.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_a_module_imports_only_its_own_layer_and_those_below(path):
    module = module_name(path)
    if module == "multillm_edge":
        return
    here = "app" if module == "multillm_edge.app" else layer(module)
    assert here in MAY_IMPORT, f"{module} is in no layer: put it in one of {sorted(MAY_IMPORT)}"
    allowed = MAY_IMPORT[here]
    upward = sorted(m for m in imports(path, top_level_only=False)
                    if m != "multillm_edge" and layer(m) not in allowed and m != "multillm_edge.app")
    if module != "multillm_edge.app":
        upward += sorted(m for m in imports(path, False) if m == "multillm_edge.app")
    assert not upward, f"{module} ({here}) imports upward: {upward}"


def test_the_entry_imports_the_app_the_platform_and_the_cleanup_only():
    assert imports(SRC / "entry.py", top_level_only=False) == {
        "multillm_edge.app", "multillm_edge.platform.bindings", "multillm_edge.storage.cleanup"}


def test_no_module_level_import_cycle():
    graph = {module_name(p): imports(p, top_level_only=True) for p in MODULES}
    done, stack = set(), []

    def visit(m):
        if m in stack:
            raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
        if m in done:
            return
        stack.append(m)
        for n in graph.get(m, ()):
            # a submodule importing its own package's __init__ is how Python loads it
            if not m.startswith(n + "."):
                visit(n)
        stack.pop()
        done.add(m)

    for m in graph:
        visit(m)


#: search/'s modules, lowest first: each imports only those before it (``texts`` stands
#: alone; ``__init__`` re-exports). A module not listed fails the test below.
SEARCH_ORDER = ("state", "analysis", "irregular", "stems", "docs", "corpus", "match", "bm25", "passages",
                "excerpt", "ranker", "texts")


@pytest.mark.parametrize("path", sorted((PKG / "search").glob("*.py")), ids=lambda p: p.name)
def test_a_search_module_imports_only_those_below_it(path):
    if path.name == "__init__.py":
        return
    assert path.stem in SEARCH_ORDER, f"search/{path.name} is not in SEARCH_ORDER"
    below = set(SEARCH_ORDER[:SEARCH_ORDER.index(path.stem)])
    own = {m.split(".")[2] for m in imports(path, top_level_only=False) if m.startswith("multillm_edge.search.")}
    others = {m for m in imports(path, top_level_only=False) if not m.startswith("multillm_edge.search")}
    assert own <= below and not others, f"search/{path.name} imports {sorted(own - below) + sorted(others)}"


def test_the_search_order_check_can_fail():
    node = ast.parse("from .ranker import rank\n").body[0]
    assert resolve("multillm_edge.search.match", False, node) == ["multillm_edge.search.ranker"]
    assert "ranker" not in SEARCH_ORDER[:SEARCH_ORDER.index("match")]


def route_unit(module: str) -> str | None:
    """The route a module belongs to: `routes.search`, or `routes.generation` for each
    module of that package (its steps import one another); None outside routes/."""
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) >= 3 and parts[1] == "routes" else None


def sideways(path: pathlib.Path) -> list:
    """The other routes a route module imports (shared code belongs in service/ or base/)."""
    own = route_unit(module_name(path))
    return sorted(m for m in imports(path, top_level_only=False)
                  if own is not None and route_unit(m) not in (None, own))


@pytest.mark.parametrize("path", [p for p in MODULES if route_unit(module_name(p))],
                         ids=lambda p: str(p.relative_to(PKG)))
def test_no_route_module_imports_another_route(path):
    assert not sideways(path), f"{module_name(path)} imports another route: {sideways(path)}"


def test_the_sideways_check_can_fail(tmp_path):
    pkg = tmp_path / "multillm_edge" / "routes"
    pkg.mkdir(parents=True)
    bad = pkg / "search.py"
    bad.write_text("from .retrieval import checked\nfrom ..service import access\n")
    node = ast.parse(bad.read_text()).body[0]
    assert route_unit(resolve("multillm_edge.routes.search", False, node)[0]) == "multillm_edge.routes.retrieval"
    assert route_unit("multillm_edge.routes.generation.storing") == "multillm_edge.routes.generation"
    assert route_unit("multillm_edge.service.access") is None


def test_the_layer_checks_can_fail(tmp_path):
    # an upward import and a cycle, as the two tests above read them
    bad = ast.parse("from ..routes import auth\n").body[0]
    assert layer(resolve("multillm_edge.core.paging", False, bad)[0]) == "routes"
    assert "routes" not in MAY_IMPORT["core"]
    assert layer("multillm_edge.search.match") == "core" and "core" in MAY_IMPORT["routes"]


# --- a wire format is one module --------------------------------------------------

def _format_words() -> set:
    words = set()
    for f in formats.FORMATS:
        words |= {f.NAME, f.CLIENT_PATH, f.UPSTREAM_PATH}
    return words


#: (module, literal): the same word meaning something else than a wire format
NOT_A_FORMAT = {
    ("multillm_edge.service.access", "chat"),        # the policy's chat grant (docs/design.md §4)
    ("multillm_edge.routes.retrieval", "messages"),  # the retrieval answer's field (docs/design.md §6)
}


def literals(path: pathlib.Path, words: set) -> set:
    tree = ast.parse(path.read_text())
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in words}


def test_no_format_name_or_path_is_spelled_outside_formats():
    words = _format_words()
    found = []
    for path in MODULES + [SRC / "entry.py"]:
        module = module_name(path)
        if module.startswith("multillm_edge.formats"):
            continue
        found += [(module, w) for w in literals(path, words) if (module, w) not in NOT_A_FORMAT]
    assert not found, f"format facts outside formats/: {found}"


def test_the_literal_check_can_fail(tmp_path):
    p = tmp_path / "x.py"
    p.write_text('if fmt == "messages":\n    url = "/v1/chat/completions"\n')
    assert literals(p, _format_words()) == {"messages", "/v1/chat/completions"}


def test_every_registered_format_declares_the_whole_interface():
    names = ("NAME", "CLIENT_PATH", "UPSTREAM_PATH", "ITEMS_KEY", "MAX_TOKEN_FIELDS", "VERSION_HEADER",
             "ERROR_ENVELOPE", "classify", "check", "output_reservation", "schema", "tool_schema",
             "search_tool_schema", "add_tool",
             "auth_headers", "idle_event", "USAGE_FIELDS", "usage_of", "event_usage", "usage_counts")
    for f in formats.FORMATS:
        missing = [n for n in names if not hasattr(f, n)]
        assert not missing, (f.NAME, missing)
    assert len({f.CLIENT_PATH for f in formats.FORMATS}) == len(formats.FORMATS)
