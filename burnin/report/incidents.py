"""A run's shared-cause incidents (burnin/gate/incidents.py) in its outputs: kept beside the
run (incidents.json, so that `burnin report` draws them again), the first thing of
summary.html, and metrics.prom's burnin_incident series."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from burnin.core.safefiles import write_atomically
from burnin.model.incident import Incident

KEPT = "incidents.json"


def save(run_dir: Path, incidents: list[Incident]) -> None:
    """The run's incidents beside its junit.xml (an empty list: the run had none)."""
    write_atomically(run_dir / KEPT, json.dumps([i.as_dict() for i in incidents]))


def load(run_dir: Path) -> list[Incident]:
    """The incidents kept beside a run; none for a run from before them. ValueError for a
    file that is not what `save` wrote."""
    path = run_dir / KEPT
    if not path.exists():
        return []
    try:
        return [Incident.of_dict(d) for d in json.loads(path.read_text())]
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a list of incidents: {e}") from None


def html(incidents: list[Incident]) -> str:
    """summary.html's first section: each incident, its nodes, and what a person does."""
    if not incidents:
        return ""
    items = "".join(
        f"<li><b>{escape(i.message)}</b><br>{escape(_open(i))}<span class='dim'>"
        f"{len(i.nodes)} node(s): "
        f"{escape(', '.join(i.nodes[:50]))}{' ...' if len(i.nodes) > 50 else ''}</span></li>"
        for i in incidents)
    return ("<section id='incidents' class='warn'><h2>Shared-cause incidents</h2>"
            "<p>These failures are too many, or too well confined to one component, to be "
            "faults of the nodes: their nodes are not admitted, but nobody was quarantined "
            "or acted on for them. A person decides: fix the cause and run again, or "
            "<code>burnin quarantine add --run RUN --check CHECK --reason WHY</code> "
            "(docs/operator/incidents.md)."
            f"</p><ul>{items}</ul></section>")


def _open(i: Incident) -> str:
    """An incident the ledger holds open: its number, its run, and how it ends."""
    return f"{i.still_open}. " if i.id else ""


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prom(cluster: str, incidents: list[Incident]) -> str:
    """metrics.prom's burnin_incident_nodes family: one series per incident of the last
    run, its value the nodes it holds out; no series when there were none."""
    if not incidents:
        return ""
    lines = ["# HELP burnin_incident_nodes Nodes of a shared-cause incident of the last run "
             "(failed, not quarantined: a person decides).",
             "# TYPE burnin_incident_nodes gauge"]
    for i in incidents:
        if i.run_id:
            continue  # an earlier run's, still open: burnin_incident_open_nodes below
        lines.append(f'burnin_incident_nodes{{cluster="{_esc(cluster)}",check="{_esc(i.check)}",'
                     f'rule="{_esc(i.rule)}",component="{_esc(i.component)}"}} {len(i.nodes)}')
    held = [i for i in incidents if i.id]
    if held:  # open in the ledger: shown by every run until closed
        lines += ["# HELP burnin_incident_open_nodes Nodes an open shared-cause incident "
                  "holds out of admission, until a person closes it or a run passes them "
                  "all.", "# TYPE burnin_incident_open_nodes gauge"]
        lines += [f'burnin_incident_open_nodes{{cluster="{_esc(cluster)}",incident="{i.id}",'
                  f'check="{_esc(i.check)}"}} {len(i.nodes)}' for i in held]
    return "\n".join(lines) + "\n"
