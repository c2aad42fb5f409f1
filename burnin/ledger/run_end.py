"""The end of a run in the ledger: its verdicts, releases and failures in ONE transaction,
and then, each in a transaction of its own, what its actions did.

A fault between the writes of a run's end (a database lost, a statement refused) must
leave nothing half-done: releases made while the failures beside them are not recorded
would let the run say "nobody was quarantined" over a ledger that moved. So the run's
kept verdicts (`runs`), its clean re-validation counts and releases, and its failures go
in together or not at all. A Slurm drain is recorded in that same transaction, before
the drain is asked for (`drained_by_burnin`): if the write after the drain is lost,
the ledger still knows burnin drains the node, and `scontrol resume` is only ever sent
to a node whose Slurm reason is burnin's (burnin/gate/actions.py), so the mark is safe even
where the drain did not happen.

A mixin of burnin.ledger.api.Ledger, whose transactions and in-transaction writes it uses.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from burnin.ledger.runs import NodeRun, encode_runs
from burnin.model.incident import Incident
from burnin.model.outcome import ActionResult


@dataclass(frozen=True)
class RunVerdicts:
    """What a finished run hands the ledger."""

    cluster: str
    run_id: str
    kept: list[NodeRun]                      # every judged node's verdict (`runs`)
    keep_days: float                         # quarantine.keep_runs_days
    # Nodes clean in a re-validation run: {node: the checks it passed}
    clean: dict[str, frozenset[str]] = field(default_factory=dict)
    failures: list[tuple[str, list, list, dict]] = field(default_factory=list)
    release_after: int = 2
    repeat: tuple[int, float] | None = None  # (times, days): a repeat offender
    drain: bool = False                      # quarantine.actions drains new ones in Slurm
    who: str = "burnin"
    incidents: tuple[Incident, ...] = ()     # shared causes (burnin/gate/incidents.py)


@dataclass(frozen=True)
class RunRecorded:
    """What the ledger made of a run's verdicts, all in one committed transaction."""

    new: dict[str, bool] = field(default_factory=dict)          # failed: new in quarantine
    clean: dict[str, int] = field(default_factory=dict)         # clean runs so far
    released: tuple[str, ...] = ()
    resume: tuple[str, ...] = ()                                # released, drained by burnin
    # Clean in a run that did not include every check it failed: not counted.
    not_counted: dict[str, tuple[str, ...]] = field(default_factory=dict)


T = TypeVar("T")


class RunEndWrites:
    """Ledger methods for the end of a run."""

    if TYPE_CHECKING:  # the other parts of burnin.ledger.api.Ledger, for the type checker
        def _write(self, work: Callable[[Any], T]) -> T: ...
        def _clean_in(self, db: Any, node: str, run_id: str, release_after: int,
                      repeat: tuple[int, float] | None, now: float) -> tuple[int, bool]: ...
        def _failures_in(self, db: Any, cluster: str, encoded: list[tuple], run_id: str,
                         who: str, now: float) -> dict[str, bool]: ...

        @staticmethod
        def _log(db: Any, node: Any, event: Any, who: Any, why: Any, run_id: Any,
                 now: Any) -> None: ...

        @staticmethod
        def _runs_in(db: Any, rows: list[tuple], keep_days: float, now: float) -> int: ...

        @staticmethod
        def _incidents_in(db: Any, cluster: str, run_id: str, incidents: Any,
                          now: float) -> None: ...

    def record_run_end(self, v: RunVerdicts) -> RunRecorded:
        """The run's verdicts, releases and failures in one transaction (retried whole
        when a concurrent one made PostgreSQL refuse it); nothing of it when it fails.

        A node clean in a re-validation run counts toward release only when the run
        included every check it is in quarantine for: a run of `-k health` says nothing
        of the sdc that quarantined it."""
        now = time.time()
        rows, encoded = encode_runs(v.cluster, v.kept), encode_failures(v.failures)

        def work(db) -> RunRecorded:
            if rows:
                self._runs_in(db, rows, v.keep_days, now)
            if v.incidents:
                self._incidents_in(db, v.cluster, v.run_id, v.incidents, now)
            clean, released, resume, short = {}, [], [], {}
            for node, passed in sorted(v.clean.items()):
                row = db.execute("SELECT checks, drained_by_burnin FROM quarantine "
                                 "WHERE node = ?", (node,)).fetchone()
                if row is None:
                    continue  # released meanwhile (by hand, or another run): nothing to count
                lacking = tuple(c for c in json.loads(row[0]) if c not in passed)
                if lacking:
                    short[node] = lacking
                    self._log(db, node, "not-counted", v.who,
                              f"clean, but this run did not include {', '.join(lacking)}, "
                              "which it is in quarantine for: not counted toward release",
                              v.run_id, now)
                    continue
                count, gone = self._clean_in(db, node, v.run_id, v.release_after, v.repeat,
                                             now)
                clean[node] = count
                if gone:
                    released.append(node)
                    if row[1]:
                        resume.append(node)
            new = self._failures_in(db, v.cluster, encoded, v.run_id, v.who, now) \
                if encoded else {}
            if v.drain:  # before the drain is asked for: see the module's docstring
                db.executemany("UPDATE quarantine SET drained_by_burnin = 1 WHERE node = ?",
                               [(n,) for n, is_new in new.items() if is_new])
            return RunRecorded(new, clean, tuple(released), tuple(resume), short)
        return self._write(work)

    def record_actions(self, node: str, results: list[ActionResult], run_id: str | None,
                       who: str = "burnin") -> None:
        """What a just-quarantined node's actions did, in one transaction: each noted in
        its history, and a Slurm action that did not drain it (already drained by someone
        else, or scontrol failed) takes back the mark that burnin drained it."""
        now = time.time()

        def work(db) -> None:
            for r in results:
                self._log(db, node, "action" if r.ok else "action-failed", who,
                          f"{r.action}: {r.message}", run_id, now)
                if r.action == "slurm" and not r.drained:
                    db.execute("UPDATE quarantine SET drained_by_burnin = 0 WHERE node = ?",
                               (node,))
        self._write(work)

    def record_reconciled(self, node: str, result: ActionResult, run_id: str | None,
                          who: str = "burnin") -> None:
        """A node the ledger holds that Slurm had in service (or under node-check's drain,
        which node-check lifts), drained again with its ledger reason, or not: the
        `reconciled` (or `reconcile-failed`) event in its history and, in the same
        transaction, whether burnin drained it (marked before the drain was asked for)."""
        now = time.time()

        def work(db) -> None:
            self._log(db, node, "reconciled" if result.drained else "reconcile-failed", who,
                      f"{result.action}: {result.message}", run_id, now)
            db.execute("UPDATE quarantine SET drained_by_burnin = ? WHERE node = ?",
                       (int(result.drained), node))
        self._write(work)


def encode_failures(failures: list[tuple[str, list, list, dict]]) -> list[tuple]:
    """A run's failures as the ledger stores them: (node, checks, reasons, figures, why).
    Done before a transaction: a figure JSON cannot hold fails the write before anything
    is taken, and a retried transaction encodes nothing again."""
    return [(node, json.dumps(checks), json.dumps(reasons), json.dumps(figures),
             "; ".join(reasons)[:4000]) for node, checks, reasons, figures in failures]
