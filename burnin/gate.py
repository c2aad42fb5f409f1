"""Where verdicts become decisions: who is quarantined, who is released, what is done.

Used by the plugin at the end of a run, on the controller only. Plain code over the
ledger and the actions, testable without pytest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from burnin import actions
from burnin.actions import ActionResult
from burnin.goodput import Speed
from burnin.incidents import Incident, page
from burnin.ledger import Ledger, NodeRun
from burnin.nodes import Inventory, Node
from burnin.outcome import Outcome
from burnin.reports import CaseResult


@dataclass
class GateReport:
    quarantined: list[str] = field(default_factory=list)   # new entries
    still_failing: list[str] = field(default_factory=list)
    clean: dict[str, int] = field(default_factory=dict)      # node: clean runs so far
    released: list[str] = field(default_factory=list)
    actions: list[actions.ActionResult] = field(default_factory=list)
    would_quarantine: list[str] = field(default_factory=list)  # --no-quarantine
    incidents: list[Incident] = field(default_factory=list)  # shared causes: nobody's blame
    pages: list[ActionResult] = field(default_factory=list)  # incident_command


def split_by_quarantine(nodes: list[Node], ledger: Ledger, revalidate: bool):
    """(nodes to test, nodes left out because of quarantine)."""
    held = ledger.quarantined()
    if revalidate:
        return [n for n in nodes if n.name in held], []
    return [n for n in nodes if n.name not in held], [n for n in nodes if n.name in held]


def settle(inventory: Inventory, ledger: Ledger, run_id: str,
           cases: dict[tuple[str, str], CaseResult], revalidate: bool,
           act: bool, speeds: dict[str, Speed] | None = None,
           incidents: list[Incident] | None = None) -> GateReport:
    """Apply a finished run's verdicts: keep each judged node's verdict (and `speeds`)
    among the ledger's runs, quarantine failures (ledger, then actions), and in a
    re-validation run count clean runs and release. A failure that is part of one of
    `incidents` (burnin/incidents.py) quarantines nobody and acts on nobody: the ledger
    keeps the incident, and quarantine.incident_command pages a person once for it."""
    report = GateReport(incidents=list(incidents or ()))
    shared = {(n, i.check) for i in report.incidents for n in i.nodes}
    by_node: dict[str, list[CaseResult]] = {}
    for (node, _), case in sorted(cases.items()):
        by_node.setdefault(node, []).append(case)
    q = inventory.quarantine
    if act:
        kept = node_runs(run_id, by_node, speeds or {}, time.time())
        if kept:
            ledger.record_runs(inventory.cluster, kept, q.keep_runs_days)
        if report.incidents:
            ledger.record_incidents(inventory.cluster, run_id, report.incidents)
    failures = []
    for name, node_cases in by_node.items():
        failed = [c for c in node_cases if Outcome(c.outcome).bad]
        own = [c for c in failed if (name, c.check) not in shared]
        if failed and not own:
            continue  # failed only as part of an incident: neither blamed nor clean
        failed = own
        if failed:
            failures.append((name, [c.check for c in failed],
                             [f"{c.check}: {c.message}" for c in failed],
                             {c.check: c.message for c in failed}))
        elif revalidate and act and all(c.outcome == Outcome.PASSED for c in node_cases):
            entry = ledger.get(name)
            clean, released = ledger.record_clean(name, run_id, q.release_after,
                                                  (q.repeat_times, q.repeat_days))
            if clean == 0:
                continue  # released meanwhile (by hand, or another run): nothing recorded
            report.clean[name] = clean
            if released:
                report.released.append(name)
                if "slurm" in q.actions and entry and entry.drained_by_burnin:
                    result = actions.slurm_resume(name)
                    ledger.note(name, "action", f"{result.action}: {result.message}", run_id)
                    report.actions.append(result)
    if not act:
        report.would_quarantine += [name for name, *_ in failures]
        return report
    if q.incident_command:
        report.pages += [page(q.incident_command, i, run_id) for i in report.incidents]
    # The run's failures in one ledger transaction, then each new one's actions.
    new = ledger.record_failures(inventory.cluster, failures, run_id) if failures else {}
    for name, checks, reasons, _ in failures:
        (report.quarantined if new[name] else report.still_failing).append(name)
        if new[name]:
            report.actions += quarantine_actions(ledger, q, name, checks, reasons, run_id)
    return report


def quarantine_actions(ledger: Ledger, q, name: str, checks: list[str], reasons: list[str],
                       run_id: str | None, who: str = "burnin") -> list[actions.ActionResult]:
    """The inventory's quarantine.actions for a node just quarantined (`q`: its
    QuarantineSettings), each noted in the ledger's history."""
    results = []
    if "slurm" in q.actions:
        r = actions.slurm_drain(name, checks, reasons)
        if r.drained:
            ledger.set_drained(name, True)
        results.append(r)
    if "command" in q.actions:
        results.append(actions.command_hook(q.command, name, checks, "; ".join(reasons)))
    for r in results:
        ledger.note(name, "action" if r.ok else "action-failed",
                    f"{r.action}: {r.message}", run_id, who=who)
    return results


def node_runs(run_id: str, by_node: dict[str, list[CaseResult]], speeds: dict[str, Speed],
              now: float) -> list[NodeRun]:
    """What the ledger keeps of the run: each node it judged (one it only skipped, held
    in quarantine or busy with another run, was not judged), its worst outcome, the
    checks it did not pass and why, its relative speed."""
    out = []
    for node, node_cases in by_node.items():
        judged = [c for c in node_cases if c.outcome != Outcome.SKIPPED]
        if not judged:
            continue
        bad = [c for c in judged if Outcome(c.outcome).bad]
        worst = Outcome.ERROR if any(c.outcome == Outcome.ERROR for c in bad) else \
            Outcome.FAILED if bad else Outcome.PASSED
        speed = speeds.get(node)
        out.append(NodeRun(node, run_id, now, str(worst), tuple(c.check for c in bad),
                           tuple(f"{c.check}: {c.message}" for c in bad),
                           speed.speed if speed else None,
                           {"set_by": speed.set_by} if speed else {}))
    return out
