"""The burn check's part of a node's section: telemetry per GPU over the burn (TFLOPS,
temperature, clocks, power) with clock events marked, and a row per GPU. Split from
burnin/report/summary/checks.py (the other built-in checks' parts) along its largest seam."""

from __future__ import annotations

import math
import statistics
from operator import itemgetter

from burnin.checks.burn import FAULT_REASONS
from burnin.report.summary.charts import BAD, FLOOR, MEDIAN, PALETTE, Axis, Chart, fmt
from burnin.report.summary.model import floor_of, mapping, num, seq
from burnin.report.summary.sections import NodeView, charts, note, table

# Clock event reasons worth marking (names as probes/telemetry.py records them): the
# judge's faults in red, the power cap (the GPU working as configured) in amber.
MARKED = {0x4: "sw_power_cap", **FAULT_REASONS}
MAX_SPANS = 40       # clock-event spans per chart; the rest are counted in the table


def numbers(values) -> list[float]:
    """The numbers of a series, None (a reading the GPU does not support) left out. The
    probes write plain numbers, so the whole list is checked at C speed and only a
    malformed one is cleaned value by value."""
    vs = seq(values)
    if _plain(vs) is not None:
        return vs
    return [x for x in map(num, vs) if x is not None]


def _plain(values: list) -> float | None:
    """The sum when all are plain finite numbers (what the probes write), checked at C
    speed; None when not."""
    try:
        total = math.fsum(values)
    except TypeError:  # None (a reading the GPU does not support) or junk
        return None
    return total if math.isfinite(total) else None


def thin(xs, ys, n: int) -> list[tuple[float, float]]:
    """At most n points of a series; each interval keeps the value farthest from the
    series' mean (drawn at the interval's middle), so that a one-sample clock dip or
    spike still shows."""
    xs, ys = seq(xs), seq(ys)
    m = min(len(xs), len(ys))
    xs, ys = xs[:m], ys[:m]
    total = _plain(ys)
    if total is None or _plain(xs) is None:  # gaps or junk: the numbers only, then thin
        pairs = [(x, y) for x, y in zip(map(num, xs), map(num, ys), strict=True)
                 if x is not None and y is not None]
        xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
        m, total = len(xs), math.fsum(ys)
    if m <= n:
        return list(zip(xs, ys, strict=True))
    mid = total / m  # the mean: a few dips hardly move it, and it costs no sort
    out = []
    for i in range(n):
        lo = i * m // n
        hi = max((i + 1) * m // n, lo + 1)
        seg = ys[lo:hi]
        low, high = min(seg), max(seg)
        out.append(((xs[lo] + xs[hi - 1]) / 2, low if mid - low > high - mid else high))
    return out


def event_runs(t, reasons) -> list[tuple[float, float, str, bool]]:
    """(start s, end s, reason names, fault?) for each run of samples with marked reasons."""
    t, reasons = seq(t), seq(reasons)
    mask = sum(MARKED)
    # Which sample values carry a marked reason, then where they are: list.index runs at
    # C speed, and a burn's few thousand samples have a handful of distinct values.
    try:
        distinct = set(reasons)
    except TypeError:  # a list inside the series: a malformed record
        distinct = {r for r in reasons if type(r) is int}
    marked = {r for r in distinct if type(r) is int and r & mask}
    hits = []
    for value in marked:
        i = reasons.index(value)
        while True:
            hits.append(i)
            try:
                i = reasons.index(value, i + 1)
            except ValueError:
                break
    hits.sort()
    runs: list[tuple[float, float, str, bool]] = []
    gap = 2.5 * _step(t)
    named = {r: (", ".join(name for bit, name in MARKED.items() if r & bit),
                 any(r & bit for bit in FAULT_REASONS)) for r in marked}
    for i in hits:
        x = num(t[i]) if i < len(t) else None
        if x is None:
            continue
        names, fault = named[reasons[i]]
        if runs and runs[-1][2] == names and x - runs[-1][1] <= gap:
            runs[-1] = (runs[-1][0], x, names, fault)
        else:
            runs.append((x, x, names, fault))
    return runs


def _step(t) -> float:
    xs = [num(x) for x in seq(t)[:3]]
    a, b = (xs[0], xs[1]) if len(xs) > 1 else (None, None)
    return (b - a) if a is not None and b is not None and b > a else 1.0


def burn(view: NodeView, record: dict) -> list:
    data = record["data"]
    devices = [d for d in seq(data.get("devices")) if isinstance(d, dict)]
    time_axis = Axis("time into the burn", "s")
    tflops = Chart("TFLOPS per device over the burn", time_axis, Axis("TFLOPS", "TFLOPS"), 440,
                   210)
    temp = Chart("temperature", time_axis, Axis("°C", "°C", zero=False, span=30), 440, 210)
    clock = Chart("SM clock (clock events shaded)", time_axis,
                  Axis("MHz", "MHz", zero=False, span=300), 440, 210)
    power = Chart("board power", time_axis, Axis("W", "W"), 440, 210)
    rows, spans, names, limits, slowdowns = [], 0, [], [], []
    model = ""
    for i, dev in enumerate(devices):
        colour, name = PALETTE[i % len(PALETTE)], str(dev.get("device", i))
        names.append(name)
        model = model or str(dev.get("name") or "")
        tel = mapping(dev.get("telemetry"))
        s = mapping(tel.get("series"))
        t = s.get("t")
        tflops.line(name, thin(*_columns(dev.get("tflops_series")), view.detail), colour,
                    legend=False)
        for chart, key in ((temp, "temp_c"), (clock, "sm_mhz"), (power, "power_w")):
            chart.line(name, thin(t, s.get(key), view.detail), colour, legend=False)
        runs = event_runs(t, s.get("reasons"))
        for a, b, what, fault in runs:
            if spans < MAX_SPANS:
                clock.span(a, b, f"{name}: {what}, {fmt(a)}-{fmt(b)} s", BAD if fault else FLOOR)
                spans += 1
        for x in seq(tel.get("xid")):
            at = num(mapping(x).get("t"))
            if at is not None:
                for chart in (tflops, clock):
                    chart.mark(at, f"{name}: XID {mapping(x).get('xid')} at {fmt(at)} s")
        limits.append(num(tel.get("power_limit_w")))
        slowdowns.append(num(tel.get("temp_slowdown_c")))
        rows.append(_burn_row(view, dev, s, runs))
    cpu = mapping(mapping(mapping(data.get("figures")).get("cpu_telemetry")).get("series"))
    if cpu:  # a CPU node: the host's temperature and frequency stand in for the GPU's
        temp.line("cpu", thin(cpu.get("t"), cpu.get("temp_c"), view.detail), PALETTE[1])
        clock.line("cpu", thin(cpu.get("t"), cpu.get("mhz"), view.detail), PALETTE[1])
        clock.title = "CPU clock"
        power = Chart("load average (1 min)", time_axis, Axis("load", ""), 440, 210)
        power.line("load1", thin(cpu.get("t"), cpu.get("load1"), view.detail), PALETTE[1])
    tflops.ref(floor_of(view.report, view.node, "burn"), "floor")
    tflops.ref(view.fleet.medians.get(("burn", model)), "fleet median", MEDIAN)
    temp.ref(_one([s for s in slowdowns if s is not None]), "slowdown", BAD)
    power.ref(_one([p for p in limits if p is not None]), "power limit", FLOOR)
    missing = [c.title for c in (tflops, temp, clock, power) if c.empty()]
    notes = [note(f"Not recorded on this node: {', '.join(missing)}.")] if missing else []
    lines = max((len(seq(mapping(mapping(d.get("telemetry")).get("series")).get("t")))
                 for d in devices), default=0)
    if lines > view.detail:
        notes.append(note(f"Each line: {view.detail} points for {lines} samples, each the "
                          "extreme of its interval; every sample is in results.jsonl."))
    head = ["device", "model", "TFLOPS", "of fleet median", "hottest °C", "mean SM MHz",
            "max W", "clock events", "XIDs"]
    return [["legend", [[n, PALETTE[i % len(PALETTE)]] for i, n in enumerate(names)]],
            charts(tflops, temp, clock, power), *notes, table(head, rows)]


def _columns(pairs) -> tuple[list, list]:
    """[[t, v], ...] as ([t, ...], [v, ...]); pairs that are not pairs left out."""
    pairs = seq(pairs)
    try:  # map and itemgetter: no Python-level step per sample
        return list(map(itemgetter(0), pairs)), list(map(itemgetter(1), pairs))
    except (TypeError, IndexError, KeyError):
        good = [p for p in pairs if isinstance(p, list) and len(p) == 2]
        return [p[0] for p in good], [p[1] for p in good]


def _one(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _burn_row(view: NodeView, dev: dict, s: dict, runs) -> list:
    value = num(dev.get("tflops"))
    med = view.fleet.medians.get(("burn", str(dev.get("name") or "")))
    share = f"{value / med:.0%}" if value is not None and med else ""
    temps, clocks, watts = (numbers(s.get(k)) for k in ("temp_c", "sm_mhz", "power_w"))
    events = sorted({r[2] for r in runs})
    faults = any(r[3] for r in runs)
    xids = [str(mapping(x).get("xid")) for x in seq(mapping(dev.get("telemetry")).get("xid"))]
    return [dev.get("device"), dev.get("name"), value, share, max(temps, default=None),
            statistics.fmean(clocks) if clocks else None, max(watts, default=None),
            ["; ".join(events), "fail" if faults else "warn"] if events else "",
            [", ".join(xids), "fail"] if xids else dev.get("error", "")]
