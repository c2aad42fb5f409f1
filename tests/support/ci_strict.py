"""In CI (CI set), which installs every tool and runs as root, nothing may skip: a skipped
test proved nothing, and a green run must not hide it. A pytest plugin, registered by
tests/conftest.py (which imports its hooks) and loaded alone by the test that proves it
(tests/test_ci_strict.py, `-p support.ci_strict`).

Two hooks, since a skip can come at two times: a test's own (`pytest.skip` in its body or
a fixture, a skip marker) is a test report; a module's (`pytest.skip(...,
allow_module_level=True)` or `pytest.importorskip` at its top) is the module's collection
report, and no test of it is ever reported.
"""

from __future__ import annotations

import os

import pytest


def _reason(report) -> str:
    return report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where nothing may be: {_reason(report)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    report = (yield).get_result()
    if os.environ.get("CI") and report.skipped:
        report.outcome = "failed"
        report.longrepr = (f"{collector.nodeid} skipped as a whole in CI, where nothing may "
                           f"be: {_reason(report)}")
