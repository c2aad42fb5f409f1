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
    check = spec.name
    gpus = {n.name: n.gpus if spec.facts else run.gpus(n) for n in run.nodes}
    settings = {n.name: run.settings(check, n) for n in run.nodes}  # resolved once
    baselines = {n.name: run.baseline(check, n) for n in run.nodes} \
        if spec.baseline is not None else {}

    def payload_of(node: Node) -> dict:
        out = payload(check, node, run.run_id, run.profile, gpus[node.name],
                      settings[node.name])
        if spec.facts:  # the commands checks need, for the facts probe to look for
            out["tools"] = {c.name: c.tool(run.settings(c.name, node))
                            for c in CHECKS.values() if c.tool is not None}
            out["baselines"] = {c.name: c.baseline(run.settings(c.name, node))
                                for c in CHECKS.values() if c.baseline is not None}
        if baselines.get(node.name) is not None:
            out["baseline"] = baselines[node.name]
        return out

    def devices(node: Node) -> int | None:
        known = gpus[node.name]
        return None if known is None else known or node.cpu_devices

    def limit(node: Node) -> int:  # the bytes its probe may print
        return spec.output_limit(settings[node.name], devices(node))

    def shape(nodes: list[Node]):  # the widest document shape of these nodes' probes
        widest = max(nodes, key=limit)
        return spec.schema_for(settings[widest.name], devices(widest))

    def timeout(node: Node) -> float:
        return float(settings[node.name]["timeout_s"])

    def on_progress(node: Node):
        if not run.progress:
            return None
        most = devices(node) or MAX_DEVICES
        return lambda info, name=node.name: run.progress.update(name, info, most)

    def one(item: tuple[Launcher | None, list[Node]]) -> dict[str, ProbeOutcome]:
        launcher, nodes = item
        if launcher is not None:  # the nodes run as one (srun: one job step)
            return run.launch.probe_together(launcher, nodes, spec,
                                             {n.name: payload_of(n) for n in nodes},
                                             {n.name: timeout(n) for n in nodes},
                                             {n.name: on_progress(n) for n in nodes},
                                             max(limit(n) for n in nodes), shape(nodes))
        node = nodes[0]
        return {node.name: run.launch.probe(node, spec, payload_of(node), timeout(node),
                                            on_progress(node), limit(node), shape(nodes))}

    together, apart = run.launchers.split(run.nodes)
    if run.progress:
        run.progress.begin(check)
    try:
        done = run.launch.fan_out(together + [(None, [n]) for n in apart], one)
    finally:
        if run.progress:
            run.progress.end()
    outcomes = {name: o for part in done for name, o in part.items()}
    return {n.name: outcomes[n.name] for n in run.nodes}
