"""The page's goodput and ledger part: the fleet's failures per 1,000 node-days, its repeat
offenders, nodes whose speed falls run after run, and the fleet's relative speeds sorted,
with the pace a synchronous job of N nodes would run at (burnin/figures/goodput.py,
burnin/figures/track_record.py; the run's history.json and junit.xml's speeds)."""

from __future__ import annotations

from html import escape

from burnin.figures.goodput import break_even
from burnin.report.summary.charts import BAD, MEDIAN, svg
from burnin.report.summary.model import PageRun, natural_key

W, H, PAD_L, PAD_B, PAD_T = 560, 220, 46, 28, 22
CHART_POINTS = 400  # a 560-pixel line shows no more; the slowest node is always kept
LISTED = 50         # nodes named in a list; the rest are counted (junit.xml names them all)


def pace(speeds: list[float], job_nodes: int) -> float | None:
    """The pace of a job of `job_nodes` on the fleet's fastest nodes: its slowest member's
    speed (the whole fleet's slowest when the job needs more nodes than there are)."""
    if not speeds or job_nodes < 1:
        return None
    ranked = sorted(speeds, reverse=True)
    return ranked[min(job_nodes, len(ranked)) - 1]


def sorted_speeds_chart(speeds: dict[str, tuple[float, str]], job_nodes: int) -> str:
    """Every node's relative speed, fastest first, a line with the pace and break-even of a
    job of `job_nodes` nodes across it."""
    ranked = sorted(((s, n) for n, (s, _) in speeds.items()), key=lambda x: (-x[0], x[1]))
    if len(ranked) < 2:
        return ""
    at = pace([s for s, _ in ranked], job_nodes)
    if at is None:  # a kept history's job of fewer than one node: no pace to draw
        return ""
    even = break_even(job_nodes)
    lo = min(min(s for s, _ in ranked), even, at) - 0.02
    hi = max(max(s for s, _ in ranked), 1.0) + 0.02
    n = len(ranked)
    step = max(1, n // CHART_POINTS)
    picked = [*range(0, n, step)] + ([n - 1] if (n - 1) % step else [])

    def x(i: int) -> float:
        return PAD_L + (W - PAD_L - 8) * (i / max(n - 1, 1))

    def y(v: float) -> float:
        return PAD_T + (H - PAD_T - PAD_B) * (hi - v) / (hi - lo)
    items: list[tuple] = [
        ("line", PAD_L, y(1.0), W - 8, y(1.0), "", MEDIAN, "2 3", "the fleet's median: 1.0"),
        ("line", PAD_L, y(even), W - 8, y(even), "", "#9a6700", "6 3",
         f"break-even of a {job_nodes}-node job: {even:.3f}"),
        ("line", PAD_L, y(at), W - 8, y(at), "", BAD, "",
         f"a {job_nodes}-node job on the fastest nodes runs at {at:.3f}"),
        ("poly", [(x(i), y(ranked[i][0])) for i in picked], "#0969da", 1.5,
         f"{n} nodes' relative speeds, fastest first"),
        ("circle", x(n - 1), y(ranked[-1][0]), 3, BAD,
         f"slowest: {ranked[-1][1]} {ranked[-1][0]:.3f}"),
        ("text", 4, y(hi - 0.02) + 4, f"{hi - 0.02:.2f}", "tick", ""),
        ("text", 4, y(lo + 0.02) + 4, f"{lo + 0.02:.2f}", "tick", ""),
        ("text", PAD_L, H - 8, f"nodes, fastest first (1 to {n})", "tick", ""),
        ("text", PAD_L, 14, f"pace of a {job_nodes}-node job {at:.3f}; break-even "
                            f"{even:.3f}", "tick", BAD),
    ]
    return svg(W, H, "relative speeds sorted, with a job's pace", items)


def _more(count: int) -> str:
    return f" and {count - LISTED} more (junit.xml names each)" if count > LISTED else ""


def render(report: PageRun) -> str:
    """The part, or '' for a run with neither speeds nor a ledger history."""
    kept = report.history or {}
    job_nodes = int(kept.get("job_nodes") or len(report.speeds) or 0)
    nodes = kept.get("nodes", {})
    offenders = kept.get("repeat_offenders", {})
    if not report.speeds and not kept:
        return ""
    lines = []
    quarantines = sum(t.get("quarantines", 0) for t in nodes.values())
    node_days = sum(t.get("node_days", 0.0) for t in nodes.values())
    window = kept.get("window_days")
    if kept and node_days > 0:
        lines.append(f"<p>The fleet's failures: <b>{1000 * quarantines / node_days:.1f} per "
                     f"1,000 node-days</b> ({quarantines} quarantine(s) over "
                     f"{node_days:,.0f} node-days in the ledger, last {window:g} days).</p>")
    elif kept:
        lines.append("<p class='dim'>The ledger holds no earlier run of these nodes: no "
                     "failure rate yet.</p>")
    if offenders:
        ranked = sorted(offenders.items(), key=lambda x: natural_key(x[0]))
        names = ", ".join(f"<a href='#n-{escape(n)}'>{escape(n)}</a> ({times} times)"
                          for n, times in ranked[:LISTED])
        lines.append(f"<p class='fail'>Repeat offenders, quarantined "
                     f"{kept.get('repeat_times', 3)} times or more in {window:g} days "
                     f"(released only by a person): {names}{_more(len(ranked))}</p>")
    warned = sorted(((n, t["warning"]) for n, t in nodes.items() if t.get("warning")),
                    key=lambda x: natural_key(x[0]))
    if warned:
        lines.append(f"<p class='warn'>Speed falling run after run ({len(warned)} "
                     f"node(s)):</p><ul>" + "".join(
                         f"<li><a href='#n-{escape(n)}'>{escape(n)}</a>: {escape(w)}</li>"
                         for n, w in warned[:LISTED]) + f"</ul>{_more(len(warned))}")
    chart = sorted_speeds_chart(report.speeds, job_nodes) if report.speeds else ""
    return ("<h2 id='goodput'>Goodput and the ledger</h2>" + "".join(lines)
            + (f"<div class='charts'>{chart}</div>" if chart else ""))
