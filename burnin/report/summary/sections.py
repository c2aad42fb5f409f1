"""Every node's section, failing or not: its verdicts, then one part per check drawn by
the function registered for that check, then its trend.

A part is a list of blocks, plain data the page's script draws (so that a fleet's
thousands of sections travel compressed and are drawn when opened):

    ["facts", [[name, value], ...]]         ["note", text, css class]
    ["table", [head, ...], [[cell, ...]]]   a cell: text, or [text, css class]
    ["charts", [Chart.packed(), ...]]       ["legend", [[name, colour], ...]]
                                            (a chart's frame, "f", is stored once a page)
    ["pre", text]                           (folded: a probe's stderr)
    ["sparks", [[name, [value per run, oldest first], moved], ...]]
    ["figs", [[figure, unit], ...], [value, ...]]    (the names stored once a page, as
                                            a chart's frame: a big fleet's kept figures)

A check names its own part on its Check, as a reference imported when a page is drawn
(see burnin/report/summary/checks.py), so that the checks never import the page:

    CHECK = Check(name="memory", ..., page="burnin.report.summary.checks:memory")
    def memory(view: NodeView, record: dict) -> list:    # in burnin/report/summary/checks.py
        return [facts([...]), table([...], rows), charts(chart)]

A check that names none (a new one, or one from another team) still gets its verdict
and a table of its devices' figures. Each part is drawn on its own: a
malformed record costs that part, which says what it could not draw."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from html import escape

from burnin.checks import CHECKS
from burnin.figures.record_figures import key_figures, measure
from burnin.model.outcome import Outcome
from burnin.report.summary.charts import Chart, fmt, sparkline, svg, unpack
from burnin.report.summary.fleet import FleetFigures, resolve
from burnin.report.summary.model import PageRun, data_of, mapping, num, seq

MAX_ROWS = 64        # rows of a table: a node has at most this many devices
MAX_ENV = 16         # env variables in a node's heading (results.jsonl holds them all)


@dataclass(frozen=True)
class NodeView:
    """One node as its section sees it, with the fleet to compare against."""

    report: PageRun
    fleet: FleetFigures
    node: str
    detail: int          # points per telemetry line: fewer for a passing node of a big fleet

    def record(self, check: str) -> dict | None:
        return self.report.records.get(self.node, {}).get(check)

    def verdict(self, check: str) -> tuple[str, str]:
        return self.report.verdicts.get(self.node, {}).get(check, ("", ""))


Section = Callable[[NodeView, dict], list]


def part_of(check: str) -> Section:
    """The function that draws the check's part of a node's section (Check.page,
    "module:function"), or the generic one. It gets the node's view and the check's record
    (a probe that measured: record['data'] is its document) and returns a list of blocks.
    A reference that does not resolve raises here, inside the part's guard: that part
    says so, and the rest of the page is drawn."""
    spec = CHECKS.get(check)
    return resolve(spec.page) if spec is not None and spec.page else generic


def node_env(report: PageRun, node: str) -> list[list[str]]:
    """The environment the node's probes ran under (the inventory's `env:`, as a probe
    recorded it), from its first record that has one: [[name, value], ...], bounded."""
    records = report.records.get(node, {})
    for check in report.checks:
        env = data_of(records.get(check)).get("env")
        if not isinstance(env, dict) or not env:
            continue
        pairs = sorted((k[:64], v[:120]) for k, v in env.items()
                       if isinstance(k, str) and isinstance(v, str))
        if pairs:
            return [list(p) for p in pairs[:MAX_ENV]]
    return []


def node_data(view: NodeView, trend_part: Callable[[NodeView], list] | None = None) -> dict:
    """A node's section as data: {n: node, a: address, l: labels, x: env, e: has evidence,
    b: failing, v: [[check, outcome, message]], p: [[check, outcome, blocks]], t: trend}."""
    report, node = view.report, view.node
    info = report.info(node)
    given, records = report.verdicts.get(node, {}), report.records.get(node, {})
    said = [(c, given.get(c, ("", ""))) for c in report.checks if c in given or c in records]
    return {"n": node, "a": info.address if info.address != node else "",
            "l": sorted(info.labels.items()), "x": node_env(report, node),
            "e": int(node in report.evidence),
            "b": int(report.failing(node)),
            "v": [[c, str(o), str(m or "")[:1200]] for c, (o, m) in said],
            "p": [[c, o, drawn((node, c), _part, view, c)] for c, (o, _) in said],
            "t": drawn((node, "trend"), trend_part, view) if trend_part else []}


def drawn(what, fn, *args) -> list:
    """One part: its blocks, or a note saying what could not be drawn and why (`what`:
    its name, or the words of it, (node, check), joined only then)."""
    try:
        return fn(*args)
    except Exception as e:  # a malformed record costs its own part, nothing more
        what = " ".join(what) if isinstance(what, tuple) else what
        return [note(f"{what}: could not draw this part: {type(e).__name__}: {str(e)[:200]}",
                     "warn")]


def _part(view: NodeView, check: str) -> list:
    record = view.record(check)
    if record is None:
        return [note("No probe record for this check: it did not run on this node.", "dim")]
    if not record.get("ok"):
        tail = str(record.get("stderr_tail") or "")[-2000:]
        out = [note(f"The probe did not measure: {record.get('reason') or 'no reason given'}",
                    "fail")]
        return out + ([["pre", tail]] if tail else [])
    if "kept_figures" in record:
        return figures_part(view, record)
    if not isinstance(record.get("data"), dict):
        return [note("The record holds no probe document.", "warn")]
    errors = [note(f"probe error: {str(e)[:300]}", "warn")
              for e in seq(record["data"].get("errors"))[:10]]
    return errors + part_of(check)(view, record)


# Blocks ------------------------------------------------------------------------------------
def text(v) -> str:
    """A value for a table or a fact: numbers formatted for people."""
    n = num(v)
    if n is not None:
        return fmt(n)
    return "" if v is None else str(v)


def note(message: str, cls: str = "dim") -> list:
    return ["note", message, cls]


def facts(pairs: list[tuple[str, object]]) -> list:
    """name: value pairs, the empty ones left out."""
    return ["facts", [[k, text(v)] for k, v in pairs if v not in (None, "", [], {})]]


def table(head: list[str], rows: list[list]) -> list:
    """A table; numbers formatted, [text, css class] cells kept as they are."""
    body = [[c if isinstance(c, list) else text(c) for c in row] for row in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS:
        body.append([[f"{len(rows) - MAX_ROWS} more rows not shown", "dim"]])
    return ["table", head, body]


def charts(*drawn_charts: Chart) -> list:
    return ["charts", [c.packed() for c in drawn_charts if not c.empty()]]


def _flat(d: dict, prefix: str = "") -> dict[str, object]:
    """Scalars of a record, one level of nesting flattened (read.gbps)."""
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict) and not prefix:
            out.update(_flat(v, f"{k}."))
        elif isinstance(v, (int, float, str, bool)) or v is None:
            out[f"{prefix}{k}"] = v
    return out


def generic(view: NodeView, record: dict) -> list:
    """Any check: its node figures and a table of its devices' figures."""
    data = record["data"]
    figures = [(k, v) for k, v in _flat(mapping(data.get("figures"))).items()
               if not isinstance(v, str) or len(v) < 80][:24]
    devices = [_flat(d) for d in seq(data.get("devices")) if isinstance(d, dict)]
    columns: list[str] = []
    for d in devices:
        columns += [k for k, v in d.items() if k not in columns
                    and (not isinstance(v, str) or len(v) < 60)]
    columns = columns[:14]
    out = [facts(figures)] if figures else []
    if devices:
        out.append(table(columns, [[d.get(c) for c in columns] for d in devices]))
    return out or [note("The probe reported no figures.")]


def figures_part(view: NodeView, record: dict) -> list:
    """A check's part from its kept figures (a passing node of a big fleet): a "figs"
    block, the figures' names and units (one list shared by every node that has the same
    figures: the page stores it once, see page._share_frames) and their values, which the
    browser formats and lays out as a table; the charts are its results.jsonl's."""
    figs = key_figures(record)[:MAX_ROWS]
    if not figs:
        return [note(KEPT_NOTE)]
    keys = tuple((f.metric, f.labels) for f in figs)
    try:
        names = _names_of(keys)
    except TypeError:  # a label value that cannot be hashed
        names = _names_of.__wrapped__(keys)
    return [["figs", names, [f.value for f in figs]]]


KEPT_NOTE = "A passing node of a fleet this size: its figures only; every sample is in " \
    "results.jsonl."


@functools.lru_cache(maxsize=1024)  # the same few lists on every node of a fleet: one each
def _names_of(keys: tuple) -> list[list[str]]:
    return [list(_named(metric, labels)) for metric, labels in keys]


def _named(metric: str, labels: tuple) -> tuple[str, str]:
    try:
        return _name_of(metric, labels)
    except TypeError:  # a label value that cannot be hashed
        return _name_of.__wrapped__(metric, labels)


@functools.lru_cache(maxsize=4096)  # the same few dozen on every node of a fleet
def _name_of(metric: str, labels: tuple) -> tuple[str, str]:
    m = measure(metric)
    if m is None:
        return f"{metric} " + " ".join(f"{k}={v}" for k, v in labels), ""
    return m.label_of(labels), m.unit


# The same blocks as HTML, for the sections written into the page as they are (failing
# nodes, so that they read without JavaScript); script.py draws the rest identically.
def _cls(outcome: str) -> str:
    o = Outcome(outcome)
    return "fail" if o.bad else "pass" if o == Outcome.PASSED else "skip"


def _cell(c) -> str:
    if isinstance(c, list):
        return f"<td class='{escape(str(c[1]))}'>{escape(str(c[0]))}</td>"
    return f"<td>{escape(str(c))}</td>"


def block_html(b: list) -> str:
    kind = b[0]
    if kind == "facts":
        return "<dl class='facts'>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>"
                                              for k, v in b[1]) + "</dl>"
    if kind == "table":
        head = "".join(f"<th>{escape(h)}</th>" for h in b[1])
        rows = "".join("<tr>" + "".join(map(_cell, r)) + "</tr>" for r in b[2])
        return f"<table class='figs'><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    if kind == "charts":
        return "<div class='charts'>" + "".join(
            svg(c["w"], c["h"], c["t"], unpack(c.get("f", []) + c["i"])) for c in b[1] if c) + \
            "</div>"
    if kind == "note":
        return f"<p class='{escape(b[2])}'>{escape(b[1])}</p>"
    if kind == "legend":
        return "<p class='legend'>" + " ".join(
            f"<span class='sw' style='background:{escape(c)}'></span>{escape(n)}"
            for n, c in b[1]) + "</p>"
    if kind == "pre":
        return f"<details><summary>stderr (last lines)</summary><pre>{escape(b[1])}</pre></details>"
    if kind == "sparks":
        return "<table class='figs'><tbody>" + "".join(_spark(*row) for row in b[1]) + \
            "</tbody></table>"
    if kind == "figs":  # names and units, values: table() of them, then the note
        cells = [[n, u, fmt(v)] for (n, u), v in zip(b[1], b[2], strict=False)]
        return block_html(["table", ["figure", "unit", "value"], cells]) + \
            block_html(note(KEPT_NOTE))
    return ""


def _spark(name: str, values: list, moved: int) -> str:
    text = " → ".join("–" if v is None else fmt(v) for v in values)
    line = sparkline(values, f"{name}: {text}", bool(moved))  # red when it moved at all
    return (f"<tr><td>{escape(name)}</td><td>{line}</td>"
            f"<td class='dim'>{escape(text)}</td></tr>")


def section_html(d: dict) -> str:
    """A node's section (node_data's dict) as HTML."""
    sid = escape(f"n-{d['n']}")
    head = [f"<section id='{sid}' class='node{' bad' * d['b']}'><h3>{escape(d['n'])}"]
    if d["a"]:
        head.append(f" <span class='dim'>{escape(d['a'])}</span>")
    head += [f" <span class='lbl'>{escape(k)}={escape(v)}</span>" for k, v in d["l"]]
    head += [f" <span class='lbl env' title='set by its probes (env:)'>{escape(k)}="
             f"{escape(v)}</span>" for k, v in d.get("x", ())]
    if d["e"]:
        head.append(f" <a href='nodes/{escape(d['n'])}/'>evidence folder</a>")
    head.append(" <a class='up' href='#grid'>back to the grid</a></h3>")
    rows = "".join(f"<tr><td><a href='#{sid}-{escape(c)}'>{escape(c)}</a></td><td class="
                   f"'{_cls(o)}'>{escape(Outcome(o).word)}</td><td class='msg'>{escape(m)}</td>"
                   "</tr>"
                   for c, o, m in d["v"])
    trend = "".join(map(block_html, d["t"]))
    parts = "".join(f"<div class='chk' id='{sid}-{escape(c)}'><h4>{escape(c)} <span class="
                    f"'{_cls(o)}'>{escape(Outcome(o).word)}</span></h4>"
                    f"{''.join(map(block_html, blocks))}</div>" for c, o, blocks in d["p"])
    return (f"{''.join(head)}<table class='verdicts'><tbody>{rows}</tbody></table>"
            + (f"<div class='trend'>{trend}</div>" if trend else "")
            + f"<div class='parts'>{parts}</div></section>")
