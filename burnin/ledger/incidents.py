"""The ledger's memory of shared-cause incidents (burnin/gate/incidents.py): one row per
incident of a run, kept beside the quarantine and never quarantining anyone.

Its table's SQL in both engines' words (`migration`, schema step 4 of
burnin/ledger/backends.py) and the ledger methods over it (`IncidentLog`, a mixin of
burnin.ledger.api.Ledger, whose transactions `_write` and `_read` it uses)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from burnin.core.safetext import safe_text
from burnin.model.incident import Incident

INCIDENT_COLUMNS = ("cluster", "run_id", "time", "check_name", "rule", "component", "nodes",
                    "judged", "message", "figures")
MESSAGE_CHARS = 1000


def migration(real: str, serial: str) -> tuple[str, ...]:
    """Schema step 4: the `incidents` table, and its index by time (`burnin history`)."""
    return (f"""CREATE TABLE IF NOT EXISTS incidents (
                id {serial},
                cluster TEXT NOT NULL,
                run_id TEXT NOT NULL,
                time {real} NOT NULL,
                check_name TEXT NOT NULL,
                rule TEXT NOT NULL,        -- topology or fraction
                component TEXT NOT NULL,   -- switch=leafB, or '' for the fraction rule
                nodes TEXT NOT NULL,       -- JSON list of the incident's nodes
                judged INTEGER NOT NULL,   -- nodes judged for the check
                message TEXT NOT NULL,
                figures TEXT NOT NULL)     -- JSON: the incident, as_dict()""",
            "CREATE INDEX IF NOT EXISTS incidents_time ON incidents (time)")


@dataclass(frozen=True)
class KeptIncident:
    """One incident as the ledger keeps it."""

    run_id: str
    time: float
    incident: Incident


T = TypeVar("T")


class IncidentLog:
    """Ledger methods over `incidents`."""

    if TYPE_CHECKING:  # burnin.ledger.api.Ledger's, for the type checker only
        def _write(self, work: Callable[[Any], T]) -> T: ...

    def record_incidents(self, cluster: str, run_id: str, incidents: list[Incident],
                         now: float | None = None) -> None:
        """A run's incidents, in one transaction."""
        if incidents:
            now = time.time() if now is None else now
            self._write(lambda db: self._incidents_in(
                db, cluster, run_id, incidents, now))

    @staticmethod
    def _incidents_in(db, cluster: str, run_id: str, incidents, now: float) -> None:
        """The incidents' rows, inside the caller's transaction (a run's end writes them
        with its verdicts: burnin/ledger/run_end.py)."""
        rows = [(cluster, run_id, now, i.check, i.rule, safe_text(i.component),
                 json.dumps(list(i.nodes)), i.judged, safe_text(i.message)[:MESSAGE_CHARS],
                 json.dumps(i.as_dict())) for i in incidents]
        db.executemany(f"INSERT INTO incidents ({', '.join(INCIDENT_COLUMNS)}) "
                       f"VALUES ({', '.join('?' * len(INCIDENT_COLUMNS))})", rows)

    def incidents(self, node: str | None = None, run_id: str | None = None,
                  since: float = 0.0) -> list[KeptIncident]:
        """The kept incidents since `since`, oldest first: those naming `node`, or of
        `run_id`, when given."""
        rows = self._read(lambda db: db.execute(  # type: ignore[attr-defined]
            "SELECT run_id, time, figures FROM incidents WHERE time >= ? ORDER BY time, id",
            (since,)).fetchall())
        out = []
        for rid, t, figures in rows:
            incident = Incident.of_dict(json.loads(figures))
            if (node is None or node in incident.nodes) and (run_id is None or rid == run_id):
                out.append(KeptIncident(rid, t, incident))
        return out
