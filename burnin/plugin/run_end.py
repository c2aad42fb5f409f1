"""The end of a run, for the plugin (burnin/plugin/__init__.py's BurninState): the verdicts into
the ledger (burnin/gate/quarantine.py) and junit.xml, with the properties `burnin admit` needs to
trust it, or the report of a run that did not complete; and what the run lets go of
before publishing (the cyclic collector paused from collection until then).
A mixin, so that the plugin's state keeps one place; what is decided here lives in plain
modules (gate, reports)."""

from __future__ import annotations

import gc
import os
import time
from dataclasses import replace

import pytest

from burnin import __version__
from burnin.checks import CHECKS, applicable
from burnin.core.safefiles import write_atomically
from burnin.engine.run import Run
from burnin.figures import goodput, replace_soon, wear
from burnin.figures import track_record as track
from burnin.figures.goodput import Speed
from burnin.gate import incidents
from burnin.gate.quarantine import GateReport, settle
from burnin.gate.reconcile import Reconciled, reconcile
from burnin.ledger.api import Ledger, LedgerError
from burnin.model.incident import Incident
from burnin.model.nodes import Node
from burnin.model.outcome import CaseResult, Outcome
from burnin.plugin.collection import is_check
from burnin.report import incidents as incidents_report
from burnin.report import reconciled as reconciled_report
from burnin.report.junit import junit_pieces, point_latest, write_junit

REPORT_FORMAT = "1"  # junit.xml's burnin_report property: burnin wrote this report


class RunEnd:
    """BurninState's end of a run (the state's attributes: config, cases, requested,
    held, ledger, gate, speeds, job_nodes, tracked, fault, report_problems)."""

    config: pytest.Config
    cases: dict[tuple[str, str], CaseResult]
    requested: set[str]
    held: list[Node]
    ledger: Ledger | None
    gate: GateReport | None
    # held nodes Slurm had in service, drained at the run's end (burnin/gate/reconcile.py)
    reconciled: Reconciled = Reconciled()
    incidents: list[Incident]
    incidents_open: list[Incident]  # earlier runs' incidents still open after this one
    speeds: dict[str, Speed]
    job_nodes: int
    tracked: track.FleetTrack | None
    fault: str | None
    report_problems: list[str]

    def _ledger(self) -> Ledger:
        """The run's ledger: open whenever there is a run (BurninState.run opens it first)."""
        if self.ledger is None:
            raise AssertionError("burnin: the run's quarantine ledger was never opened")
        return self.ledger

    def _finish(self, run: Run, session: pytest.Session, interrupted: bool) -> None:
        """The verdicts into the ledger and junit.xml. A complete run's report is written
        first under another name, so that a full disk is found before anyone is
        quarantined; it takes its place once the ledger holds the run. An interrupted run
        and a controller fault quarantine nobody, and their report says so."""
        # Every check asked for, also where no node ran it (all of them in quarantine).
        checks = [c for c in CHECKS if c in (self.requested | {c for _, c in self.cases})]
        for node in self.held:
            entry = self._ledger().get(node.name)
            why = (f"in quarantine since run {entry.run_id}: {'; '.join(entry.reasons)}; "
                   "--revalidate re-tests it") if entry else "in quarantine"
            for check in checks:
                self.cases[(node.name, check)] = CaseResult(node.name, check, Outcome.SKIPPED,
                                                            why[:4000], why)
        junit = run.run_dir / "junit.xml"
        if interrupted or self.fault:
            self._write_incomplete(run, session, interrupted)
            return
        try:  # what admitting each node costs a job: its properties in junit.xml
            self.speeds, self.job_nodes = goodput.of_run(run)
        except Exception as e:  # a part of the report, not a verdict: the run goes on
            self.report_problems.append(f"relative speeds not computed: {e}")
        try:  # what the ledger remembers of each node: failures, trend, repeat offenders
            self.tracked = track.of_ledger(
                self.ledger, [n.name for n in run.nodes],
                {n: s.speed for n, s in self.speeds.items()}, self.job_nodes or len(run.nodes),
                run.inventory.goodput, run.inventory.quarantine, time.time())
            self.tracked.save(run.run_dir)
        except Exception as e:  # a part of the report, not a verdict: the run goes on
            self.report_problems.append(f"the nodes' history not read from the ledger: {e}")
        worn = self._replace_soon(run)
        # A cause many nodes share is one incident, not N faulty nodes: its failures say so
        # in every output, and the gate quarantines nobody for them (burnin/gate/incidents.py).
        self.incidents = incidents.of_cases(self.cases, run.nodes,
                                            run.inventory.quarantine.shared_cause)
        incidents.mark(self.cases, self.incidents)
        incidents_report.save(run.run_dir, self.incidents)
        # Nothing reconciled yet: the count the report is written with before the ledger
        # holds the run, where the run will reconcile (quarantine.actions has slurm).
        self.reconciled = Reconciled(checked="slurm" in run.inventory.quarantine.actions
                                     and not self.config.getoption("no_quarantine"))
        pending = junit.with_name(".junit.xml.pending")  # not a name admit is given
        write_atomically(pending, self._junit(run, self._report_properties(
            run, session.exitstatus)), durable=True)
        self.gate = settle(run.inventory, self._ledger(), run.run_id, self.cases,
                           self.config.getoption("revalidate"),
                           act=not self.config.getoption("no_quarantine"), speeds=self.speeds,
                           incidents=self.incidents, wear=worn)
        self._open_incidents(run, settle=not self.config.getoption("no_quarantine"))
        before = self.reconciled.properties()
        self.reconciled = self._reconcile(run)
        if self.reconciled.properties() != before:
            # What the ledger holds and Slurm had in service is known only now, after the
            # run's transaction: the report written before it takes the count.
            write_atomically(pending, self._junit(run, self._report_properties(
                run, session.exitstatus)), durable=True)
        os.replace(pending, junit)
        # `latest` has pointed at this run since it started (burnin/plugin/preflight.py), unless
        # another run has started since: a completed run is the one to admit from.
        point_latest(run.reports_dir, run.run_id)

    def _reconcile(self, run: Run) -> Reconciled:
        """Held nodes of the inventory that Slurm has in service, drained again
        (burnin/gate/reconcile.py), and kept for metrics.prom; a ledger or Slurm that fails
        here is said in the report, the run's verdicts stand."""
        if not self.reconciled.checked:
            return self.reconciled
        try:
            done = reconcile(run.inventory, self._ledger(), run.run_id)
        except LedgerError as e:
            done = Reconciled(checked=True, unreachable=f"the ledger failed: {e}")
        try:
            reconciled_report.save(run.run_dir, done)
        except OSError as e:
            self.report_problems.append(f"what was reconciled not kept for metrics.prom: {e}")
        return done

    def _replace_soon(self, run: Run) -> dict[str, dict]:
        """Each node's wear counters (the ledger keeps them with the run), and the
        replace-soon list with them as the newest point (replace_soon.json, for the page
        and metrics.prom); a part of the report, not a verdict: a problem is said."""
        try:
            worn = wear.of_run(run)
        except Exception as e:
            self.report_problems.append(f"the nodes' wear counters not read: {e}")
            return {}
        try:
            now = time.time()
            current = {n.name: (now, worn.get(n.name, {}),
                                s.speed if (s := self.speeds.get(n.name)) else None)
                       for n in run.nodes}
            replace_soon.save(run.run_dir, replace_soon.of_ledger(
                self._ledger(), now, {n.name for n in run.nodes}, current,
                goodput.break_even(self.job_nodes or len(run.nodes))))
        except Exception as e:
            self.report_problems.append(f"the replace-soon list not made: {e}")
        return worn

    def _open_incidents(self, run: Run, settle: bool) -> None:
        """Earlier runs' incidents whose nodes this run passed all in their check are
        closed (`settle`: a run that writes the ledger); every incident still open (this
        run's, numbered, and earlier runs') goes into incidents.json, so that summary.html
        and metrics.prom show each until it is closed (burnin/ledger/incidents.py), and
        the earlier ones into the terminal summary. A ledger that fails here leaves the
        run's own incidents shown, and every hold where it was."""
        passed: dict[str, set[str]] = {}
        for (node, check), case in self.cases.items():
            if case.outcome == Outcome.PASSED:
                passed.setdefault(check, set()).add(node)
        try:
            if settle:
                self._ledger().settle_incidents(run.run_id, passed)
            still = [replace(k.incident, run_id="") if k.run_id == run.run_id else k.incident
                     for k in self._ledger().incidents(still_open=True)]
        except LedgerError as e:
            self.report_problems.append(f"the open incidents not read from the ledger: {e}")
            return
        if not settle:  # this run's own are in no ledger: shown as the run found them
            still = [i for i in still if i.run_id] + self.incidents
        self.incidents_open = [i for i in still if i.run_id]
        incidents_report.save(run.run_dir, still)

    # The cyclic collector is paused from the end of a run's collection until _let_go (or
    # the end of the session): each full collection scans every object of the run,
    # pytest's 100,000 items and 240,000 reports at 10,000 nodes (2,000 nodes' run made
    # 17, 2.1 s of its 18.7 s). A passing run makes nothing that lives by cycles alone in
    # numbers (2,000 nodes' peak is the same paused: 278 MiB); the first failed test gives
    # it back. Publish pauses it too (figures.py).
    _gc_paused: bool = False

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if gc.isenabled() and any(is_check(i) for i in session.items):  # a burnin run
            gc.disable()
            self._gc_paused = True

    def pytest_exception_interact(self, node, call, report) -> None:
        # A failed test's exception holds its frames in a cycle: a failing fleet's 70,000
        # would pile up uncollected (10,000 nodes: 2,225 MiB against 1,657 collected).
        self._gc_back()

    def _gc_back(self) -> None:
        if self._gc_paused:
            self._gc_paused = False
            gc.enable()

    def _let_go(self, run: Run, session: pytest.Session) -> None:
        """Before publishing, what nothing after it reads goes: the run's kept outcomes
        and verdicts (junit.xml and the ledger hold them) and pytest's collected items
        (the test loop is over; the terminal summary reads reports). Publish then builds
        its page in their room, not beside them: at 10,000 nodes the peak of the run."""
        self._gc_back()
        run.let_go()
        session.items = []  # the list only: a plugin holding its own reference keeps it
        gc.collect()  # an item and its keywords hold each other

    def _junit(self, run: Run, props: dict[str, str]) -> list[str]:
        return junit_pieces(run.inventory.cluster, run.run_id,
                            [(n.name, n.address) for n in run.nodes + self.held], self.cases,
                            props, {n.name: self._node_properties(run, n)
                                    for n in run.nodes + self.held})

    def _write_incomplete(self, run: Run, session: pytest.Session,
                          interrupted: bool = False) -> None:
        """junit.xml of a run that did not complete: every verdict it reached, and
        complete=false with why, which `burnin admit` refuses. Best effort: where even this
        cannot be written, the report `latest` points at is this run's unfinished one."""
        why = "interrupted" if interrupted else f"controller fault: {self.fault}"
        props = {**self._report_properties(run, session.exitstatus), "complete": "false",
                 "incomplete": why}
        try:
            write_junit(run.run_dir / "junit.xml", run.inventory.cluster, run.run_id,
                        [(n.name, n.address) for n in run.nodes + self.held], self.cases,
                        props, {n.name: self._node_properties(run, n)
                                for n in run.nodes + self.held})
        except OSError as e:
            self.report_problems.append(f"junit.xml of the incomplete run not written: {e}")
        try:
            (run.run_dir / ".junit.xml.pending").unlink()
        except OSError:
            pass

    def _in_ledger(self, run: Run) -> dict[str, bool] | None:
        """{node: in quarantine} at the end of the run, for metrics.prom; None when the
        ledger cannot be read now (the series is left out, the run goes on)."""
        try:
            held = self._ledger().quarantined()
        except (OSError, LedgerError):
            return None
        return {n.name: n.name in held for n in run.nodes + self.held}

    def _run_properties(self, run: Run) -> dict[str, str]:
        """The properties every testsuite of the run's junit.xml carries."""
        props = {"burnin_report": REPORT_FORMAT, "burnin_version": __version__,
                 "profile": run.profile, "nodes_in_run": str(len(run.nodes))}
        if run.inventory.require:
            props["admission_require"] = ",".join(run.inventory.require)
        return props

    def _report_properties(self, run: Run, status) -> dict[str, str]:
        """What `burnin admit` needs to trust the report: that burnin wrote it, that the run
        completed (callers say otherwise), and what it was asked to run."""
        requested = self.requested or {c for _, c in self.cases}
        return {**self._run_properties(run), "complete": "true",
                "exit_status": str(int(status)),
                "requested_checks": ",".join(c for c in CHECKS if c in requested),
                **self.reconciled.properties()}

    def _node_properties(self, run: Run, node: Node) -> dict[str, str]:
        gpus, equipped = run.known_gpus(node), run.known_equipped(node)
        speed = self.speeds.get(node.name)
        return {"gpus": "unknown" if gpus is None else str(gpus),
                "equipped_checks": "unknown" if equipped is None else ",".join(sorted(equipped)),
                "applicable_checks": ",".join(applicable(gpus, len(run.nodes), equipped)),
                **(speed.properties(self.job_nodes) if speed else {}),
                **(self.tracked.properties(node.name) if self.tracked else {}),
                **self.reconciled.node_properties(node.name)}
