"""What the end of a run reconciled between the ledger and Slurm (burnin/gate/reconcile.py)
in its outputs: kept beside the run (reconciled.json, so that `burnin report` writes it
again) and metrics.prom's burnin_quarantine_reconciled_nodes series."""

from __future__ import annotations

import json
from pathlib import Path

from burnin.core.safefiles import write_atomically
from burnin.gate.reconcile import Reconciled

KEPT = "reconciled.json"


def save(run_dir: Path, done: Reconciled) -> None:
    """Only where the run reconciled (quarantine.actions has slurm)."""
    if done.checked:
        write_atomically(run_dir / KEPT, json.dumps({
            "reconciled": [r.node for r in done.drained],
            "not_reconciled": [r.node for r in done.failed],
            "error": done.unreachable}))


def load(run_dir: Path) -> dict | None:
    """What `save` kept; None for a run that did not reconcile. ValueError for a file that
    is not what `save` wrote."""
    path = run_dir / KEPT
    if not path.exists():
        return None
    try:
        kept = json.loads(path.read_text())
        return {"reconciled": [str(n) for n in kept["reconciled"]],
                "not_reconciled": [str(n) for n in kept["not_reconciled"]],
                "error": str(kept.get("error") or "")}
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not what a run's reconcile kept: {e}") from None


def prom(cluster: str, kept: dict | None) -> str:
    """Two gauges: held nodes the run found in service in Slurm and drained, and those it
    could not drain (they may take jobs: alert on it). None: no series."""
    if kept is None:
        return ""
    c = cluster.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return (
        "# HELP burnin_quarantine_reconciled_nodes Nodes the quarantine ledger holds that "
        "Slurm had in service at the end of the last run, drained again with their ledger "
        "reason.\n# TYPE burnin_quarantine_reconciled_nodes gauge\n"
        f'burnin_quarantine_reconciled_nodes{{cluster="{c}"}} {len(kept["reconciled"])}\n'
        "# HELP burnin_quarantine_unreconciled_nodes Nodes the quarantine ledger holds that "
        "Slurm may still give jobs: the drain at the end of the last run failed.\n"
        "# TYPE burnin_quarantine_unreconciled_nodes gauge\n"
        f'burnin_quarantine_unreconciled_nodes{{cluster="{c}"}} '
        f'{len(kept["not_reconciled"])}\n')
