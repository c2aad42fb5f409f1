"""What the terminal says of a run, for the plugin (burnin/plugin/__init__.py's
BurninState): burnin's own section at the end (the nodes that did not pass, quarantine,
incidents, the report), and pytest's per-failure listing left out past FAILURE_LISTING
failed tests. A mixin, as run_end's RunEnd is, so that the plugin's state keeps one place."""

from __future__ import annotations

import pytest

from burnin.engine.run import Run
from burnin.gate.incidents import Incident, summary_lines
from burnin.gate.quarantine import GateReport
from burnin.gate.reconcile import Reconciled
from burnin.ledger.api import Ledger
from burnin.model.nodes import Node
from burnin.model.outcome import CaseResult, Outcome

FAILURE_LISTING = 200  # failed tests above which pytest's per-failure section is left out


class TerminalSummary:
    """BurninState's words on the terminal (the state's attributes below)."""

    config: pytest.Config
    worker: bool
    _run: Run | None
    cases: dict[tuple[str, str], CaseResult]
    held: list[Node]
    incidents: list[Incident]
    incidents_open: list[Incident]
    failure_listing_cut: int
    ledger: Ledger | None
    gate: GateReport | None
    reconciled: Reconciled
    report_problems: list[str]
    fault: str | None

    def _bound_failure_listing(self) -> None:
        """pytest's FAILURES section pairs each failure with every report (quadratic: some
        14 s at 3,000 failing nodes, minutes at 10,000). Past FAILURE_LISTING failed
        tests, burnin's own summary and the short summary (-ra) list them instead."""
        failed = sum(Outcome(c.outcome).bad for c in self.cases.values())
        if failed > FAILURE_LISTING and self.config.option.tbstyle != "no":
            self.config.option.tbstyle = "no"
            self.failure_listing_cut = failed

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.worker or not self.cases or self._run is None:
            return
        run, tr = self._run, terminalreporter
        bad: dict[str, list[str]] = {}
        for (name, check), case in sorted(self.cases.items()):
            if case.outcome != "passed":
                bad.setdefault(name, []).append(check)
        held = {n.name for n in self.held}
        bad = {n: c for n, c in bad.items() if n not in held}
        tested = {name for name, _ in self.cases} - held
        tr.section("burnin")
        for line in summary_lines(self.incidents, self.incidents_open):
            tr.write_line(line, red=True)
        if not tested:
            tr.write_line(f"nothing to test: every selected node is in quarantine "
                          f"({', '.join(n.name for n in self.held)}); --revalidate re-tests "
                          "them")
        if self.failure_listing_cut:
            tr.write_line(f"{self.failure_listing_cut} failed tests: pytest's tracebacks left out "
                          f"(more than {FAILURE_LISTING}); each node's reasons are in "
                          "summary.html and junit.xml")
        tr.write_line(f"run {run.run_id}: {len(tested)} node{'s' * (len(tested) != 1)} tested, "
                      f"{len(tested) - len(bad)} passed every check, {len(bad)} did not")
        for name, checks in bad.items():
            tr.write_line(f"  {name}: {', '.join(checks)}", red=True)
        if self.held:
            tr.write_line(f"skipped for quarantine: {', '.join(n.name for n in self.held)} "
                          "(re-test with --revalidate; see burnin quarantine list)")
        if self.ledger is not None and self.ledger.created:
            tr.write_line(f"created the quarantine ledger {self.ledger.where} (no "
                          "quarantine.ledger configured: this run's first; "
                          "see docs/operator/ledger.md)")
        for line, red in self.gate.lines(run.inventory.quarantine.release_after) \
                if self.gate else ():
            tr.write_line(line, red=red)
        for line, red in self.reconciled.lines():  # held nodes Slurm had in service
            tr.write_line(line, red=red)
        for problem in self.report_problems:
            tr.write_line(f"report: {problem}", red=True)
        if self.fault:
            tr.write_line(f"the run did not complete: controller fault: {self.fault}; nobody "
                          "was quarantined for it, and its report is not admissible", red=True)
        tr.write_line(f"report: {run.run_dir / 'junit.xml'}")
