"""What a run needs of its own controller, checked before any node is touched.

A fault of the controller must never become a node's failure: an unwritable reports
directory or ledger, or a quarantine command that is not there, found half-way through a
run, would otherwise fail (and quarantine, and drain) every node it was testing. Found
here, the run does not start. And the previous run's report stops being admissible here,
before anything can go wrong: `reports/latest` points at this run, whose junit.xml says it
is not complete until the run completes (burnin/plugin/__init__.py replaces it at the end).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from burnin.core.safefiles import private_dirs, write_atomically
from burnin.errors import NotReady  # noqa: F401  (raised here, caught by callers)
from burnin.ledger.api import Ledger, LedgerError
from burnin.model.nodes import QuarantineSettings
from burnin.report.junit import point_latest, render_junit

# What an unfinished run's junit.xml says: a controller killed before it could say more.
IN_PROGRESS = ("in progress, or its controller died before it finished (a run that "
               "completes replaces this report)")


def check_controller(run_dir: Path, ledger: Ledger | None, quarantine: QuarantineSettings,
                     act: bool) -> None:
    """NotReady unless the run can write its reports, and (when it may act: not a
    --no-quarantine dry run) write its ledger and run its quarantine actions."""
    try:
        private_dirs(run_dir)
        probe = run_dir / ".writable"
        with open(probe, "w", encoding="utf-8") as f:
            f.write("burnin\n")
            f.flush()
            os.fsync(f.fileno())
        probe.unlink()
    except OSError as e:
        raise NotReady(f"cannot write reports in {run_dir}: {e}; pass --reports DIR with a "
                       "directory this user can write") from None
    if not act:
        return
    if ledger is not None:
        try:
            ledger.check_writable()
        except (OSError, LedgerError) as e:
            raise NotReady(f"cannot write the quarantine ledger {ledger.where}: {e}") from None
    if "slurm" in quarantine.actions and shutil.which("scontrol") is None:
        raise NotReady("quarantine.actions has slurm, but scontrol is not on this "
                       "controller's PATH")
    if "command" in quarantine.actions:
        tool = quarantine.command[0]
        found = shutil.which(tool) if os.sep not in tool else (
            tool if os.path.isfile(tool) and os.access(tool, os.X_OK) else None)
        if found is None:
            raise NotReady(f"quarantine.command runs {tool!r}, which is not an executable "
                           "file here" + ("" if os.sep in tool else " or on PATH"))


def mark_running(reports_dir: Path, run_id: str, cluster: str,
                 nodes: list[tuple[str, str]], properties: dict[str, str]) -> None:
    """Point reports/latest at this run, whose junit.xml says it has not completed: from
    now on, `burnin admit reports/latest/junit.xml` refuses until this run completes.
    NotReady when `latest` cannot be moved (then the old report would stay admissible)."""
    run_dir = reports_dir / run_id
    try:
        write_atomically(run_dir / "junit.xml", render_junit(
            cluster, run_id, nodes, {}, {**properties, "complete": "false",
                                         "incomplete": IN_PROGRESS}), durable=True)
        point_latest(reports_dir, run_id)
    except OSError as e:
        raise NotReady(f"cannot point {reports_dir / 'latest'} at this run: {e}; the previous "
                       "report would stay admissible, so the run does not start") from None
