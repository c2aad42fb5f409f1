"""What pytest keeps of a failed check's report, bounded.

pytest keeps every report until the session ends (its terminal reporter's statistics, for
the summary). A check fails its test with the verdict's messages and no traceback
(burnin/model/verdict.py: assert_passed, pytest.fail(pytrace=False)), yet the report holds
them as an exception's representation: a chain of traceback entries, each with its lines,
locations and crash record, some 5 KiB a failing node over the checks beside the same
words in burnin's own case (burnin/plugin/__init__.py: CaseResult). Once every other
plugin has seen the report (pytest's --junitxml included), such a report keeps its text
alone: what the FAILURES section and the short summary would print of it anyway. A
failure with a real traceback (a bug, a controller fault) keeps it whole.
"""

from __future__ import annotations

import pytest

TEXT_MAX = 64 * 1024  # a verdict's messages are bounded well below this


class KeptReports:
    """Registered by burnin's pytest_configure."""

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        longrepr = report.longrepr
        if not report.failed or longrepr is None or isinstance(longrepr, str):
            return
        chain = getattr(longrepr, "chain", None) or []
        tracebacks = [tb for tb, _, _ in chain]
        if not tracebacks or any(getattr(tb, "style", None) != "value" for tb in tracebacks):
            return  # a traceback someone will want to read
        report.longrepr = report.longreprtext[:TEXT_MAX]
