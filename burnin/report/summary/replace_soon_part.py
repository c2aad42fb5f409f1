"""The page's replace-soon part: the nodes whose wear counters or speed reach their limit
soon, ranked by the projected day, each with its reasons and the limit's source
(burnin/figures/replace_soon.py; the run's replace_soon.json)."""

from __future__ import annotations

import time
from html import escape

from burnin.report.summary.model import PageRun

LISTED = 50  # nodes named; the rest are counted (`burnin history --watch` lists them all)


def _day(t: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(t))


def render(report: PageRun) -> str:
    """The part, or '' for a run without a list (no ledger, or an older run)."""
    listed = report.replace_soon
    if listed is None:
        return ""
    if not listed:
        return ("<h2 id='replace-soon'>Replace soon</h2><p class='dim'>No node's wear "
                "counters or speed reach their limit within the horizon.</p>")
    rows = []
    for rank, findings in enumerate(listed[:LISTED], 1):
        node = findings[0].node
        reasons = "".join(
            f"<li{' class=fail' if f.reached else ''}>{_day(f.projected)}: "
            f"{escape(f.reason)} <span class='dim'>({escape(f.source)})</span></li>"
            for f in findings)
        rows.append(f"<tr><td>{rank}</td><td><a href='#n-{escape(node)}'>{escape(node)}</a>"
                    f"</td><td>{_day(findings[0].projected)}</td><td><ul>{reasons}</ul>"
                    "</td></tr>")
    more = (f"<p class='dim'>and {len(listed) - LISTED} more: burnin history --watch lists "
            "them all.</p>" if len(listed) > LISTED else "")
    return ("<h2 id='replace-soon'>Replace soon</h2>"
            f"<p class='warn'>{len(listed)} node(s) whose wear counters or speed reach "
            "their limit soon, soonest first (the ledger's kept runs and this one):</p>"
            "<table><thead><tr><th>#</th><th>node</th><th>projected</th><th>why</th></tr>"
            f"</thead><tbody>{''.join(rows)}</tbody></table>{more}")
