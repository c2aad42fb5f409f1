"""The page: verdict banner, fleet grid, fleet charts, the fleet's moves, the table of
nodes, and every node's section. One self-contained file: inline CSS, SVG and a little
script, nothing fetched.

Node sections are data (sections.py): the failing nodes' are written into the page as
HTML while a size budget lasts, so that they read without JavaScript; every other
section travels gzip-compressed (base85, a few dozen nodes a chunk) and the browser's
own DecompressionStream and script.py draw it when it is opened (a tile, a row, a
#n-NODE link), or at once when the fleet is small."""

from __future__ import annotations

import base64
import gzip
import json
import time
from html import escape
from typing import cast

from burnin.model.outcome import Outcome
from burnin.report import incidents as incidents_report
from burnin.report.summary import fleet as fleet_mod
from burnin.report.summary import ledger_part, replace_soon_part
from burnin.report.summary import trend as trend_mod
from burnin.report.summary.model import PageRun, group_key, guarded
from burnin.report.summary.script import HTML_SAFE, SCRIPT
from burnin.report.summary.sections import NodeView, node_data, section_html

INLINE = 150_000          # bytes of failing nodes' sections written into the page as HTML
CHUNK = 48                # sections per compressed chunk: opening one inflates one chunk
DRAW_ALL = 60             # up to this many nodes every section is drawn at load
DRAW_FAILING = 12         # beyond, the failing ones up to this many; the rest on a click
DETAIL = 150              # telemetry points per line for a failing node or a small fleet
FLEET_DETAIL = 16_000     # ... shared out among the passing nodes of a big fleet (16 at least)
TABLE_OPEN = 2_000        # beyond this many nodes the table starts folded
# Beyond this many nodes a passing node's section is its verdicts, figures and trend,
# drawn from the figures the run kept, not its documents: reading back and drawing
# 10,000 nodes' telemetry cost most of publish's time and of the page.
WHOLE_SECTIONS = 2_000
# In such a fleet, the failing nodes' sections are whole (their telemetry drawn) for this
# many of them, the most checks failed first; the others' are drawn from their figures,
# their documents in their evidence folders (burnin/report/publish.py): a fleet failing
# whole (a bad roll-out) would otherwise hold every node's documents at once.
WHOLE_FAILING = 256
MARK = {Outcome.PASSED: ("", "✓"), Outcome.FAILED: (" class=fail", "✗"),
        Outcome.ERROR: (" class=fail", "!"),
        Outcome.SKIPPED: (" class=skip", "–")}  # a passed cell is green by default: 1,000s of rows
NOT_RUN = (" class=skip", "")
# MARK as the verdicts' plain strings look it up (Outcome is a str enum: the same entries)
MARK_BY_WORD: dict[str, tuple[str, str]] = {o: mark for o, mark in MARK.items()}

# The last rule: a node's section off the screen is not laid out until it nears it (the
# failing ones written in and drawn at load lie below a big fleet's grid and table).
STYLE = """body{font:14px system-ui,sans-serif;margin:20px 24px;color:#1f2328}
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:22px 0 8px}h3{font-size:15px;margin:0}
h4{font-size:14px;margin:10px 0 4px}a{color:#0969da}summary h2{display:inline}
.banner{border-radius:6px;padding:10px 14px;margin:10px 0;border:1px solid}
.banner.ok{background:#dafbe1;border-color:#4ac26b}.banner.bad{background:#ffebe9;
border-color:#ff8182}.banner .head{font-size:18px;font-weight:700}
.banner ul{margin:6px 0 0;padding-left:20px}.chip{display:inline-block;margin:6px 6px 0 0;
padding:1px 8px;border-radius:10px;font-size:13px;color:#fff}.chip.ok{background:#1a7f37}
.chip.bad{background:#cf222e}.groups{display:flex;flex-wrap:wrap;gap:10px 14px}
.gh{font-size:12px;color:#57606a;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}.tiles{display:flex;flex-wrap:wrap;gap:1px}
.tiles a{display:block}.tiles a:hover{outline:2px solid #1f2328}
.legend{font-size:12px;color:#57606a;margin:4px 0}.sw{display:inline-block;width:10px;
height:10px;margin:0 3px 0 8px;vertical-align:-1px}.charts{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{background:#fff;border:1px solid #d0d7de}svg text{font:11px system-ui,sans-serif;
fill:#1f2328}svg .t{font-weight:600;font-size:12px}svg .s{font-size:10px}
svg .e{text-anchor:end}svg .m{text-anchor:middle}
svg .b{font-weight:600;paint-order:stroke;stroke:#fff;stroke-width:3px}svg .g{stroke:#eaeef2}
svg .a{stroke:#8c959f;fill:none}svg.spark{vertical-align:middle}
table{border-collapse:collapse}th,td{padding:2px 8px;border-bottom:1px solid #eaeef2;
text-align:left;vertical-align:top}th{background:#f6f8fa}#nodes th{cursor:pointer}
#nodes td{color:#1a7f37}#nodes td.msg{color:#1f2328}
.r{text-align:right;font-variant-numeric:tabular-nums}.pass{color:#1a7f37}
.fail{color:#cf222e;font-weight:600}.skip,.dim{color:#6e7781}.warn{color:#9a6700}
.msg{max-width:720px;font-size:12px}section.node{border:1px solid #d0d7de;border-radius:6px;
padding:10px 14px;margin:14px 0}section.node.bad{border-left:4px solid #cf222e}
.lbl{font-size:12px;background:#eaeef2;border-radius:8px;padding:0 6px;font-weight:400}
.env{font-family:ui-monospace,monospace;background:#f6f8fa}
.up{font-size:12px;font-weight:400}.facts{display:grid;grid-template-columns:max-content auto;
gap:1px 12px;margin:4px 0;font-size:13px}.facts dt{color:#57606a}.facts dd{margin:0}
.figs{font-size:12px;margin:6px 0}pre{font-size:11px;white-space:pre-wrap;max-width:900px}
section.node:target{box-shadow:0 0 0 3px #54aeff}
section.node{content-visibility:auto;contain-intrinsic-block-size:auto 2000px}"""


def render(report: PageRun) -> str:
    """The whole page, from the run as summary.PageRun holds it."""
    nodes = report.ordered
    try:
        fleet = fleet_mod.fleet_of(report)
    except Exception as e:  # the fleet's yardsticks are missing; the nodes are still drawn
        fleet = fleet_mod.FleetFigures()
        report.problems.append(f"fleet figures not drawn: {type(e).__name__}: {e}")
    detail = max(16, min(DETAIL, FLEET_DETAIL // max(len(nodes), 1)))

    def section(n: str) -> dict:
        return node_data(NodeView(report, fleet, n, DETAIL if report.failing(n) else detail),
                         trend_mod.node_trend)
    # Sections are made as they are written, a chunk at a time: 10,000 nodes' at once
    # would be held until the last was packed. The failing ones are made first, once.
    data = {n: section(n) for n in nodes if report.failing(n)}
    inline, used = [], 0
    for n in (n for n in nodes if report.failing(n)):
        html = guarded(f"{n} section", section_html, data[n])
        if used + len(html) > INLINE:
            break
        inline.append(html)
        used += len(html)
    lazy = nodes[len(inline):]  # failing nodes come first: the inline ones are a prefix
    drawn_at_load = lazy if len(nodes) <= DRAW_ALL else \
        [n for n in lazy if report.failing(n)][:DRAW_FAILING]
    # One node has no fleet to compare with: its own charts, in its section, say it all.
    charts = "".join(guarded(what, fn, *args) for what, fn, *args in
                     fleet_mod.charts(report, fleet)) if len(nodes) > 1 else ""
    moved = trend_mod.summary_line(_trend(report), nodes)
    later = len(lazy) - len(drawn_at_load)
    return "".join([
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width'>"
        f"<title>burnin {escape(report.run_id)}: {escape(report.cluster)}</title>"
        f"<style>{STYLE}</style></head><body>",
        f"<h1>burnin run {escape(report.run_id)}, cluster {escape(report.cluster)}</h1>",
        guarded("shared-cause incidents", incidents_report.html, report.incidents),
        f"<p class='dim'>Written {time.strftime('%Y-%m-%d %H:%M:%S')}. Hover any point for "
        "its node and device; click a tile or a node for its section.</p>",
        guarded("verdict", fleet_mod.banner, report, moved),
        guarded("fleet grid", fleet_mod.grid, report),
        f"<h2>Fleet charts</h2><div class='charts'>{charts}</div>" if charts else "",
        guarded("goodput and the ledger", ledger_part.render, report),
        guarded("replace soon", replace_soon_part.render, report),
        guarded("trend", trend_mod.movers, report.trend, nodes),
        guarded("table", _table, report, nodes),
        "<h2 id='sections'>Nodes</h2>", *inline,
        "<div id='drawn'></div>",
        (f"<p class='dim'>The sections of {later} more nodes are drawn when opened: click a "
         "tile or a node.</p>" if later else ""),
        "<noscript><p class='warn'>The other node sections need JavaScript.</p></noscript>"
        if lazy else "",
        _chunks(lazy, drawn_at_load, lambda n: data.pop(n, None) or section(n),
                later=len(nodes) > DRAW_ALL),
        f"<script>{SCRIPT}</script></body></html>"])


def _share_frames(nodes: list[str], data: dict[str, dict], frames: list,
                  index: dict[int, int]) -> None:
    """Charts' frames (axes, ticks, titles: most of a chart) and kept figures' names
    ("figs" blocks) replaced by their index in one list for the page (`frames`; `index`:
    id of a frame -> its place): a fleet's thousands of sections share a handful."""
    def shared(frame: list) -> int:
        key = id(frame)
        if key not in index:
            index[key] = len(frames)
            frames.append(frame)
        return index[key]
    for n in nodes:
        for _, _, blocks in data[n]["p"]:
            for b in blocks:
                if b[0] == "charts":
                    for chart in b[1]:
                        if chart and isinstance(chart.get("f"), list):
                            chart["f"] = shared(chart["f"])
                elif b[0] == "figs" and isinstance(b[1], list):
                    b[1] = shared(b[1])


def _chunks(lazy: list[str], at_load: list[str], section, later: bool = False) -> str:
    """The lazy sections, packed a chunk at a time (`section(node)` makes one), then
    the frames their charts share (the script finds each by its id). `later`: the
    sections drawn at load lie below the fold (a big fleet's, under its grid, charts and
    table), and are drawn once the page's first frame is up rather than before it."""
    if not lazy:
        return ""
    out: list[str] = []
    names: list[list[str]] = []
    frames: list[object] = []
    index: dict[int, int] = {}
    # gzip's 9 costs a fleet of 10,000 nodes a third of a second of publish over its 6,
    # for 4% of the page: a small fleet's page gets the 9, a big one's the 6.
    level = 9 if len(lazy) <= WHOLE_SECTIONS else 6
    for i in range(0, len(lazy), CHUNK):
        part = lazy[i:i + CHUNK]
        names.append(part)
        data = {n: section(n) for n in part}
        _share_frames(part, data, frames, index)  # `frames` keeps each alive: ids stay its
        out.append(_packed(f"sections-{i // CHUNK}", data, level))
    out.append(_packed("sections-frames", frames, level))
    index_json = json.dumps({"c": names, "open": at_load, "later": int(later)},
                            separators=(",", ":")).replace("</", "<\\/")
    return "".join(out) + \
        f"<script type='application/json' id='sections-index'>{index_json}</script>"


def _trend(report: PageRun) -> trend_mod.Trend | None:
    # A trend.Trend or None by construction (summary.build): PageRun cannot say so, as
    # trend.py imports the module PageRun is in.
    return cast("trend_mod.Trend | None", report.trend)


def _packed(element_id: str, value, level: int = 9) -> str:
    """A JSON value gzip-compressed, base85 with HTML-safe characters, in a script element
    the browser does not run."""
    blob = gzip.compress(json.dumps(value, separators=(",", ":")).encode(), level, mtime=0)
    return (f"<script type='application/x-burnin-sections' id='{element_id}'>"
            f"{base64.b85encode(blob).decode().translate(HTML_SAFE)}</script>")


def _speed_cell(speed: tuple[float, str] | None) -> str:
    if speed is None:
        return "<td></td>"
    return f"<td class=r title='set by {escape(speed[1])}'>{speed[0]:.3f}</td>"


def _table(report: PageRun, nodes: list[str]) -> str:
    checks = report.checks
    key = group_key(report.nodes)
    rows = []
    for n in nodes:
        v = report.verdicts.get(n, {})
        cells = "".join("<td{}>{}</td>".format(*MARK_BY_WORD.get(v.get(c, ("", ""))[0], NOT_RUN))
                        for c in checks)
        bad = next(((c, v[c][1]) for c in checks if c in v and v[c][0] != "passed"), None)
        sid = escape(f"n-{n}")
        # A passing row's node opens its section through the script (a click on the row):
        # a link on each of thousands of rows would weigh as much as the rest of the row.
        name = f"<a href='#{sid}'>{escape(n)}</a>" if bad else escape(n)
        message = (f"<td class=msg><a href='#{sid}-{escape(bad[0])}'>{escape(bad[0])}</a>: "
                   f"{escape(bad[1][:300])}</td>") if bad else "<td></td>"
        link = f"<a href='nodes/{escape(n)}/verdicts.txt'>evidence</a>" \
            if n in report.evidence else ""
        trend = _trend(report)
        moved = len(trend.moved(n)) if trend else 0
        rows.append(f"<tr id='node-{escape(n)}'><td>{name}</td>"
                    + (f"<td class=dim>{escape(report.info(n).labels.get(key, ''))}</td>"
                       if key else "")
                    + cells + message
                    + (_speed_cell(report.speeds.get(n)) if report.speeds else "")
                    + ((f"<td class=r>{report.costs[n]:.3f}</td>" if n in report.costs
                        else "<td></td>") if report.costs else "")
                    + (f"<td class=r>{moved or ''}</td>" if report.trend else "")
                    + f"<td>{link}</td></tr>")
    head = ("<th>node</th>" + (f"<th>{escape(key)}</th>" if key else "")
            + "".join(f"<th title='{escape(c)}'>{escape(c)}</th>" for c in checks)
            + "<th>failing figure</th>"
            + ("<th title='slowest speed-bearing figure over the fleet median: what a "
               "synchronous job would run at with this node'>speed</th>"
               if report.speeds else "")
            + ("<th title='what admitting the node costs a synchronous job, as junit.xml "
               "states it: N x (1 - speed)'>price (node-h per job-h)</th>"
               if report.costs else "")
            + ("<th>moved</th>" if report.trend else "")
            + "<th>evidence</th>")
    folded = len(nodes) > TABLE_OPEN
    words = ", ".join(f"{m} {o.word}" for o, (_, m) in MARK.items())
    table = (f"<table id='nodes'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody>"
             "</table>")
    if folded:
        # With scripting on, a noscript's content is text to the browser's parser, not
        # elements: the folded table of 25,000 rows (300,000 elements, 88% of the page's
        # and most of its parsing) is made when it is opened (script.py); without
        # JavaScript it is the table as it was.
        table = f"<noscript id='table-rows'>{table}</noscript>"
    return (f"<details id='table'{'' if folded else ' open'}><summary><h2>Verdict per node"
            f"{' (folded: a fleet this big reads from the grid)' if folded else ''}</h2>"
            f"</summary><p class='legend'>{words}; click a column to sort.</p>"
            f"{table}</details>")
