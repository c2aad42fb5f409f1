"""The ledger's memory of `burnin run --rolling` (burnin/cli/rolling.py): each step of a
node through a wave is an event of its `history`, so that `burnin history NODE` shows it,
ledger copies carry it, and a loop that was killed, interrupted or whose controller
rebooted reads where it left off. No table of its own: the history is the record.

Events: `rolling-out` (drained for a wave), `rolling-validated` (the wave's run passed it;
its time is when the node was last validated), `rolling-released` (back in service
without a verdict: its jobs did not end in time, or the loop stopped), `rolling-failed`
(the run did not pass it: left to quarantine); and `rolling-hook`, what a site's hook
said. `RollingLog` is a mixin of
burnin.ledger.api.Ledger, whose `_read` and `note` it uses."""

from __future__ import annotations

from collections.abc import Callable
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
        def note(self, node: str, event: str, why: str, run_id: str | None = None,
                 who: str = "burnin") -> None: ...

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
