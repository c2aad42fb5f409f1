"""The burnin pytest plugin: options, the per-node parametrisation, fixtures, reports.

Thin by design: inventory, probes, judging and reports live in plain modules. The
plugin stays dormant in a pytest run that collects no burnin check (a test asking for
the `node` fixture), so it never gets in the way of other test suites. It is the pytest11
entry point (pyproject.toml), so its hooks live here; the run's end is run_end, which
items are checks is collection, what the controller needs before a run is preflight.

Layer 12: may import every layer below it; never the CLI.
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any, cast

import pytest

from burnin import extensions
from burnin.checks import CHECKS, DEFAULT_PROFILE, PROFILES
from burnin.engine.kept_inventory import keep_inventory
from burnin.engine.openfiles import raise_to_hard
from burnin.engine.progress import Progress
from burnin.engine.run import DEFAULT_FANOUT, Run, new_run_id
from burnin.errors import BurninError
from burnin.figures import goodput
from burnin.figures import track_record as track
from burnin.gate.incidents import Incident
from burnin.gate.quarantine import GateReport, split_by_quarantine
from burnin.inventory.schema import InventoryError, load_inventory, select_nodes
from burnin.inventory.trust import refuse_untrusted_commands
from burnin.ledger.api import Ledger, LedgerError, LedgerLost
from burnin.ledger.open import open_configured
from burnin.model.nodes import Node
from burnin.model.outcome import CaseResult
from burnin.model.verdict import clean
from burnin.plugin.collection import (
    check_of,
    check_of_id,
    inapplicable,
    is_check,
    node_of,
    node_param,
)
from burnin.plugin.kept_reports import KeptReports
from burnin.plugin.preflight import NotReady, check_controller, mark_running
from burnin.plugin.run_end import RunEnd
from burnin.plugin.terminal import TerminalSummary
from burnin.report.junit import floors_of, verdicts_of
from burnin.report.publish import publish

STATE = pytest.StashKey["BurninState"]()
TOO_FEW_FILES = pytest.StashKey[str]()  # why the open-files limit cannot carry the run
DEFAULT_INVENTORY = "inventories/localhost.yaml"


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("burnin", "burnin cluster acceptance tests")
    g.addoption("--inventory", metavar="FILE",
                help=f"YAML inventory of the nodes to test (default: {DEFAULT_INVENTORY})")
    g.addoption("--nodes", metavar="HOSTLIST",
                help="test only these inventory nodes, e.g. gpu[001-004],gpu017")
    g.addoption("--profile", choices=PROFILES, default=DEFAULT_PROFILE,
                help=f"check durations and depth (default: {DEFAULT_PROFILE})")
    g.addoption("--reports", metavar="DIR",
                help="where reports/<run-id>/ is written (default: reports/ in the rootdir)")
    g.addoption("--fanout", type=int, default=DEFAULT_FANOUT, metavar="N",
                help=f"probes running at once across nodes (default: {DEFAULT_FANOUT})")
    g.addoption("--revalidate", action="store_true",
                help="test only the quarantined nodes; release those clean often enough")
    g.addoption("--no-quarantine", action="store_true",
                help="dry run: judge and report, but neither write the ledger nor act")


class BurninState(RunEnd, TerminalSummary):
    """Per-process plugin state; the Run is built only when a burnin check is collected."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.worker = hasattr(config, "workerinput")
        self.run_id = (_workerinput(config)["burnin_run_id"] if self.worker
                       else new_run_id())
        self._run: Run | None = None
        self.error: str | None = None
        self.plugin_error: str | None = None  # an installed extension refused (extensions.py)
        self.cases: dict[tuple[str, str], CaseResult] = {}
        self.ledger: Ledger | None = None
        self.held: list[Node] = []  # left out of this run: in quarantine
        self.gate: GateReport | None = None
        self.incidents: list[Incident] = []  # shared causes of this run (incidents.py)
        self.incidents_open: list[Incident] = []  # earlier runs' still open (the ledger's)
        self.speeds: dict[str, goodput.Speed] = {}  # nodes' relative speeds (goodput.py)
        self.tracked: track.FleetTrack | None = None  # what the ledger remembers of them
        self.job_nodes = 0
        self.requested: set[str] = set()  # the checks this session was asked to run
        self.report_problems: list[str] = []  # parts of the report that could not be made
        self.failure_listing_cut = 0  # failed tests whose pytest listing was left out
        # Set when the controller itself failed (burnin/engine/run.py: ControllerFault, or any
        # error of a check's test that is not its verdict): the run ends incomplete.
        self.fault: str | None = None
        self.session: pytest.Session | None = None
        self._sigterm: Any = None  # SIGTERM's handler before ours (signal.signal's answer)

    @property
    def reports_dir(self) -> Path:
        given = self.config.getoption("reports")
        return Path(given).resolve() if given else self.config.rootpath / "reports"

    def run(self) -> Run | None:
        """The run, loading the inventory on first use; None (and .error) when it is wrong."""
        if self.plugin_error and self.error is None:
            self.error = self.plugin_error
        if self._run is None and self.error is None:
            given = self.config.getoption("inventory")
            path = Path(given) if given else self.config.rootpath / DEFAULT_INVENTORY
            try:
                inventory = load_inventory(path)
                refuse_untrusted_commands(inventory)  # as root: hooks only root can change
                nodes = select_nodes(inventory, self.config.getoption("nodes"))
                # the default ledger is created by the first run, no other (ledger/open.py)
                self.ledger = open_configured(inventory.quarantine, self.reports_dir,
                                              first_run=not self.worker)
                nodes, self.held = self._split(nodes)
            except InventoryError as e:
                self.error = f"invalid inventory:\n{e}"
            except (ValueError, LedgerLost) as e:
                self.error = str(e)
            except (OSError, LedgerError) as e:  # a ledger not reached: no run at all
                self.error = f"cannot open the quarantine ledger: {e}"
            except BurninError as e:  # any other error a user sees: a usage error, no trace
                self.error = str(e)
            else:
                run = Run(inventory, nodes, self.config.getoption("profile"),
                          self.reports_dir, self.run_id, fanout=self.config.getoption("fanout"))
                if self.worker:  # the controller holds the Slurm allocation for all
                    run.launchers.attach(_workerinput(self.config).get("burnin_launchers", {}))
                else:
                    try:
                        self._prepare(run)
                    except NotReady as e:
                        self.error = f"the controller is not ready to run: {e}"
                        return None
                self._run = run
                self._attach_progress()
        return self._run

    def _prepare(self, run: Run) -> None:
        """Before any node is touched: what the run needs of this controller is there
        (burnin/plugin/preflight.py), and the previous report is no longer admissible."""
        if self.config.getoption("revalidate") and not run.nodes:
            return  # nothing in quarantine: this run tests nothing and reports nothing
        check_controller(run.run_dir, self.ledger, run.inventory.quarantine,
                         act=not self.config.getoption("no_quarantine"))
        try:  # for `burnin rejudge`: the settings the verdicts were made with
            keep_inventory(run.run_dir, Path(run.inventory.path))
        except OSError as e:
            raise NotReady(f"cannot keep the inventory in {run.run_dir}: {e}") from None
        mark_running(run.reports_dir, run.run_id, run.inventory.cluster,
                     [(n.name, n.address) for n in run.nodes + self.held],
                     self._run_properties(run))

    def _split(self, nodes: list[Node]) -> tuple[list[Node], list[Node]]:
        revalidate = self.config.getoption("revalidate")
        if self.worker:  # the controller decided; the ledger may have moved since
            held = set(_workerinput(self.config)["burnin_held"])
            return ([n for n in nodes if (n.name in held) == revalidate],
                    [] if revalidate else [n for n in nodes if n.name in held])
        return split_by_quarantine(nodes, self._ledger(), revalidate)

    def _attach_progress(self) -> None:
        # The terminal reporter registers in its own pytest_configure, maybe after ours.
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        if tr is None or self.worker or not self._run or self._run.progress:
            return

        def write(text: str) -> None:
            # Probes run inside a test, where pytest captures the terminal: step out of
            # the capture for the write, as pytest's own live logging does.
            if capman is None:
                tr.write(text, flush=True)
                return
            with capman.global_and_fixture_disabled():
                tr.write(text, flush=True)
        self._run.progress = Progress(write, tr.isatty)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session
        self._attach_progress()
        # A pipeline cancelling its job sends SIGTERM: stop as Ctrl-C stops, within
        # seconds, killing every probe, rather than die leaving them to burn on.
        if threading.current_thread() is threading.main_thread():
            self._sigterm = signal.signal(signal.SIGTERM, _interrupt)

    def pytest_unconfigure(self) -> None:
        self._gc_back()  # a run that ended before _let_go
        if self._sigterm is not None:
            signal.signal(signal.SIGTERM, self._sigterm)
            self._sigterm = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        # Under xdist the controller collects nothing: the workers say what they have.
        self.requested |= {check_of_id(i) for i in ids if check_of_id(i) in CHECKS}

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        # xdist: every worker joins the controller's run, one run id, one reports dir,
        # and the controller's view of the quarantine, so that all collect the same.
        node.workerinput["burnin_run_id"] = self.run_id
        run = self.run()
        held = self.ledger.quarantined() if run is not None and self.ledger else set()
        node.workerinput["burnin_held"] = sorted(held)
        node.workerinput["burnin_launchers"] = run.launchers.shared() if run else {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        """A check's test ends in its verdict: it passes, fails or skips. Any other
        exception is the controller's own fault, never the node's: the run stops after this
        test and ends incomplete (pytest_sessionfinish), blaming nobody. Marked on the
        report, which reaches the controller from an xdist worker too."""
        report = (yield).get_result()
        if call.when == "call" and is_check(item) and self._run is not None:
            # The floors its judge used travel with the report (from an xdist worker too)
            # to summary.html, which draws these and no others.
            verdict = self._run.judged(check_of(item), node_of(item).name)
            if verdict is not None and verdict.floors:
                report.user_properties.append(("burnin_floors", json.dumps(verdict.floors)))
            # Whether its failures are the node's own evidence: the gate's incidents
            # leave such a case out (burnin/gate/incidents.py).
            if verdict is not None and verdict.own:
                report.user_properties.append(("burnin_own", ", ".join(verdict.own)))
        if call.excinfo is None or not is_check(item) or call.excinfo.errisinstance(
                (pytest.fail.Exception, pytest.skip.Exception, pytest.xfail.Exception,
                 pytest.exit.Exception, KeyboardInterrupt)):
            return
        node = node_of(item).name
        what = clean(f"{check_of(item)} on {node}: {call.excinfo.typename}: "
                     f"{call.excinfo.value}".splitlines()[0])[:1000]
        report.user_properties.append(("burnin_fault", what))
        item.session.shouldstop = f"burnin: controller fault, the run ends incomplete: {what}"

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # burnin's own properties are strings (set in pytest_runtest_makereport and at
        # collection); no other plugin's is read here.
        props = cast(dict[str, str], dict(report.user_properties))
        if self.worker or "burnin_node" not in props:
            return
        if props.get("burnin_fault") and self.fault is None:
            self.fault = props["burnin_fault"]
            if self.session is not None:  # under xdist: stop the other workers too
                self.session.shouldstop = f"burnin: controller fault: {self.fault}"
        key = (props["burnin_node"], props["burnin_check"])
        case = self.cases.setdefault(key, CaseResult(*key))
        case.add_phase(report.when, report.outcome, _text(report), report.capstdout,
                       report.duration)
        if "burnin_floors" in props:
            case.floors = json.loads(props["burnin_floors"])
        if "burnin_own" in props:
            case.own = props["burnin_own"]

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        stopped = session.exitstatus == pytest.ExitCode.INTERRUPTED or (
            self._run is not None and self._run.cancel.is_set())
        if self._run is not None:
            if stopped:
                self._run.cancel.set()  # whatever still runs is killed, nothing new starts
            self._run.close()
        if self.worker:
            return
        self._bound_failure_listing()
        revalidate = self.config.getoption("revalidate")
        if revalidate and self._run is not None and not self._run.nodes:
            session.exitstatus = pytest.ExitCode.OK  # nothing in quarantine: nothing to do
            return
        if not self.cases and not self.requested and not stopped:
            return
        run = self.run()  # under xdist the controller collects nothing: load it now
        if run is None:
            return
        try:
            self._finish(run, session, interrupted=stopped and self.fault is None)
        except (OSError, LedgerError) as e:  # the reports or the ledger: ours, no node's
            self.fault = self.fault or clean(f"cannot write the run's report or ledger: "
                                             f"{type(e).__name__}: {e}")
            self._write_incomplete(run, session)
        if self.fault:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        self._let_go(run, session)  # the verdicts are in self.cases
        self.report_problems += publish(run.run_dir, run.inventory.cluster, run.run_id,
                                       verdicts_of(self.cases), floors_of(self.cases),
                                       self._in_ledger(run), nodes=run.nodes + self.held)


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("fanout") < 1:
        raise pytest.UsageError("--fanout must be 1 or more")
    state = BurninState(config)
    config.stash[STATE] = state
    try:  # the installed distributions' checks, transports, ... (burnin/extensions.py)
        extensions.load()
    except BurninError as e:  # said where burnin runs (below), as the inventory's errors are
        state.plugin_error = str(e)
    config.pluginmanager.register(state, "burnin-state")
    config.pluginmanager.register(KeptReports(config), "burnin-kept-reports")
    # Before xdist's workers start, which inherit it; said only where burnin runs.
    config.stash[TOO_FEW_FILES] = raise_to_hard(config.getoption("fanout"))
    # Asked for burnin explicitly: validate now, on the controller, before xdist workers
    # start and before any node is touched. Otherwise wait until a check is collected.
    if not state.worker and (config.getoption("inventory") or config.getoption("nodes")):
        if config.stash[TOO_FEW_FILES]:
            raise pytest.UsageError(config.stash[TOO_FEW_FILES])
        if state.run() is None:
            raise pytest.UsageError(state.error)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "node" not in metafunc.fixturenames:
        return
    run = metafunc.config.stash[STATE].run()
    nodes = run.nodes if run else []
    # No node (all in quarantine): pytest makes one placeholder item per check, which
    # pytest_collection_modifyitems deselects, so the run says there is nothing to test.
    metafunc.parametrize("node", nodes, ids=[n.name for n in nodes])


def _workerinput(config: pytest.Config) -> dict[str, Any]:
    """What pytest-xdist's controller gave this worker (pytest_configure_node)."""
    return config.workerinput  # type: ignore[attr-defined]  # xdist sets it


def _text(report: pytest.TestReport) -> str:
    """What a report says, as text: a skip's reason, not the (file, line, reason) tuple
    pytest keeps for it. A passed phase says nothing: asking pytest for its text anyway
    builds a terminal writer per report (three per testcase, 300,000 at 10,000 nodes)."""
    if report.passed:
        return ""
    if report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        reason = str(report.longrepr[2])
        return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason
    return report.longreprtext


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


# trylast: after -k and -m have deselected, so that only what will run is considered.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash[STATE]
    if state.error:
        raise pytest.UsageError(state.error)  # before any node is touched
    order = {c: i for i, c in enumerate(CHECKS)}
    run = state.run()
    placeholders = [i for i in items if "node" in getattr(i, "fixturenames", ())
                    and not isinstance(node_param(i), Node)]
    if placeholders:  # a check with no node to run on: requested, but nothing to test
        state.requested |= {check_of(i) for i in placeholders if check_of(i) in CHECKS}
        config.hook.pytest_deselected(items=placeholders)
        dropped = set(map(id, placeholders))
        items[:] = [i for i in items if id(i) not in dropped]
    if run is not None and config.stash[TOO_FEW_FILES]:
        raise pytest.UsageError(config.stash[TOO_FEW_FILES])  # before any node is touched
    if run is not None:
        # A check that does not apply to a node gets no testcase, rather than a skip that
        # would keep the node out of admission.
        gone = inapplicable(run, items)
        if gone:
            config.hook.pytest_deselected(items=gone)
            dropped = set(map(id, gone))
            items[:] = [i for i in items if id(i) not in dropped]
    burnin = [i for i in items if "node" in getattr(i, "fixturenames", ())]
    state.requested |= {check_of(i) for i in burnin if check_of(i) in CHECKS}
    for item in burnin:
        item.user_properties += [("burnin_node", node_of(item).name),
                                 ("burnin_check", check_of(item))]
    if burnin:
        # Single-node checks first; the inter-node all-reduce takes only nodes that passed.
        items.sort(key=lambda i: order.get(check_of(i), len(order))
                   if "node" in getattr(i, "fixturenames", ()) else -1)


@pytest.fixture(scope="session")
def burnin_run(pytestconfig: pytest.Config) -> Run:
    """The run: its nodes, settings, and each check's outcomes on every node."""
    run = pytestconfig.stash[STATE].run()
    assert run is not None, "burnin_run used outside a burnin suite"
    return run
