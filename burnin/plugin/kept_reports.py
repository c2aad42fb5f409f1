"""What pytest keeps of each test's reports until the end, bounded.

pytest keeps every report until the session ends (its terminal reporter's statistics, for
the summary): three a testcase (setup, call, teardown), each with a copy of its item's
keywords, at 25,000 nodes and a dozen checks 900,000 reports, about 22 KiB a node. Once
every other plugin has seen a report (pytest's --junitxml included), this plugin keeps
of it only what the end of the session can still print:
- a passed setup or teardown with no captured output is dropped from the statistics: the
  summary counts calls, and prints a teardown's captured output, which it has none of;
- a call's keywords go (the summary reads only a skipped setup's again, to fold skips by
  their `skip` keyword);
- a check fails its test with the verdict's messages and no traceback
  (burnin/model/verdict.py: assert_passed, pytest.fail(pytrace=False)), yet the report
  holds them as an exception's representation (a chain of entries, each with its lines,
  location and crash record): such a report keeps its text alone, what the FAILURES
  section and the short summary print of it anyway. A failure with a real traceback (a
  bug, a controller fault) keeps it whole.
"""

from __future__ import annotations

from typing import Literal

import pytest

TEXT_MAX = 64 * 1024  # a verdict's messages are bounded well below this
_NO_KEYWORDS: dict[str, Literal[1]] = {}


class KeptReports:
    """Registered by burnin's pytest_configure."""

    def __init__(self, config: pytest.Config):
        self.config = config

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            if report.passed and not report.sections:
                self._unlisted(report)
            return
        report.keywords = _NO_KEYWORDS
        longrepr = report.longrepr
        if not report.failed or longrepr is None or isinstance(longrepr, str):
            return
        chain = getattr(longrepr, "chain", None) or []
        tracebacks = [tb for tb, _, _ in chain]
        if not tracebacks or any(getattr(tb, "style", None) != "value" for tb in tracebacks):
            return  # a traceback someone will want to read
        report.longrepr = report.longreprtext[:TEXT_MAX]

    def _unlisted(self, report: pytest.TestReport) -> None:
        """Take `report` out of the terminal reporter's statistics, where it was put last
        (its hook ran before this one)."""
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        kept = getattr(terminal, "stats", {}).get("")
        if kept and kept[-1] is report:
            kept.pop()
