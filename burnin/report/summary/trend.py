"""Trend: each node's key figures (burnin/figures/record_figures.py, the ones metrics.prom
and `burnin compare` use) across the last runs of the same cluster found beside this one under
reports/, as sparklines; a figure that moved by more than the compare threshold since
the previous run is marked, as `burnin compare PREVIOUS THIS` would list it."""

from __future__ import annotations

import calendar
import functools
import json
import math
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from burnin.core.safefiles import write_atomically
from burnin.figures.record_figures import Figure, measure
from burnin.report.metrics import BASE_UNITS, UUID_LABEL
from burnin.report.summary.charts import fmt
from burnin.report.summary.model import natural_key, safe_figures

RUNS = 6              # this run and up to five before it
THRESHOLD = 0.1       # burnin compare's default
MAX_MOVERS = 30       # rows of the fleet's "moved" table
STAMP = re.compile(r"^(\d{8}T\d{6}Z)")

Key = tuple[str, tuple]          # (metric, labels) of a Figure


@dataclass
class Trend:
    """Per node and figure, its value in each run (oldest first, this run last; None
    where a run lacked it)."""

    runs: list[str]
    values: dict[str, dict[Key, list[float | None]]] = field(default_factory=dict)
    threshold: float = THRESHOLD
    _moved: dict[str, list] = field(default_factory=dict, repr=False)

    def moved(self, node: str) -> list[tuple[Key, float, float, float]]:
        """(figure, previous, now, relative change) past the threshold, largest first."""
        if node not in self._moved:  # the banner, the table, the section each ask
            self._moved[node] = self._moves(node)
        return self._moved[node]

    def _moves(self, node: str) -> list[tuple[Key, float, float, float]]:
        out = []
        for key, series in self.values.get(node, {}).items():
            now = series[-1]
            before = [v for v in series[:-1] if v is not None]
            if now is None or not before:
                continue
            old = before[-1]
            change = (now - old) / old if old else (0.0 if now == old else float("inf"))
            if abs(change) > self.threshold:
                out.append((key, old, now, change))
        return sorted(out, key=lambda m: -abs(m[3]))


def when(run_dir: Path) -> float:
    """When a run happened: its run id's timestamp, else its junit.xml's mtime."""
    m = STAMP.match(run_dir.name)
    if m:
        return calendar.timegm(time.strptime(m.group(1), "%Y%m%dT%H%M%SZ"))
    try:
        return (run_dir / "junit.xml").stat().st_mtime
    except OSError:
        return 0.0


def _cluster(junit: Path) -> str | None:
    try:
        for _, el in ET.iterparse(junit):
            if el.tag == "property" and el.get("name") == "cluster":
                return el.get("value")
    except (ET.ParseError, OSError):
        return None
    return None


def earlier_runs(run_dir: Path, cluster: str, limit: int = RUNS - 1) -> list[Path]:
    """Sibling run directories of the same cluster from before this run, oldest first."""
    here = run_dir.resolve()
    mine = when(here)
    try:
        siblings = [p for p in here.parent.iterdir() if p.is_dir() and not p.is_symlink()
                    and p.resolve() != here and (p / "junit.xml").is_file()
                    and (p / "results.jsonl").is_file()]
    except OSError:
        return []
    found: list[Path] = []
    for p in sorted(siblings, key=when, reverse=True):
        if len(found) >= limit:
            break
        if when(p) < mine and _cluster(p / "junit.xml") == cluster:
            found.append(p)
    return found[::-1]


# What publish drew, by column: {"keys": [[metric, labels], ...], "nodes": {node: [value
# or null per key]}}: a fleet's nodes share their few dozen figure names.
FIGURES = ".figures.json"


def save(run_dir: Path, figures: dict[str, list[Figure]]) -> None:
    """This run's key figures, for the trend of the runs after it (see _figures_of)."""
    index: dict[Key, int] = {}
    rows = {}
    for node, figs in figures.items():
        row: list[float | None] = [None] * len(index)
        for f in figs:
            i = index.setdefault((f.metric, f.labels), len(index))
            row += [None] * (i + 1 - len(row))
            row[i] = f.value
        rows[node] = row
    write_atomically(run_dir / FIGURES, json.dumps(
        {"keys": list(index), "nodes": rows}, separators=(",", ":"), allow_nan=False))


def _from_saved(path: Path) -> dict[str, dict[Key, float]]:
    saved = json.loads(path.read_text(encoding="utf-8"))
    keys = [(m, tuple(tuple(p) for p in labels)) for m, labels in saved["keys"]]
    # json.loads makes no subclass of int but bool: a type check is the isinstance one.
    return {node: {k: v for k, v in zip(keys, row, strict=False) if type(v) in _NUMBERS}
            for node, row in saved["nodes"].items()}


_NUMBERS = frozenset((int, float))


def _figures_of(run: Path) -> dict[str, dict[Key, float]]:
    """One earlier run's key figures: from the figures its publish saved (FIGURES), else
    from its metrics.prom, which publish wrote from key_figures, when it is there; else
    from results.jsonl through key_figures, read line by line (a fleet's results.jsonl
    holds every telemetry sample: parsing it costs seconds per thousand nodes,
    metrics.prom a second per thousand, the saved figures a tenth of one)."""
    prom, jsonl, saved = run / "metrics.prom", run / "results.jsonl", run / FIGURES
    newer = jsonl.stat().st_mtime
    if saved.is_file() and saved.stat().st_mtime >= newer:
        try:
            return _from_saved(saved)
        except (ValueError, TypeError, AttributeError):
            pass  # a doctored file: metrics.prom or results.jsonl say the same
    if prom.is_file() and prom.stat().st_mtime >= newer:
        return _from_prom(prom)
    out: dict[str, dict[Key, float]] = {}
    with open(jsonl, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if isinstance(r, dict) and isinstance(r.get("node"), str):
                for fig in safe_figures(r) or []:
                    out.setdefault(r["node"], {})[(fig.metric, fig.labels)] = fig.value
    return out


SAMPLE = re.compile(r"^burnin_(\w+)\{(.*)\} (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
ESCAPED = re.compile(r"\\(.)")
RUN_WIDE = ("check_passed", "check_outcome", "run_info", "run_timestamp_seconds",
            "last_run_timestamp_seconds", "node_quarantined")


def _unescape(m: re.Match) -> str:
    return "\n" if m.group(1) == "n" else m.group(1)


def _figure_metric(name: str) -> tuple[str, float] | None:
    """A metrics.prom family's name, in base units, back to its Figure's metric and the
    factor metrics.render multiplied by (metrics.BASE_UNITS read backwards)."""
    for unit, base, factor, _ in BASE_UNITS:
        if name.endswith(base):
            return name[:-len(base)] + unit, factor
    return None


def _from_prom(path: Path) -> dict[str, dict[Key, float]]:
    """metrics.prom back into key figures: cluster, node, then the Figure's labels in
    order, then the GPU's UUID where it has one (metrics.render writes them so), values
    in base units."""
    out: dict[str, dict[Key, float]] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = SAMPLE.match(line.rstrip("\n"))
            if not m or m.group(1) in RUN_WIDE:
                continue
            labels = [(k, ESCAPED.sub(_unescape, v) if "\\" in v else v)
                      for k, v in LABEL.findall(m.group(2))]
            figure = _figure_metric(m.group(1))
            if len(labels) < 2 or labels[1][0] != "node" or figure is None:
                continue
            try:
                value = float(m.group(3)) / figure[1]
            except ValueError:
                continue
            key = tuple(kv for kv in labels[2:] if kv[0] != UUID_LABEL)
            out.setdefault(labels[1][1], {})[(figure[0], key)] = value
    return out


def load(run_dir: Path, cluster: str, current: dict[str, list[Figure]]) -> Trend | None:
    """The trend over this run and the earlier ones, or None when there are none."""
    earlier = earlier_runs(run_dir, cluster)
    if not earlier:
        return None
    past = [_figures_of(p) for p in earlier]
    trend = Trend([p.name for p in earlier] + [run_dir.resolve().name])
    for node, figs in current.items():
        keys = [(fig.metric, fig.labels) for fig in figs]
        # Column by column (each run's values of this node's keys, then this run's), the
        # rows zipped: no Python loop per figure (450,000 at 10,000 nodes).
        columns = [list(map(run.get(node, {}).get, keys)) for run in past]
        columns.append([fig.value for fig in figs])
        rows = map(list, zip(*columns, strict=True))
        trend.values.setdefault(node, {}).update(zip(keys, rows, strict=True))
    return trend


@functools.lru_cache(maxsize=4096)  # keys repeat on every node of a fleet
def figure_name(key: Key) -> str:
    metric, labels = key
    m = measure(metric)
    if m is not None:
        return m.label_of(labels)
    return f"{metric} " + " ".join(f"{k}={v}" for k, v in labels)


def summary_line(trend: Trend | None, nodes: list[str]) -> str:
    if trend is None:
        return ""
    moved = {n: trend.moved(n) for n in nodes}
    count = sum(len(m) for m in moved.values())
    where = sum(1 for m in moved.values() if m)
    return (f"Compared with {len(trend.runs) - 1} earlier run{'s' * (len(trend.runs) > 2)} of "
            f"this cluster: {count} figure{'s' * (count != 1)} on {where} node"
            f"{'s' * (where != 1)} moved by more than {trend.threshold:.0%} since the "
            "previous one" + (" (<a href='#moved'>list</a>)." if count else "."))


def movers(trend: Trend | None, nodes: list[str]) -> str:
    """The fleet's largest moves since the previous run, each linked to its node."""
    if trend is None:
        return ""
    rows = sorted(((n, *m) for n in nodes for m in trend.moved(n)),
                  key=lambda r: (-abs(r[4]), natural_key(r[0])))
    if not rows:
        return ""
    body = "".join(
        f"<tr><td><a href='#n-{escape(n)}'>{escape(n)}</a></td><td>{escape(figure_name(k))}"
        f"</td><td class='r'>{fmt(old)}</td><td class='r'>{fmt(now)}</td>"
        f"<td class='r fail'>{change:+.1%}</td></tr>" for n, k, old, now, change in
        rows[:MAX_MOVERS])
    more = f"<p class='dim'>and {len(rows) - MAX_MOVERS} more.</p>" if len(rows) > MAX_MOVERS \
        else ""
    return (f"<h2 id='moved'>Moved since the previous run (more than {trend.threshold:.0%})</h2>"
            f"<table class='figs'><thead><tr><th>node</th><th>figure</th><th>previous</th>"
            f"<th>this run</th><th>change</th></tr></thead><tbody>{body}</tbody></table>{more}")


@functools.lru_cache(maxsize=4096)
def family(key: Key) -> tuple[str, str]:
    """(the family a figure folds into on a node's trend, its worst end: low or high)."""
    metric, labels = key
    m = measure(metric)
    return (m.family_of(labels), m.worst) if m is not None else (metric, "low")


def families(values: dict[Key, list[float | None]]) -> dict[str, list[float | None]]:
    """A node's figures folded per family (burn TFLOPS, hottest °C, storage read, ...):
    per run the worst device's value, the slowest or the hottest."""
    keys = tuple(values)
    try:
        plan = _plan(keys)
    except TypeError:  # a label value that cannot be hashed
        plan = _plan.__wrapped__(keys)
    series = list(values.values())
    out = {}
    for name, pick, members in plan:  # per run (a column), its worst device
        columns = ([v for v in column if v is not None]
                   for column in zip(*(series[i] for i in members), strict=True))
        out[name] = [pick(vs) if vs else None for vs in columns]
    return out


Pick = Callable[[list[float]], float]  # how a family's worst value of a run is picked


@functools.lru_cache(maxsize=256)  # every node of a fleet has the same figures, in order
def _plan(keys: tuple[Key, ...]) -> tuple[tuple[str, Pick, tuple[int, ...]], ...]:
    """(family, how its worst is picked, the places of its figures in `keys`), by name."""
    members: dict[str, list[int]] = {}
    worst: dict[str, str] = {}
    for i, key in enumerate(keys):
        name, end = family(key)
        worst[name] = end
        members.setdefault(name, []).append(i)
    pick: dict[str, Pick] = {"high": max, "low": min}
    return tuple((name, pick[worst[name]], tuple(members[name])) for name in sorted(members))


def shown(v: float) -> float:
    """A value as fmt() shows it, as a number (float(fmt(v)) without the text: a
    fleet's sparklines hold 200,000 of them): three significant digits, whole from 100."""
    a = abs(v)
    if not math.isfinite(v):
        return v
    if a >= 100 or v == int(v):
        return float(round(v)) if v else v  # -0.0 stays itself, as fmt writes it
    if a >= 10:
        return round(v, 1)
    if a >= 1:
        return round(v, 2)
    return float(f"{v:.3g}")


def node_trend(view) -> list:
    """A node's figures across the runs: a sparkline per family, the moves listed."""
    trend: Trend | None = view.report.trend
    if trend is None or view.node not in trend.values:
        return []
    moved = trend.moved(view.node)
    hot = {family(k)[0] for k, *_ in moved}  # families with a moved figure: their point red
    sparks = [[name, [None if v is None else shown(v) for v in series], int(name in hot)]
              for name, series in families(trend.values[view.node]).items()]
    out: list = [["note", f"Over the last {len(trend.runs)} runs of this cluster, oldest first "
                          f"(this run last); {len(moved)} figure{'s' * (len(moved) != 1)} moved by"
                          f" more than {trend.threshold:.0%} since the previous run.",
                  "fail" if moved else "dim"], ["sparks", sparks]]
    if moved:
        out.append(["table", ["figure", "previous", "this run", "change"],
                    [[figure_name(k), fmt(old), fmt(now), [f"{change:+.1%}", "fail"]]
                     for k, old, now, change in moved[:40]]])
    return out
