"""Replace before it fails: from the ledger's kept runs, the trend of each node's wear
counters (burnin/figures/wear.py) and relative speed, projected to the day it reaches
its limit; a node whose trend reaches one within the horizon, or has reached it, is on
the "replace soon" list, ranked by that day.

The limits, the horizon and what makes a trend steady are data:
burnin/data/replace_soon.yaml, each limit with its source (NVIDIA's memory error
management pages for row remapping and page retirement; burnin's own default, said as
such, where NVIDIA gives no number).

Read by `burnin history --watch` (burnin/cli/ledger.py), and at the end of a run, with
that run's counters as the newest point, for summary.html and metrics.prom
(replace_soon.json beside junit.xml).

Layer 6 (burnin/figures): imports core, model, ledger and checks below it.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import yaml

from burnin.core.safefiles import write_atomically
from burnin.figures import wear as wear_counters
from burnin.figures.track_record import trend

DAY = 86400.0
KEPT = "replace_soon.json"  # beside the run's junit.xml: what the page and metrics read
SPEED = "relative_speed"    # the one counter read from the kept runs' speed, not wear
KINDS = ("lifetime", "since_reset", "level")


@dataclass(frozen=True)
class Limit:
    counter: str
    what: str
    kind: str
    limit: float
    source: str
    worse: str = "higher"

    def reached(self, value: float) -> bool:
        return value >= self.limit if self.worse == "higher" else value <= self.limit


@dataclass(frozen=True)
class Rules:
    limits: dict[str, Limit]
    horizon_days: float
    window_days: float
    max_points: int
    min_points: int
    min_days: float
    min_fit: float


def rules_from(values: dict) -> Rules:
    """Rules from replace_soon.yaml's mapping; ValueError naming what is wrong."""
    limits = {}
    for name, c in (values.get("counters") or {}).items():
        if c.get("kind") not in KINDS or c.get("worse", "higher") not in ("higher", "lower"):
            raise ValueError(f"replace_soon.yaml: {name}: kind one of {', '.join(KINDS)}, "
                             f"worse higher or lower")
        limits[name] = Limit(name, str(c["what"]), c["kind"], float(c["limit"]),
                             " ".join(str(c["source"]).split()), c.get("worse", "higher"))
    return Rules(limits, float(values["horizon_days"]), float(values["window_days"]),
                 int(values["max_points"]), int(values["min_points"]),
                 float(values["min_days"]), float(values["min_fit"]))


@functools.cache
def rules() -> Rules:
    """The shipped rules (burnin/data/replace_soon.yaml)."""
    text = resources.files("burnin").joinpath("data").joinpath("replace_soon.yaml") \
        .read_text("utf-8")
    return rules_from(yaml.safe_load(text))


@dataclass(frozen=True)
class Finding:
    """One counter of one device that reaches, or has reached, its limit."""

    node: str
    counter: str
    device: str           # a GPU's index, or "node"
    value: float          # now (for a since_reset counter: its sum across resets)
    limit: float
    per_day: float        # the fitted trend, toward the limit (0 when it has reached it)
    projected: float      # when it reaches the limit (epoch s); reached: when first seen
    reached: bool
    runs: int
    what: str
    source: str

    @property
    def reason(self) -> str:
        where = "" if self.device == "node" else f"GPU {self.device}: "
        if self.reached:
            return (f"{where}{self.what} {_num(self.value)}, at or past the limit of "
                    f"{_num(self.limit)} since {_day(self.projected)}")
        sign = "+" if self.per_day > 0 else "-"
        return (f"{where}{self.what} {_num(self.value)}, moving {sign}"
                f"{_num(abs(self.per_day))} a day over {self.runs} runs: reaches the limit "
                f"of {_num(self.limit)} about {_day(self.projected)}")


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _day(t: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(t))


Point = tuple[float, dict, float | None]  # (time, kept figures, relative speed)


def series(points: list[Point]) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """{(counter, device): [(time, value)]} of a node's kept runs, oldest first. A counter
    a run read but kept nothing of reads as zero there; one it did not read (a check
    that did not run, an older probe) is no point."""
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    devices: dict[str, set[str]] = {}
    kept = [wear_counters.kept(figures) for _, figures, _ in points]
    for wear, _ in kept:
        for counter, per in wear.items():
            devices.setdefault(counter, set()).update(per)
    for (t, _, speed), (wear, read) in zip(points, kept, strict=True):
        for counter in read | set(wear):
            for device in devices.get(counter, ()):
                out.setdefault((counter, device), []).append(
                    (t, wear.get(counter, {}).get(device, 0.0)))
        if isinstance(speed, (int, float)) and not isinstance(speed, bool):
            out.setdefault((SPEED, "node"), []).append((t, float(speed)))
    return out


def summed(values: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """A counter that resets (a driver reload, a reboot) as the sum of its increases: a
    fall is a reset, after which the new value is all increase."""
    out, total, last = [], 0.0, None
    for t, v in values:
        total += v if last is None or v < last else v - last
        last = v
        out.append((t, total))
    return out


def project(node: str, counter: str, device: str, values: list[tuple[float, float]],
            limit: Limit, r: Rules, now: float) -> Finding | None:
    """The counter's Finding when it has reached its limit or its steady trend reaches
    it within the horizon; None otherwise."""
    pts = summed(values) if limit.kind == "since_reset" else list(values)
    if not pts:
        return None
    current = pts[-1][1]
    if limit.reached(current):
        since = next((t for t, v in pts if limit.reached(v)), pts[-1][0])
        return Finding(node, counter, device, current, limit.limit, 0.0, since, True,
                       len(pts), limit.what, limit.source)
    if all(v == current for _, v in pts):
        return None  # flat, however high: no trend (most of a fleet's counters, most runs)
    line = trend(pts)
    if line is None or len(pts) < r.min_points or line.days < r.min_days \
            or line.fit < r.min_fit:
        return None
    per_day = line.per_week / 7
    toward = per_day if limit.worse == "higher" else -per_day
    if toward <= 0:
        return None
    days = abs(limit.limit - current) / toward
    if days > r.horizon_days:
        return None
    return Finding(node, counter, device, current, limit.limit, per_day,
                   max(now, pts[-1][0]) + days * DAY, False, len(pts), limit.what,
                   limit.source)


def of_node(node: str, points: list[Point], now: float, r: Rules | None = None,
            speed_floor: float | None = None) -> list[Finding]:
    """The node's findings, soonest first, from its kept runs (oldest first) within the
    window."""
    r = r or rules()
    recent = sorted((p for p in points if p[0] >= now - r.window_days * DAY),
                    key=lambda p: p[0])[-r.max_points:]
    out = []
    for (counter, device), values in series(recent).items():
        limit = r.limits.get(counter)
        if limit is None:
            continue
        if counter == SPEED and speed_floor is not None:
            limit = Limit(counter, limit.what, limit.kind, speed_floor,
                          f"the break-even of the run's job size ({speed_floor:.3f})",
                          limit.worse)
        found = project(node, counter, device, values, limit, r, now)
        if found:
            out.append(found)
    return sorted(out, key=lambda f: (f.projected, f.counter, f.device))


def ranked(points_by_node: dict[str, list[Point]], now: float, r: Rules | None = None,
           speed_floor: float | None = None) -> list[list[Finding]]:
    """The replace-soon list: each listed node's findings, nodes ranked by their soonest."""
    nodes = [f for node, pts in points_by_node.items()
             if (f := of_node(node, pts, now, r, speed_floor))]
    return sorted(nodes, key=lambda fs: (fs[0].projected, fs[0].node))


def of_ledger(ledger, now: float, nodes: set[str] | None = None,
              current: dict[str, Point] | None = None, speed_floor: float | None = None
              ) -> list[list[Finding]]:
    """The list from the ledger's kept runs (of `nodes`, or every node), each node's
    `current` point (a run's own, before the ledger holds it) the newest."""
    r = rules()
    current = dict(current or {})
    out: list[list[Finding]] = []

    def visit(node: str, points: list[Point]) -> None:
        mine = [*points, current.pop(node)] if node in current else points
        found = of_node(node, mine, now, r, speed_floor)
        if found:
            out.append(found)
    ledger.each_kept_since(now - r.window_days * DAY, visit, nodes)
    for node in list(current):  # nodes the ledger kept no run of (visit takes theirs)
        if nodes is None or node in nodes:
            visit(node, [])
    return sorted(out, key=lambda fs: (fs[0].projected, fs[0].node))


def save(run_dir: Path, listed: list[list[Finding]]) -> None:
    write_atomically(run_dir / KEPT, json.dumps([[asdict(f) for f in fs] for fs in listed]))


def load(run_dir: Path) -> list[list[Finding]] | None:
    """The run's replace_soon.json; None for a run without one (or one unreadable)."""
    try:
        raw = json.loads((run_dir / KEPT).read_text("utf-8"))
        return [[Finding(**f) for f in fs] for fs in raw]
    except (OSError, ValueError, TypeError):
        return None
