"""What the ledger remembers of each node, priced: failures per node-day and what they cost
a synchronous job, repeat offenders, and a relative speed that falls run after run.

Read from the ledger when a run ends (before its own verdicts go in), with this run's
speeds as the newest point. The failure cost follows Meta's account of repeat offenders
(arXiv 2410.21680): a node that fails p times a node-day interrupts a job it is in p
times a day, and each interruption costs all N of the job's nodes the restart and, on
average, half a checkpoint interval of work: N x p x (restart + checkpoint / 2)
node-hours a day, stated here per hour of the job beside goodput.py's N x (1 - s).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from burnin.core.safefiles import write_atomically
from burnin.figures.goodput import break_even
from burnin.model.nodes import GoodputSettings, QuarantineSettings

DAY = 86400.0
TREND_DAYS = 60.0      # the runs a trend is fitted to: the last two months...
TREND_POINTS = 30      # ...and at most this many of them
TREND_MIN_POINTS = 4   # fewer runs say nothing steady
TREND_MIN_DAYS = 2.0   # nor do runs of one afternoon
TREND_MIN_FIT = 0.5    # "steadily": the fitted line explains half the runs' variance
KEPT = "history.json"  # beside the run's junit.xml: what the page draws of the ledger


@dataclass(frozen=True)
class Trend:
    """A least-squares line through a node's relative speeds over time."""

    per_week: float  # change of relative speed per week (negative: falling)
    runs: int
    days: float
    first: float
    last: float
    fit: float       # r squared

    def steady_fall(self, drop_per_week: float) -> bool:
        return (self.runs >= TREND_MIN_POINTS and self.days >= TREND_MIN_DAYS
                and self.per_week <= -drop_per_week and self.fit >= TREND_MIN_FIT)


def trend(points: list[tuple[float, float]]) -> Trend | None:
    """The line through (time s, speed) points; None under two distinct times."""
    if len(points) < 2:
        return None
    days = [t / DAY for t, _ in points]
    speeds = [s for _, s in points]
    mx, my = statistics.fmean(days), statistics.fmean(speeds)
    sxx = sum((x - mx) ** 2 for x in days)
    if sxx <= 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in zip(days, speeds, strict=True))
    syy = sum((y - my) ** 2 for y in speeds)
    slope = sxy / sxx
    fit = (sxy * sxy) / (sxx * syy) if syy > 0 else 0.0
    return Trend(slope * 7, len(points), max(days) - min(days), speeds[0], speeds[-1], fit)


@dataclass(frozen=True)
class NodeTrack:
    quarantines: int = 0             # times quarantined in the window
    node_days: float = 0.0           # since its first kept run in the window
    trend: Trend | None = None
    warning: str = ""

    @property
    def per_day(self) -> float | None:
        """Failures per node-day; None before the ledger kept any run of the node (one
        day at least: a node seen an hour ago with one failure is not 24 a day)."""
        return self.quarantines / max(self.node_days, 1.0) if self.node_days > 0 else None


@dataclass(frozen=True)
class FleetTrack:
    job_nodes: int
    goodput: GoodputSettings
    window_days: float
    nodes: dict[str, NodeTrack] = field(default_factory=dict)
    repeat_offenders: dict[str, int] = field(default_factory=dict)  # node: times
    repeat_times: int = 3

    @property
    def quarantines(self) -> int:
        return sum(t.quarantines for t in self.nodes.values())

    @property
    def node_days(self) -> float:
        return sum(t.node_days for t in self.nodes.values())

    @property
    def per_1000_node_days(self) -> float | None:
        days = self.node_days
        return 1000 * self.quarantines / days if days > 0 else None

    def failure_cost(self, node: str) -> float | None:
        """Node-hours a job of job_nodes loses per hour of the job to this node's failures:
        N x p x (restart + checkpoint / 2), p per hour."""
        track = self.nodes.get(node)
        p = track.per_day if track else None
        if p is None:
            return None
        hours = (self.goodput.restart_minutes + self.goodput.checkpoint_minutes / 2) / 60
        return self.job_nodes * p / 24 * hours

    def properties(self, node: str) -> dict[str, str]:
        """The node's junit.xml properties of what the ledger remembers."""
        track, out = self.nodes.get(node), dict[str, str]()
        if track is None:
            return out
        if track.per_day is not None:
            out["failures_per_node_day"] = f"{track.per_day:.4f}"
            out["failures_counted"] = (f"{track.quarantines} quarantine(s) in "
                                       f"{track.node_days:.1f} node-days (last "
                                       f"{self.window_days:g} days)")
            out["goodput_failure_cost_node_hours_per_hour"] = f"{self.failure_cost(node):.4f}"
        if track.trend is not None:
            out["speed_trend_per_week"] = f"{track.trend.per_week:+.4f}"
        if track.warning:
            out["speed_warning"] = track.warning
        if node in self.repeat_offenders:
            out["repeat_offender"] = (f"quarantined {self.repeat_offenders[node]} times in "
                                      f"{self.window_days:g} days")
        return out

    def save(self, run_dir: Path) -> None:
        write_atomically(run_dir / KEPT, json.dumps(asdict(self), sort_keys=True))


def warning_of(t: Trend | None, drop_per_week: float, job_nodes: int) -> str:
    if t is None or not t.steady_fall(drop_per_week):
        return ""
    floor = break_even(job_nodes)
    text = (f"relative speed falling {-t.per_week:.1%} a week over {t.runs} runs in "
            f"{t.days:.0f} days ({t.first:.3f} to {t.last:.3f})")
    if t.last <= floor:
        return text + f"; below {floor:.3f}, the break-even of a {job_nodes}-node job"
    weeks = (t.last - floor) / -t.per_week
    return text + (f"; at this pace it reaches {floor:.3f}, the break-even of a "
                   f"{job_nodes}-node job, in about {weeks * 7:.0f} days")


def of_ledger(ledger, nodes: list[str], speeds: dict[str, float], job_nodes: int,
              goodput: GoodputSettings, q: QuarantineSettings, now: float) -> FleetTrack:
    """The run's nodes as the ledger remembers them, `speeds` (this run's) the newest
    point of each trend; the fleet's rate counts every node with a run in the window."""
    since = now - q.repeat_days * DAY
    exposure = ledger.exposure_since(since)
    history = ledger.speeds_since(now - min(TREND_DAYS, q.keep_runs_days) * DAY)
    tracks: dict[str, NodeTrack] = {}
    for node, (first, times) in exposure.items():
        tracks[node] = NodeTrack(times, (now - first) / DAY)
    for node in nodes:
        points = history.get(node, [])[-(TREND_POINTS - 1):]
        if node in speeds:
            points = [*points, (now, speeds[node])]
        t = trend(points)
        base = tracks.get(node, NodeTrack())
        tracks[node] = NodeTrack(base.quarantines, base.node_days, t,
                                 warning_of(t, goodput.speed_drop_per_week, job_nodes))
    return FleetTrack(job_nodes, goodput, q.repeat_days, tracks,
                      ledger.repeat_offenders(q.repeat_times, q.repeat_days, now),
                      q.repeat_times)


def load(run_dir: Path) -> dict | None:
    """The run's history.json as the page reads it; None for a run without one."""
    path = run_dir / KEPT
    return json.loads(path.read_text()) if path.exists() else None
