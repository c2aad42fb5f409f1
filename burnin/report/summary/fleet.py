"""The top of the page: the verdict banner, the fleet grid (nodes x checks, grouped by
rack, failing first) and the fleet charts, every point named. Fleet-wide figures (the
medians, the busbw band) are computed here once and handed to the node sections."""

from __future__ import annotations

import importlib
import math
import statistics
from dataclasses import dataclass, field
from html import escape
from string import Formatter
from typing import Any

from burnin.checks import CHECKS, Measure
from burnin.model.outcome import Outcome
from burnin.report.summary.charts import BAD, MEDIAN, PALETTE, Axis, Chart, fmt
from burnin.report.summary.model import (
    PageRun,
    check_key,
    data_of,
    floor_of,
    floors_over,
    group_key,
    natural_key,
    seq,
)

MAX_POINTS = 240     # dots a fleet chart draws: a 560-pixel chart shows no more
LABELLED = 3         # the worst few devices named in place
CAPTION = 14         # px: a group's caption line (12px type), its tiles below
COLOUR = {Outcome.PASSED: "#2da44e", Outcome.FAILED: "#cf222e", Outcome.ERROR: "#8250df",
          Outcome.SKIPPED: "#afb8c1", Outcome.NOT_RUN: "#eaeef2"}


@dataclass(frozen=True)
class FleetPart:
    """What a check adds to the fleet (Check.fleet_page, computed once a page): data its
    node parts read (the all-reduce's busbw band), reference lines on a rank chart by its
    key ({"temp": [(85.0, "slowdown", BAD)]}), and charts of its own, each
    (what, function, *args) as charts() returns them."""

    data: Any = None  # of the check's own shape, which its node parts read
    refs: dict[str, list[tuple[float | None, str, str]]] = field(default_factory=dict)
    charts: list[tuple] = field(default_factory=list)


@dataclass
class FleetFigures:
    """Per-device figures of the run with who they belong to, and the fleet's yardsticks."""

    devices: dict[str, list[tuple[float, str, str, str]]] = field(default_factory=dict)
    models: dict[tuple[str, str], str] = field(default_factory=dict)  # (node, device) -> model
    medians: dict[tuple[str, str], float] = field(default_factory=dict)
    model: str = ""          # the fleet's most common device model
    # check -> its fleet-wide part (Check.fleet_page): its data, lines and charts
    parts: dict[str, FleetPart] = field(default_factory=dict)
    # chart key -> (page order, the check that judges it, title, Measure): the rank charts
    charts: dict[str, tuple[int, str, str, Measure]] = field(default_factory=dict)


def fleet_of(report: PageRun) -> FleetFigures:
    """One pass over the run: every device figure a check's Measure charts, keyed by its
    Measure's key ('burn', 'sdc', 'temp', 'storage read', ...), as (value, node, device,
    model)."""
    fleet = FleetFigures()
    # The device models: from the facts check and the checks charted per model.
    named = [c.name for c in CHECKS.values() if c.facts or any(m.per_model for m in c.measures)]
    placed: dict[tuple, tuple | None] = {}
    for node, recs in report.records.items():
        for check in named:
            for dev in seq(data_of(recs.get(check)).get("devices")):
                if isinstance(dev, dict) and isinstance(dev.get("name"), str):
                    fleet.models.setdefault((node, str(dev.get("device", dev.get("index")))),
                                            dev["name"])
        for check, f in report.checked.get(node, []):
            try:  # every node of a fleet has the same few dozen: each placed once
                where = placed[(check, f.metric, f.labels)]
            except KeyError:
                where = placed[(check, f.metric, f.labels)] = _placed(check, f, fleet)
            except TypeError:  # a label value that cannot be hashed
                where = _placed(check, f, fleet)
            if where is not None:
                items, device, per_model = where
                items.append((f.value, node, device,
                              fleet.models.get((node, device), "") if per_model else ""))
    for key, items in fleet.devices.items():
        by_model: dict[str, list[float]] = {}
        for v, _, _, model in items:
            by_model.setdefault(model, []).append(v)
        for model, values in by_model.items():
            fleet.medians[(key, model)] = statistics.median(values)
    names = list(fleet.models.values())
    fleet.model = max(sorted(set(names)), key=names.count) if names else ""
    for spec in CHECKS.values():
        if spec.fleet_page:
            try:
                fleet.parts[spec.name] = resolve(spec.fleet_page)(report)
            except Exception as e:  # a malformed record costs this part, not the page
                report.problems.append(f"the {spec.name} fleet part could not be drawn: "
                                       f"{type(e).__name__}: {e}")
    return fleet


def _placed(check: str, f, fleet: FleetFigures) -> tuple | None:
    """(the list of its chart's devices, its device, whether charted per model) of a
    figure, its chart entered in `fleet`; None when it is not charted."""
    spec = CHECKS.get(check)
    if spec is None:
        return None
    m = next((m for m in spec.measures if m.metric == f.metric), None)
    if m is None or not m.chart:
        return None
    used = {name for _, name, _, _ in Formatter().parse(m.key) if name}
    device = dict(f.labels).get("device") or " ".join(
        f"{k} {v}" for k, v in f.labels if k not in used) or "?"
    key = m.key_of(f.labels) or m.metric
    fleet.charts.setdefault(key, (spec.page_order, check, m.chart_of(f.labels), m))
    return fleet.devices.setdefault(key, []), device, m.per_model


def sorted_median(values: list[float]) -> float:
    """statistics.median of values already sorted, either way, without sorting 80,000
    devices again."""
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def resolve(ref: str):
    """The function a Check names as "module:function", imported now."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


# The banner -------------------------------------------------------------------------------
def banner(report: PageRun, moved: str) -> str:
    nodes = report.ordered
    bad = [n for n in nodes if report.failing(n)]
    checks = report.checks
    chips = []
    for c in checks:
        outcomes = [report.verdicts.get(n, {}).get(c, ("", ""))[0] for n in nodes]
        passed = outcomes.count("passed")
        ran = sum(1 for o in outcomes if o)
        cls = "ok" if passed == ran and ran else "bad"
        extra = ", ".join(f"{outcomes.count(o)} {o.word}" for o in
                          (Outcome.FAILED, Outcome.ERROR, Outcome.SKIPPED) if outcomes.count(o))
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


def first_problem(report: PageRun, node: str) -> str:
    verdicts = report.verdicts.get(node, {})
    for check in sorted(verdicts, key=check_key):
        outcome, message = verdicts[check]
        if outcome != "passed":
            return f"{check} {Outcome(outcome).word}: {message or 'no message'}"
    return "passed every check"


# The grid ---------------------------------------------------------------------------------
def grid(report: PageRun) -> str:
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
        rows = math.ceil(len(members) / columns)
        # A group off the screen is neither styled, laid out nor painted until it nears
        # it (content-visibility below), holding its place meanwhile at the size it will
        # have: 25,000 tiles were repainted in every frame drawn while the page loaded.
        box = "" if len(groups) == 1 else (
            f" style='width:{columns * (width + 1)}px;contain-intrinsic-size:auto "
            f"{columns * (width + 1)}px auto {CAPTION + rows * (height + 1) - 1}px'")
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
                     for o, w in ((o, o.word) for o in Outcome))
    stripes = " / ".join(escape(c) for c in checks)
    return (f"<style>.tiles a{{height:{height}px;width:{width}px}}"
            f"{'.grp{content-visibility:auto}' if len(groups) > 1 else ''}{css}</style>"
            "<section id='grid'>"
            f"<h2>Fleet: every node, one stripe per check</h2><p class='legend'>"
            f"{f'Grouped by {escape(key)}, failures first. ' if key else ''}Stripes top "
            f"to bottom: {stripes}. {legend}· hover a tile for the node and its reason, click "
            f"for its section.</p><div class='groups'>{''.join(boxes)}</div></section>")


def _stops(pattern: tuple) -> str:
    n = len(pattern) or 1
    blank = COLOUR[Outcome.NOT_RUN]  # '' is NOT_RUN's value: the key COLOUR[''] found
    return ",".join(f"{COLOUR.get(o, blank)} {100 * i / n:.1f}% {100 * (i + 1) / n:.1f}%"
                    for i, o in enumerate(pattern))


# Fleet charts -----------------------------------------------------------------------------
def charts(report: PageRun, fleet: FleetFigures) -> list[tuple]:
    """A rank chart per figure a check's Measure gives one (per device model where it
    says so), in page order; then the charts of the checks' fleet parts."""
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
    for part in fleet.parts.values():
        out += part.charts
    return out


def rank_chart(report: PageRun, fleet: FleetFigures, title: str, axis: Axis, items: list,
               key: str, check: str, worst: str) -> str:
    """Devices ranked worst first: what people draw to find the straggler. Hover names
    every dot; the worst few are labelled in place."""
    if not items:
        return ""
    # Ties in node order: each node's place once, not its natural key per device.
    place = {n: i for i, n in enumerate(sorted({i[1] for i in items}, key=natural_key))}
    sign = 1 if worst == "low" else -1
    ordered = sorted(items, key=lambda i: (sign * i[0], place[i[1]]))
    # This check's failures, not another's: a slow disk is not a slow GPU.
    bad_nodes = {n for n, v in report.verdicts.items()
                 if v.get(check, ("passed", ""))[0] != "passed"}
    keep = set(range(min(10, len(ordered))))
    keep |= {i for i, it in enumerate(ordered) if it[1] in bad_nodes}
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
        bad = node in bad_nodes or (floor is not None and v < floor)
        chart.dot(i + 1, v, f"{node} {device}: {fmt(v)} {axis.unit}", BAD if bad else PALETTE[0])
    for i, (v, node, device, _) in enumerate(ordered[:LABELLED]):
        chart.label(i + 1, v, f"{node} {device}")
    for floor, name in floors_over(report, key, [i[1] for i in ordered]):
        chart.ref(floor, name)
    chart.ref(sorted_median([i[0] for i in ordered]), "median", MEDIAN)
    for part in fleet.parts.values():
        for value, name, colour in part.refs.get(key, []):
            chart.ref(value, name, colour)
    if len(keep) < len(ordered):
        chart.note = (f"{len(keep)} of {len(ordered)} drawn: the {direction} 10, {check} "
                      "failures, evenly spaced ranks")
    return chart.svg()
