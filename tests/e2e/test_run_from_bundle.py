"""The runner runs the upload (docs/deploy.md): started on a `wrangler deploy --dry-run`
outdir, it loads only what deploy uploads — python_modules/ on sys.path before
site-packages, nothing installed from .cache — and serves a paged turn, a search and a
retrieval from it."""

from __future__ import annotations

import pytest

from devkit import roleplay as rp
from devkit.fakes import FakeServer
from devkit.imports import walk_project
from devkit.runner import Edge
from multillm_edge.search import page_texts
from tests.e2e.test_search import CHAT_REPLY, MODEL, NEEDLE, paged_session, search

pytestmark = pytest.mark.slow
BUNDLE = "/session/metadata/"            # where the runner mounts the upload, as workerd does
PYODIDE_LIB = ("/lib/python313.zip/", "/lib/python3.13/")     # Pyodide's own stdlib


@pytest.fixture(scope="module")
def edge(deploy_bundle, tmp_path_factory):
    _, upload = deploy_bundle
    with FakeServer(CHAT_REPLY) as provider, FakeServer() as origin, \
            Edge(tmp_path_factory.mktemp("from-bundle"), vars=rp.edge_vars(provider.url, origin.url),
                 extra_env={"EDGE_BUNDLE_DIR": str(upload.outdir)}) as edge:
        rp.set_model(edge, MODEL, 6000, 1000)
        yield edge


def test_a_paged_turn_a_search_and_a_retrieval_run_from_the_upload(edge):
    player, pages = paged_session(edge)                # two paged turns, pages stored
    assert pages
    r = search(edge, player, {"query": "promise to guard a lantern", "limit": 3})
    assert r.status_code == 200, r.text
    top = r.json()["data"][0]
    assert top["excerpt"] == {"role": "user", "text": NEEDLE}
    got = edge.client.get(f"/v1/context/pages/{top['page_id']}",
                          params={"roleplay_session_id": player.session}, headers=player.headers())
    assert got.status_code == 200 and got.json()["sha256"] == top["sha256"]
    assert ("user", NEEDLE) in page_texts(got.json()["messages"])


def test_only_uploaded_modules_were_loaded(edge, deploy_bundle):
    project, upload = deploy_bundle
    edge.client.get("/healthz")
    loaded = edge.client.get("/__runner/modules").json()
    assert loaded["site_packages"] == []               # no wheel installed from .cache
    path = loaded["sys_path"]
    assert path[0] == BUNDLE.rstrip("/")
    assert path.index(BUNDLE + "python_modules") == path.index("/lib/python3.13/site-packages") - 1
    files = loaded["files"]
    assert files["workers"] == BUNDLE + "python_modules/workers/__init__.py"
    assert files["snowballstemmer"] == BUNDLE + "python_modules/snowballstemmer/__init__.py"
    assert files["entry"] == BUNDLE + "entry.py"
    # Everything not Pyodide's own came from the upload, and the static walk predicted it.
    others = {name: f for name, f in files.items() if not f.startswith(PYODIDE_LIB)}
    assert all(f.startswith(BUNDLE) for f in others.values()), others
    ours = {name: f[len(BUNDLE):] for name, f in others.items()}
    assert set(ours.values()) <= upload.files()
    walked = walk_project(project).files
    assert ours == {n: walked.get(n) for n in ours}
