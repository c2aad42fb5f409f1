"""What pytest keeps of a failed check's report (burnin/plugin/kept_reports.py): a failure
without a traceback (a verdict's messages: pytest.fail(pytrace=False)) keeps its text
alone once every plugin has seen it, pytest's --junitxml and FAILURES section still
saying it; a failure with a traceback keeps it whole."""

from __future__ import annotations

import xml.etree.ElementTree as ET

MESSAGE = "gpu3: 412.0 TFLOPS below the floor of 600.0 TFLOPS"


def test_a_verdicts_failure_keeps_its_text_and_a_bugs_its_traceback(pytester):
    pytester.makepyfile(f"""
        import pytest

        def test_verdict():
            pytest.fail({MESSAGE!r}, pytrace=False)

        def test_bug():
            raise ValueError("a bug of ours")
    """)
    result = pytester.inline_run("--junitxml=junit.xml", "-p", "no:cacheprovider")
    reports = {r.nodeid.rsplit("::", 1)[1]: r for r in result.getreports()
               if r.when == "call"}
    assert reports["test_verdict"].longrepr == MESSAGE
    assert not isinstance(reports["test_bug"].longrepr, str)
    assert "ValueError" in reports["test_bug"].longreprtext
    junit = ET.parse(pytester.path / "junit.xml").getroot()
    said = {c.get("name"): c.find("failure") for c in junit.iter("testcase")}
    assert MESSAGE in (said["test_verdict"].get("message") or "")
    shown = pytester.runpytest("-p", "no:cacheprovider")
    shown.stdout.fnmatch_lines([f"*{MESSAGE}*"])
