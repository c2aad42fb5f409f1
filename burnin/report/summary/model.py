"""The run as summary.html draws it, and the defensive readers every part of the page
uses: a probe record is untrusted input, so a string where a number belongs is skipped
and said, never a traceback that loses the whole page."""

from __future__ import annotations

import functools
import html
import itertools
import math
import re
import statistics
from dataclasses import dataclass, field
from functools import cached_property

from burnin.checks import CHECKS
from burnin.figures.record_figures import Figure, key_figures
from burnin.model.outcome import Outcome

# Which label groups the fleet grid: the first of these a node carries, else the label
# most nodes carry.
GROUP_KEYS = ("rack", "row", "pod", "zone", "switch", "chassis")


@dataclass(frozen=True)
class NodeInfo:
    """What the inventory says about a node (nothing when rendered from a run dir)."""

    name: str
    address: str = ""
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class PageRun:
    """The run as one summary.html draws it: verdicts, records, floors, figures, trend."""

    cluster: str
    run_id: str
    verdicts: dict[str, dict[str, tuple[str, str]]]
    records: dict[str, dict[str, dict]]          # node -> check -> results.jsonl record
    floors: dict[str, dict[str, float]]          # node -> figure family -> its judge's floor
    nodes: dict[str, NodeInfo]
    evidence: set[str]                           # nodes with a nodes/<node>/ folder
    trend: object | None = None                  # trend.Trend, when earlier runs exist
    figures: dict[str, list[Figure]] = field(default_factory=dict)
    checked: dict[str, list[tuple[str, Figure]]] = field(default_factory=dict)  # (check, fig)
    problems: list[str] = field(default_factory=list)
    unreadable: set[int] = field(default_factory=set)  # id() of records with junk figures
    speeds: dict[str, tuple[float, str]] = field(default_factory=dict)  # junit.xml's
    costs: dict[str, float] = field(default_factory=dict)  # node-hours per job-hour, junit's
    history: dict | None = None  # what the ledger remembered at the run's end (track.py)
    replace_soon: list | None = None  # the replace-soon list (burnin/figures/replace_soon.py)
    incidents: list = field(default_factory=list)  # shared causes (burnin/gate/incidents.py)

    @cached_property
    def checks(self) -> list[str]:
        found = {c for v in self.verdicts.values() for c in v}
        found |= {c for recs in self.records.values() for c in recs}
        return sorted(found, key=check_key)

    def failing(self, node: str) -> bool:
        return node in self.failing_nodes

    @cached_property
    def failing_nodes(self) -> frozenset[str]:
        """The nodes with a check not passed, found once: the page asks failing() of
        every node some ten times (225,000 calls at 25,000 nodes)."""
        return frozenset(n for n, v in self.verdicts.items()
                         if any(o != Outcome.PASSED for o, _ in v.values()))

    @cached_property
    def ordered(self) -> list[str]:
        """Failing nodes first, then the rest, each in natural order (g2 before g10)."""
        names = set(self.verdicts) | set(self.records)
        return sorted(names, key=lambda n: (not self.failing(n), natural_key(n)))

    def info(self, node: str) -> NodeInfo:
        return self.nodes.get(node) or NodeInfo(node)


def build(cluster: str, run_id: str, verdicts: dict, records: list[dict], floors: dict | None,
          nodes: dict[str, NodeInfo] | None, evidence: set[str], trend=None) -> PageRun:
    by_node: dict[str, dict[str, dict]] = {}
    figures: dict[str, list[Figure]] = {}
    checked: dict[str, list[tuple[str, Figure]]] = {}
    problems: list[str] = []
    unreadable: set[int] = set()
    for r in records:
        if not isinstance(r, dict) or not isinstance(r.get("node"), str) \
                or not isinstance(r.get("check"), str):
            problems.append("a results.jsonl line without node and check was left out")
            unreadable.add(id(r))
            continue
        by_node.setdefault(r["node"], {})[r["check"]] = r
        try:
            raw = key_figures(r)
        except Exception:  # a record too malformed to read any figure from
            raw = None
        figs = [f for f in raw or [] if _finite(f.value)]
        if raw is None or len(figs) < len(raw):
            unreadable.add(id(r))
            problems.append(f"{r['node']} {r['check']}: figures that are not numbers, left "
                            "out of the charts (and the record out of metrics.prom)")
        figures.setdefault(r["node"], []).extend(figs)
        checked.setdefault(r["node"], []).extend(zip(itertools.repeat(r["check"]), figs))
    return PageRun(cluster, run_id, verdicts, by_node, dict(floors or {}), dict(nodes or {}),
                  evidence, trend, figures, checked, problems, unreadable)


def safe_figures(record: dict) -> list[Figure] | None:
    """key_figures of a record, with the malformed ones (a string for a number) dropped;
    None when the record cannot be read at all."""
    try:
        figs = key_figures(record)
    except Exception:
        return None
    return [f for f in figs if num(f.value) is not None]


def _finite(v) -> bool:
    """num(v) is not None, without a call for the plain floats and ints of 450,000
    figures (v - v is 0 for a finite float, NaN for inf and NaN)."""
    t = type(v)
    return t is int or (v - v == 0.0 if t is float else num(v) is not None)


def num(v) -> float | None:
    """A finite number, or None for anything else (strings, None, booleans, NaN)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def mapping(v) -> dict:
    return v if isinstance(v, dict) else {}


def seq(v) -> list:
    return v if isinstance(v, list) else []


def data_of(record: dict | None) -> dict:
    """The probe document of a record that measured something, else {}."""
    if not isinstance(record, dict) or not record.get("ok"):
        return {}
    return mapping(record.get("data"))


@functools.lru_cache(maxsize=1 << 16)  # a fleet's names, sorted again by every part
def natural_key(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def check_key(check: str) -> tuple:
    """Where a check stands on the page: its Check.page_order, then its name; a check
    burnin does not know (an old results.jsonl) after every known one."""
    spec = CHECKS.get(check)
    return (0, spec.page_order, check) if spec is not None else (1, 0, check)


def group_key(nodes: dict[str, NodeInfo]) -> str | None:
    """The label the fleet grid groups by, or None (no inventory, or no labels)."""
    counts: dict[str, int] = {}
    for info in nodes.values():
        for k in info.labels:
            counts[k] = counts.get(k, 0) + 1
    for k in GROUP_KEYS:
        if k in counts:
            return k
    return max(sorted(counts), key=lambda k: counts[k]) if counts else None


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def floor_of(report: PageRun, node: str, family: str) -> float | None:
    """The floor the node's judge held its `family` figures to (Verdict.floors), or None."""
    return num(mapping(report.floors.get(node)).get(family))


def floors_over(report: PageRun, family: str, nodes) -> list[tuple[float, str]]:
    """(floor, its name) for each distinct floor the judges held these nodes' `family`
    figures to: one line where they share it, else one per floor, named by its nodes (a
    node group's own floor beside the inventory's)."""
    by_value: dict[float, list[str]] = {}
    for node in sorted(set(nodes), key=natural_key):
        v = floor_of(report, node, family)
        if v is not None:
            by_value.setdefault(v, []).append(node)
    if len(by_value) == 1:
        return [(next(iter(by_value)), "floor")]
    return [(v, f"floor of {ns[0]}" if len(ns) == 1 else f"floor of {len(ns)} nodes")
            for v, ns in sorted(by_value.items())]


def guarded(what: str, fn, *args) -> str:
    """One part of the page: drawn, or a line saying what could not be drawn and why."""
    try:
        return fn(*args)
    except Exception as e:  # a malformed record costs its own section, nothing more
        return (f"<p class='warn'>{html.escape(what)}: could not draw this part: "
                f"{html.escape(type(e).__name__)}: {html.escape(str(e)[:200])}</p>")
