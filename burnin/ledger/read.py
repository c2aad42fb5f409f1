"""The quarantine ledger's reads: who is in quarantine, a node's history, repeat
offenders, and the whole ledger in one snapshot (`burnin ledger copy`). A mixin of
burnin.ledger.api.Ledger, whose transactions (`_read`, `_guard`, `_backend`) it uses; writes
stay in burnin/ledger/api.py."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from burnin.ledger.runs import DAY, RUN_COLUMNS

if TYPE_CHECKING:
    from burnin.ledger.backends import Backend

T = TypeVar("T")

QUARANTINE_COLUMNS = ("node", "cluster", "checks", "reasons", "figures", "run_id", "since",
                      "updated", "set_by", "clean_runs", "drained_by_burnin", "by_hand")
HISTORY_COLUMNS = ("node", "time", "event", "who", "why", "run_id")


@dataclass(frozen=True)
class Entry:
    node: str
    cluster: str
    checks: tuple[str, ...]
    reasons: tuple[str, ...]
    figures: dict
    run_id: str
    since: float
    updated: float
    set_by: str
    clean_runs: int
    drained_by_burnin: bool
    by_hand: bool = False  # quarantined by an operator: clean runs never release it


class LedgerReads:
    """The reads of burnin.ledger.api.Ledger."""

    if TYPE_CHECKING:  # burnin.ledger.api.Ledger's, for the type checker only
        _backend: Backend

        def _read(self, work: Callable[[Any], T]) -> T: ...
        def _guard(self) -> AbstractContextManager[None]: ...

    def repeat_offenders(self, times: int, days: float,
                         now: float | None = None) -> dict[str, int]:
        """{node: times quarantined within `days`} of every node quarantined at least
        `times` times in that window, in or out of quarantine now."""
        since = (time.time() if now is None else now) - days * DAY
        rows = self._read(lambda db: db.execute(
            "SELECT node, COUNT(*) FROM history WHERE event = ? AND time >= ? GROUP BY node "
            "ORDER BY node", ("quarantined", since)).fetchall())
        return {node: n for node, n in rows if n >= times}

    def get(self, node: str) -> Entry | None:
        entries = self._entries("WHERE node = ?", (node,))
        return entries[0] if entries else None

    def entries(self) -> list[Entry]:
        return self._entries("ORDER BY node", ())

    def quarantined(self) -> set[str]:
        return {e.node for e in self.entries()}

    def history(self, node: str) -> list[dict]:
        rows = self._read(lambda db: db.execute(
            "SELECT time, event, who, why, run_id FROM history WHERE node = ? ORDER BY id",
            (node,)).fetchall())
        return [dict(zip(("time", "event", "who", "why", "run_id"), r, strict=True))
                for r in rows]

    def _entries(self, where: str, args: tuple) -> list[Entry]:
        rows = self._read(lambda db: db.execute(
            f"SELECT {', '.join(QUARANTINE_COLUMNS)} FROM quarantine {where}", args).fetchall())
        return [_entry(r) for r in rows]

    def dump(self) -> tuple[list[tuple], list[tuple], list[tuple]]:
        """(quarantine rows, history rows in order, kept runs in order), read in one
        snapshot, without writing (a source this user may only read can be copied)."""
        def work(db):
            return (db.execute(f"SELECT {', '.join(QUARANTINE_COLUMNS)} FROM quarantine "
                               "ORDER BY node").fetchall(),
                    db.execute(f"SELECT {', '.join(HISTORY_COLUMNS)} FROM history "
                               "ORDER BY id").fetchall(),
                    db.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs "
                               "ORDER BY id").fetchall())
        with self._guard(), self._backend.transaction(self._backend.begin_snapshot) as db:
            return work(db)


def _entry(r) -> Entry:
    return Entry(r[0], r[1], tuple(json.loads(r[2])), tuple(json.loads(r[3])),
                 json.loads(r[4]), r[5], r[6], r[7], r[8], r[9], bool(r[10]), bool(r[11]))
