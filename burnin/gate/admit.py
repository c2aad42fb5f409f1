"""Admission: which nodes a JUnit report lets into production. Fail closed: a node is
admitted only when every required check has exactly one passed testcase for it.

Required by default: every check of burnin's table that applies to the node (from the
node's GPU count and the run's size recorded in the report), or the inventory's
admission.require; never "whatever the report happens to hold", so a `-k health` run
admits nobody. Only a complete report burnin wrote is read: pytest's own --junitxml, a
hand-made file or an interrupted run's report is bad input."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from burnin.checks import CHECKS, applicable
from burnin.core.safefiles import write_atomically
from burnin.errors import ReportError  # noqa: F401  (raised here, caught by callers)
from burnin.model.outcome import JUNIT_TAGS, Outcome


@dataclass
class Report:
    """A burnin junit.xml: per node its testcases and its testsuite's properties."""

    cases: dict[str, list[tuple[str, Outcome, str]]] = field(default_factory=dict)
    properties: dict[str, dict[str, str]] = field(default_factory=dict)

    def required(self, node: str) -> list[str]:
        """What the report itself says a node must pass: the inventory's admission.require
        when it set one, else every check that applies to the node (a GPU count the run
        never learned counts as GPUs: fail closed)."""
        props = self.properties.get(node, {})
        if props.get("admission_require"):
            return props["admission_require"].split(",")
        gpus = props.get("gpus", "unknown")
        count = props.get("nodes_in_run", "")
        nodes = (int(count) if count.isdecimal() else 0) or len(self.cases)
        found = props.get("equipped_checks", "unknown")  # unknown: every tool counts as found
        equipped = None if found == "unknown" else frozenset(c for c in found.split(",") if c)
        return applicable(int(gpus) if gpus.isdecimal() else None, nodes, equipped)


@dataclass(frozen=True)
class Decision:
    node: str
    admitted: bool
    reasons: tuple[str, ...] = ()


def read_junit(path: Path, strict: bool = True) -> Report:
    """A burnin junit.xml's testcases and properties; ReportError for anything else (with
    strict=False, a report of an interrupted run is read too: for re-rendering it)."""
    try:
        root = ET.parse(path).getroot()
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except ET.ParseError as e:
        raise ReportError(f"{path}: not well-formed XML ({e}); a truncated report?") from None
    except OSError as e:
        raise ReportError(f"{path}: cannot read: {e}") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise ReportError(f"{path}: the root element is <{root.tag}>, expected <testsuites>")
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if not suites:
        raise ReportError(f"{path}: no <testsuite>, so no node to admit")
    report = Report()
    nodes = report.cases
    runs = set()  # of every testsuite: a node's second one may come from another run
    for suite in suites:
        name = suite.get("name")
        if not name:
            raise ReportError(f"{path}: a <testsuite> without a name (the node)")
        props = {p.get("name") or "": p.get("value") or "" for p in suite.iter("property")}
        runs.add(props.get("run_id"))
        if strict:
            _trusted(path, name, props)
        report.properties.setdefault(name, props)
        cases = nodes.setdefault(name, [])
        for case in suite.findall("testcase"):
            check = case.get("name")
            if not check:
                raise ReportError(f"{path}: node {name}: a <testcase> without a name")
            outcome, message = Outcome.PASSED, ""
            for tag in JUNIT_TAGS:
                el = case.find(tag)
                if el is not None:
                    outcome = Outcome.of_junit(tag)
                    message = (el.get("message") or el.text or "").strip()
                    break
            cases.append((check, outcome, message))
    if not any(nodes.values()):
        raise ReportError(f"{path}: no <testcase> at all, so no check passed")
    if len(runs) > 1:
        raise ReportError(f"{path}: testsuites of different runs in one report")
    return report


def _trusted(path: Path, node: str, props: dict[str, str]) -> None:
    if not props.get("burnin_report"):
        raise ReportError(f"{path}: not a report burnin wrote (node {node}'s testsuite has "
                          "no burnin_report property; pytest's own --junitxml is not the "
                          "admission contract: use reports/<run-id>/junit.xml)")
    if not props.get("run_id"):
        raise ReportError(f"{path}: node {node}'s testsuite has no run_id")
    if props.get("complete") != "true":
        why = props.get("incomplete") or f"interrupted, exit status {props.get('exit_status', '?')}"
        raise ReportError(f"{path}: run {props['run_id']} did not complete ({why}); run it "
                          "again")


def decide(report: Report, required: list[str] | None = None,
           inventory_nodes: list[str] | None = None,
           inventory_require: list[str] | None = None,
           quarantined: dict[str, str] | None = None,
           min_speed: float | None = None,
           incidents: dict[str, str] | None = None) -> list[Decision]:
    """One decision per node of the report (and of the inventory, when given). Required:
    `required` when given (--require), else the inventory's admission.require, else what
    the report says applies to each node (Report.required). A node in `quarantined`
    ({node: why}, from the ledger) is refused whatever the report says of it, and so is
    one an open shared-cause incident holds (`incidents`: {node: why}, from the ledger,
    burnin/ledger/incidents.py) until a person closes it or a run passes them all; with
    `min_speed`, so is one slower than that against its fleet, or of unknown speed."""
    nodes = report.cases
    names = list(nodes)
    if inventory_nodes is not None:
        names = list(inventory_nodes) + [n for n in nodes if n not in set(inventory_nodes)]
    decisions = []
    for name in names:
        if inventory_nodes is not None and name not in inventory_nodes:
            decisions.append(Decision(name, False, ("not in the inventory",)))
            continue
        if name not in nodes:
            decisions.append(Decision(name, False, ("no testsuite in the report",)))
            continue
        reasons = []
        if quarantined and name in quarantined:
            reasons.append(f"in quarantine: {quarantined[name]}")
        if incidents and name in incidents:
            reasons.append(f"held by an open shared-cause incident: {incidents[name]}")
        if min_speed is not None:
            reasons += too_slow(report.properties.get(name, {}), min_speed)
        checks = required or inventory_require or report.required(name)
        for check in checks:
            found = [(o, m) for c, o, m in nodes[name] if c == check]
            if not found:
                reasons.append(f"{check}: no testcase" + ("" if check in CHECKS else
                                                          " (not a check burnin knows)"))
            elif len(found) > 1:
                reasons.append(f"{check}: {len(found)} testcases, expected one")
            elif found[0][0] != Outcome.PASSED:
                outcome, message = found[0]  # in the report's own words: failure, error
                reasons.append(f"{check}: {outcome.junit}" +
                               (f": {message[:300]}" if message else ""))
        decisions.append(Decision(name, not reasons, tuple(reasons)))
    return decisions


def too_slow(props: dict[str, str], min_speed: float) -> list[str]:
    """--min-speed: why a node's relative speed (junit.xml's `relative_speed`, burnin/
    goodput.py) keeps it out: below the bound, or not stated (fail closed: a report of a
    run without a speed-bearing check says nothing of the node's speed)."""
    try:
        speed = float(props.get("relative_speed", ""))
    except ValueError:
        return [f"relative speed: not in the report, which --min-speed {min_speed:g} needs "
                "(no check that measures a speed ran on the node)"]
    if not speed >= min_speed:  # NaN is no speed either
        return [f"relative speed {speed:.3f}, below --min-speed {min_speed:g} (set by "
                f"{props.get('speed_set_by', '?')})"]
    return []


def write_admitted(path: Path, decisions: list[Decision]) -> None:
    """The admitted nodes, one per line, replaced in one step."""
    write_atomically(path, "".join(f"{d.node}\n" for d in decisions if d.admitted))
