"""Executing a single-node check over the fleet (Run.execute): each node's payload,
output bound, document shape and timeout, resolved once in the calling thread, then the
fan-out through the run's launch layer (burnin/engine/launch.py), at most `fanout` at once.

What is resolved here is what holds the run's lock (settings, the GPUs its health facts
showed, baselines): the fan-out threads, which lack it, only look it up.
"""

from __future__ import annotations

from typing import Protocol

from burnin.checks import CHECKS, Check
from burnin.engine.launch import Launch
from burnin.engine.progress import Progress
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome, payload
from burnin.probe.shapes import MAX_DEVICES
from burnin.transports import Launcher, Launchers


class FleetRun(Protocol):
    """What of the run (burnin/engine/run.py: Run, which imports this module) execution reads."""

    nodes: list[Node]
    run_id: str
    profile: str
    progress: Progress | None
    launch: Launch

    @property
    def launchers(self) -> Launchers: ...
    def settings(self, check: str, node: Node | None = None) -> dict: ...
    def gpus(self, node: Node) -> int | None: ...
    def baseline(self, check: str, node: Node) -> dict | None: ...


def execute_single_node(run: FleetRun, spec: Check) -> dict[str, ProbeOutcome]:
    """`spec`'s probe on every node of `run`, {node: outcome} in the run's node order."""
    terms = NodeProbeTerms(run, spec)
    together, apart = run.launchers.split(run.nodes)
    if run.progress:
        run.progress.begin(spec.name)
    try:
        done = run.launch.fan_out(together + [(None, [n]) for n in apart], terms.probe_group)
    finally:
        if run.progress:
            run.progress.end()
    outcomes = {name: o for part in done for name, o in part.items()}
    return {n.name: outcomes[n.name] for n in run.nodes}


class NodeProbeTerms:
    """What each node's probe of `spec` is given (its payload, the bytes it may print, the
    shape of its document, its timeout, where its progress goes), from the settings, GPUs
    and baselines resolved once, here in the calling thread, which holds the run's lock."""

    def __init__(self, run: FleetRun, spec: Check):
        self.run, self.spec = run, spec
        self.gpus = {n.name: n.gpus if spec.facts else run.gpus(n) for n in run.nodes}
        self.settings = {n.name: run.settings(spec.name, n) for n in run.nodes}
        self.baselines = {n.name: run.baseline(spec.name, n) for n in run.nodes} \
            if spec.baseline is not None else {}

    def payload_of(self, node: Node) -> dict:
        run, spec = self.run, self.spec
        out = payload(spec.name, node, run.run_id, run.profile, self.gpus[node.name],
                      self.settings[node.name])
        if spec.facts:  # the commands checks need, for the facts probe to look for
            out["tools"] = {c.name: c.tool(run.settings(c.name, node))
                            for c in CHECKS.values() if c.tool is not None}
            out["baselines"] = {c.name: c.baseline(run.settings(c.name, node))
                                for c in CHECKS.values() if c.baseline is not None}
        if self.baselines.get(node.name) is not None:
            out["baseline"] = self.baselines[node.name]
        return out

    def devices(self, node: Node) -> int | None:
        known = self.gpus[node.name]
        return None if known is None else known or node.cpu_devices

    def limit(self, node: Node) -> int:  # the bytes its probe may print
        return self.spec.output_limit(self.settings[node.name], self.devices(node))

    def shape(self, nodes: list[Node]):  # the widest document shape of these nodes' probes
        widest = max(nodes, key=self.limit)
        return self.spec.schema_for(self.settings[widest.name], self.devices(widest))

    def timeout(self, node: Node) -> float:
        return float(self.settings[node.name]["timeout_s"])

    def on_progress(self, node: Node):
        run = self.run
        if not run.progress:
            return None
        most = self.devices(node) or MAX_DEVICES
        return lambda info, name=node.name: run.progress.update(name, info, most)

    def probe_group(self, item: tuple[Launcher | None, list[Node]]) -> dict[str, ProbeOutcome]:
        """One item of the fan-out: a launcher's nodes as one (srun: one job step), or a
        node alone."""
        launcher, nodes = item
        launch, spec = self.run.launch, self.spec
        if launcher is not None:
            return launch.probe_together(launcher, nodes, spec,
                                         {n.name: self.payload_of(n) for n in nodes},
                                         {n.name: self.timeout(n) for n in nodes},
                                         {n.name: self.on_progress(n) for n in nodes},
                                         max(self.limit(n) for n in nodes), self.shape(nodes))
        node = nodes[0]
        return {node.name: launch.probe(node, spec, self.payload_of(node), self.timeout(node),
                                        self.on_progress(node), self.limit(node),
                                        self.shape(nodes))}
