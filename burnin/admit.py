"""Admission: which nodes a JUnit report lets into production. Fail closed: a node is
admitted only when every required check has exactly one passed testcase for it."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

OUTCOME_TAGS = ("failure", "error", "skipped")


class ReportError(Exception):
    """The report cannot be trusted at all: every node stays out (exit 2)."""


@dataclass(frozen=True)
class Decision:
    node: str
    admitted: bool
    reasons: tuple[str, ...] = ()


def read_junit(path: Path) -> dict[str, list[tuple[str, str, str]]]:
    """{node: [(check, outcome, message)]} from a burnin junit.xml."""
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
    nodes: dict[str, list[tuple[str, str, str]]] = {}
    for suite in suites:
        name = suite.get("name")
        if not name:
            raise ReportError(f"{path}: a <testsuite> without a name (the node)")
        cases = nodes.setdefault(name, [])
        for case in suite.findall("testcase"):
            check = case.get("name")
            if not check:
                raise ReportError(f"{path}: node {name}: a <testcase> without a name")
            outcome, message = "passed", ""
            for tag in OUTCOME_TAGS:
                el = case.find(tag)
                if el is not None:
                    outcome, message = tag, (el.get("message") or el.text or "").strip()
                    break
            cases.append((check, outcome, message))
    if not any(nodes.values()):
        raise ReportError(f"{path}: no <testcase> at all, so no check passed")
    return nodes


def decide(nodes: dict[str, list[tuple[str, str, str]]], required: list[str] | None = None,
           inventory_nodes: list[str] | None = None) -> list[Decision]:
    """One decision per node of the report (and of the inventory, when given)."""
    checks = required or sorted({c for cases in nodes.values() for c, _, _ in cases})
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
        for check in checks:
            found = [(o, m) for c, o, m in nodes[name] if c == check]
            if not found:
                reasons.append(f"{check}: no testcase")
            elif len(found) > 1:
                reasons.append(f"{check}: {len(found)} testcases, expected one")
            elif found[0][0] != "passed":
                outcome, message = found[0]
                reasons.append(f"{check}: {outcome}" + (f": {message[:300]}" if message else ""))
        decisions.append(Decision(name, not reasons, tuple(reasons)))
    return decisions


def write_admitted(path: Path, decisions: list[Decision]) -> None:
    """The admitted nodes, one per line, replaced in one step."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text("".join(f"{d.node}\n" for d in decisions if d.admitted), encoding="utf-8")
    os.replace(tmp, path)
