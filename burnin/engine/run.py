"""One run of the suite: which nodes, which settings, each check's outcomes and verdicts.

The first test of a check that asks for its outcomes runs the probe on every selected
node at once (bounded by the fan-out), so the run's wall time is one probe's duration,
not the sum over nodes. Its seams, each its own module:

    run.py         settings, fleet figures, verdicts, what is kept of judged documents
    execution.py   a single-node check's probe over the fleet: payloads, bounds, fan-out
    store.py       the outcome store: each check's outcomes once per run, shared by every
                   pytest-xdist worker under a file lock, and results.jsonl
    launch.py      the launch layer: transports, launchers (srun), fan-out, cancel
    probe.py       the probe protocol: the payload a probe reads, the document it prints
    groups.py      a group check's groups: formed, launched, searched for the slow node
                   (GroupRun, in checks/group_run.py: all a group check may use)

Layered top to bottom, each importing only what is below it:

    plugin.py (pytest) -> run.py -> checks/ (judges; group checks get a GroupRun)
                                 -> groups.py, group_search.py (a GroupRun's machinery)
                                 -> store.py (outcomes, results.jsonl)
                                 -> launch.py -> probe.py -> transports/ (local, ssh;
                                                 srun a Launcher; fanout.py, reading.py)

Where a change goes: a new way to reach one node is one file in transports/ and a row of
TRANSPORTS (its read loop is reading.py's); one that runs many nodes as one is a Launcher
and a row of LAUNCHERS; what every probe is told, probe.payload; a check, burnin/checks/.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from burnin.checks import CHECKS, FACTS, Check, Fleet, Judging, single_node
from burnin.checks.group_run import GroupRun
from burnin.checks.health import facts_baseline, facts_equipped, facts_gpus
from burnin.core.shipped_files import shipped
from burnin.engine.execution import execute_single_node
from burnin.engine.groups import GROUPS
from burnin.engine.launch import DEFAULT_FANOUT, Launch
from burnin.engine.outcome_store import ControllerFault, OutcomeStore
from burnin.engine.probe_files import probes_for
from burnin.engine.progress import Progress
from burnin.figures import wear as wear_counters
from burnin.figures.record_figures import Figure, key_figures
from burnin.model.nodes import Inventory, Node
from burnin.model.verdict import Verdict
from burnin.probe.protocol import ProbeOutcome, payload
from burnin.transports import Launchers

PROBES_DIR = shipped("probes")  # inside the package from a wheel, beside it in a checkout
__all__ = ["DEFAULT_FANOUT", "PROBES_DIR", "ControllerFault", "Run", "new_run_id"]


@dataclass(frozen=True)
class NodeFacts:
    """What later checks and the report need of a node's facts document (health), kept
    when the document itself is let go (Run.release)."""

    gpus: int | None
    equipped: frozenset[str] | None
    baselines: dict[str, dict]

    @classmethod
    def of(cls, outcome: ProbeOutcome) -> NodeFacts:
        baselines = {c.name: facts_baseline(outcome, c.name) for c in CHECKS.values()
                     if c.baseline is not None}
        return cls(facts_gpus(outcome), facts_equipped(outcome),
                   {k: v for k, v in baselines.items() if v is not None})


def new_run_id() -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{os.urandom(3).hex()}"


@dataclass
class Run:
    """One run: its nodes and settings, each check's outcomes (its OutcomeStore) and
    verdicts. Probes start through its launch layer (burnin/engine/launch.py)."""

    inventory: Inventory
    nodes: list[Node]
    profile: str
    reports_dir: Path
    run_id: str
    fanout: int = DEFAULT_FANOUT
    probes_dir: Path = PROBES_DIR
    progress: Progress | None = None  # live lines for probes that report progress
    store: OutcomeStore = field(init=False)
    launch: Launch = field(init=False)
    _summaries: dict = field(default_factory=dict)
    # {check: {node: why}}: nodes whose document broke their check's fleet figures when
    # summarised alone; left out of the fleet, and failed with the reason.
    _unjudged: dict[str, dict[str, str]] = field(default_factory=dict)
    _verdicts: dict[str, dict[str, Verdict]] = field(default_factory=dict)
    # What the run keeps of a check's documents once it is judged (Run.release): the
    # speed-bearing figures (goodput), and of the facts check each node's NodeFacts.
    _figures: dict[str, dict[str, list[Figure]]] = field(default_factory=dict)
    # and each node's wear counters, whose trend across runs the ledger keeps
    _wear: dict[str, dict[str, dict]] = field(default_factory=dict)
    # {check: nodes whose document its judge could not read}: their figures never vote
    _unread: dict[str, set[str]] = field(default_factory=dict)
    _facts: dict[str, NodeFacts] | None = None

    def __post_init__(self):
        self.probes_dir = probes_for(self.probes_dir, CHECKS.values())
        self.store = OutcomeStore(self.reports_dir / self.run_id, self.run_id)
        self.launch = Launch(self.nodes, self.probes_dir, self.run_id, self.fanout)

    @property
    def _lock(self) -> threading.RLock:  # one lock for outcomes and judging: no order
        return self.store.lock

    @property
    def cancel(self) -> threading.Event:
        """Set when the run is interrupted: every probe is killed, nothing new starts."""
        return self.launch.cancel

    @property
    def launchers(self) -> Launchers:
        """The launchers of transports that run a check's nodes as one (srun)."""
        return self.launch.launchers

    @property
    def run_dir(self) -> Path:
        return self.store.run_dir

    def make_run_dir(self) -> Path:
        return self.store.make_run_dir()

    def settings(self, check: str, node: Node | None = None) -> dict[str, Any]:
        """The check's settings: profile defaults, the inventory's `checks:`, then the
        node group's own `checks:` when a node is given."""
        return CHECKS[check].resolve(self.profile, self.inventory.checks.get(check) or {},
                                     node.checks.get(check, {}) if node else {})

    def outcomes(self, check: str) -> dict[str, ProbeOutcome]:
        """Every selected node's outcome of `check`, running the probe once per run."""
        if check not in CHECKS:
            raise KeyError(f"unknown check {check!r}")
        return self.store.get(check, self.execute)

    def summary(self, check: str):
        """The check's fleet summary over this run's outcomes, computed once per run:
        fleet-wide figures such as majorities and medians, so judging n nodes is O(n)."""
        spec = CHECKS[check]
        if spec.summarize is None:
            return None
        with self._lock:
            if check not in self._summaries:
                self._summaries[check] = self._summarize(spec)
            return self._summaries[check]

    def _summarize(self, spec: Check):
        """spec.summarize over the fleet, with the blast radius of one node: when a node's
        document makes the fleet figure raise, each node is summarised alone, those that
        raise alone are left out (and failed: Run.verdict), and the rest make the figure.
        What still raises then is no one node's doing: a fault of the controller."""
        outcomes = self.outcomes(spec.name)
        devices = {n.name: n.gpus if spec.facts else self._devices_or_none(n)
                   for n in self.nodes}
        models = {n.name: self.inventory.model(n) for n in self.nodes}
        settings = {n.name: self.settings(spec.name, n) for n in self.nodes}

        summarize = spec.summarize
        assert summarize is not None  # the caller asks only of a check with a summary

        def over(names: Iterable[str]) -> object:
            return summarize(Fleet({k: outcomes[k] for k in names}, devices, models,
                                   {n.name: n for n in self.nodes}, settings=settings))
        try:
            return over(outcomes)
        except Exception:  # whose document it was is found next
            pass
        unjudged = {}
        for name in outcomes:
            try:
                over([name])
            except Exception as e:  # this node's document: its failure
                unjudged[name] = (f"its {spec.name} document could not be summarised with "
                                  f"the fleet's: {type(e).__name__}: {e}")
        try:
            if len(unjudged) == len(outcomes):  # no node's doing when it fails every node
                raise RuntimeError(next(iter(unjudged.values()), "no node"))
            summary = over([k for k in outcomes if k not in unjudged])
        except Exception as e:
            raise ControllerFault(f"the {spec.name} fleet figures could not be computed: "
                                  f"{type(e).__name__}: {e}") from e
        self._unjudged[spec.name] = unjudged
        return summary

    def _devices_or_none(self, node: Node) -> int | None:
        try:
            return self.devices(node)
        except (KeyError, TypeError, AttributeError, ValueError):  # its own health facts
            return None

    def verdict(self, check: str, node: Node) -> Verdict:
        """The verdict on `node` for `check`, running the check's probe if it has not run."""
        with self._lock:
            if check not in self._verdicts:
                self._verdicts[check] = self._judge_all(check)
                self._release(check)
            return self._verdicts[check][node.name]

    def judged(self, check: str, node: str) -> Verdict | None:
        """The verdict already reached on `node` for `check`, or None: judges nothing."""
        with self._lock:
            return self._verdicts.get(check, {}).get(node)

    def _judge_all(self, check: str) -> dict[str, Verdict]:
        """Every node's verdict on `check`, once per run. Whatever one node's document does
        to the judge is that node's failure alone; a judge that raises for every node it
        judges is no node's doing but ours (ControllerFault), and blames none of them."""
        outcomes = self.outcomes(check)
        spec = CHECKS[check]
        fleet = self.summary(check)
        unjudged = self._unjudged.get(check, {})
        out: dict[str, Verdict] = {}
        raised: dict[str, str] = {}
        for node in self.nodes:
            outcome = outcomes[node.name]
            if outcome.fault:
                raise ControllerFault(f"{node.name}: {outcome.reason}")
            if outcome.busy:
                out[node.name] = Verdict(node.name, check, skipped=outcome.reason)
            elif node.name in unjudged:
                out[node.name] = Verdict(node.name, check, (unjudged[node.name],))
            else:
                try:
                    out[node.name] = spec.judge(node, outcome, self._judging(spec, node, fleet))
                except Exception as e:  # a document its judge cannot read
                    raised[node.name] = f"{type(e).__name__}: {e}"
                    out[node.name] = Verdict(node.name, check, (
                        f"its {check} document could not be judged: {raised[node.name]}",))
        judged = sum(outcomes[n.name].ok for n in self.nodes if n.name not in unjudged)
        self._unread[check] = set(raised)
        if raised and len(raised) >= judged:
            raise ControllerFault(f"the {check} judge failed on every node it judged, which "
                                  f"is no node's doing: {next(iter(raised.values()))}")
        return out

    def _release(self, check: str) -> None:
        """Figures, not documents: once every node of `check` is judged, the run keeps the
        verdicts, its speed-bearing figures (figures()) and, of the facts check, each
        node's NodeFacts; each document shrinks to its scalar figures and errors
        (store.kept). results.jsonl has them whole; a fleet of 10,000 nodes would
        otherwise hold every check's documents (all of burn's telemetry) to the end."""
        spec = CHECKS[check]
        outcomes = self.outcomes(check)
        if spec.facts and self._facts is None:
            self._facts = {name: NodeFacts.of(o) for name, o in outcomes.items()}
        if any(m.speed for m in spec.measures):
            self._figures[check] = self._speed_figures(check, outcomes)
        if check in wear_counters.SOURCES:
            self._wear[check] = self._wear_of(check, outcomes)
        self.store.release(check)

    def wear(self, check: str) -> dict[str, dict]:
        """{node: its wear counters in `check`'s document} (burnin/figures/wear.py), kept
        when the check was judged, or read from its outcomes."""
        with self._lock:
            if check in self._wear:
                return self._wear[check]
            return self._wear_of(check, self.outcomes(check))

    def _wear_of(self, check: str, outcomes: dict[str, ProbeOutcome]) -> dict[str, dict]:
        unread = self._unread.get(check, set()) | set(self._unjudged.get(check, {}))
        return {name: wear_counters.of_document(check, o.data) for name, o in outcomes.items()
                if o.ok and name not in unread}

    def figures(self, check: str) -> dict[str, list[Figure]]:
        """{node: its speed-bearing figures of `check`} (the Measures marked `speed`; what
        goodput prices), kept when the check was judged, or read from its outcomes."""
        with self._lock:
            if check in self._figures:
                return self._figures[check]
            return self._speed_figures(check, self.outcomes(check))

    def _speed_figures(self, check: str, outcomes: dict[str, ProbeOutcome]
                       ) -> dict[str, list[Figure]]:
        speed = {m.metric for m in CHECKS[check].measures if m.speed}
        unread = self._unread.get(check, set()) | set(self._unjudged.get(check, {}))
        return {name: [f for f in key_figures(o.to_record(self.run_id, check))
                       if f.metric in speed] for name, o in outcomes.items()
                if name not in unread}

    def _judging(self, spec: Check, node: Node, fleet) -> Judging:
        known = not spec.facts
        return Judging(settings=self.settings(spec.name, node), fleet=fleet,
                       model=self.inventory.model(node),
                       devices=self.devices(node) if known else node.gpus,
                       gpus=self.gpus(node) if known else node.gpus)

    def gpus(self, node: Node) -> int | None:
        """The GPUs `node` must have: the inventory's count, or for `gpus: auto` what its
        health facts show; None while unknown (its health probe failed)."""
        if node.gpus is not None:
            return node.gpus
        if self._facts is not None:
            return self._facts[node.name].gpus
        return facts_gpus(self.outcomes(FACTS)[node.name])

    def known_gpus(self, node: Node) -> int | None:
        """gpus(), but only from what is known already: never runs a probe (reports)."""
        if node.gpus is not None or self.has_outcomes(FACTS):
            return self.gpus(node)
        return None

    def equipped(self, node: Node) -> frozenset[str] | None:
        """The checks needing a tool whose tool the node's health facts found; None while
        unknown (its health probe failed, or a node held in quarantine did not run it)."""
        if self._facts is not None:
            facts = self._facts.get(node.name)
            return facts.equipped if facts else None
        return facts_equipped(self.outcomes(FACTS).get(node.name))

    def known_equipped(self, node: Node) -> frozenset[str] | None:
        """equipped(), but only from what is known already: never runs a probe."""
        return self.equipped(node) if self.has_outcomes(FACTS) else None

    def baseline(self, check: str, node: Node) -> dict | None:
        """What the node's facts probe read before the load for `check` (Check.baseline),
        when it ran in this run; never runs it."""
        if not self.has_outcomes(FACTS):
            return None
        if self._facts is not None:
            facts = self._facts.get(node.name)
            return facts.baselines.get(check) if facts else None
        return facts_baseline(self.outcomes(FACTS).get(node.name), check)

    def devices(self, node: Node) -> int | None:
        """The devices every probe must report for `node`: its GPUs, or on a CPU-only node
        its `cpu_devices`; None while unknown."""
        gpus = self.gpus(node)
        if gpus is None:
            return None
        return gpus or node.cpu_devices

    def failed_single_node_checks(self) -> dict[str, list[str]]:
        """{node: failed checks} over the single-node checks that ran in this run (a node
        another run holds counts too: it is no partner to test others with)."""
        out: dict[str, list[str]] = {}
        for check in single_node():
            if not self.has_outcomes(check):
                continue
            for node in self.nodes:
                # A check that does not apply to the node (pcie on a CPU node of a mixed
                # fleet, whose probe ran there with the rest) is not one it failed.
                if not CHECKS[check].applies(self.gpus(node), len(self.nodes),
                                             self.equipped(node)):
                    continue
                v = self.verdict(check, node)
                if not v.passed:
                    out.setdefault(node.name, []).append(f"{check} (busy)" if v.skipped
                                                         else check)
        return out

    def has_outcomes(self, check: str) -> bool:
        """Whether `check` has run in this run (here or in another xdist worker)."""
        return self.store.has(check)

    def execute(self, check: str) -> dict[str, ProbeOutcome]:
        """Run `check`'s probe on every selected node now, at most `fanout` at once."""
        spec = CHECKS[check]
        if spec.group:  # one coordinated group, not a fan-out
            assert spec.execute is not None  # a group check declares how it executes
            return spec.execute(self.group_run(spec))
        return execute_single_node(self, spec)

    def group_run(self, spec: Check) -> GroupRun:
        """All of this run a group check may use (burnin/checks/group_run.py: GroupRun)."""
        def payload_of(node: Node, gpus: int | None, settings: dict) -> dict:
            return payload(spec.probe_name, node, self.run_id, self.profile, gpus, settings)
        return GroupRun(nodes=tuple(self.nodes), settings=self.settings,
                        failed=self.failed_single_node_checks, devices=self.devices,
                        gpus=self.gpus, payload=payload_of, probe=self.launch.probe,
                        launcher=self.launch.launcher, probe_tasks=self.launch.probe_tasks,
                        at_once=self.launch.at_once, groups=GROUPS,
                        fleet_of=lambda c: self.summary(c) if self.store.has(c) else None)

    def close(self) -> None:
        self.launch.close()

    def let_go(self) -> None:
        """Drop what the run kept of its checks (outcomes, verdicts, speed figures), once
        junit.xml and the ledger hold the verdicts: publish reads what it draws from the
        run's directory, and at 10,000 nodes this is some 100 MB it would build beside."""
        with self._lock:
            self.store.let_go()
            self._verdicts.clear()
            self._figures.clear()
            self._wear.clear()
            self._summaries.clear()
