"""junit.xml (the admission contract) and the reports/latest pointer.

junit.xml holds one <testsuite> per node, named after the node, and one <testcase> per
check, named after the check; its shape is documented in README.md.
"""

from __future__ import annotations

import os
import shutil
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from junit_xml import TestCase, TestSuite, to_xml_report_string

from burnin.core.safefiles import write_atomically
from burnin.model.outcome import CaseResult, Outcome

if TYPE_CHECKING:
    pass



def write_junit(path: Path, cluster: str, run_id: str, nodes: list[tuple[str, str]],
                cases: dict[tuple[str, str], CaseResult], run_properties: dict | None = None,
                node_properties: dict[str, dict] | None = None) -> None:
    """Write junit.xml (render_junit), durably and in one step."""
    # The admission contract: on disk before a pipeline can see it.
    write_atomically(path, junit_pieces(cluster, run_id, nodes, cases, run_properties,
                                        node_properties), durable=True)


def render_junit(cluster: str, run_id: str, nodes: list[tuple[str, str]],
                 cases: dict[tuple[str, str], CaseResult], run_properties: dict | None = None,
                 node_properties: dict[str, dict] | None = None) -> str:
    """junit.xml's text: a testsuite for every (name, address) in `nodes`, even one with
    no testcase, so that `burnin admit` sees a node whose checks did not run. Each
    testsuite carries the run's properties (burnin wrote it, complete or not, what was
    requested) and its node's (GPU count, the checks that apply to it)."""
    return "".join(junit_pieces(cluster, run_id, nodes, cases, run_properties,
                                node_properties))


def junit_pieces(cluster: str, run_id: str, nodes: list[tuple[str, str]],
                 cases: dict[tuple[str, str], CaseResult], run_properties: dict | None = None,
                 node_properties: dict[str, dict] | None = None) -> list[str]:
    """render_junit's text in pieces, a testsuite each, to be written one after another
    (write_atomically): a failing fleet's text (57 MB at 3,000 nodes) is then never held
    twice, as its testsuites and joined."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    by_node: dict[str, list[CaseResult]] = {}
    for (node, _), case in cases.items():
        by_node.setdefault(node, []).append(case)
    if not nodes:
        return [_completed(to_xml_report_string([], prettyprint=False, encoding="utf-8"))]
    # One testsuite at a time, each through the same junit_xml and _completed steps as a
    # whole document would take, so that the text is the same to the byte; the whole
    # document's trees (some 250 MB at 10,000 nodes) are never held at once.
    parts: list[str] = []
    totals = dict.fromkeys(("disabled", "errors", "failures", "tests"), 0)
    seconds, skipped = 0.0, 0  # as junit_xml and _completed sum them, in the same order
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
        parts.append(("\n\t" if parts else "") + ET.tostring(el, "unicode"))
    head = " ".join(f'{k}="{v}"' for k, v in totals.items())
    return ['<?xml version="1.0" encoding="utf-8"?>\n'
            f'<testsuites {head} time="{seconds:.3f}" skipped="{skipped}">\n\t',
            *parts, "\n</testsuites>\n"]


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


COST = "goodput_cost_node_hours_per_hour"  # junit.xml's price of admitting a node


def junit_speeds(path: Path, costs: dict[str, float] | None = None
                 ) -> dict[str, tuple[float, str]]:
    """{node: (relative speed, the check that sets it)} as junit.xml states them (burnin/
    figures/goodput.py), from each node's first testsuite; none for a report without them;
    and into `costs`, when given, each node's price in node-hours per job-hour. Only these
    properties are read, a testsuite at a time (admit.read_junit's whole tree of a
    fleet's report cost a quarter of a second)."""
    if not path.exists():
        return {}
    out: dict[str, tuple[float, str]] = {}
    seen: set[str] = set()
    name: str | None = None
    props: dict[str, str] = {}
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
