"""summary.html: one self-contained page (no network fetch) people decide from: the verdict
per node in a sortable table, fleet charts as inline SVG, and drill-down charts for the
failing nodes. Aggregates first, so that a fleet of thousands still opens quickly."""

from __future__ import annotations

import html
import math
import statistics
import time

from burnin.figures import key_figures

MAX_POINTS = 1500       # a fleet chart draws at most this many points (quantiles beyond)
MAX_DRILLDOWN = 20      # failing nodes with their own charts
MARK = {"passed": ("pass", "&#10003;"), "failure": ("fail", "&#10007;"),
        "error": ("fail", "!"), "skipped": ("skip", "&#8211;")}
STYLE = """body{font:14px system-ui,sans-serif;margin:24px;color:#222}h1{font-size:20px}
table{border-collapse:collapse}th,td{padding:3px 8px;border-bottom:1px solid #ddd;
text-align:left;vertical-align:top}th{cursor:pointer;background:#f4f4f4}
.pass{color:#1a7f37}.fail{color:#cf222e;font-weight:600}.skip{color:#888}
.charts{display:flex;flex-wrap:wrap;gap:16px}svg{background:#fafafa;border:1px solid #ddd}
.msg{max-width:720px;font-size:12px}"""
SORT = """document.querySelectorAll('th').forEach((th,i)=>th.onclick=()=>{const t=th.closest(
'table'),b=t.tBodies[0],r=[...b.rows],d=th.dataset.d=th.dataset.d=='1'?'-1':'1';r.sort((x,y)
=>x.cells[i].innerText.localeCompare(y.cells[i].innerText,undefined,{numeric:true})*d);
r.forEach(x=>b.appendChild(x))})"""
COLORS = ("#0969da", "#cf222e", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a3069")


def _sample(values: list[float]) -> list[float]:
    if len(values) <= MAX_POINTS:
        return values
    step = (len(values) - 1) / (MAX_POINTS - 1)
    return [values[round(i * step)] for i in range(MAX_POINTS)]


class Chart:
    """A small SVG line/dot chart with horizontal reference lines."""

    def __init__(self, title: str, xlabel: str, ylabel: str, logx: bool = False):
        self.title, self.xlabel, self.ylabel, self.logx = title, xlabel, ylabel, logx
        self.series: list[tuple[str, list[tuple[float, float]], bool]] = []
        self.hlines: list[tuple[float, str]] = []

    def line(self, label, points, dots=False):
        if points:
            self.series.append((label, points, dots))
        return self

    def hline(self, y, label):
        if y is not None:
            self.hlines.append((y, label))
        return self

    def svg(self, w: int = 560, h: int = 240) -> str:
        pts = [p for _, s, _ in self.series for p in s]
        if not pts:
            return ""
        fx = (lambda x: math.log2(max(x, 1e-12))) if self.logx else (lambda x: x)
        xs = [fx(x) for x, _ in pts]
        ys = [y for _, y in pts] + [y for y, _ in self.hlines] + [0.0]
        x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
        y1 = max(ys) * 1.08 or 1.0
        L, R, T, B = 56, 12, 26, 34

        def px(x):
            return L + (fx(x) - x0) / (x1 - x0) * (w - L - R)

        def py(y):
            return h - B - y / y1 * (h - T - B)
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
               f'role="img" aria-label="{html.escape(self.title)}">',
               f'<text x="{L}" y="16" font-size="13" font-weight="600">'
               f'{html.escape(self.title)}</text>',
               f'<line x1="{L}" y1="{h - B}" x2="{w - R}" y2="{h - B}" stroke="#888"/>',
               f'<line x1="{L}" y1="{T}" x2="{L}" y2="{h - B}" stroke="#888"/>',
               f'<text x="{w - R}" y="{h - 8}" font-size="11" text-anchor="end">'
               f'{html.escape(self.xlabel)}</text>',
               f'<text x="4" y="{T - 6}" font-size="11">{html.escape(self.ylabel)}</text>']
        for frac in (0, 0.5, 1):
            out.append(f'<text x="{L - 4}" y="{py(y1 * frac) + 4:.1f}" font-size="10" '
                       f'text-anchor="end">{y1 * frac:.4g}</text>')
        for y, label in self.hlines:
            out.append(f'<line x1="{L}" y1="{py(y):.1f}" x2="{w - R}" y2="{py(y):.1f}" '
                       f'stroke="#9a6700" stroke-dasharray="4 3"/><text x="{w - R - 2}" '
                       f'y="{py(y) - 3:.1f}" font-size="10" text-anchor="end">'
                       f'{html.escape(label)} {y:.3g}</text>')
        for i, (label, s, dots) in enumerate(self.series):
            color = COLORS[i % len(COLORS)]
            coords = [(px(x), py(y)) for x, y in s]
            if dots or len(coords) == 1:
                out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{color}"/>'
                        for x, y in coords]
            else:
                d = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
                out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                           f'points="{d}"/>')
            out.append(f'<text x="{L + 6 + 110 * (i % 4)}" y="{T + 12 + 12 * (i // 4)}" '
                       f'font-size="10" fill="{color}">{html.escape(label[:18])}</text>')
        out.append("</svg>")
        return "".join(out)


def _fleet_dots(title: str, ylabel: str, values: list[tuple[str, float]], floor=None) -> str:
    ordered = sorted(v for _, v in values)
    if not ordered:
        return ""
    pts = [(i, v) for i, v in enumerate(_sample(ordered))]
    return (Chart(title, f"{len(ordered)} devices, slowest first", ylabel)
            .line("devices", pts, dots=True).hline(statistics.median(ordered), "median")
            .hline(floor, "floor").svg())


def render(cluster: str, run_id: str, verdicts: dict[str, dict[str, tuple[str, str]]],
           records: list[dict], floors: dict | None = None) -> str:
    floors = floors or {}
    checks = sorted({c for v in verdicts.values() for c in v})
    failed = sorted(n for n, v in verdicts.items() if any(o != "passed" for o, _ in v.values()))
    by_node: dict[str, dict[str, dict]] = {}
    for r in records:
        by_node.setdefault(r["node"], {})[r["check"]] = r
    figs = [(r["node"], f) for r in records for f in key_figures(r)]

    charts = []
    for check in ("burn", "sdc"):
        vals = [(n, f.value) for n, f in figs if f.metric == "device_tflops"
                and dict(f.labels)["check"] == check]
        charts.append(_fleet_dots(f"{check}: TFLOPS per device", "TFLOPS", vals,
                                  floors.get(check)))
    for phase in ("read", "write"):
        vals = [(n, f.value) for n, f in figs if f.metric == "storage_gbps"
                and dict(f.labels)["phase"] == phase]
        charts.append(_fleet_dots(f"storage: {phase} GB/s per GPU (stream)", "GB/s", vals,
                                  floors.get(f"storage_{phase}")))
    charts.append(_busbw_chart(by_node, failed))
    charts.append(_fleet_dots("burn: hottest temperature per GPU", "C",
                              [(n, f.value) for n, f in figs
                               if f.metric == "gpu_temperature_max_celsius"]))
    rows = [_row(n, verdicts[n], checks, n in failed)
            for n in failed + sorted(set(verdicts) - set(failed))]
    drill = "".join(_drilldown(n, by_node.get(n, {})) for n in failed[:MAX_DRILLDOWN])
    passed = len(verdicts) - len(failed)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in checks)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>burnin {html.escape(run_id)}"
            f"</title><style>{STYLE}</style></head><body>"
            f"<h1>burnin run {html.escape(run_id)}, cluster {html.escape(cluster)}</h1>"
            f"<p id='verdict'>{len(verdicts)} nodes: <span class='pass'>{passed} passed every "
            f"check</span>, <span class='fail'>{len(failed)} did not</span>. Generated "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}.</p>"
            f"<h2>Fleet</h2><div class='charts'>{''.join(c for c in charts if c)}</div>"
            f"<h2>Verdict per node</h2><table id='nodes'><thead><tr><th>node</th>{head}"
            f"<th>failing figure</th><th>evidence</th></tr></thead><tbody>{''.join(rows)}"
            f"</tbody></table>"
            + (f"<h2>Failing nodes</h2>{drill}" if drill else "")
            + f"<script>{SORT}</script></body></html>")


def _row(node: str, v: dict[str, tuple[str, str]], checks: list[str], bad: bool) -> str:
    cells = []
    for c in checks:
        cls, mark = MARK.get(v.get(c, ("", ""))[0], ("skip", ""))
        cells.append(f"<td class='{cls}'>{mark}</td>")
    message = next((m for o, m in v.values() if o != "passed" and m), "")
    link = (f"<a href='nodes/{html.escape(node)}/verdicts.txt'>evidence</a>" if bad else "")
    return (f"<tr id='node-{html.escape(node)}'><td>{html.escape(node)}</td>{''.join(cells)}"
            f"<td class='msg'>{html.escape(message[:300])}</td><td>{link}</td></tr>")


def _busbw_chart(by_node: dict, failed: list[str]) -> str:
    sweeps = {n: r["allreduce"]["data"]["figures"]["sweep"] for n, r in by_node.items()
              if r.get("allreduce", {}).get("ok")
              and r["allreduce"]["data"]["figures"].get("sweep")}
    if not sweeps:
        return ""
    sizes = sorted({s["bytes"] for sw in sweeps.values() for s in sw})
    chart = Chart("allreduce: busbw against message size", "bytes (log)", "GB/s", logx=True)
    for label, pick in (("median", statistics.median), ("min", min), ("max", max)):
        chart.line(label, [(b, pick([s["busbw_gbps"] for sw in sweeps.values() for s in sw
                                     if s["bytes"] == b])) for b in sizes])
    for n in failed[:4]:
        if n in sweeps:
            chart.line(n, [(s["bytes"], s["busbw_gbps"]) for s in sweeps[n]])
    inter = next((r["allreduce_internode"]["data"]["figures"]["group"]["sweep"]
                  for r in by_node.values() if r.get("allreduce_internode", {}).get("ok")
                  and r["allreduce_internode"]["data"]["figures"].get("group")), None)
    if inter:
        chart.line("inter-node", [(s["bytes"], s["busbw_gbps"]) for s in inter])
    return chart.svg()


def _drilldown(node: str, recs: dict[str, dict]) -> str:
    parts = [f"<h3 id='fail-{html.escape(node)}'>{html.escape(node)} "
             f"<a href='nodes/{html.escape(node)}/'>evidence folder</a></h3><div class='charts'>"]
    burn = recs.get("burn", {})
    for dev in (burn.get("data") or {}).get("devices", []) if burn.get("ok") else []:
        series = (dev.get("telemetry") or {}).get("series") or {}
        t = series.get("t", [])
        for key, unit in (("temp_c", "C"), ("sm_mhz", "MHz"), ("power_w", "W")):
            pts = [(x, y) for x, y in zip(t, series.get(key, []), strict=False) if y is not None]
            parts.append(Chart(f"{dev['device']}: {key}", "seconds", unit)
                         .line(key, pts).svg(360, 180))
        if dev.get("tflops_series"):
            parts.append(Chart(f"{dev['device']}: TFLOPS over the burn", "seconds", "TFLOPS")
                         .line("TFLOPS", [tuple(p) for p in dev["tflops_series"]]).svg(360, 180))
    pairs = ((recs.get("allreduce_internode") or {}).get("data") or {}).get(
        "figures", {}).get("pairs", [])
    if pairs:
        parts.append(Chart("allreduce: this node's pairs", "pair", "GB/s").line(
            "pairs", [(i, p["busbw_gbps"]) for i, p in enumerate(pairs)], dots=True)
            .svg(360, 180) + "<p class='msg'>" + html.escape(
            "; ".join(f"{'+'.join(p['nodes'])}: {p['busbw_gbps']:.3f} GB/s" for p in pairs))
            + "</p>")
    return "".join(parts) + "</div>"
