"""The ledger's memory of runs: every run's verdict on every node it judged (`runs`),
kept for a bounded time. What `burnin history` prints, and what failures per node-day and
the speed trend are computed from (burnin/figures/track_record.py). A mixin of
burnin.ledger.api.Ledger, whose transactions (`_write`, `_read`) it uses."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from burnin.core.safetext import safe_text

DAY = 86400.0  # seconds
RUN_COLUMNS = ("node", "cluster", "run_id", "time", "outcome", "checks", "reasons", "speed",
               "figures")
REASON_CHARS = 1000  # of each reason a kept run holds: the evidence folder has the rest
KEPT_CHUNK = 500  # nodes whose kept runs are read at once (each_kept_since)
T = TypeVar("T")


@dataclass(frozen=True)
class NodeRun:
    """One run's verdict on one node, as the ledger keeps it (`runs`)."""

    node: str
    run_id: str
    time: float
    outcome: str                  # the node's worst: passed, failed, error
    checks: tuple[str, ...] = ()  # the checks it did not pass
    reasons: tuple[str, ...] = ()
    speed: float | None = None    # its relative speed (burnin/figures/goodput.py)
    figures: dict = field(default_factory=dict)  # what set the speed, the wear counters

    def as_dict(self) -> dict:
        return {"run_id": self.run_id, "time": self.time, "outcome": self.outcome,
                "checks": list(self.checks), "reasons": list(self.reasons),
                "speed": self.speed, "figures": self.figures}


class RunLog:
    """Ledger methods over `runs`."""

    if TYPE_CHECKING:  # burnin.ledger.api.Ledger's, for the type checker only
        def _write(self, work: Callable[[Any], T]) -> T: ...
        def _read(self, work: Callable[[Any], T]) -> T: ...

    def record_runs(self, cluster: str, runs: list[NodeRun], keep_days: float,
                    now: float | None = None) -> int:
        """A run's verdict on each node it judged, in one transaction, and every kept run
        older than `keep_days` let go in the same one (the table stays bounded however
        long the fleet lives). The number let go."""
        now = time.time() if now is None else now
        rows = encode_runs(cluster, runs)
        return self._write(lambda db: self._runs_in(db, rows, keep_days, now))

    @staticmethod
    def _runs_in(db, rows: list[tuple], keep_days: float, now: float) -> int:
        """record_runs inside the caller's transaction `db`."""
        db.executemany(f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) "
                       f"VALUES ({', '.join('?' * len(RUN_COLUMNS))})", rows)
        gone = db.execute("SELECT count(*) FROM runs WHERE time < ?",
                          (now - keep_days * DAY,)).fetchone()[0]
        if gone:
            db.execute("DELETE FROM runs WHERE time < ?", (now - keep_days * DAY,))
        return gone

    def runs(self, node: str) -> list[NodeRun]:
        """The node's kept runs, oldest first."""
        rows = self._read(lambda db: db.execute(
            f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE node = ? ORDER BY time, id",
            (node,)).fetchall())
        return [NodeRun(r[0], r[2], r[3], r[4], tuple(json.loads(r[5])),
                        tuple(json.loads(r[6])), r[7], json.loads(r[8])) for r in rows]

    def speeds_since(self, since: float) -> dict[str, list[tuple[float, float]]]:
        """{node: [(time, relative speed)] oldest first} of the runs kept since `since`."""
        out: dict[str, list[tuple[float, float]]] = {}
        for node, t, speed in self._read(lambda db: db.execute(
                "SELECT node, time, speed FROM runs WHERE time >= ? AND speed IS NOT NULL "
                "ORDER BY time, id", (since,)).fetchall()):
            out.setdefault(node, []).append((t, speed))
        return out

    def kept_since(self, since: float, nodes: set[str] | None = None
                   ) -> dict[str, list[tuple[float, dict, float | None]]]:
        """{node: [(time, kept figures, relative speed)] oldest first} of the runs kept
        since `since` (of `nodes`, or every node): what the replace-soon list's trends are
        fitted to (burnin/figures/replace_soon.py)."""
        out: dict[str, list[tuple[float, dict, float | None]]] = {}
        self.each_kept_since(since, out.__setitem__, nodes)
        return out

    def each_kept_since(self, since: float,
                        visit: Callable[[str, list[tuple[float, dict, float | None]]], None],
                        nodes: set[str] | None = None) -> None:
        """visit(node, its kept runs since `since` as kept_since gives them) for each
        node (of `nodes`, or every node), a chunk of nodes read at a time in one snapshot:
        a fleet's two months of runs are never all held at once. A row whose figures are
        not JSON reads as none."""
        def work(db) -> None:
            names = sorted(r[0] for r in db.execute(
                "SELECT DISTINCT node FROM runs WHERE time >= ?", (since,)).fetchall()
                if nodes is None or r[0] in nodes)
            for i in range(0, len(names), KEPT_CHUNK):
                chunk = names[i:i + KEPT_CHUNK]
                rows = db.execute(
                    f"SELECT node, time, speed, figures FROM runs WHERE time >= ? AND node IN "
                    f"({','.join('?' * len(chunk))}) ORDER BY node, time, id",
                    (since, *chunk)).fetchall()
                points: list[tuple[float, dict, float | None]] = []
                for at, (node, t, speed, figures) in enumerate(rows):
                    points.append((t, _figures(figures), speed))
                    if at + 1 == len(rows) or rows[at + 1][0] != node:
                        visit(node, points)
                        points = []
        self._read(work)

    def exposure_since(self, since: float) -> dict[str, tuple[float, int]]:
        """{node: (its first kept run since `since`, times quarantined since then)} for
        every node with a run kept in the window: failures per node-day
        (burnin/figures/track_record.py)."""
        def work(db):
            first = db.execute("SELECT node, min(time) FROM runs WHERE time >= ? "
                               "GROUP BY node", (since,)).fetchall()
            times = dict(db.execute("SELECT node, count(*) FROM history WHERE event = ? AND "
                                    "time >= ? GROUP BY node",
                                    ("quarantined", since)).fetchall())
            return {node: (t, times.get(node, 0)) for node, t in first}
        return self._read(work)


def _figures(text) -> dict:
    try:
        kept = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


def encode_runs(cluster: str, runs: list[NodeRun]) -> list[tuple]:
    """`runs` as the ledger stores them (RUN_COLUMNS)."""
    return [(r.node, cluster, r.run_id, r.time, r.outcome, json.dumps(list(r.checks)),
             json.dumps([safe_text(x)[:REASON_CHARS] for x in r.reasons]), r.speed,
             json.dumps(r.figures)) for r in runs]
