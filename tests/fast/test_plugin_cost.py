"""What the plugin does per testcase stays small and does not grow with the fleet
(80,000 testcases at 10,000 nodes)."""

from __future__ import annotations

import pytest

from burnin.plugin import _text


class Report(pytest.TestReport):
    """A report whose text costs: pytest builds a terminal writer to make it."""

    @property
    def longreprtext(self) -> str:
        raise AssertionError("a passed phase's text was asked of pytest")


def report(outcome: str, longrepr=None) -> Report:
    return Report("suites/test_health.py::test_health[n1]", ("f", 1, "d"), {}, outcome,
                  longrepr, "call")


def test_a_passed_phase_says_nothing_without_asking_pytest():
    assert _text(report("passed")) == ""


def test_a_skip_says_its_reason_and_a_failure_its_text():
    assert _text(report("skipped", ("f.py", 3, "Skipped: held by run r2"))) == "held by run r2"
    failed = pytest.TestReport("x", ("f", 1, "d"), {}, "failed", "boom\nmore", "call")
    assert _text(failed) == "boom\nmore"
