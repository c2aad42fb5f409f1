"""What pytest keeps of each test's reports (burnin/plugin/kept_reports.py): a failure
without a traceback (a verdict's messages: pytest.fail(pytrace=False)) keeps its text
alone once every plugin has seen it, pytest's --junitxml and FAILURES section still
saying it; a failure with a traceback keeps it whole; a passed setup or teardown with
nothing captured leaves the statistics, one with captured output stays and is shown."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

MESSAGE = "gpu3: 412.0 TFLOPS below the floor of 600.0 TFLOPS"


@pytest.fixture()
def tests_file(pytester):
    pytester.makepyfile(f"""
        import pytest

        @pytest.fixture()
        def talks():
            yield
            print("said in teardown")

        def test_verdict():
            pytest.fail({MESSAGE!r}, pytrace=False)

        def test_bug():
            raise ValueError("a bug of ours")

        def test_passes(talks):
            pass

        def test_quiet():
            pass
    """)
    return pytester


def test_a_verdicts_failure_keeps_its_text_and_a_bugs_its_traceback(tests_file):
    pytester = tests_file
    result = pytester.inline_run("--junitxml=junit.xml", "-p", "no:cacheprovider")
    reports = {r.nodeid.rsplit("::", 1)[1]: r for r in result.getreports()
               if r.when == "call"}
    assert reports["test_verdict"].longrepr == MESSAGE
    assert all(not r.keywords for r in reports.values()), "a call's keywords are let go"
    assert not isinstance(reports["test_bug"].longrepr, str)
    assert "ValueError" in reports["test_bug"].longreprtext
    junit = ET.parse(pytester.path / "junit.xml").getroot()
    said = {c.get("name"): c.find("failure") for c in junit.iter("testcase")}
    assert MESSAGE in (said["test_verdict"].get("message") or "")
    shown = pytester.runpytest("-p", "no:cacheprovider")
    shown.stdout.fnmatch_lines([f"*{MESSAGE}*", "*2 failed, 2 passed*"])


def test_passed_setups_and_teardowns_leave_the_statistics_unless_they_said_something(
        tests_file):
    pytester = tests_file
    kept: dict = {}

    class Look:
        @pytest.hookimpl(trylast=True)
        def pytest_sessionfinish(self, session):
            terminal = session.config.pluginmanager.get_plugin("terminalreporter")
            kept.update({k: list(v) for k, v in terminal.stats.items()})
    pytester.inline_run("-p", "no:cacheprovider", plugins=[Look()])
    unlisted = [(r.nodeid.rsplit("::", 1)[1], r.when) for r in kept.get("", [])]
    assert unlisted == [("test_passes", "teardown")], unlisted
    shown = pytester.runpytest("-p", "no:cacheprovider", "-rP")
    shown.stdout.fnmatch_lines(["*said in teardown*", "*2 failed, 2 passed*"])


def _made(pytester, *args: str) -> tuple[dict, int]:
    """Each call report as made (before anything trims it), and how often pytest's own
    repr_failure ran."""
    made: dict = {}
    calls = [0]
    from _pytest.python import Function
    own = Function.repr_failure

    def counted(self, excinfo):
        calls[0] += 1
        return own(self, excinfo)

    class Look:
        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_makereport(self, item, call):
            report = yield
            if report.when == "call":
                crash = getattr(report.longrepr, "reprcrash", None)
                made[item.name] = (report.outcome, report.longreprtext, report.location,
                                   report.sections, sorted(report.keywords),
                                   crash and (crash.path, crash.lineno, crash.message),
                                   report.duration, report.head_line)
            return report
    mp = pytest.MonkeyPatch()
    mp.setattr(Function, "repr_failure", counted)
    try:
        pytester.inline_run("-p", "no:cacheprovider", *args, plugins=[Look()])
    finally:
        mp.undo()
    return made, calls[0]


def test_a_verdicts_failure_is_reported_as_pytest_would_without_its_traceback_walk(
        tests_file):
    pytester = tests_file
    pytester.makepyfile(test_more="""
        import pytest

        def test_said():
            print("captured by the call")
            pytest.fail("line one\\nline two", pytrace=False)

        def test_traced():
            pytest.fail("with its traceback")

        def test_chained():
            try:
                raise KeyError("x")
            except KeyError:
                pytest.fail("while handling", pytrace=False)
    """)
    ours, walked = _made(pytester)
    theirs, walked_all = _made(pytester, "-p", "no:burnin-kept-reports")
    for made in (ours, theirs):
        for name in made:
            made[name] = made[name][:6] + made[name][7:]  # not its duration
    assert ours == theirs
    assert "line one\nline two" in ours["test_said"][1]
    assert ours["test_said"][3] == [("Captured stdout call", "captured by the call\n")]
    # test_verdict and test_said without pytest's walk; a traceback, a chained failure
    # and a bug with it
    assert (walked, walked_all) == (3, 5)
    _, walked_full = _made(pytester, "--fulltrace")
    assert walked_full == 5, "--fulltrace is pytest's to print"
