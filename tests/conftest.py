"""Shared by every tier: a failing test that ran the local runner shows its log tail."""

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    from devkit.runner import Edge
    for edge in list(Edge.running):
        report.sections.append((f"runner log tail ({edge.state_dir.name})", edge.tail()))
