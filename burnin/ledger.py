"""The quarantine ledger: which nodes are out of production, why, and their history.

SQLite, every change one IMMEDIATE transaction, so several pytest-xdist workers and
several concurrent runs lose nothing, and a process killed mid-write leaves the file as
it was before that transaction (SQLite's journal). History is append-only.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from burnin.files import private_dirs, write_atomically
from burnin.text import safe_text

BUSY_TIMEOUT_S = 60
SCHEMA = """
CREATE TABLE IF NOT EXISTS quarantine (
    node TEXT PRIMARY KEY,
    cluster TEXT NOT NULL,
    checks TEXT NOT NULL,         -- JSON list of failed checks
    reasons TEXT NOT NULL,        -- JSON list of failure messages
    figures TEXT NOT NULL,        -- JSON: key figures, per check
    run_id TEXT NOT NULL,
    since REAL NOT NULL,
    updated REAL NOT NULL,
    set_by TEXT NOT NULL,
    clean_runs INTEGER NOT NULL DEFAULT 0,
    drained_by_burnin INTEGER NOT NULL DEFAULT 0,
    by_hand INTEGER NOT NULL DEFAULT 0   -- an operator's: released only by hand
);
CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node TEXT NOT NULL,
    time REAL NOT NULL,
    event TEXT NOT NULL,          -- quarantined, failed-again, clean, released, action, ...
    who TEXT NOT NULL,
    why TEXT NOT NULL,
    run_id TEXT
);
CREATE INDEX IF NOT EXISTS history_node ON history (node, id);
"""


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


class LedgerLost(Exception):
    """A ledger that existed is gone or emptied: starting an empty one would release every
    node it held, so nothing opens it until a person restores it (or says to start anew)."""


class Ledger:
    def __init__(self, path: str | Path, create: bool = True):
        """Open the ledger at `path`, creating it when it was never there (`create`).
        LedgerLost when burnin made a ledger there before and the file is now missing or
        empty; FileNotFoundError when it is missing and `create` is False."""
        self.path = Path(path).expanduser()
        marker = self.marker
        if not self.path.exists():
            if marker.exists():
                raise LedgerLost(f"the quarantine ledger {self.path} is missing, but burnin "
                                 f"created one there ({marker} says when): restore it from "
                                 f"a backup, or remove {marker} to start an empty ledger")
            if not create:
                raise FileNotFoundError(f"no quarantine ledger at {self.path}")
            private_dirs(self.path.parent)
            # owner-only from its first byte: it holds evidence
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            self._init()
            write_atomically(marker, f"burnin created {self.path.name} here at "
                                     f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n")
            return
        if self.path.is_file() and self.path.stat().st_size == 0 and marker.exists():
            raise LedgerLost(f"the quarantine ledger {self.path} is empty (0 bytes), but burnin "
                             f"created it ({marker} says when): restore it from a backup, or "
                             f"remove both files to start an empty ledger")
        self._init()
        if not marker.exists():  # a ledger from before the marker: from now on, guarded
            try:
                write_atomically(marker, f"burnin found {self.path.name} here at "
                                         f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n")
            except OSError:
                pass  # a reader without write access (burnin admit) guards nothing

    @property
    def marker(self) -> Path:
        """The file beside the ledger that says burnin created one here: without it, a
        deleted or truncated ledger would silently become an empty one."""
        return self.path.with_name(f".{self.path.name}.burnin")

    def check_writable(self) -> None:
        """Raise (sqlite3.Error, OSError) unless a write transaction can be taken and a
        row written; nothing is kept."""
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("INSERT INTO history (node, time, event, who, why) "
                           "VALUES ('', 0, 'writable?', 'burnin', '')")
            finally:
                db.execute("ROLLBACK")
        finally:
            db.close()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
        return db

    def _init(self) -> None:
        db = self._connect()
        try:
            columns = {row[1] for row in db.execute("PRAGMA table_info(quarantine)")}
            if "by_hand" in columns and db.execute(
                    "SELECT 1 FROM sqlite_master WHERE name = 'history_node'").fetchone():
                return  # up to date: a reader that may not write opens it too
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("BEGIN IMMEDIATE")
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            columns = {row[1] for row in db.execute("PRAGMA table_info(quarantine)")}
            if "by_hand" not in columns:  # a ledger from before `quarantine add`
                db.execute("ALTER TABLE quarantine ADD COLUMN by_hand INTEGER NOT NULL "
                           "DEFAULT 0")
            db.execute("COMMIT")
        finally:
            db.close()

    @contextmanager
    def _tx(self):
        """One write transaction, taken at its start so concurrent writers queue."""
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

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
        out: dict[str, bool] = {}
        with self._tx() as db:
            for node, checks, reasons, figures in failures:
                known = db.execute("SELECT 1 FROM quarantine WHERE node = ?",
                                   (node,)).fetchone()
                if known:
                    db.execute("UPDATE quarantine SET checks = ?, reasons = ?, figures = ?, "
                               "run_id = ?, updated = ?, clean_runs = 0 WHERE node = ?",
                               (json.dumps(checks), json.dumps(reasons), json.dumps(figures),
                                run_id, now, node))
                else:
                    db.execute("INSERT INTO quarantine (node, cluster, checks, reasons, "
                               "figures, run_id, since, updated, set_by) "
                               "VALUES (?,?,?,?,?,?,?,?,?)",
                               (node, cluster, json.dumps(checks), json.dumps(reasons),
                                json.dumps(figures), run_id, now, now, who))
                self._log(db, node, "failed-again" if known else "quarantined", who,
                          "; ".join(reasons)[:4000], run_id, now)
                out[node] = not known
        return out

    def quarantine_by_hand(self, node: str, cluster: str, reason: str, who: str) -> bool:
        """An operator takes `node` out of production (`burnin quarantine add`): True if
        it is new here. A node already in quarantine stays, its clean runs reset, and is
        from now on released only by hand, as any node quarantined by hand."""
        now = time.time()
        why = f"quarantined by hand by {who}: {reason}"
        with self._tx() as db:
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

    def record_clean(self, node: str, run_id: str, release_after: int) -> tuple[int, bool]:
        """A clean re-validation run: (clean runs so far, released now?). A node
        quarantined by hand is counted but never released here: only by hand."""
        now = time.time()
        with self._tx() as db:
            row = db.execute("SELECT clean_runs, by_hand FROM quarantine WHERE node = ?",
                             (node,)).fetchone()
            if row is None:
                return 0, False
            clean = row[0] + 1
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

    def set_drained(self, node: str, drained: bool) -> None:
        with self._tx() as db:
            db.execute("UPDATE quarantine SET drained_by_burnin = ? WHERE node = ?",
                       (int(drained), node))

    def release(self, node: str, reason: str, who: str) -> Entry | None:
        """Take `node` out of quarantine by hand; returns the entry it had, or None."""
        entry = self.get(node)
        if entry is None:
            return None
        with self._tx() as db:
            db.execute("DELETE FROM quarantine WHERE node = ?", (node,))
            self._log(db, node, "released", who, reason, None, time.time())
        return entry

    def note(self, node: str, event: str, why: str, run_id: str | None = None,
             who: str = "burnin") -> None:
        with self._tx() as db:
            self._log(db, node, event, who, why, run_id, time.time())

    @staticmethod
    def _log(db, node, event, who, why, run_id, now) -> None:
        # Reasons quote nodes; text is made safe where it enters (burnin/text.py), and
        # once more here, where an unencodable character would roll back a whole run.
        db.execute("INSERT INTO history (node, time, event, who, why, run_id) "
                   "VALUES (?,?,?,?,?,?)", (node, now, event, who, safe_text(why), run_id))

    # --- reads -----------------------------------------------------------------------

    def get(self, node: str) -> Entry | None:
        entries = self._entries("WHERE node = ?", (node,))
        return entries[0] if entries else None

    def entries(self) -> list[Entry]:
        return self._entries("ORDER BY node", ())

    def quarantined(self) -> set[str]:
        return {e.node for e in self.entries()}

    def history(self, node: str) -> list[dict]:
        db = self._connect()
        try:
            rows = db.execute("SELECT time, event, who, why, run_id FROM history "
                              "WHERE node = ? ORDER BY id", (node,)).fetchall()
        finally:
            db.close()
        return [dict(zip(("time", "event", "who", "why", "run_id"), r, strict=True))
                for r in rows]

    def _entries(self, where: str, args: tuple) -> list[Entry]:
        db = self._connect()
        try:
            rows = db.execute(f"SELECT node, cluster, checks, reasons, figures, run_id, since, "
                              f"updated, set_by, clean_runs, drained_by_burnin, by_hand "
                              f"FROM quarantine {where}", args).fetchall()
        finally:
            db.close()
        return [Entry(r[0], r[1], tuple(json.loads(r[2])), tuple(json.loads(r[3])),
                      json.loads(r[4]), r[5], r[6], r[7], r[8], r[9], bool(r[10]),
                      bool(r[11]))
                for r in rows]


def ledger_path(configured: str | None, reports_dir: Path) -> Path:
    """quarantine.ledger from the inventory, or reports/quarantine.db."""
    return Path(configured).expanduser() if configured else reports_dir / "quarantine.db"
