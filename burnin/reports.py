"""Run reports: junit.xml (the admission contract) and the reports/latest pointer.

junit.xml holds one <testsuite> per node, named after the node, and one <testcase> per
check, named after the check; its shape is documented in README.md.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from junit_xml import TestCase, TestSuite, to_xml_report_string

from burnin.files import write_atomically
from burnin.outcome import Outcome

if TYPE_CHECKING:
    from burnin.nodes import Node

FLOORS_KEPT = ".floors.json"  # {node: {figure family: floor}}, as the run's judges stated


@dataclass
class CaseResult:
    """One node's outcome of one check, merged from pytest's setup/call/teardown reports."""

    node: str
    check: str
    outcome: Outcome = Outcome.PASSED
    message: str = ""
    output: str = ""
    stdout: str = ""
    duration_s: float = 0.0
    floors: dict[str, float] = field(default_factory=dict)  # the judge's (Verdict.floors)

    def add_phase(self, when: str, outcome: str, text: str, stdout: str, duration: float):
        self.duration_s += duration
        if stdout:
            self.stdout = stdout
        if outcome == "passed":
            return
        if outcome == "skipped":  # pytest's words, from here on ours
            if self.outcome == Outcome.PASSED:
                self.outcome, self.message, self.output = Outcome.SKIPPED, _first_line(text), text
            return
        kind = Outcome.FAILED if when == "call" else Outcome.ERROR
        if self.outcome in (Outcome.PASSED, Outcome.SKIPPED) or (
                kind == Outcome.FAILED and self.outcome == Outcome.ERROR):
            self.outcome, self.message, self.output = kind, _first_line(text), text


def _first_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    # pytest.fail(..., pytrace=False) gives the bare messages; keep them all, joined.
    return "; ".join(ln.strip() for ln in lines[:20])[:4000]


def write_junit(path: Path, cluster: str, run_id: str, nodes: list[tuple[str, str]],
                cases: dict[tuple[str, str], CaseResult], run_properties: dict | None = None,
                node_properties: dict[str, dict] | None = None) -> None:
    """Write junit.xml (render_junit), durably and in one step."""
    # The admission contract: on disk before a pipeline can see it.
    write_atomically(path, render_junit(cluster, run_id, nodes, cases, run_properties,
                                        node_properties), durable=True)


def render_junit(cluster: str, run_id: str, nodes: list[tuple[str, str]],
                 cases: dict[tuple[str, str], CaseResult], run_properties: dict | None = None,
                 node_properties: dict[str, dict] | None = None) -> str:
    """junit.xml's text: a testsuite for every (name, address) in `nodes`, even one with
    no testcase, so that `burnin admit` sees a node whose checks did not run. Each
    testsuite carries the run's properties (burnin wrote it, complete or not, what was
    requested) and its node's (GPU count, the checks that apply to it)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    by_node: dict[str, list[CaseResult]] = {}
    for (node, _), case in cases.items():
        by_node.setdefault(node, []).append(case)
    if not nodes:
        return _completed(to_xml_report_string([], prettyprint=False, encoding="utf-8"))
    # One testsuite at a time, each through the same junit_xml and _completed steps as a
    # whole document would take, so that the text is the same to the byte; the whole
    # document's trees (some 250 MB at 10,000 nodes) are never held at once.
    parts: list[str] = []
    totals = dict.fromkeys(("disabled", "errors", "failures", "tests"), 0)
    seconds, skipped = 0, 0  # as junit_xml and _completed sum them, in the same order
    for name, address in nodes:
        suite = _suite(cluster, run_id, stamp, name, address, by_node.get(name, []),
                       {**(run_properties or {}), **(node_properties or {}).get(name, {})})
        one = ET.fromstring(to_xml_report_string([suite], prettyprint=False,
                                                 encoding="utf-8").encode("utf-8"))
        for key in totals:
            totals[key] += int(one.get(key, 0))
        seconds += float(one.get("time", 0))
        el = _completed_suite(one[0])
        skipped += int(el.get("skipped", 0))
        parts.append(ET.tostring(el, "unicode"))
    head = " ".join(f'{k}="{v}"' for k, v in totals.items())
    return ('<?xml version="1.0" encoding="utf-8"?>\n'
            f'<testsuites {head} time="{seconds:.3f}" skipped="{skipped}">\n\t'
            + "\n\t".join(parts) + "\n</testsuites>\n")


def _suite(cluster: str, run_id: str, stamp: str, name: str, address: str,
           cases: list[CaseResult], properties: dict) -> TestSuite:
    """One node's testsuite, as junit_xml builds it."""
    tcs = []
    for case in cases:
        tc = TestCase(case.check, classname=f"{cluster}.{name}",
                      elapsed_sec=round(case.duration_s, 3), stdout=case.stdout or None)
        outcome = Outcome(case.outcome)
        if outcome == Outcome.FAILED:
            tc.add_failure_info(message=case.message, output=case.output)
        elif outcome == Outcome.ERROR:
            tc.add_error_info(message=case.message, output=case.output)
        elif outcome == Outcome.SKIPPED:
            tc.add_skipped_info(message=case.message, output=case.output)
        tcs.append(tc)
    return TestSuite(name, tcs, hostname=address, id=name, package=cluster, timestamp=stamp,
                     properties={"cluster": cluster, "run_id": run_id, **properties})


def _completed_suite(suite: ET.Element) -> ET.Element:
    """_completed's changes to one testsuite (level 1 of the document)."""
    for el in (suite, *suite.iter("testcase")):
        el.set("time", f"{float(el.get('time') or 0):.3f}")
    ET.indent(suite, "\t", level=1)
    return suite


def _completed(text: str) -> str:
    """What junit_xml leaves out and JUnit readers (Jenkins, GitLab, the Ant schema)
    expect: `time` on every testcase (0 for one that did not run) and testsuite, in plain
    decimal seconds; the skipped count on <testsuites> beside the others."""
    root = ET.fromstring(text.encode("utf-8"))
    for el in (root, *root.iter("testsuite"), *root.iter("testcase")):
        el.set("time", f"{float(el.get('time') or 0):.3f}")
    root.set("skipped", str(sum(int(s.get("skipped", 0)) for s in root.iter("testsuite"))))
    ET.indent(root, "\t")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def point_latest(reports_dir: Path, run_id: str) -> None:
    """Make reports/latest point at this run, replacing the old link in one step. A
    `latest` that is a real directory (a CI artifact step, `cp -r` or `rsync -L` turns the
    link into one) is first moved aside in one step and then removed: between the two
    steps `latest` is missing, which admits nobody, and never the old report. OSError
    when it cannot be done."""
    link = reports_dir / "latest"
    tmp = reports_dir / f".latest.{os.getpid()}"
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    os.symlink(run_id, tmp)
    if link.is_dir() and not link.is_symlink():
        aside = reports_dir / f".latest-replaced.{os.getpid()}.{time.time_ns()}"
        os.rename(link, aside)
        os.replace(tmp, link)
        shutil.rmtree(aside, ignore_errors=True)
        return
    os.replace(tmp, link)


def publish(run_dir: Path, cluster: str, run_id: str,
            verdicts: dict[str, dict[str, tuple[str, str]]],
            floors: dict | None = None, quarantined: dict[str, bool] | None = None,
            *, nodes: Iterable[Node] | None = None) -> list[str]:
    """summary.html, metrics.prom and an evidence folder per failed node, from the run's
    verdicts and its results.jsonl (and `floors`, {node: {figure family: floor}}, the
    floors its judges used, which the page draws; `quarantined`, {node: in the ledger at
    the end of the run}, for metrics.prom). `nodes`: the inventory's nodes, whose labels group the
    page's fleet grid (by rack) and whose addresses it shows; without them (`burnin
    report` on a run directory) the grid is one group. Earlier runs of the cluster beside
    this one under reports/ give the page its trend. Each part is made on its own: one
    that fails (a node's record of an unexpected shape, a full disk) is named in the
    returned problems and the others are still made; nothing here can stop a run or its
    junit.xml."""
    from burnin.figures import paused_gc
    with paused_gc():
        return _publish(run_dir, cluster, run_id, verdicts, floors, quarantined, nodes)


def _publish(run_dir: Path, cluster: str, run_id: str, verdicts: dict, floors: dict | None,
             quarantined: dict[str, bool] | None, nodes: Iterable[Node] | None) -> list[str]:
    from burnin import evidence, incidents_report, metrics, summary, track
    from burnin.figures import read_for_page, read_records
    from burnin.summary import page, trend

    problems: list[str] = []

    def attempt(what: str, fn) -> bool:
        try:
            fn()
            return True
        except Exception as e:  # a report part degrades; the verdicts are already written
            problems.append(f"{what} could not be made: {type(e).__name__}: {e}")
            return False

    # The floors the judges stated are kept beside the run, so that `burnin report` (which
    # has junit.xml's verdicts, not the judges') draws the same ones.
    kept, given = run_dir / FLOORS_KEPT, floors
    floors = {} if floors is None else floors
    if given is not None:
        attempt("the judges' floors", lambda: write_atomically(kept, json.dumps(floors)))
    elif kept.exists():
        attempt("the judges' floors", lambda: floors.update(json.loads(kept.read_text())))
    records: list[dict] = []
    # A big fleet's passing nodes are drawn from their figures (page.WHOLE_SECTIONS):
    # their documents' series are never read back, the failing nodes' whole records are.
    whole = {n for n, v in verdicts.items() if any(Outcome(o) != Outcome.PASSED
                                                   for o, _ in v.values())}
    if (run_dir / "results.jsonl").exists():
        attempt("results.jsonl", lambda: records.extend(
            read_for_page(run_dir, whole) if len(verdicts) > page.WHOLE_SECTIONS
            else read_records(run_dir / "results.jsonl")))
    by_node: dict[str, list[dict]] = {}
    for r in records:
        if isinstance(r, dict) and isinstance(r.get("node"), str) \
                and isinstance(r.get("check"), str):
            by_node.setdefault(r["node"], []).append(r)
    bundles = set()
    for node, v in verdicts.items():
        if any(Outcome(outcome).bad for outcome, _ in v.values()) and attempt(
                f"the evidence folder of {node}",
                lambda node=node, v=v: evidence.write_bundle(run_dir, node, v,
                                                             by_node.get(node, []))):
            bundles.add(node)
    info = {n.name: summary.NodeInfo(n.name, n.address, dict(n.labels)) for n in nodes or ()}
    unreadable: set[int] = set()

    speeds: dict[str, tuple[float, str]] = {}
    costs: dict[str, float] = {}  # node-hours per job-hour, as junit.xml states them
    attempt("the relative speeds", lambda: speeds.update(junit_speeds(run_dir / "junit.xml",
                                                                      costs)))
    incidents: list = []  # the run's shared causes: the page's first section, metrics.prom
    attempt("the shared-cause incidents", lambda: incidents.extend(
        incidents_report.load(run_dir)))

    def draw() -> None:
        report = summary.build(cluster, run_id, verdicts, records, floors, info, bundles)
        report.speeds = speeds
        report.costs = costs
        report.incidents = incidents
        try:
            report.history = track.load(run_dir)
        except (OSError, ValueError) as e:  # costs the page's ledger part only
            report.problems.append(f"the ledger's history of the nodes not drawn: {e}")
        unreadable.update(report.unreadable)
        report.problems += problems
        try:
            report.trend = trend.load(run_dir, cluster, report.figures)
        except (OSError, ValueError) as e:  # an unreadable earlier run costs the trend only
            report.problems.append(f"trend over earlier runs not drawn: {e}")
        write_atomically(run_dir / "summary.html", page.render(report))
        # A later run's trend reads these instead of this run's results.jsonl.
        attempt("the figures kept for later trends", lambda: trend.save(run_dir,
                                                                        report.figures))
    if not attempt("summary.html", draw):
        attempt("a plain summary.html", lambda: write_atomically(
            run_dir / "summary.html", html_fallback(cluster, run_id, verdicts, problems)))
    # A record with a figure that is not a number would stop metrics.render: left out.
    readable = [r for r in records if id(r) not in unreadable]
    attempt("metrics.prom", lambda: metrics.write(
        run_dir / "metrics.prom", metrics.render(cluster, run_id, time.time(), verdicts,
                                                 readable, quarantined, speeds)
        + incidents_report.prom(cluster, incidents)))
    return problems


COST = "goodput_cost_node_hours_per_hour"  # junit.xml's price of admitting a node


def junit_speeds(path: Path, costs: dict[str, float] | None = None
                 ) -> dict[str, tuple[float, str]]:
    """{node: (relative speed, the check that sets it)} as junit.xml states them (burnin/
    goodput.py), from each node's first testsuite; none for a report without them; and
    into `costs`, when given, each node's price in node-hours per job-hour. Only these
    properties are read, a testsuite at a time (admit.read_junit's whole tree of a
    fleet's report cost a quarter of a second)."""
    if not path.exists():
        return {}
    out: dict[str, tuple[float, str]] = {}
    seen: set[str] = set()
    name, props = None, {}
    for event, el in ET.iterparse(path, events=("start", "end")):
        if event == "start":
            if el.tag == "testsuite":
                name, props = el.get("name"), {}
        elif el.tag == "property" and el.get("name") in ("relative_speed", "speed_set_by",
                                                         COST):
            props[el.get("name")] = el.get("value") or ""
        elif el.tag == "testsuite":
            if name and name not in seen:
                seen.add(name)
                try:
                    out[name] = (float(props.get("relative_speed", "")),
                                 props.get("speed_set_by", "").split(":")[0])
                    if costs is not None:
                        costs[name] = float(props[COST])
                except (ValueError, KeyError):
                    pass
            el.clear()
    return out


def html_fallback(cluster: str, run_id: str, verdicts: dict, problems: list[str]) -> str:
    """The page when the full one could not be drawn: what failed, and every verdict."""
    from html import escape
    rows = "".join(f"<tr><td>{escape(n)}</td><td>{escape(c)}</td><td>{escape(o)}</td>"
                   f"<td>{escape(m)}</td></tr>" for n, v in sorted(verdicts.items())
                   for c, (o, m) in sorted(v.items()))
    notes = "".join(f"<li>{escape(p)}</li>" for p in problems)
    return (f"<!doctype html><meta charset='utf-8'><title>burnin {escape(cluster)} "
            f"{escape(run_id)}</title><h1>burnin run {escape(run_id)}</h1><p>The full "
            f"summary could not be drawn:</p><ul>{notes}</ul><table><tr><th>node</th>"
            f"<th>check</th><th>outcome</th><th>message</th></tr>{rows}</table>")


def floors_of(cases: dict[tuple[str, str], CaseResult]) -> dict[str, dict[str, float]]:
    """{node: {figure family: floor}}: the floors each node's judges held it to."""
    out: dict[str, dict[str, float]] = {}
    for (node, _), case in cases.items():
        out.setdefault(node, {}).update(case.floors)
    return out


def verdicts_of(cases: dict[tuple[str, str], CaseResult]) -> dict[str, dict[str, tuple]]:
    """{node: {check: (Outcome, message)}}."""
    out: dict[str, dict[str, tuple]] = {}
    for (node, check), case in cases.items():
        out.setdefault(node, {})[check] = (Outcome(case.outcome), case.message)
    return out
