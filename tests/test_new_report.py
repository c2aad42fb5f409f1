"""A new report is a writer in one list (burnin/report/publish.py: WRITERS): a throwaway
writer declared here, and added to the list in one place, is made by a run's end (the
plugin), by `burnin report RUN_DIR` and by publish itself, after the writers before it and
before the ones after; one that fails is named among the problems and costs no other
report."""

from __future__ import annotations

import json

import pytest
from support.replay import replay_python
from support.suiterun import SUITES

from burnin import cli
from burnin.ledger.api import Ledger
from burnin.report import publish as publish_mod
from burnin.report.publish import WRITERS, Published, ReportWriter, publish

# Everything about the report, in one place: what a writer module would hold.
WIDGETS = '''
from burnin.report.publish import WRITERS, ReportWriter


def write_widgets(p):
    """widgets.json: each node's outcomes, and whether the page was made before it."""
    made = {n: sorted(o for o, _ in v.values()) for n, v in p.verdicts.items()}
    page = (p.run_dir / "summary.html").exists()
    (p.run_dir / "widgets.json").write_text(__import__("json").dumps(
        {"nodes": made, "page_before": page, "metrics_before":
         (p.run_dir / "metrics.prom").exists()}))


WRITERS.insert(2, ReportWriter("widgets.json", write_widgets))  # after the page
'''


@pytest.fixture()
def widgets(monkeypatch):
    """The throwaway writer in this process (publish, `burnin report`)."""
    namespace: dict = {}
    monkeypatch.setattr(publish_mod, "WRITERS", list(WRITERS))
    exec(compile(WIDGETS, "widgets_plugin", "exec"), namespace)  # noqa: S102  (the text above)
    return namespace


def verdicts() -> dict:
    return {"n1": {"health": ("passed", "")}, "n2": {"health": ("failed", "no GPU 3")}}


def test_publish_runs_the_new_writer_in_its_place(tmp_path, widgets):
    run = tmp_path / "run"
    run.mkdir()
    assert publish(run, "c", "r1", verdicts()) == []
    got = json.loads((run / "widgets.json").read_text())
    assert got == {"nodes": {"n1": ["passed"], "n2": ["failed"]}, "page_before": True,
                   "metrics_before": False}
    assert (run / "metrics.prom").exists() and (run / "nodes" / "n2").is_dir()


def test_burnin_report_makes_it_from_a_run_directory(tmp_path, widgets, capsys):
    from burnin.model.outcome import CaseResult, Outcome
    from burnin.report.junit import write_junit
    run = tmp_path / "run"
    run.mkdir()
    cases = {(n, c): CaseResult(n, c, Outcome(o), m)
             for n, v in verdicts().items() for c, (o, m) in v.items()}
    write_junit(run / "junit.xml", "c", "r1", [("n1", "n1"), ("n2", "n2")], cases)
    assert cli.main(["report", str(run)]) == 0
    assert json.loads((run / "widgets.json").read_text())["nodes"] == {
        "n1": ["passed"], "n2": ["failed"]}


def test_a_failing_writer_is_named_and_costs_no_other_report(tmp_path, monkeypatch):
    def broken(p: Published) -> None:
        raise OSError("disk full")
    monkeypatch.setattr(publish_mod, "WRITERS",
                        [ReportWriter("broken.txt", broken), *WRITERS])
    run = tmp_path / "run"
    run.mkdir()
    problems = publish(run, "c", "r1", verdicts())
    assert problems == ["broken.txt could not be made: OSError: disk full"]
    assert (run / "summary.html").exists() and (run / "metrics.prom").exists()


def test_a_run_of_the_suite_makes_it_at_its_end(pytester):
    pytester.makepyfile(widgets_plugin=WIDGETS)
    replay = replay_python(pytester.path / "replay")
    inv = pytester.path / "inv.yaml"
    inv.write_text(f"version: 1\ndefaults: {{transport: local, gpus: 0, python: {replay}}}\n"
                   f"nodes:\n  - name: n[1-2]\nquarantine:\n"
                   f"  ledger: {pytester.path / 'ledger.db'}\n")
    Ledger(pytester.path / "ledger.db")  # made on purpose, as `burnin ledger init` does
    reports = pytester.path / "reports"
    result = pytester.runpytest_subprocess(
        SUITES, "--inventory", str(inv), "--reports", str(reports), "-p", "no:cacheprovider",
        "-p", "widgets_plugin", "-k", "health", timeout=600)
    assert result.ret == 0, result.stdout.str()[-3000:]
    got = json.loads((reports / "latest" / "widgets.json").read_text())
    assert got["nodes"] == {"n1": ["passed"], "n2": ["passed"]} and got["page_before"]
