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

Such a failure's report is also made here, the text pytest would make of it without
pytest's cost: pytest walks and filters the whole traceback (some 26 frames of its own
runner and hooks, a path object for each) only to print the message alone, 0.9 ms a
failure; a fleet that fails every check paid 15 s of its 79 for it at 2,000 nodes
(benchmarks/RESULTS.md, "Where a failing fleet's time goes").
"""

from __future__ import annotations

from typing import Literal

import pytest
from _pytest._code.code import ExceptionChainRepr, ReprEntry, ReprTraceback

TEXT_MAX = 64 * 1024  # a verdict's messages are bounded well below this
_NO_KEYWORDS: dict[str, Literal[1]] = {}


class KeptReports:
    """Registered by burnin's pytest_configure."""

    def __init__(self, config: pytest.Config):
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> pytest.TestReport | None:
        """A test's call failed with pytest.fail(pytrace=False) (a verdict's messages): its
        report as pytest's own makes it (style "value": the message's lines, where it was
        raised), without the traceback pytest would filter and then not print. Anything
        else, and --fulltrace, is pytest's to report (None)."""
        excinfo = call.excinfo
        if call.when != "call" or excinfo is None or not isinstance(item, pytest.Function):
            return None
        e = excinfo.value
        if type(e) is not pytest.fail.Exception or e.pytrace or e.__cause__ is not None \
                or (e.__context__ is not None and not e.__suppress_context__) \
                or self.config.getoption("fulltrace", False):
            return None
        entry = ReprEntry(str(e).split("\n"), None, None, None, "value")
        longrepr = ExceptionChainRepr([(ReprTraceback([entry], None, style="value"),
                                        excinfo._getreprcrash(), None)])
        sections = [(f"Captured {key} {when}", content)
                    for when, key, content in item._report_sections]
        return pytest.TestReport(getattr(item, "id", item.nodeid), item.location,
                                 dict.fromkeys(item.keywords, 1), "failed", longrepr, "call",
                                 sections, call.duration, call.start, call.stop,
                                 user_properties=item.user_properties)

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
