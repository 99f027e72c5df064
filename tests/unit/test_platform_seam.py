"""Both platforms satisfy the seam of base/platform.py, member by member: the Worker's
(platform/bindings.py, which imports `js` and `workers` and so is read as source here)
and the in-process one the handler tests run on (tests/support/inprocess.py)."""

import ast
import inspect
import pathlib

import pytest

from devkit.sqlite import SqliteExecutor
from multillm_edge.base import platform as seam
from tests.support import inprocess

BINDINGS = pathlib.Path(seam.__file__).resolve().parents[1] / "platform" / "bindings.py"


def protocol_members(proto) -> dict:
    """name -> (parameter names without self, is coroutine | "property" | "attribute")."""
    out = {}
    for name in proto.__annotations__:
        out[name] = ((), "attribute")
    for name, member in vars(proto).items():
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            out[name] = ((), "property")
        elif inspect.isfunction(member):
            params = tuple(list(inspect.signature(member).parameters)[1:])
            out[name] = (params, inspect.iscoroutinefunction(member))
    return out


def class_members(cls) -> dict:
    out = {name: ((), "attribute") for k in reversed(cls.__mro__)
           for name in vars(k).get("__annotations__", {})}
    for name in dir(cls):
        member = inspect.getattr_static(cls, name)
        if isinstance(member, property):
            out[name] = ((), "property")
        elif inspect.isfunction(member):
            out[name] = (tuple(list(inspect.signature(member).parameters)[1:]),
                         inspect.iscoroutinefunction(member))
    return out


def source_members(path: pathlib.Path, class_name: str) -> dict:
    """The same, read from a module's source (its runtime imports are not available)."""
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    out = {}
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list):
                out[node.name] = ((), "property")
            else:
                out[node.name] = (tuple(a.arg for a in node.args.args[1:] + node.args.kwonlyargs),
                                  isinstance(node, ast.AsyncFunctionDef))
    # attributes set in __init__ (self.status = ...)
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    for node in ast.walk(init) if init else ():
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id == "self":
            out.setdefault(node.attr, ((), "attribute"))
    return out


def mismatches(proto, members: dict) -> list:
    """What ``members`` lacks or declares differently from ``proto``."""
    bad = []
    for name, (params, kind) in protocol_members(proto).items():
        got = members.get(name)
        if got is None:
            bad.append(f"{name}: missing")
        elif kind == "attribute":
            continue                       # a property or an attribute both serve
        elif got[1] != kind or got[0][:len(params)] != params:
            bad.append(f"{name}: {got} != {(params, kind)}")
    return bad


PAIRS = [
    (seam.Platform, "WorkersPlatform", inprocess.InProcessPlatform),
    (seam.Database, "D1Executor", SqliteExecutor),
    (seam.Bucket, "R2PageStore", inprocess.MemoryBucket),
    (seam.UpstreamResponse, "Upstream", inprocess.Answer),
]


@pytest.mark.parametrize("proto,worker,local", PAIRS, ids=lambda x: getattr(x, "__name__", x))
def test_both_platforms_satisfy_the_seam(proto, worker, local):
    assert not mismatches(proto, source_members(BINDINGS, worker)), worker
    assert not mismatches(proto, class_members(local)), local.__name__


def test_the_seam_check_can_fail():
    class Partial:
        def var(self, name): ...
        def now(self): ...                 # sync where fine
        def read_body(self, limit): ...    # not async: a mismatch

    bad = mismatches(seam.Platform, class_members(Partial))
    assert any(b.startswith("read_body") for b in bad) and any(b.startswith("fetch") for b in bad)
