"""The platform proxy's workerd lost in the middle of a module (docs/design.md §9): the
runner notices, starts a new proxy, and the rest of the module is served as before — paged
turns store in D1 and R2, and /__runner/d1 and /__runner/r2 answer. (An e2e module once saw
every /__runner/d1 call answer 500 after one 503 storage_failed on a loaded machine.)"""

import os
import time

import pytest

from devkit import roleplay as rp
from devkit.fakes import FakeServer
from devkit.runner import Edge
from tests.e2e.test_generation import provider_reply
from tests.e2e.test_runner_fidelity import descendants

pytestmark = pytest.mark.slow
MODEL = "fake:rp-small"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with FakeServer(provider_reply) as provider, \
            Edge(tmp_path_factory.mktemp("proxy-restart"), vars=rp.edge_vars(provider.url),
                 extra_env={"EDGE_PROXY_PROBE_MS": "250"}) as edge:
        rp.set_model(edge, MODEL, 6000, 500)
        yield edge, rp.new_player(edge)


def paged_turn(edge, player, tag):
    body = rp.chat_body(60, model=MODEL, tag=tag, capabilities=["multillm_context_retrieve"])
    r = edge.client.post("/v1/chat/completions", json=body, headers=player.headers())
    assert r.status_code == 200, r.text[:300]
    pages = r.json()["context_pages"]
    assert pages
    return pages


def stored_everywhere(edge, player, pages):
    rows = edge.sql("SELECT page_id FROM context_pages WHERE session_id = ?1", player.session)
    assert {p["page_id"] for p in pages} <= {r["page_id"] for r in rows}
    assert all(rp.stored_page(edge, p["page_id"]) for p in pages)


def test_before_the_loss_turns_store(served):
    edge, player = served
    stored_everywhere(edge, player, paged_turn(edge, player, "A"))


def test_the_proxy_workerd_killed_mid_module_is_restarted(served):
    edge, _ = served
    since = len(edge.logs())
    workerd = [pid for pid, name in descendants(edge.proc.pid) if "workerd" in name]
    assert workerd, descendants(edge.proc.pid)
    for pid in workerd:
        os.kill(pid, 9)
    restarted = edge.wait_for_log(lambda r: r.get("runner") == "platform_proxy_restarted",
                                  timeout=60, since=since)
    assert restarted, edge.tail()
    assert not [r for r in edge.logs()[since:] if r.get("runner") == "platform_proxy_restart_failed"]
    assert edge.proc.poll() is None


def test_after_the_restart_the_module_is_served_as_before(served):
    edge, player = served
    deadline = time.monotonic() + 30          # the first call may race the new proxy's start
    while edge.client.get("/healthz").json().get("d1_tables") is not True:
        assert time.monotonic() < deadline, edge.tail()
        time.sleep(0.25)
    stored_everywhere(edge, player, paged_turn(edge, player, "B"))
    assert edge.sql("SELECT 1 AS one") == [{"one": 1}]
    edge.r2_put("probe/after-restart", b"still here")
    assert edge.r2_get("probe/after-restart") == b"still here"
    assert edge.memory()["isolates_lost"] == 0
