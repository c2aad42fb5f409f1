"""Where verdicts become decisions: who is quarantined, who is released, what is done.

Used by the plugin at the end of a run, on the controller only. Plain code over the
ledger and the actions, testable without pytest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from burnin.figures.goodput import Speed
from burnin.gate import actions
from burnin.gate.incidents import page
from burnin.ledger.api import Ledger, LedgerError, NodeRun, RunVerdicts
from burnin.model.incident import Incident
from burnin.model.nodes import Inventory, Node
from burnin.model.outcome import ActionResult, CaseResult, Outcome


@dataclass
class GateReport:
    quarantined: list[str] = field(default_factory=list)   # new entries
    still_failing: list[str] = field(default_factory=list)
    clean: dict[str, int] = field(default_factory=dict)      # node: clean runs so far
    released: list[str] = field(default_factory=list)
    actions: list[actions.ActionResult] = field(default_factory=list)
    would_quarantine: list[str] = field(default_factory=list)  # --no-quarantine
    # clean in a re-validation run without every check it failed: {node: those checks}
    not_counted: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # actions taken after the run's transaction whose record the ledger did not take
    unrecorded: list[str] = field(default_factory=list)
    incidents: list[Incident] = field(default_factory=list)  # shared causes: nobody's blame
    pages: list[ActionResult] = field(default_factory=list)  # quarantine.incident_command

    def lines(self, release_after: int) -> list[tuple[str, bool]]:
        """What the run's terminal summary says of it: (line, in red)."""
        out = [(f"{label}: {', '.join(names)}", False) for label, names in (
            ("quarantined", self.quarantined),
            ("still failing, kept in quarantine", self.still_failing),
            ("released from quarantine", self.released),
            ("would be quarantined (--no-quarantine)", self.would_quarantine)) if names]
        for node, clean in sorted(self.clean.items()):
            if node not in self.released:
                out.append((f"{node}: clean re-validation run {clean} of {release_after}" + (
                    f"; held for a person: a repeat offender or quarantined by hand "
                    f"(burnin history {node})" if clean >= release_after else ""), False))
        for node, lacking in sorted(self.not_counted.items()):
            out.append((f"{node}: clean, but not counted toward release: this run did not "
                        f"include {', '.join(lacking)}, which it is in quarantine for", True))
        out += [(f"{a.action} on {a.node}: {a.message}", not a.ok)
                for a in self.actions + self.pages]
        out += [(f"not recorded in the ledger: {u}", True) for u in self.unrecorded]
        return out


def split_by_quarantine(nodes: list[Node], ledger: Ledger, revalidate: bool):
    """(nodes to test, nodes left out because of quarantine)."""
    held = ledger.quarantined()
    if revalidate:
        return [n for n in nodes if n.name in held], []
    return [n for n in nodes if n.name not in held], [n for n in nodes if n.name in held]


def settle(inventory: Inventory, ledger: Ledger, run_id: str,
           cases: dict[tuple[str, str], CaseResult], revalidate: bool,
           act: bool, speeds: dict[str, Speed] | None = None,
           incidents: list[Incident] | None = None,
           wear: dict[str, dict] | None = None) -> GateReport:
    """Apply a finished run's verdicts: each judged node's verdict (and `speeds`) kept
    among the ledger's runs, failures quarantined, and in a re-validation run clean runs
    counted and nodes released, all in one ledger transaction (a LedgerError: none of
    it); then, once it is committed, the actions, each recorded. A failure that is part of
    one of `incidents` (burnin/gate/incidents.py) quarantines nobody and acts on nobody:
    the ledger keeps the incident, in the same transaction, and
    quarantine.incident_command pages a person once for it."""
    report = GateReport(incidents=list(incidents or ()))
    shared = {(n, i.check) for i in report.incidents for n in i.nodes}
    by_node: dict[str, list[CaseResult]] = {}
    for (node, _), case in sorted(cases.items()):
        by_node.setdefault(node, []).append(case)
    q = inventory.quarantine
    failures, clean = [], {}
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
        elif revalidate and all(c.outcome == Outcome.PASSED for c in node_cases):
            clean[name] = frozenset(c.check for c in node_cases)
    if not act:
        report.would_quarantine += [name for name, *_ in failures]
        return report
    done = ledger.record_run_end(RunVerdicts(
        inventory.cluster, run_id, node_runs(run_id, by_node, speeds or {}, time.time(),
                                             wear or {}),
        q.keep_runs_days, clean, failures, q.release_after, (q.repeat_times, q.repeat_days),
        drain="slurm" in q.actions, incidents=tuple(report.incidents)))
    report.clean, report.released = done.clean, list(done.released)
    report.not_counted = done.not_counted
    if q.incident_command:
        report.pages += [page(q.incident_command, i, run_id) for i in report.incidents]
    # Committed: from here on the run's verdicts stand; what the actions did is recorded
    # each in its own transaction, and one the ledger refuses is said, not raised.
    for name in done.resume if "slurm" in q.actions else ():
        result = actions.slurm_resume(name)
        report.actions.append(result)
        _record(report, f"{result.action} on {name}: {result.message}", ledger.note,
                name, "action", f"{result.action}: {result.message}", run_id)
    for name, checks, reasons, _ in failures:
        (report.quarantined if done.new[name] else report.still_failing).append(name)
        if done.new[name]:
            report.actions += quarantine_actions(ledger, q, name, checks, reasons, run_id,
                                                 drain_recorded=True,
                                                 unrecorded=report.unrecorded)
    return report


def _record(report: GateReport, what: str, write, *args) -> None:
    try:
        write(*args)
    except LedgerError as e:
        report.unrecorded.append(f"{what} ({e})")


def quarantine_actions(ledger: Ledger, q, name: str, checks: list[str], reasons: list[str],
                       run_id: str | None, who: str = "burnin", drain_recorded: bool = False,
                       unrecorded: list[str] | None = None) -> list[actions.ActionResult]:
    """The inventory's quarantine.actions for a node just quarantined (`q`: its
    QuarantineSettings), then what they did in one ledger transaction. A drain is marked
    in the ledger before it is asked for (`drain_recorded`: the run's transaction did),
    so that a write lost after it never loses that burnin drained the node. With
    `unrecorded`, a ledger that refuses the record is said there, not raised."""
    results = []
    if "slurm" in q.actions:
        if not drain_recorded:
            ledger.set_drained(name, True)
        results.append(actions.slurm_drain(name, checks, reasons))
    if "command" in q.actions:
        results.append(actions.command_hook(q.command, name, checks, "; ".join(reasons)))
    if results:
        if unrecorded is None:
            ledger.record_actions(name, results, run_id, who=who)
        else:
            report = GateReport(unrecorded=unrecorded)
            _record(report, "; ".join(f"{r.action} on {name}: {r.message}" for r in results),
                    ledger.record_actions, name, results, run_id, who)
    return results


def node_runs(run_id: str, by_node: dict[str, list[CaseResult]], speeds: dict[str, Speed],
              now: float, wear: dict[str, dict] | None = None) -> list[NodeRun]:
    """What the ledger keeps of the run: each node it judged (one it only skipped, held
    in quarantine or busy with another run, was not judged), its worst outcome, the
    checks it did not pass and why, its relative speed and its wear counters
    (burnin/figures/wear.py: what the replace-soon list's trends read)."""
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
                           {**({"set_by": speed.set_by} if speed else {}),
                            **(wear or {}).get(node, {})}))
    return out
