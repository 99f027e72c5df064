import pytest

from devkit.fakes import FakeServer
from devkit.runner import ROOT, Edge


@pytest.fixture
def origin():
    with FakeServer() as server:
        yield server


@pytest.fixture
def provider():
    with FakeServer() as server:
        yield server


@pytest.fixture
def start_edge(tmp_path):
    """Start runners with given vars; all are stopped at the end of the test."""
    started = []

    def start(vars=None, unbind=(), name="edge", **kw):
        edge = Edge(tmp_path / name, vars=vars, unbind=list(unbind), **kw)
        started.append(edge)
        return edge

    yield start
    for edge in started:
        edge.stop()


@pytest.fixture(scope="module")
def fidelity_edge(tmp_path_factory):
    with Edge(tmp_path_factory.mktemp("fidelity"),
              extra_env={"EDGE_MAIN": str(ROOT / "tests/e2e/fidelity/fidelity_entry.py")}) as edge:
        yield edge


@pytest.fixture(scope="session")
def deploy_bundle(tmp_path_factory):
    """The upload `wrangler deploy` would make, built once: a staged copy of the project
    with python_modules/ laid out from the pinned wheels, and its dry run's outdir."""
    from devkit import bundle
    base = tmp_path_factory.mktemp("bundle")
    project = bundle.stage(base / "project")
    return project, bundle.dry_run(project, base / "upload")
