"""The top of the page: the verdict banner, the fleet grid (nodes x checks, grouped by
rack, failing first) and the fleet charts, every point named. Fleet-wide figures (the
medians, the busbw band) are computed here once and handed to the node sections."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from html import escape
from string import Formatter

from burnin.checks import CHECKS, Measure
from burnin.summary.charts import BAD, MEDIAN, PALETTE, Axis, Chart, fmt, fmt_bytes
from burnin.summary.model import (
    OUTCOME_WORD,
    Report,
    check_key,
    data_of,
    floor_of,
    floors_over,
    group_key,
    mapping,
    median,
    natural_key,
    num,
    seq,
)

MAX_POINTS = 240     # dots a fleet chart draws: a 560-pixel chart shows no more
LABELLED = 3         # the worst few devices named in place
COLOUR = {"passed": "#2da44e", "failure": "#cf222e", "error": "#8250df",
          "skipped": "#afb8c1", "": "#eaeef2"}


@dataclass
class Fleet:
    """Per-device figures of the run with who they belong to, and the fleet's yardsticks."""

    devices: dict[str, list[tuple[float, str, str, str]]] = field(default_factory=dict)
    models: dict[tuple[str, str], str] = field(default_factory=dict)  # (node, device) -> model
    medians: dict[tuple[str, str], float] = field(default_factory=dict)
    # ranks per node -> [(bytes, min, median, max, nodes)]: the busbw band at each size
    band: dict[int, list[tuple[int, float, float, float, int]]] = field(default_factory=dict)
    slowdown_c: float | None = None
    model: str = ""          # the fleet's most common device model
    # chart key -> (page order, the check that judges it, title, Measure): the rank charts
    charts: dict[str, tuple[int, str, str, Measure]] = field(default_factory=dict)


def fleet_of(report: Report) -> Fleet:
    """One pass over the run: every device figure a check's Measure charts, keyed by its
    Measure's key ('burn', 'sdc', 'temp', 'storage read', ...), as (value, node, device,
    model)."""
    fleet, slowdown = Fleet(), []
    sweeps: dict[int, dict[int, list[float]]] = {}
    # The device models: from the facts check and the checks charted per model.
    named = [c.name for c in CHECKS.values() if c.facts or any(m.per_model for m in c.measures)]
    for node, recs in report.records.items():
        for check in named:
            for dev in seq(data_of(recs.get(check)).get("devices")):
                if isinstance(dev, dict) and isinstance(dev.get("name"), str):
                    fleet.models.setdefault((node, str(dev.get("device", dev.get("index")))),
                                            dev["name"])
        for dev in seq(data_of(recs.get("burn")).get("devices")):
            s = num(mapping(mapping(dev).get("telemetry")).get("temp_slowdown_c"))
            if s is not None:
                slowdown.append(s)
        sweep = seq(mapping(data_of(recs.get("allreduce")).get("figures")).get("sweep"))
        world = num(mapping(data_of(recs.get("allreduce")).get("figures")).get("world"))
        for step in sweep:
            b, v = num(mapping(step).get("bytes")), num(mapping(step).get("busbw_gbps"))
            if b and v is not None:
                sweeps.setdefault(int(world or 0), {}).setdefault(int(b), []).append(v)
        for check, f in report.checked.get(node, []):
            spec = CHECKS.get(check)
            m = next((m for m in spec.measures if m.metric == f.metric), None) if spec else None
            if m is None or not m.chart:
                continue
            key = m.key_of(f.labels) or m.metric
            labels = dict(f.labels)
            used = {name for _, name, _, _ in Formatter().parse(m.key) if name}
            device = labels.get("device") or " ".join(
                f"{k} {v}" for k, v in f.labels if k not in used) or "?"
            model = fleet.models.get((node, device), "") if m.per_model else ""
            fleet.devices.setdefault(key, []).append((f.value, node, device, model))
            fleet.charts.setdefault(key, (spec.page_order, check, m.chart_of(f.labels), m))
    for key, items in fleet.devices.items():
        by_model: dict[str, list[float]] = {}
        for v, _, _, model in items:
            by_model.setdefault(model, []).append(v)
        for model, values in by_model.items():
            fleet.medians[(key, model)] = statistics.median(values)
    fleet.slowdown_c = median(slowdown)
    names = list(fleet.models.values())
    fleet.model = max(sorted(set(names)), key=names.count) if names else ""
    fleet.band = {w: [(b, min(v), statistics.median(v), max(v), len(v)) for b, v in sorted(
        sizes.items())] for w, sizes in sweeps.items()}
    return fleet


# The banner -------------------------------------------------------------------------------
def banner(report: Report, moved: str) -> str:
    nodes = report.ordered
    bad = [n for n in nodes if report.failing(n)]
    checks = report.checks
    chips = []
    for c in checks:
        outcomes = [report.verdicts.get(n, {}).get(c, ("", ""))[0] for n in nodes]
        passed = outcomes.count("passed")
        ran = sum(1 for o in outcomes if o)
        cls = "ok" if passed == ran and ran else "bad"
        extra = ", ".join(f"{outcomes.count(o)} {OUTCOME_WORD[o]}" for o in
                          ("failure", "error", "skipped") if outcomes.count(o))
        chips.append(f"<span class='chip {cls}'>{escape(c)} {passed}/{ran}"
                     f"{' (' + extra + ')' if extra else ''}</span>")
    if not nodes:
        head, cls = "No node was tested", "bad"
    elif bad:
        head, cls = (f"NOT ADMITTED: {len(bad)} of {len(nodes)} node{'s' * (len(nodes) != 1)} "
                     f"did not pass every check", "bad")
    else:
        head, cls = (f"ADMITTED: all {len(nodes)} node{'s' * (len(nodes) != 1)} passed every "
                     "check", "ok")
    worst = "".join(f"<li><a href='#n-{escape(n)}'>{escape(n)}</a>: "
                    f"{escape(first_problem(report, n)[:160])}</li>" for n in bad[:5])
    more = f"<li>and {len(bad) - 5} more, below</li>" if len(bad) > 5 else ""
    problems = "".join(f"<li class='warn'>{escape(p)}</li>" for p in report.problems[:3])
    if len(report.problems) > 3:
        problems += f"<li class='warn'>and {len(report.problems) - 3} more such notes</li>"
    return (f"<div id='verdict' class='banner {cls}'><div class='head'>{escape(head)}</div>"
            f"<div class='chips'>{''.join(chips)}</div>"
            + (f"<ul class='worst'>{worst}{more}</ul>" if worst else "")
            + (f"<p>{moved}</p>" if moved else "")
            + (f"<ul>{problems}</ul>" if problems else "") + "</div>")


def first_problem(report: Report, node: str) -> str:
    verdicts = report.verdicts.get(node, {})
    for check in sorted(verdicts, key=check_key):
        outcome, message = verdicts[check]
        if outcome != "passed":
            return f"{check} {OUTCOME_WORD.get(outcome, outcome)}: {message or 'no message'}"
    return "passed every check"


# The grid ---------------------------------------------------------------------------------
def grid(report: Report) -> str:
    """Every node a tile, one stripe per check; grouped by rack (or the label most nodes
    carry), groups and tiles with failures first. One element per node, coloured by a
    class per distinct outcome pattern, so that 10,000 tiles stay light."""
    checks = report.checks
    key = group_key(report.nodes)
    groups: dict[str, list[str]] = {}
    for n in report.ordered:
        label = report.info(n).labels.get(key, "(no label)") if key else ""
        groups.setdefault(label, []).append(n)
    patterns: dict[tuple, str] = {}
    # Tiles as big as the fleet allows: a glance at 10 nodes, a map at 10,000.
    size = len(report.ordered)
    width, stripe = (22, 6) if size <= 100 else (13, 4) if size <= 1000 else \
        (9, 3) if size <= 3000 else (6, 2)
    height = max(9, stripe * len(checks))
    boxes = []
    order = sorted(groups, key=lambda g: (-sum(map(report.failing, groups[g])), natural_key(g)))
    for label in order:
        members = groups[label]
        tiles = []
        for n in members:
            v = report.verdicts.get(n, {})
            pattern = tuple(v.get(c, ("", ""))[0] for c in checks)
            cls = patterns.setdefault(pattern, f"k{len(patterns)}")
            hover = f"{n}: {first_problem(report, n)[:200]}" if report.failing(n) \
                else f"{n}: passed"
            tiles.append(f"<a href='#n-{escape(n)}' class={cls} title='{escape(hover)}'></a>")
        failing = sum(map(report.failing, members))
        columns = 16 if size > 3000 else min(40, max(8, math.ceil(math.sqrt(len(members)) * 2)))
        box = "" if len(groups) == 1 else f" style='width:{columns * (width + 1)}px'"
        full = (f"{escape(key)} {escape(label)}: " if key else "") + \
            f"{len(members)} node{'s' * (len(members) != 1)}" + \
            (f", <b>{failing} failing</b>" if failing else "")
        # Hundreds of racks: a caption as narrow as its tiles, the whole of it on hover.
        caption = full if len(groups) <= 24 else \
            escape(label) + (f" · <b>{failing} failing</b>" if failing else "")
        boxes.append(f"<div class='grp'{box}><div class='gh' title='"
                     f"{escape(full.replace('<b>', '').replace('</b>', ''))}'>{caption}</div>"
                     f"<div class='tiles'>{''.join(tiles)}</div></div>")
    css = "".join(f".{cls}{{background:linear-gradient({_stops(p)})}}"
                  for p, cls in patterns.items())
    legend = "".join(f"<span class='sw' style='background:{COLOUR[o]}'></span>{w} "
                     for o, w in OUTCOME_WORD.items())
    stripes = " / ".join(escape(c) for c in checks)
    return (f"<style>.tiles a{{height:{height}px;width:{width}px}}{css}</style><section id='grid'>"
            f"<h2>Fleet: every node, one stripe per check</h2><p class='legend'>"
            f"{f'Grouped by {escape(key)}, failures first. ' if key else ''}Stripes top "
            f"to bottom: {stripes}. {legend}· hover a tile for the node and its reason, click "
            f"for its section.</p><div class='groups'>{''.join(boxes)}</div></section>")


def _stops(pattern: tuple) -> str:
    n = len(pattern) or 1
    return ",".join(f"{COLOUR.get(o, COLOUR[''])} {100 * i / n:.1f}% {100 * (i + 1) / n:.1f}%"
                    for i, o in enumerate(pattern))


# Fleet charts -----------------------------------------------------------------------------
def charts(report: Report, fleet: Fleet) -> list[str]:
    """A rank chart per figure a check's Measure gives one (per device model where it
    says so), in page order; then the busbw band per rank count."""
    out = []
    for key, (_, check, title, m) in sorted(fleet.charts.items(),
                                            key=lambda kv: (kv[1][:2], kv[0])):
        items = fleet.devices.get(key, [])
        axis = Axis(m.unit or m.metric, m.unit, zero=m.zero, span=m.span)
        models = sorted({i[3] for i in items}) if m.per_model else [""]
        for model in models:
            mine = [i for i in items if i[3] == model] if model or len(models) > 1 else items
            name = f"{title}, {model}" if model and model != "cpu" else title
            out.append((f"fleet {key}", rank_chart, report, fleet, name, axis, mine, key,
                        check, m.worst))
    for world in sorted(fleet.band):
        out.append(("fleet busbw", busbw_chart, report, fleet, world))
    return out


def rank_chart(report: Report, fleet: Fleet, title: str, axis: Axis, items: list,
               key: str, check: str, worst: str) -> str:
    """Devices ranked worst first: what people draw to find the straggler. Hover names
    every dot; the worst few are labelled in place."""
    if not items:
        return ""
    ordered = sorted(items, key=lambda i: (i[0] if worst == "low" else -i[0], natural_key(i[1])))

    def failed(node: str) -> bool:  # this check, not another: a slow disk is not a slow GPU
        return report.verdicts.get(node, {}).get(check, ("passed", ""))[0] != "passed"
    keep = set(range(min(10, len(ordered))))
    keep |= {i for i, it in enumerate(ordered) if failed(it[1])}
    if len(ordered) > MAX_POINTS:
        step = (len(ordered) - 1) / (MAX_POINTS - len(keep) - 1 or 1)
        keep |= {round(i * step) for i in range(MAX_POINTS - len(keep))}
    else:
        keep = set(range(len(ordered)))
    direction = "slowest" if worst == "low" else "hottest"
    chart = Chart(title, Axis(f"devices, {direction} first", integer=True), axis)
    for i in sorted(keep)[:MAX_POINTS + 60]:
        v, node, device, _ = ordered[i]
        floor = floor_of(report, node, key)
        bad = failed(node) or (floor is not None and v < floor)
        chart.dot(i + 1, v, f"{node} {device}: {fmt(v)} {axis.unit}", BAD if bad else PALETTE[0])
    for i, (v, node, device, _) in enumerate(ordered[:LABELLED]):
        chart.label(i + 1, v, f"{node} {device}")
    for floor, name in floors_over(report, key, [i[1] for i in ordered]):
        chart.ref(floor, name)
    chart.ref(statistics.median(i[0] for i in ordered), "median", MEDIAN)
    if key == "temp":
        chart.ref(fleet.slowdown_c, "slowdown", BAD)
    if len(keep) < len(ordered):
        chart.note = (f"{len(keep)} of {len(ordered)} drawn: the {direction} 10, {check} "
                      "failures, evenly spaced ranks")
    return chart.svg()


def busbw_chart(report: Report, fleet: Fleet, world: int) -> str:
    """The fleet's busbw band against message size, the nodes that failed drawn over it."""
    band = fleet.band[world]
    chart = Chart(f"allreduce: busbw against message size ({world} ranks per node)",
                  Axis("message size", log2=True), Axis("GB/s", "GB/s"))
    chart.band("fleet min-max", [(b, lo, hi) for b, lo, _, hi, _ in band], PALETTE[0])
    chart.line("fleet min", [(b, lo) for b, lo, *_ in band], PALETTE[0], 0.8, legend=False)
    chart.line("fleet max", [(b, hi) for b, _, _, hi, _ in band], PALETTE[0], 0.8, legend=False)
    chart.line("fleet median", [(b, mid) for b, _, mid, _, _ in band], MEDIAN)
    # The nodes that failed the check drawn over the band, the slowest few at the
    # judged size named (the band's edge is somebody: which one).
    sweeps = {}
    for node, recs in report.records.items():
        fig = mapping(data_of(recs.get("allreduce")).get("figures"))
        if int(num(fig.get("world")) or 0) == world:
            pts = [(num(mapping(s).get("bytes")), num(mapping(s).get("busbw_gbps")))
                   for s in seq(fig.get("sweep"))]
            pts = [(b, v) for b, v in pts if b and v is not None]
            if pts:
                sweeps[node] = pts
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


def _internode_sweep(report: Report) -> list[tuple[float, float]]:
    for recs in report.records.values():
        group = mapping(mapping(data_of(recs.get("allreduce_internode")).get("figures"))
                        .get("group"))
        pts = [(num(mapping(s).get("bytes")), num(mapping(s).get("busbw_gbps")))
               for s in seq(group.get("sweep"))]
        pts = [(b, v) for b, v in pts if b and v is not None]
        if pts:
            return pts
    return []
