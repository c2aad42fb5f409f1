"""`burnin_node_check_up` for node_exporter's textfile collector (`node_check.textfile`, or
`--textfile` where the inventory itself may be what is wrong): 1 when node-check ran and
judged the node, 0 with the reason as a label when it could not (a bad or untrusted
inventory, an internal error). A node-check that cannot run is never silent: slurmd
logs one line, and the fleet's dashboards see the 0."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

from burnin.core.rootfiles import running_as_root, untrusted

FILE = "burnin_node_check.prom"


def _label(value: str) -> str:
    # Prometheus text format: backslash, double quote and newline escaped.
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")[:200]


def text(up: bool, reason: str, failures: int) -> str:
    lines = ["# HELP burnin_node_check_up 1: node-check ran and judged this node; 0: it "
             "could not (reason)",
             "# TYPE burnin_node_check_up gauge",
             f'burnin_node_check_up{{reason="{_label(reason)}"}} {int(up)}'
             if not up else "burnin_node_check_up 1",
             "# HELP burnin_node_check_findings_count failures the last node-check found",
             "# TYPE burnin_node_check_findings_count gauge",
             f"burnin_node_check_findings_count {failures}",
             "# HELP burnin_node_check_last_run_timestamp_seconds when it last ran",
             "# TYPE burnin_node_check_last_run_timestamp_seconds gauge",
             f"burnin_node_check_last_run_timestamp_seconds {time.time():.3f}"]
    return "\n".join(lines) + "\n"


def write(directory: str | None, up: bool, reason: str = "", failures: int = 0) -> str:
    """Replace DIRECTORY/burnin_node_check.prom in one step; '' or why it was not."""
    if not directory:
        return ""
    where = Path(directory)
    if not where.is_dir():
        return f"textfile directory {where} does not exist"
    problem = untrusted(where) if running_as_root() else ""
    if problem:
        return f"textfile directory {where} not written as root: {problem}"
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{FILE}.", dir=where)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text(up, reason, failures))
            os.fchmod(f.fileno(), 0o644)  # node_exporter reads it as its own user
        os.replace(tmp, where / FILE)
    except OSError as e:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return f"textfile {where / FILE}: {e.strerror or e}"
    return ""
