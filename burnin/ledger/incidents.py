"""The ledger's memory of shared-cause incidents (burnin/gate/incidents.py): one row per
incident of a run, kept beside the quarantine and never quarantining anyone.

An incident is open from the run that found it until a person closes it (`burnin incident
close ID`) or a later run passes every one of its nodes in its check. While it is open its
nodes are held as its members: no fault counted, no action, no drain, but `burnin admit
--inventory/--ledger` refuses them (`incident_holds`), and every run's outputs show it.

Its table's SQL in both engines' words (`migration`, schema steps 4 and 5 of
burnin/ledger/backends.py) and the ledger methods over it (`IncidentLog`, a mixin of
burnin.ledger.api.Ledger, whose transactions `_write` and `_read` it uses)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from burnin.core.safetext import safe_text
from burnin.errors import IncidentError
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


def closing_migration(real: str) -> tuple[str, ...]:
    """Schema step 5: an incident is open until closed (`closed`: when, by whom, why).
    Incidents kept before this step held nobody: they are closed by it, saying so."""
    return (f"ALTER TABLE incidents ADD COLUMN closed {real}",
            "ALTER TABLE incidents ADD COLUMN closed_by TEXT",
            "ALTER TABLE incidents ADD COLUMN closed_why TEXT",
            "UPDATE incidents SET closed = time, closed_by = 'burnin', closed_why = "
            "'kept before incidents held their nodes' WHERE closed IS NULL")


@dataclass(frozen=True)
class KeptIncident:
    """One incident as the ledger keeps it."""

    run_id: str
    time: float
    incident: Incident     # with its id and run_id
    closed: float | None = None
    closed_by: str = ""
    closed_why: str = ""


T = TypeVar("T")


class IncidentLog:
    """Ledger methods over `incidents`."""

    if TYPE_CHECKING:  # burnin.ledger.api.Ledger's, for the type checker only
        def _write(self, work: Callable[[Any], T]) -> T: ...
        def _read(self, work: Callable[[Any], T]) -> T: ...

        @staticmethod
        def _log(db: Any, node: Any, event: Any, who: Any, why: Any, run_id: Any,
                 now: Any) -> None: ...

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
                  since: float = 0.0, still_open: bool = False) -> list[KeptIncident]:
        """The kept incidents since `since`, oldest first: those naming `node`, or of
        `run_id`, when given; only the open ones with `still_open`."""
        where = " AND closed IS NULL" if still_open else ""
        rows = self._read(lambda db: db.execute(
            f"{SELECT} WHERE time >= ?{where} ORDER BY time, id", (since,)).fetchall())
        out = [_kept(row) for row in rows]
        return [k for k in out if (node is None or node in k.incident.nodes)
                and (run_id is None or k.run_id == run_id)]

    def incident_holds(self) -> dict[str, str]:
        """{node: why} of every node an open incident holds: `burnin admit` refuses them."""
        held: dict[str, str] = {}
        for k in self.incidents(still_open=True):
            for node in k.incident.nodes:
                held.setdefault(node, k.incident.still_open)
        return held

    def close_incident(self, number: int, why: str, who: str) -> KeptIncident:
        """A person closes open incident `number`: its nodes are held no more (each node's
        history says so). IncidentError when there is none open of that number."""
        now = time.time()

        def work(db) -> KeptIncident:
            row = db.execute(f"{SELECT} WHERE id = ?", (number,)).fetchone()
            if row is None:
                raise IncidentError(f"no incident {number} in the ledger")
            kept = _kept(row)
            if kept.closed is not None:
                raise IncidentError(f"incident {number} was closed already by "
                                    f"{kept.closed_by}: {kept.closed_why}")
            return self._close_in(db, kept, who, safe_text(why), now)
        return self._write(work)

    def settle_incidents(self, run_id: str, passed: dict[str, set[str]],
                         who: str = "burnin") -> list[KeptIncident]:
        """Close every open incident of an earlier run whose nodes all passed its check in
        run `run_id` (`passed`: {check: nodes that passed it}), in one transaction; the
        ones closed."""
        now = time.time()

        def work(db) -> list[KeptIncident]:
            rows = db.execute(f"{SELECT} WHERE closed IS NULL ORDER BY id").fetchall()
            done = []
            for kept in map(_kept, rows):
                i = kept.incident
                if kept.run_id != run_id and set(i.nodes) <= passed.get(i.check, set()):
                    done.append(self._close_in(
                        db, kept, who, f"run {run_id} passed all its nodes in {i.check}", now))
            return done
        return self._write(work)

    def _close_in(self, db, kept: KeptIncident, who: str, why: str,
                  now: float) -> KeptIncident:
        why = why[:MESSAGE_CHARS]
        db.execute("UPDATE incidents SET closed = ?, closed_by = ?, closed_why = ? "
                   "WHERE id = ?", (now, who, why, kept.incident.id))
        for node in kept.incident.nodes:
            self._log(db, node, "incident-closed", who,
                      f"incident {kept.incident.id} ({kept.incident.name}) closed: {why}",
                      kept.run_id, now)
        return replace(kept, closed=now, closed_by=who, closed_why=why)


SELECT = ("SELECT id, run_id, time, figures, closed, closed_by, closed_why FROM incidents")


def _kept(row) -> KeptIncident:
    number, rid, t, figures, closed, by, why = row
    incident = replace(Incident.of_dict(json.loads(figures)), id=int(number),
                       run_id=str(rid))
    return KeptIncident(str(rid), float(t), incident,
                        None if closed is None else float(closed), by or "", why or "")
