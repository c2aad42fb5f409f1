"""`burnin rejudge RUN_DIR`: a run's verdicts judged again from its results.jsonl.

With the inventory the run kept (RUN_DIR/inventory.yaml, copied when the run started)
and the same code, every verdict comes out as the run's junit.xml has it: judging is a
function of the figures, not of the moment. With another inventory (`--inventory`), the
verdicts that would change are listed, so that an operator tunes a floor or a fraction on
last night's figures before using it. No probe runs and nothing is written: the ledger,
the reports and the nodes are left as they are."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from burnin.checks import CHECKS
from burnin.engine.kept_inventory import INVENTORY_COPY
from burnin.engine.run import Run
from burnin.errors import RejudgeError  # noqa: F401  (raised here, caught by callers)
from burnin.gate import incidents
from burnin.gate.admit import ReportError, read_junit
from burnin.inventory.schema import InventoryError, load_inventory
from burnin.model.outcome import Outcome, first_line
from burnin.probe.protocol import ProbeOutcome


@dataclass(frozen=True)
class Case:
    """One node's outcome of one check, as junit.xml states it."""

    outcome: Outcome
    message: str = ""
    # The kinds of the node's own evidence (Verdict.own): no incident takes such a case.
    # junit.xml does not state it, so a rejudged case is compared without it.
    own: str = field(default="", compare=False)


@dataclass(frozen=True)
class Change:
    node: str
    check: str
    was: Case
    now: Case


def _records(run_dir: Path) -> dict[str, dict[str, ProbeOutcome]]:
    path = run_dir / "results.jsonl"
    out: dict[str, dict[str, ProbeOutcome]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise RejudgeError(f"{path}: cannot read: {e}") from None
    for i, line in enumerate(lines, 1):
        try:
            o = ProbeOutcome.from_record(record := json.loads(line))
            check = record["check"]
        except (ValueError, KeyError, TypeError) as e:
            raise RejudgeError(f"{path}:{i}: not a burnin record ({e})") from None
        if check not in CHECKS:
            raise RejudgeError(f"{path}:{i}: a record of {check!r}, which this burnin does "
                               f"not know (checks: {', '.join(CHECKS)})")
        out.setdefault(check, {})[o.node] = o
    return out


def judged(run: Run, check: str, node) -> Case:
    """The case a run's test of `check` on `node` gives, as junit.xml writes it."""
    try:
        v = run.verdict(check, node)
    except Exception as e:  # what the run's test would have reported as an error
        return Case(Outcome.ERROR, first_line(f"{type(e).__name__}: {e}"))
    if v.skipped:
        return Case(Outcome.SKIPPED, first_line(v.skipped))
    if v.failures:
        return Case(Outcome.FAILED, first_line("\n".join(v.failures)), ", ".join(v.own))
    return Case(Outcome.PASSED)


def rejudge(run_dir: Path, inventory_file: Path | None = None) -> tuple[int, list[Change]]:
    """(testcases judged, the ones whose verdict differs from the run's junit.xml)."""
    run_dir = run_dir.resolve()
    try:
        report = read_junit(run_dir / "junit.xml")
    except ReportError as e:
        raise RejudgeError(str(e)) from None
    inventory_file = inventory_file or run_dir / INVENTORY_COPY
    if not inventory_file.exists():
        raise RejudgeError(f"{run_dir} kept no copy of its inventory (runs before burnin "
                           "kept one): name it with --inventory FILE")
    try:
        inventory = load_inventory(inventory_file)
    except InventoryError as e:
        raise RejudgeError(f"invalid inventory:\n{e}") from None
    records = _records(run_dir)
    tested = {name for outcomes in records.values() for name in outcomes}
    by_name = {n.name: n for n in inventory.nodes}
    missing = sorted(tested - by_name.keys())
    if missing:
        raise RejudgeError(f"{inventory_file} lacks node(s) the run tested: "
                           f"{', '.join(missing[:10])}")
    props = next(iter(report.properties.values()), {})
    nodes = [by_name[name] for name in by_name if name in tested]
    with tempfile.TemporaryDirectory(prefix="burnin-rejudge-") as scratch:
        # Nothing of the run's directory is written, and no probe can start: a check the
        # run kept no record of is judged as an error, not measured now.
        run = Run(inventory, nodes, props.get("profile") or "standard", Path(scratch),
                  run_dir.name)
        run.execute = _no_probe  # type: ignore[method-assign]  # this Run never probes
        for check, outcomes in records.items():
            run.store.adopt(check, outcomes)
        return _compare(run, report, records, by_name)


def _no_probe(check: str):
    raise RejudgeError(f"the run kept no record of {check}")


def _compare(run: Run, report, records: dict, by_name: dict) -> tuple[int, list[Change]]:
    was_cases, now_cases = {}, {}
    for name, cases in report.cases.items():
        for check, outcome, message in cases:
            if check not in CHECKS or check not in records or name not in by_name:
                continue  # a case no probe record stands behind: nothing to judge again
            was_cases[(name, check)] = Case(outcome, message)
            now_cases[(name, check)] = judged(run, check, by_name[name])
    # The run's shared-cause incidents start their nodes' messages: found again here, by
    # the settings being tried (burnin/gate/incidents.py); an error here is this tool's (a
    # check the run kept no record of), not a node's, and counts for no incident.
    judged_now = {k: c for k, c in now_cases.items() if c.outcome != Outcome.ERROR}
    found = incidents.of_cases(judged_now,
                               [by_name[n] for n in sorted({n for n, _ in now_cases})],
                               run.inventory.quarantine.shared_cause)
    for key, incident in incidents.by_case(found).items():
        now_cases[key] = replace(now_cases[key], message=first_line(
            f"{incident.message}; {now_cases[key].message}"))
    changes = [Change(name, check, was, now_cases[(name, check)])
               for (name, check), was in was_cases.items() if was != now_cases[(name, check)]]
    return len(was_cases), changes
