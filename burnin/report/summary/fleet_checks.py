"""The built-in checks' fleet-wide parts of summary.html (Check.fleet_page), computed
once a page: burn's thermal slowdown line on the temperature chart, the all-reduce's
busbw band (which each node's all-reduce part draws its own sweep over) and its fleet
chart with the inter-node group's sweep."""

from __future__ import annotations

import statistics

from burnin.report.summary.charts import BAD, MEDIAN, PALETTE, Axis, Chart, fmt, fmt_bytes
from burnin.report.summary.fleet import LABELLED, FleetPart
from burnin.report.summary.model import (
    PageRun,
    data_of,
    floors_over,
    mapping,
    median,
    natural_key,
    num,
    seq,
)


def burn(report: PageRun) -> FleetPart:
    """The fleet's median thermal slowdown temperature, drawn on the hottest-GPU chart."""
    slowdown = []
    for recs in report.records.values():
        for dev in seq(data_of(recs.get("burn")).get("devices")):
            s = num(mapping(mapping(dev).get("telemetry")).get("temp_slowdown_c"))
            if s is not None:
                slowdown.append(s)
    return FleetPart(refs={"temp": [(median(slowdown), "slowdown", BAD)]})


def allreduce(report: PageRun) -> FleetPart:
    """The busbw band, {ranks per node: [(bytes, min, median, max, nodes)]}, and its
    chart per rank count (which gets every node's sweep, read here once)."""
    sweeps: dict[int, dict[int, list[float]]] = {}
    curves: dict[int, dict[str, list[tuple[float, float]]]] = {}
    for node, recs in report.records.items():
        fig = mapping(data_of(recs.get("allreduce")).get("figures"))
        world = int(num(fig.get("world")) or 0)
        read = [(num(mapping(s).get("bytes")), num(mapping(s).get("busbw_gbps")))
                for s in seq(fig.get("sweep"))]
        pts = [(b, v) for b, v in read if b and v is not None]
        for b, v in pts:
            sweeps.setdefault(world, {}).setdefault(int(b), []).append(v)
        if pts:
            curves.setdefault(world, {})[node] = pts
    bands = {w: [(b, min(v), statistics.median(v), max(v), len(v)) for b, v in sorted(
        sizes.items())] for w, sizes in sweeps.items()}
    return FleetPart(data=bands, charts=[("fleet busbw", busbw_chart, report, bands, w,
                                          curves.get(w, {})) for w in sorted(bands)])


def busbw_chart(report: PageRun, bands: dict, world: int,
                sweeps: dict[str, list[tuple[float, float]]]) -> str:
    """The fleet's busbw band against message size, the nodes that failed drawn over it
    (`sweeps`: each node's points at this rank count)."""
    band = bands[world]
    chart = Chart(f"allreduce: busbw against message size ({world} ranks per node)",
                  Axis("message size", log2=True), Axis("GB/s", "GB/s"))
    chart.band("fleet min-max", [(b, lo, hi) for b, lo, _, hi, _ in band], PALETTE[0])
    chart.line("fleet min", [(b, lo) for b, lo, *_ in band], PALETTE[0], 0.8, legend=False)
    chart.line("fleet max", [(b, hi) for b, _, _, hi, _ in band], PALETTE[0], 0.8, legend=False)
    chart.line("fleet median", [(b, mid) for b, _, mid, _, _ in band], MEDIAN)
    # The nodes that failed the check drawn over the band, the slowest few at the
    # judged size named (the band's edge is somebody: which one).
    failed = [n for n in sweeps
              if report.verdicts.get(n, {}).get("allreduce", ("passed", ""))[0] != "passed"]
    for node in sorted(failed, key=natural_key)[:5]:
        chart.line(node, sweeps[node], BAD, 1.5, legend=False)
    slowest = sorted(sweeps, key=lambda n: (sweeps[n][-1][1], natural_key(n)))[:LABELLED]
    for node in slowest:
        b, v = sweeps[node][-1]
        chart.dot(b, v, f"{node}: {fmt(v)} GB/s at {fmt_bytes(b)}",
                  BAD if node in failed else PALETTE[5])
        chart.label(b, v, node)
    inter = _internode_sweep(report)
    if inter:
        chart.line("inter-node group", inter, PALETTE[2])
    for floor, name in floors_over(report, "allreduce", sweeps):
        chart.ref(floor, f"{name} at {fmt_bytes(band[-1][0])}")
    return chart.svg()


def _internode_sweep(report: PageRun) -> list[tuple[float, float]]:
    for recs in report.records.values():
        group = mapping(mapping(data_of(recs.get("allreduce_internode")).get("figures"))
                        .get("group"))
        read = [(num(mapping(s).get("bytes")), num(mapping(s).get("busbw_gbps")))
                for s in seq(group.get("sweep"))]
        pts = [(b, v) for b, v in read if b and v is not None]
        if pts:
            return pts
    return []
