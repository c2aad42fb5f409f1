"""The quarantine ledger: which nodes are out of production, why, and their history.

One API over two engines (burnin/ledger/backends.py): an SQLite file, the embedded
default, or a PostgreSQL database shared by controllers on different machines. Every
change is one transaction, so concurrent writers (pytest-xdist workers, runs, operators)
lose nothing and a process killed mid-write leaves the ledger as it was before that
transaction. History is append-only. A database error is a LedgerError: the controller's
fault, never a node's.
"""

from __future__ import annotations

import json
import random
import time
from contextlib import contextmanager
from pathlib import Path

from burnin.core.safetext import safe_text
from burnin.ledger.backends import (  # noqa: F401  (callers catch and read them here)
    BUSY_TIMEOUT_S,
    Backend,
    LedgerError,
    LedgerLost,
    LedgerMissing,
    LedgerNotEmpty,
    LedgerUrlError,
    SqliteBackend,
    backend_for,
    parse_location,
)
from burnin.ledger.incidents import INCIDENT_COLUMNS, IncidentLog
from burnin.ledger.read import (  # noqa: F401  (Entry: callers)
    HISTORY_COLUMNS,
    QUARANTINE_COLUMNS,
    Entry,
    LedgerReads,
    _entry,
)
from burnin.ledger.rolling import RollingLog
from burnin.ledger.run_end import (  # noqa: F401  (callers)
    RunEndWrites,
    RunRecorded,
    RunVerdicts,
    encode_failures,
)
from burnin.ledger.runs import DAY, RUN_COLUMNS, NodeRun, RunLog  # noqa: F401  (NodeRun: callers)

# A serialization failure (PostgreSQL) is retried this often, with growing random
# pauses (at most PAUSE_S each), before the run hears of it: some 10 s of contention.
WRITE_ATTEMPTS = 20
PAUSE_S = 1.0


class Ledger(RunEndWrites, RunLog, IncidentLog, RollingLog, LedgerReads):
    def __init__(self, where: str | Path, create: bool = True):
        """Open the ledger at `where` (a path, sqlite:///path, postgresql://... or another
        scheme of BACKENDS), creating it where there is none at all (`create`): the
        low-level opener; the product opens ledgers through burnin/ledger/open.py, which
        decides when one may be created. LedgerMissing where there is none and not
        `create`; LedgerLost where one was and is missing, empty or lost tables;
        LedgerError when the database cannot be reached or refuses; LedgerUrlError for a
        bad location."""
        location = parse_location(where)
        self.path = location if isinstance(location, Path) else None
        self._backend: Backend = backend_for(location)
        self.where = self._backend.where
        with self._guard():
            self.created = self._backend.open(create)  # True: made here, now

    @property
    def marker(self) -> Path:
        """The file beside an SQLite ledger that says burnin created one here."""
        backend = self._backend
        if not isinstance(backend, SqliteBackend):  # a database server keeps no file beside
            raise AttributeError(f"the ledger {self.where} is no SQLite file: it has no marker")
        return backend.marker

    def check_writable(self) -> None:
        """Raise (LedgerError, OSError) unless a write transaction can be taken and every
        table written as a run writes it (a PostgreSQL role may lack a right); nothing is
        kept."""
        with self._guard():
            db = self._backend.connect()
            try:
                db.execute(self._backend.begin)
                try:
                    db.execute("INSERT INTO history (node, time, event, who, why) "
                               "VALUES ('', 0, 'writable?', 'burnin', '')")
                    # rights are checked when a statement starts, whatever rows it meets
                    db.execute("INSERT INTO quarantine SELECT * FROM quarantine WHERE 0 = 1")
                    db.execute("UPDATE quarantine SET clean_runs = 0 WHERE 0 = 1")
                    db.execute("DELETE FROM quarantine WHERE 0 = 1")
                    # every run keeps its verdicts (`runs`) and lets the oldest go
                    columns = ", ".join(RUN_COLUMNS)
                    db.execute(f"INSERT INTO runs ({columns}) SELECT {columns} FROM runs "
                               "WHERE 0 = 1")
                    db.execute("DELETE FROM runs WHERE 0 = 1")
                    # and its shared-cause incidents (burnin/ledger/incidents.py)
                    kept = ", ".join(INCIDENT_COLUMNS)  # not its id: PostgreSQL generates it
                    db.execute(f"INSERT INTO incidents ({kept}) SELECT {kept} FROM incidents "
                               "WHERE 0 = 1")
                finally:
                    db.execute("ROLLBACK")
            finally:
                db.close()

    @contextmanager
    def _guard(self):
        """The engine's errors as LedgerError, naming the ledger."""
        try:
            yield
        except self._backend.errors as e:
            # one line: PostgreSQL adds DETAIL and CONTEXT lines, and faults are one line
            said = " ".join(self._backend.scrub(str(e)).split()) or type(e).__name__
            raise LedgerError(f"the quarantine ledger {self.where}: {said}") from e

    def _connect(self):
        return self._backend.connect()

    @contextmanager
    def _tx(self):
        """One write transaction, taken at its start so concurrent writers queue."""
        with self._guard(), self._backend.transaction() as db:
            yield db

    def _write(self, work):
        """work(db) in one write transaction, run again from the start when the engine
        refused it for a concurrent one (PostgreSQL's SERIALIZABLE), a bounded number of
        times: `work` keeps nothing outside the transaction."""
        with self._guard():
            for attempt in range(1, WRITE_ATTEMPTS + 1):
                try:
                    with self._backend.transaction() as db:
                        return work(db)
                except self._backend.retryable:
                    if attempt == WRITE_ATTEMPTS:
                        raise
                    time.sleep(random.uniform(0, min(PAUSE_S, 0.005 * 2 ** attempt)))
        raise AssertionError("unreachable")

    def _read(self, work):
        with self._guard(), self._backend.reading() as db:
            return work(db)

    # --- writes ----------------------------------------------------------------------

    def record_failure(self, node: str, cluster: str, checks: list[str], reasons: list[str],
                       figures: dict, run_id: str, who: str = "burnin") -> bool:
        """Quarantine `node` (or keep it there, resetting its clean runs). True if new."""
        return self.record_failures(cluster, [(node, checks, reasons, figures)], run_id,
                                    who)[node]

    def record_failures(self, cluster: str, failures: list[tuple[str, list, list, dict]],
                        run_id: str, who: str = "burnin") -> dict[str, bool]:
        """Quarantine every (node, checks, reasons, figures) of a run in one transaction:
        all of them or, on a crash, none (one fsync for the run, not one per node: a
        fleet-wide bad rollout fails thousands at once). {node: new in quarantine}."""
        now = time.time()
        encoded = encode_failures(failures)  # before the transaction
        return self._write(lambda db: self._failures_in(db, cluster, encoded, run_id, who,
                                                        now))

    def _failures_in(self, db, cluster: str, encoded: list[tuple], run_id: str, who: str,
                     now: float) -> dict[str, bool]:
        """record_failures inside the caller's transaction `db`."""
        # A few statements for the whole run, not three per node: over a network each
        # statement is a round trip (PostgreSQL), and a bad rollout fails thousands.
        names = [f[0] for f in encoded]
        known: set[str] = set()
        for i in range(0, len(names), 500):
            chunk = names[i:i + 500]
            known.update(r[0] for r in db.execute(
                f"SELECT node FROM quarantine WHERE node IN ({','.join('?' * len(chunk))})",
                tuple(chunk)).fetchall())
        out: dict[str, bool] = {}
        inserts, updates, history = [], [], []
        for node, checks, reasons, figures, why in encoded:
            if node in known:
                updates.append((checks, reasons, figures, run_id, now, node))
            else:
                inserts.append((node, cluster, checks, reasons, figures, run_id, now, now, who))
            history.append((node, now, "failed-again" if node in known else "quarantined",
                            who, safe_text(why), run_id))
            out.setdefault(node, node not in known)
            known.add(node)
        db.executemany("INSERT INTO quarantine (node, cluster, checks, reasons, figures, "
                       "run_id, since, updated, set_by) VALUES (?,?,?,?,?,?,?,?,?)", inserts)
        db.executemany("UPDATE quarantine SET checks = ?, reasons = ?, figures = ?, "
                       "run_id = ?, updated = ?, clean_runs = 0 WHERE node = ?", updates)
        db.executemany("INSERT INTO history (node, time, event, who, why, run_id) "
                       "VALUES (?,?,?,?,?,?)", history)
        return out

    def quarantine_by_hand(self, node: str, cluster: str, reason: str, who: str) -> bool:
        """An operator takes `node` out of production (`burnin quarantine add`): True if
        it is new here. A node already in quarantine stays, its clean runs reset, and is
        from now on released only by hand, as any node quarantined by hand."""
        now = time.time()
        why = f"quarantined by hand by {who}: {reason}"

        def work(db) -> bool:
            row = db.execute("SELECT reasons FROM quarantine WHERE node = ?", (node,)).fetchone()
            if row:
                db.execute("UPDATE quarantine SET reasons = ?, updated = ?, clean_runs = 0, "
                           "by_hand = 1 WHERE node = ?",
                           (json.dumps([*json.loads(row[0]), why]), now, node))
            else:
                db.execute("INSERT INTO quarantine (node, cluster, checks, reasons, figures, "
                           "run_id, since, updated, set_by, by_hand) "
                           "VALUES (?,?,?,?,?,?,?,?,?,1)",
                           (node, cluster, "[]", json.dumps([why]), "{}", "", now, now, who))
            self._log(db, node, "quarantined" if row is None else "held-by-hand", who,
                      reason, None, now)
            return row is None
        return self._write(work)

    def record_clean(self, node: str, run_id: str, release_after: int,
                     repeat: tuple[int, float] | None = None) -> tuple[int, bool]:
        """A clean re-validation run: (clean runs so far, released now?). A node
        quarantined by hand, or a repeat offender (quarantined `repeat` = (times, days)
        times within that many days), is counted but never released here: only by hand."""
        now = time.time()
        return self._write(lambda db: self._clean_in(db, node, run_id, release_after, repeat,
                                                     now))

    def _clean_in(self, db, node: str, run_id: str, release_after: int,
                  repeat: tuple[int, float] | None, now: float) -> tuple[int, bool]:
        """record_clean inside the caller's transaction `db`."""
        row = db.execute("SELECT clean_runs, by_hand FROM quarantine WHERE node = ?",
                         (node,)).fetchone()
        if row is None:
            return 0, False
        clean = row[0] + 1
        times = self._quarantined_since(db, node, now - repeat[1] * DAY) if repeat else 0
        if repeat and times >= repeat[0]:
            db.execute("UPDATE quarantine SET clean_runs = ?, updated = ? WHERE node = ?",
                       (clean, now, node))
            self._log(db, node, "clean", "burnin",
                      f"clean re-validation run {clean}; a repeat offender (quarantined "
                      f"{times} times in {repeat[1]:g} days): released only by hand",
                      run_id, now)
            return clean, False
        if clean >= release_after and not row[1]:
            db.execute("DELETE FROM quarantine WHERE node = ?", (node,))
            self._log(db, node, "released", "burnin",
                      f"{clean} consecutive clean re-validation runs", run_id, now)
            return clean, True
        db.execute("UPDATE quarantine SET clean_runs = ?, updated = ? WHERE node = ?",
                   (clean, now, node))
        self._log(db, node, "clean", "burnin",
                  f"clean re-validation run {clean}" + (
                      "; quarantined by hand: released only by hand" if row[1]
                      else f" of {release_after}"), run_id, now)
        return clean, False

    @staticmethod
    def _quarantined_since(db, node: str, since: float) -> int:
        return db.execute("SELECT COUNT(*) FROM history WHERE node = ? AND event = ? AND "
                          "time >= ?", (node, "quarantined", since)).fetchone()[0]

    def set_drained(self, node: str, drained: bool) -> None:
        self._write(lambda db: db.execute(
            "UPDATE quarantine SET drained_by_burnin = ? WHERE node = ?", (int(drained), node)))

    def release(self, node: str, reason: str, who: str) -> Entry | None:
        """Take `node` out of quarantine by hand; returns the entry it had, or None. The
        entry is read in the transaction that deletes it: what is returned is what went."""
        now = time.time()

        def work(db) -> Entry | None:
            rows = db.execute(f"SELECT {', '.join(QUARANTINE_COLUMNS)} FROM quarantine "
                              "WHERE node = ?", (node,)).fetchall()
            if not rows:
                return None
            db.execute("DELETE FROM quarantine WHERE node = ?", (node,))
            self._log(db, node, "released", who, reason, None, now)
            return _entry(rows[0])
        return self._write(work)

    def note(self, node: str, event: str, why: str, run_id: str | None = None,
             who: str = "burnin") -> None:
        now = time.time()
        self._write(lambda db: self._log(db, node, event, who, why, run_id, now))

    @staticmethod
    def _log(db, node, event, who, why, run_id, now) -> None:
        # Reasons quote nodes; text is made safe where it enters (burnin/core/safetext.py), and
        # once more here, where an unencodable character would roll back a whole run.
        db.execute("INSERT INTO history (node, time, event, who, why, run_id) "
                   "VALUES (?,?,?,?,?,?)", (node, now, event, who, safe_text(why), run_id))


    def load(self, quarantine: list[tuple], history: list[tuple], runs: list[tuple],
             force: bool) -> None:
        """Replace everything with `quarantine`, `history` and `runs` (as dump() gives
        them), in one transaction. LedgerNotEmpty when this ledger holds anything, unless
        `force`."""
        def work(db) -> None:
            held = db.execute("SELECT (SELECT count(*) FROM quarantine), "
                              "(SELECT count(*) FROM history), "
                              "(SELECT count(*) FROM runs)").fetchone()
            if any(held) and not force:
                raise LedgerNotEmpty(f"{self.where} holds {held[0]} node(s) in quarantine, "
                                     f"{held[1]} history event(s) and {held[2]} kept run(s)")
            for table in ("quarantine", "history", "runs"):
                db.execute(f"DELETE FROM {table}")
            marks = ", ".join("?" * len(QUARANTINE_COLUMNS))
            for row in quarantine:
                db.execute(f"INSERT INTO quarantine ({', '.join(QUARANTINE_COLUMNS)}) "
                           f"VALUES ({marks})", tuple(row))
            for row in history:  # in order: the new ids keep it
                db.execute(f"INSERT INTO history ({', '.join(HISTORY_COLUMNS)}) "
                           f"VALUES (?,?,?,?,?,?)", tuple(row))
            db.executemany(f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) "
                           f"VALUES ({', '.join('?' * len(RUN_COLUMNS))})",
                           [tuple(r) for r in runs])
        self._write(work)


def ledger_path(configured: str | None, reports_dir: Path) -> Path | str:
    """quarantine.ledger from the inventory (a Path for SQLite, the URL for PostgreSQL),
    or reports/quarantine.db. LedgerUrlError for a location burnin cannot open."""
    return parse_location(configured) if configured else reports_dir / "quarantine.db"
