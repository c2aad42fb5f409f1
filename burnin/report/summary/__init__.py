"""summary.html: the page an operator decides from, in ten seconds at 10 nodes and at
10,000. A verdict banner; a grid of every node x check, grouped by rack, failing first;
fleet charts whose every point names its node and device; a section per node (burn
telemetry per GPU, busbw against the fleet's band, storage per stream, the SDC error
map, the node's facts, its trend over earlier runs); a generic section for any check
the page does not know. Self-contained: no network fetch, no JavaScript library.

Modules, along the seams: charts (SVG), model (the run as drawn, defensive readers),
fleet (banner, grid, fleet charts), sections (a node's section and the per-check
registry), checks and burn_part (the built-in checks' parts), trend (earlier runs),
page (assembly, lazy sections).

Part of layer 10 (burnin.report)."""

from __future__ import annotations

from burnin.report.summary.model import NodeInfo, PageRun, build
from burnin.report.summary.page import render as render_page
from burnin.report.summary.sections import NodeView, part_of

__all__ = ["NodeInfo", "NodeView", "PageRun", "build", "part_of", "render"]


def render(cluster: str, run_id: str, verdicts: dict[str, dict[str, tuple[str, str]]],
           records: list[dict], floors: dict | None = None,
           nodes: dict[str, NodeInfo] | None = None, evidence: set[str] | None = None,
           trend=None) -> str:
    """summary.html's text. `nodes`: the inventory's view of each node (labels group the
    grid); `evidence`: the nodes with a nodes/<node>/ folder; `trend`: trend.load()'s."""
    return render_page(build(cluster, run_id, verdicts, records, floors, nodes,
                             set(evidence or ()), trend))
