"""Goodput: what admitting a node costs a synchronous job.

A synchronous job runs at its slowest member's pace, so a node's worth to such a job is
its relative speed s: the slowest of its speed-bearing figures (the Measures marked
`speed`: burn TFLOPS per device, busbw, storage GB/s per stream, PCIe GB/s per GPU)
against the run's median of the same figure over the nodes of the same gpu_model, each
node one vote (its own median). A job of N nodes that takes it in runs at s of its pace:
N x (1 - s) node-hours lost per hour of the job. Without it the job would run on N - 1
nodes at full pace, so the node pays for itself only when s > 1 - 1/N."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from burnin.checks import CHECKS
from burnin.figures.record_figures import Figure, Measure

# Nodes of one model whose figures make a fleet median (goodput.min_voters): with three,
# one node's own figure sets another's relative speed and its --min-speed admission.
MIN_VOTERS = 5


@dataclass(frozen=True)
class Speed:
    """A node's relative speed, and the figure that sets it."""

    speed: float       # its slowest speed-bearing figure over the fleet's median
    check: str         # the check whose figure it is
    figure: str        # the figure, as the page names it ("burn TFLOPS cuda:3")
    value: float
    median: float      # the fleet's median of that figure (same model, a vote a node)

    @property
    def set_by(self) -> str:
        """What sets the speed, as junit.xml and the ledger's kept runs say it."""
        return (f"{self.check}: {self.figure} {self.value:.4g} against the fleet's median "
                f"{self.median:.4g}")

    def cost(self, job_nodes: int) -> float:
        """Node-hours a job of `job_nodes` nodes loses per hour by taking this node in."""
        return job_nodes * max(0.0, 1.0 - self.speed)

    def pays(self, job_nodes: int) -> bool:
        """Whether a job of `job_nodes` nodes runs faster with this node than without it."""
        return self.speed > break_even(job_nodes)

    def properties(self, job_nodes: int) -> dict[str, str]:
        """The node's junit.xml properties (`burnin admit --min-speed` reads the first)."""
        return {"relative_speed": f"{self.speed:.4f}",
                "speed_set_by": self.set_by,
                "goodput_job_nodes": str(job_nodes),
                "goodput_cost_node_hours_per_hour": f"{self.cost(job_nodes):.4f}",
                "goodput_pays_for_itself": "true" if self.pays(job_nodes) else "false"}


def break_even(job_nodes: int) -> float:
    """The least relative speed at which a node pays for itself in a job of N nodes."""
    return 1.0 - 1.0 / job_nodes if job_nodes > 0 else 0.0


def _speed_measure(check: str, metric: str) -> Measure | None:
    """The check's own speed-bearing Measure of this metric (sdc and burn share one
    metric name, and only burn's is a speed)."""
    spec = CHECKS.get(check)
    return next((m for m in spec.measures if m.metric == metric and m.speed), None) \
        if spec else None


def speeds(figures: dict[str, list[tuple[str, Figure]]],
           model: dict[str, str] | None = None, min_voters: int = MIN_VOTERS
           ) -> dict[str, Speed]:
    """Every node's Speed from its (check, figure) pairs. A figure is compared with the
    same family ("burn TFLOPS", "storage read GB/s") of nodes of the same model only, and
    only where at least `min_voters` nodes vote (fewer: one node's own figure would set
    another's speed: no relative speed there, floors only); a node with no such figure,
    or none with a positive fleet median, has none."""
    model = model or {}
    families: dict[tuple, dict[str, list[tuple[float, str]]]] = {}
    for node, pairs in figures.items():
        for check, f in pairs:
            m = _speed_measure(check, f.metric)
            if m is None or not isinstance(f.value, (int, float)) \
                    or not 0 <= f.value < float("inf"):
                continue
            key = (check, m.family_of(f.labels), model.get(node, ""))
            families.setdefault(key, {}).setdefault(node, []).append(
                (float(f.value), m.label_of(f.labels)))
    out: dict[str, Speed] = {}
    for (check, _, _), nodes in families.items():
        if len(nodes) < min_voters:
            continue
        center = statistics.median(statistics.median(v for v, _ in vals)
                                   for vals in nodes.values())
        if not center > 0:
            continue
        for node, vals in nodes.items():
            value, label = min(vals)
            s = Speed(value / center, check, label, value, center)
            if node not in out or s.speed < out[node].speed:
                out[node] = s
    return out


def of_run(run) -> tuple[dict[str, Speed], int]:
    """The run's speeds, from the checks that ran in it (here or in another xdist worker;
    none is run for this), and the job size they are priced for: the inventory's
    `goodput.job_nodes`, else the run's node count."""
    figures: dict[str, list[tuple[str, Figure]]] = {}
    for name, spec in CHECKS.items():
        if not any(m.speed for m in spec.measures) or not run.store.has(name):
            continue
        # The run keeps these once the check is judged; its documents it lets go.
        for node, figs in run.figures(name).items():
            figures.setdefault(node, []).extend((name, f) for f in figs)
    model = {n.name: n.gpu_model or "" for n in run.nodes}
    return (speeds(figures, model, run.inventory.goodput.min_voters),
            run.inventory.goodput.job_nodes or len(run.nodes))
