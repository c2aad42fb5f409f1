"""What a run publishes after junit.xml: every report a writer of WRITERS makes, in order.

publish() reads what the writers share (the judges' floors, results.jsonl, the relative
speeds) once, then runs each writer on its own: one that fails (a node's record of an
unexpected shape, a full disk) is named in the returned problems, its fallback is tried,
and the others are still made; nothing here can stop a run or its junit.xml. A new
report is a function of a Published and a ReportWriter appended to WRITERS: the plugin's
end of a run and `burnin report RUN_DIR` both publish through this list
(tests/test_new_report.py adds one in a test); one from outside the repository is an
installed distribution's entry point, appended after these (burnin/extensions.py).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from html import escape
from pathlib import Path
from typing import Any

from burnin.core.safefiles import write_atomically
from burnin.model.incident import Incident
from burnin.model.nodes import Node
from burnin.model.outcome import Outcome
from burnin.report import incidents as incidents_report
from burnin.report.junit import junit_speeds

# The writers' own modules (the page's, metrics.prom's) are imported when a run publishes,
# not when the plugin loads: a pytest run that collects no burnin check never needs them.

FLOORS_KEPT = ".floors.json"  # {node: {figure family: floor}}, as the run's judges stated
STAGING = ".evidence-writing"  # evidence files are made here, then renamed into nodes/


@dataclass
class Published:
    """One publish: the run's verdicts and what the writers share, filled in as they go
    (the evidence writer's bundles are linked from the page; records the page could not
    read are left out of metrics.prom)."""

    run_dir: Path
    cluster: str
    run_id: str
    verdicts: dict[str, dict[str, tuple[str, str]]]
    floors: dict[str, dict[str, float]]
    quarantined: dict[str, bool] | None
    nodes: list[Node]
    records: list[dict[str, Any]] = field(default_factory=list)
    by_node: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    speeds: dict[str, tuple[float, str]] = field(default_factory=dict)
    costs: dict[str, float] = field(default_factory=dict)  # node-hours per job-hour, junit's
    incidents: list[Incident] = field(default_factory=list)  # shared causes, page and metrics
    bundles: set[str] = field(default_factory=set)
    # Failing nodes drawn from their figures (beyond page.WHOLE_SECTIONS of them): their
    # bundles are written from results.jsonl as it is read, not from `records`.
    streamed: set[str] = field(default_factory=set)
    unreadable: set[int] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    def attempt(self, what: str, fn: Callable[[], object]) -> bool:
        """Run fn; a failure is named in the problems (`what` could not be made)."""
        try:
            fn()
            return True
        except Exception as e:  # a report part degrades; the verdicts are already written
            self.problems.append(f"{what} could not be made: {type(e).__name__}: {e}")
            return False


@dataclass(frozen=True)
class ReportWriter:
    """A report of the run: `what` names it in problems; `fallback` is tried when it fails."""

    what: str
    write: Callable[[Published], None]
    fallback: ReportWriter | None = None


def write_evidence(p: Published) -> None:
    """An evidence folder per failed node (burnin/report/evidence.py), each on its own:
    from the records publish holds, or, for the failing nodes it does not hold whole
    (`streamed`), from results.jsonl a record at a time. Files' threads write the files
    while this thread makes the next one's text."""
    from burnin.report import evidence
    opened: dict[str, tuple[Path, evidence.Put]] = {}  # a streamed node's folder, its put
    files = evidence.Files(p.run_dir / STAGING)
    try:
        for node, v in p.verdicts.items():
            if not any(Outcome(outcome).bad for outcome, _ in v.values()):
                continue
            what, put = f"the evidence folder of {node}", files.put_for(node)
            if node in p.streamed:
                def start(node: str = node, v: dict = v, put=put) -> None:
                    opened[node] = (evidence.open_bundle(p.run_dir, node, v, put), put)
                p.attempt(what, start)
            elif p.attempt(what, partial(evidence.write_bundle, p.run_dir, node, v,
                                         p.by_node.get(node, []), put)):
                p.bundles.add(node)
        if opened:
            from burnin.figures.record_figures import whole_records
            failed: set[str] = set()
            for r in whole_records(p.run_dir / "results.jsonl", set(opened)):
                node = r["node"]
                folder, put = opened[node]
                if node not in failed and not p.attempt(
                        f"the evidence folder of {node}",
                        partial(evidence.add_record, folder, r, put)):
                    failed.add(node)
            p.bundles.update(set(opened) - failed)
    finally:
        for node, why in sorted(files.close().items()):
            p.bundles.discard(node)
            p.problems.append(f"the evidence folder of {node} could not be made: {why}")


def write_summary(p: Published) -> None:
    """summary.html (burnin/report/summary/), with the trend over earlier runs."""
    from burnin.figures import replace_soon, track_record
    from burnin.report import summary
    from burnin.report.summary import page, trend
    info = {n.name: summary.NodeInfo(n.name, n.address, dict(n.labels)) for n in p.nodes}
    report = summary.build(p.cluster, p.run_id, p.verdicts, p.records, p.floors, info,
                           p.bundles)
    report.speeds = p.speeds
    report.costs = p.costs
    report.incidents = p.incidents
    try:
        report.history = track_record.load(p.run_dir)
    except (OSError, ValueError) as e:  # costs the page's ledger part only
        report.problems.append(f"the ledger's history of the nodes not drawn: {e}")
    report.replace_soon = replace_soon.load(p.run_dir)
    p.unreadable.update(report.unreadable)
    report.problems += p.problems
    try:
        report.trend = trend.load(p.run_dir, p.cluster, report.figures)
    except (OSError, ValueError) as e:  # an unreadable earlier run costs the trend only
        report.problems.append(f"trend over earlier runs not drawn: {e}")
    write_atomically(p.run_dir / "summary.html", page.render(report))
    # A later run's trend reads these instead of this run's results.jsonl.
    p.attempt("the figures kept for later trends", lambda: trend.save(p.run_dir,
                                                                      report.figures))


def write_plain_summary(p: Published) -> None:
    write_atomically(p.run_dir / "summary.html",
                     html_fallback(p.cluster, p.run_id, p.verdicts, p.problems))


def write_metrics(p: Published) -> None:
    """metrics.prom (burnin/report/metrics.py)."""
    from burnin.figures import replace_soon
    from burnin.report import metrics, reconciled
    # A record with a figure that is not a number would stop metrics.render: left out.
    readable = [r for r in p.records if id(r) not in p.unreadable]
    tail = (incidents_report.prom(p.cluster, p.incidents)
            + metrics.replace_soon(p.cluster, replace_soon.load(p.run_dir))
            + reconciled.prom(p.cluster, reconciled.load(p.run_dir)))
    metrics.write(p.run_dir / "metrics.prom", itertools.chain(
        metrics.lines(p.cluster, p.run_id, time.time(), p.verdicts, readable, p.quarantined,
                      p.speeds), [tail]))


# In order: the page links the evidence folders, metrics.prom leaves out what the page
# could not read.
WRITERS: list[ReportWriter] = [
    ReportWriter("the evidence folders", write_evidence),
    ReportWriter("summary.html", write_summary,
                 fallback=ReportWriter("a plain summary.html", write_plain_summary)),
    ReportWriter("metrics.prom", write_metrics),
]


def publish(run_dir: Path, cluster: str, run_id: str,
            verdicts: dict[str, dict[str, tuple[str, str]]],
            floors: dict[str, dict[str, float]] | None = None,
            quarantined: dict[str, bool] | None = None,
            *, nodes: Iterable[Node] | None = None) -> list[str]:
    """Every report of WRITERS, from the run's verdicts and its results.jsonl (and
    `floors`, {node: {figure family: floor}}, the floors its judges used, which the page
    draws; `quarantined`, {node: in the ledger at the end of the run}, for metrics.prom).
    `nodes`: the inventory's nodes, whose labels group the page's fleet grid (by rack) and
    whose addresses it shows; without them (`burnin report` on a run directory) the grid
    is one group. Earlier runs of the cluster beside this one under reports/ give the
    page its trend. Returns the problems: what could not be made, and why."""
    from burnin.figures.record_figures import paused_gc
    with paused_gc():
        return _publish(run_dir, cluster, run_id, verdicts, floors, quarantined,
                        list(nodes or ()))


def _publish(run_dir: Path, cluster: str, run_id: str,
             verdicts: dict[str, dict[str, tuple[str, str]]],
             floors: dict[str, dict[str, float]] | None, quarantined: dict[str, bool] | None,
             nodes: list[Node]) -> list[str]:
    from burnin.figures.record_figures import read_for_page, read_records
    from burnin.report.summary import page
    p = Published(run_dir, cluster, run_id, verdicts, {}, quarantined, nodes)
    # The floors the judges stated are kept beside the run, so that `burnin report` (which
    # has junit.xml's verdicts, not the judges') draws the same ones.
    kept = run_dir / FLOORS_KEPT
    if floors is not None:
        p.floors = floors
        p.attempt("the judges' floors", lambda: write_atomically(kept, json.dumps(floors)))
    elif kept.exists():
        p.attempt("the judges' floors", lambda: p.floors.update(json.loads(kept.read_text())))
    # A big fleet's passing nodes are drawn from their figures (page.WHOLE_SECTIONS):
    # their documents' series are never read back, the failing nodes' whole records are.
    # Of a big fleet's failing nodes, WHOLE_FAILING are held whole (the most checks failed
    # first): a fleet failing whole (a bad roll-out) would otherwise hold every node's
    # documents at once, the failing fleet's peak; the others' sections are drawn from
    # their figures and their evidence folders written as results.jsonl is read.
    bad = {n: sum(Outcome(o) != Outcome.PASSED for o, _ in v.values())
           for n, v in verdicts.items()}
    whole = sorted((n for n, k in bad.items() if k), key=lambda n: (-bad[n], n))
    held = set(whole[:page.WHOLE_FAILING])
    if (run_dir / "results.jsonl").exists():
        big = len(verdicts) > page.WHOLE_SECTIONS
        p.streamed = set(whole) - held if big else set()
        p.attempt("results.jsonl", lambda: p.records.extend(
            read_for_page(run_dir, held) if big
            else read_records(run_dir / "results.jsonl")))
    for r in p.records:
        if isinstance(r, dict) and isinstance(r.get("node"), str) \
                and isinstance(r.get("check"), str):
            p.by_node.setdefault(r["node"], []).append(r)
    p.attempt("the relative speeds", lambda: p.speeds.update(
        junit_speeds(run_dir / "junit.xml", p.costs)))
    p.attempt("the shared-cause incidents", lambda: p.incidents.extend(
        incidents_report.load(run_dir)))
    for writer in WRITERS:
        if not p.attempt(writer.what, partial(writer.write, p)) and writer.fallback:
            p.attempt(writer.fallback.what, partial(writer.fallback.write, p))
    return p.problems


def html_fallback(cluster: str, run_id: str, verdicts: dict, problems: list[str]) -> str:
    """The page when the full one could not be drawn: what failed, and every verdict."""
    rows = "".join(f"<tr><td>{escape(n)}</td><td>{escape(c)}</td><td>{escape(o)}</td>"
                   f"<td>{escape(m)}</td></tr>" for n, v in sorted(verdicts.items())
                   for c, (o, m) in sorted(v.items()))
    notes = "".join(f"<li>{escape(p)}</li>" for p in problems)
    return (f"<!doctype html><meta charset='utf-8'><title>burnin {escape(cluster)} "
            f"{escape(run_id)}</title><h1>burnin run {escape(run_id)}</h1><p>The full "
            f"summary could not be drawn:</p><ul>{notes}</ul><table><tr><th>node</th>"
            f"<th>check</th><th>outcome</th><th>message</th></tr>{rows}</table>")
