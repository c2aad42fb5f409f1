"""The ledger's memory of `burnin run --rolling` (burnin/cli/rolling.py): each step of a
node through a wave is an event of its `history`, so that `burnin history NODE` shows it,
ledger copies carry it, and a loop that was killed, interrupted or whose controller
rebooted reads where it left off. No table of its own: the history is the record.

Events: `rolling-out` (drained for a wave), `rolling-validated` (the wave's run passed it;
its time is when the node was last validated), `rolling-released` (back in service
without a verdict: its jobs did not end in time, or the loop stopped), `rolling-failed`
(the run did not pass it: left to quarantine); and `rolling-hook`, what a site's hook
said. `RollingLog` is a mixin of
burnin.ledger.api.Ledger, whose `_read` and `_write` it uses.

A wave's step over its nodes (a thousand of them at 10,000 nodes and `max_out` 10%) is
one transaction (`note_all`), not one per node: each is an fsync (SQLite) or a round trip
(PostgreSQL), and one per node per event made a 10,000-node loop wait some 100 s on its
disk (benchmarks/RESULTS.md, "Rolling re-validation at 10,000 nodes")."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

OUT, VALIDATED, RELEASED, FAILED = ("rolling-out", "rolling-validated", "rolling-released",
                                    "rolling-failed")
EVENTS = (OUT, VALIDATED, RELEASED, FAILED)
# A rolling hook's call (burnin/gate/rolling_control.py): its result and the end of its
# output; not a step of the node through a wave, so not one of EVENTS.
HOOK = "rolling-hook"
T = TypeVar("T")


class RollingLog:
    if TYPE_CHECKING:
        def _read(self, work: Callable[[Any], T]) -> T: ...
        def _write(self, work: Callable[[Any], T]) -> T: ...
        @staticmethod
        def _log(db, node, event, who, why, run_id, now) -> None: ...

    def note_all(self, notes: Iterable[tuple[str, str, str, str | None]],
                 who: str = "burnin") -> None:
        """Each (node, event, why, run_id) into the nodes' history as Ledger.note writes
        one, in this order, in one transaction: all of them or, on a crash, none."""
        rows = list(notes)
        if not rows:
            return
        now = time.time()

        def work(db) -> None:
            for node, event, why, run_id in rows:
                self._log(db, node, event, who, why, run_id, now)
        self._write(work)

    def rolling_validated(self) -> dict[str, float]:
        """{node: when a rolling run last validated it}."""
        rows = self._read(lambda db: db.execute(
            "SELECT node, MAX(time) FROM history WHERE event = ? GROUP BY node",
            (VALIDATED,)).fetchall())
        return {node: float(t) for node, t in rows}

    def rolling_last(self) -> dict[str, str]:
        """{node: its last rolling event}: `rolling-out` names a node a loop drained and
        has not yet given back nor judged."""
        marks = ", ".join("?" * len(EVENTS))
        rows = self._read(lambda db: db.execute(
            f"SELECT h.node, h.event FROM history h JOIN (SELECT node, MAX(id) AS id FROM "
            f"history WHERE event IN ({marks}) GROUP BY node) last ON h.id = last.id",
            EVENTS).fetchall())
        return dict(rows)
