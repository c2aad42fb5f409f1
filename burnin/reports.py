"""Run reports: junit.xml (the admission contract) and the reports/latest pointer.

junit.xml holds one <testsuite> per node, named after the node, and one <testcase> per
check, named after the check; its shape is documented in README.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from junit_xml import TestCase, TestSuite, to_xml_report_string

if TYPE_CHECKING:
    from burnin.inventory import Node

OUTCOMES = ("passed", "failed", "error", "skipped")


@dataclass
class CaseResult:
    """One node's outcome of one check, merged from pytest's setup/call/teardown reports."""

    node: str
    check: str
    outcome: str = "passed"
    message: str = ""
    output: str = ""
    stdout: str = ""
    duration_s: float = 0.0

    def add_phase(self, when: str, outcome: str, text: str, stdout: str, duration: float):
        self.duration_s += duration
        if stdout:
            self.stdout = stdout
        if outcome == "passed":
            return
        if outcome == "skipped":
            if self.outcome == "passed":
                self.outcome, self.message, self.output = "skipped", _first_line(text), text
            return
        kind = "failed" if when == "call" else "error"
        if self.outcome in ("passed", "skipped") or (kind == "failed" and self.outcome == "error"):
            self.outcome, self.message, self.output = kind, _first_line(text), text


def _first_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    # pytest.fail(..., pytrace=False) gives the bare messages; keep them all, joined.
    return "; ".join(ln.strip() for ln in lines[:20])[:4000]


def write_junit(path: Path, cluster: str, run_id: str, nodes: list[tuple[str, str]],
                cases: dict[tuple[str, str], CaseResult]) -> None:
    """Write junit.xml: a testsuite for every (name, address) in `nodes`, even one with
    no testcase, so that `burnin admit` sees a node whose checks did not run."""
    by_node: dict[str, list[CaseResult]] = {}
    for (node, _), case in cases.items():
        by_node.setdefault(node, []).append(case)
    suites = []
    for name, address in nodes:
        tcs = []
        for case in by_node.get(name, []):
            tc = TestCase(case.check, classname=f"{cluster}.{name}",
                          elapsed_sec=round(case.duration_s, 3), stdout=case.stdout or None)
            if case.outcome == "failed":
                tc.add_failure_info(message=case.message, output=case.output)
            elif case.outcome == "error":
                tc.add_error_info(message=case.message, output=case.output)
            elif case.outcome == "skipped":
                tc.add_skipped_info(message=case.message, output=case.output)
            tcs.append(tc)
        suites.append(TestSuite(name, tcs, hostname=address, id=name, package=cluster,
                                properties={"cluster": cluster, "run_id": run_id}))
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(to_xml_report_string(suites, prettyprint=True, encoding="utf-8"),
                   encoding="utf-8")
    os.replace(tmp, path)


def point_latest(reports_dir: Path, run_id: str) -> None:
    """Make reports/latest point at this run, replacing the old link in one step."""
    link = reports_dir / "latest"
    tmp = reports_dir / f".latest.{os.getpid()}"
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    os.symlink(run_id, tmp)
    os.replace(tmp, link)


def publish(run_dir: Path, cluster: str, run_id: str,
            verdicts: dict[str, dict[str, tuple[str, str]]], floors: dict | None = None,
            *, nodes: Iterable[Node] | None = None) -> None:
    """summary.html, metrics.prom and an evidence folder per failed node, from the run's
    verdicts and its results.jsonl. `nodes`: the inventory's nodes, whose labels group the
    page's fleet grid (by rack) and whose addresses it shows; without them (`burnin
    report` on a run directory) the grid is one group. Earlier runs of the cluster beside
    this one under reports/ give the page its trend."""
    from burnin import evidence, metrics, summary
    from burnin.figures import read_records
    from burnin.summary import page, trend

    records = read_records(run_dir / "results.jsonl") if (run_dir / "results.jsonl").exists() \
        else []
    by_node: dict[str, list[dict]] = {}
    for r in records:
        if isinstance(r, dict) and isinstance(r.get("node"), str) \
                and isinstance(r.get("check"), str):
            by_node.setdefault(r["node"], []).append(r)
    bundles, problems = set(), []
    for node, v in verdicts.items():
        if any(outcome in ("failure", "error") for outcome, _ in v.values()):
            try:
                evidence.write_bundle(run_dir, node, v, by_node.get(node, []))
                bundles.add(node)
            except Exception as e:  # a malformed record must not cost the whole report
                problems.append(f"{node}: evidence folder not written: {type(e).__name__}: {e}")
    info = {n.name: summary.NodeInfo(n.name, n.address, dict(n.labels)) for n in nodes or ()}
    report = summary.build(cluster, run_id, verdicts, records, floors, info, bundles)
    report.problems += problems
    try:
        report.trend = trend.load(run_dir, cluster, report.figures)
    except (OSError, ValueError) as e:  # an unreadable earlier run costs the trend only
        report.problems.append(f"trend over earlier runs not drawn: {e}")
    tmp = run_dir / ".summary.html.tmp"
    tmp.write_text(page.render(report), encoding="utf-8")
    os.replace(tmp, run_dir / "summary.html")
    # A record with a figure that is not a number would stop metrics.render: left out.
    readable = [r for r in records if id(r) not in report.unreadable]
    metrics.write(run_dir / "metrics.prom",
                  metrics.render(cluster, run_id, time.time(), verdicts, readable))


def verdicts_of(cases: dict[tuple[str, str], CaseResult]) -> dict[str, dict[str, tuple]]:
    """{node: {check: (outcome, message)}} in junit's words (failure, error, skipped)."""
    word = {"failed": "failure"}
    out: dict[str, dict[str, tuple]] = {}
    for (node, check), case in cases.items():
        out.setdefault(node, {})[check] = (word.get(case.outcome, case.outcome), case.message)
    return out
