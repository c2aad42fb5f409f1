"""Where the quarantine ledger lives: an SQLite file (the embedded default) or a PostgreSQL
database (one ledger for controllers on different machines). burnin/ledger.py holds the
ledger's logic and its SQL, written once; a backend only connects, opens a transaction
the way its engine needs, and keeps its schema's version.

The schema is versioned: each step of _migrations() is applied once, in one transaction,
recorded in `ledger_schema`, under a lock that makes two controllers opening an old
schema at once migrate it once (SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory lock).
"""

from __future__ import annotations

import re
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from burnin import incidents_ledger

BUSY_TIMEOUT_S = 60
CONNECT_TIMEOUT_S = 10
SCHEMA_VERSION = 4
# pg_advisory_xact_lock's key for migrations: b"burnin" read as an integer.
MIGRATION_LOCK = 0x6275726E696E


class LedgerError(Exception):
    """The ledger's database refused or could not be reached: a controller fault, never a
    node's. The message names the ledger and what the database said."""


class LedgerUrlError(ValueError):
    """quarantine.ledger (or --ledger) is not a ledger burnin can open; the message says
    what is accepted."""


class LedgerNotEmpty(Exception):
    """`burnin ledger copy` would overwrite a ledger that holds something."""


def parse_location(text: str | Path) -> Path | str:
    """A ledger's location: a Path for SQLite (a path or sqlite:///absolute/path), the URL
    for PostgreSQL (postgresql://user@host:port/db?sslmode=...). LedgerUrlError for
    anything else, and for a URL that carries a password: an inventory is no place for
    one (PGPASSWORD, ~/.pgpass or a service= entry are)."""
    if isinstance(text, Path):
        return text.expanduser()
    if text.startswith("sqlite:"):
        if not text.startswith("sqlite:///") or len(text) == len("sqlite:///"):
            raise LedgerUrlError(f"{text!r}: an SQLite ledger is a path, or "
                                 "sqlite:///absolute/path")
        return Path(text[len("sqlite://"):])
    if text.startswith(("postgresql://", "postgres://")):
        try:
            url = urlsplit(text)
            password = url.password
            url.port  # noqa: B018  (ValueError when it is no number)
        except ValueError as e:
            raise LedgerUrlError(f"{_redacted(text)!r} is not a PostgreSQL URL: {e}") from None
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        if password is not None or "password" in query:
            raise LedgerUrlError(
                f"{_redacted(text)!r}: the ledger URL holds a password; take it out and give "
                "it in PGPASSWORD, ~/.pgpass or a service= entry of ~/.pg_service.conf")
        return text
    if "://" in text:
        raise LedgerUrlError(f"{_redacted(text)!r}: a ledger is a path, sqlite:///path or "
                             "postgresql://user@host/db")
    if text == "":
        raise LedgerUrlError("an empty ledger location: a ledger is a path, sqlite:///path "
                             "or postgresql://user@host/db")
    return Path(text).expanduser()


def _redacted(text: str) -> str:
    """A URL as messages may show it: never its password."""
    try:
        url = urlsplit(text)
        if url.password is not None:
            url = url._replace(netloc=url.netloc.replace(f":{url.password}@", ":***@", 1))
    except ValueError:
        return text.split("://", 1)[0] + "://..."
    return re.sub(r"(?i)(password=)[^&]*", r"\1***", url.geturl())


def _migrations(real: str, serial: str) -> dict[int, tuple[str, ...]]:
    """The schema's steps, in either engine's words (`real`, `serial` differ)."""
    return {
        1: (f"""CREATE TABLE IF NOT EXISTS quarantine (
                node TEXT PRIMARY KEY,
                cluster TEXT NOT NULL,
                checks TEXT NOT NULL,         -- JSON list of failed checks
                reasons TEXT NOT NULL,        -- JSON list of failure messages
                figures TEXT NOT NULL,        -- JSON: key figures, per check
                run_id TEXT NOT NULL,
                since {real} NOT NULL,
                updated {real} NOT NULL,
                set_by TEXT NOT NULL,
                clean_runs INTEGER NOT NULL DEFAULT 0,
                drained_by_burnin INTEGER NOT NULL DEFAULT 0)""",
            f"""CREATE TABLE IF NOT EXISTS history (
                id {serial},
                node TEXT NOT NULL,
                time {real} NOT NULL,
                event TEXT NOT NULL,  -- quarantined, failed-again, clean, released, ...
                who TEXT NOT NULL,
                why TEXT NOT NULL,
                run_id TEXT)"""),
        # `burnin quarantine add`: an operator's entry, released only by hand
        2: ("ALTER TABLE quarantine ADD COLUMN by_hand INTEGER NOT NULL DEFAULT 0",),
        # Every run's verdict on every node it judged, kept for quarantine.keep_runs_days:
        # `burnin history`, failures per node-day, the speed trend (burnin/track.py).
        3: (f"""CREATE TABLE IF NOT EXISTS runs (
                id {serial},
                node TEXT NOT NULL,
                cluster TEXT NOT NULL,
                run_id TEXT NOT NULL,
                time {real} NOT NULL,
                outcome TEXT NOT NULL,   -- the node's worst: passed, failed, error
                checks TEXT NOT NULL,    -- JSON list of the checks it did not pass
                reasons TEXT NOT NULL,   -- JSON list of their messages, each bounded
                speed {real},            -- relative speed (burnin/goodput.py), if known
                figures TEXT NOT NULL)   -- JSON: what set the speed""",),
        # Shared-cause incidents (burnin/incidents.py): its SQL lives with its methods.
        4: incidents_ledger.migration(real, serial),
    }


# Not version steps: re-made whenever missing (an index dropped by hand), each once the
# schema has the step that makes its table.
ENSURE = ((1, "history_node", "CREATE INDEX IF NOT EXISTS history_node ON history (node, id)"),
          (3, "runs_node", "CREATE INDEX IF NOT EXISTS runs_node ON runs (node, time)"),
          (3, "runs_time", "CREATE INDEX IF NOT EXISTS runs_time ON runs (time)"))
VERSION_TABLE = ("CREATE TABLE IF NOT EXISTS ledger_schema (version INTEGER PRIMARY KEY, "
                 "applied {real} NOT NULL, how TEXT NOT NULL)")


class Backend:
    """One engine: connections, transactions and the schema's version."""

    where: str  # what messages call this ledger (never a password: the URL holds none)
    migrations: dict[int, tuple[str, ...]]
    real = "REAL"
    retryable: tuple[type[BaseException], ...] = ()
    errors: tuple[type[BaseException], ...] = ()

    def connect(self):
        raise NotImplementedError

    @contextmanager
    def transaction(self, begin: str | None = None):
        """One write transaction (or, with `begin`, another kind): committed when the
        block ends, rolled back whatever stops it (BaseException included)."""
        db = self.connect()
        try:
            db.execute(begin or self.begin)
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    begin = "BEGIN"
    begin_snapshot = "BEGIN"

    @contextmanager
    def reading(self):
        db = self.connect()
        try:
            yield db
        finally:
            db.close()

    def version(self, db) -> int:
        raise NotImplementedError

    def lock_for_migration(self, db) -> None:
        """Taken in the migration's transaction: whoever comes second waits, then finds
        the schema current."""

    def up_to_date(self, db) -> bool:
        return self.version(db) == SCHEMA_VERSION

    def migrate(self, upto: int = SCHEMA_VERSION) -> list[int]:
        """Bring the schema to `upto` (tests stop earlier to make an old one); the steps
        applied here, [] when someone else did or it was current."""
        with self.reading() as db:
            current = self.version(db)
            if current > SCHEMA_VERSION:
                raise LedgerError(f"the quarantine ledger {self.where} has schema version "
                                  f"{current}, newer than this burnin knows "
                                  f"({SCHEMA_VERSION}): upgrade burnin")
            if current >= upto and self.up_to_date(db):
                return []  # a reader that may not write opens it too
        applied = []
        with self.migrating() as db:
            self.lock_for_migration(db)
            current = self.version(db)  # again, under the lock
            db.execute(VERSION_TABLE.format(real=self.real))
            # a ledger from before versions: what its tables showed, recorded as found
            recorded = {r[0] for r in db.execute("SELECT version FROM ledger_schema"
                                                 ).fetchall()}
            for step in range(1, current + 1):
                if step not in recorded:
                    db.execute(self.q("INSERT INTO ledger_schema (version, applied, how) "
                                      "VALUES (?, ?, 'found')"), (step, time.time()))
            for step in range(current + 1, upto + 1):
                for statement in self.migrations[step]:
                    db.execute(statement)
                db.execute(self.q("INSERT INTO ledger_schema (version, applied, how) "
                                  "VALUES (?, ?, 'migrated')"), (step, time.time()))
                applied.append(step)
            for step, _, statement in ENSURE:
                if upto >= step:
                    db.execute(statement)
        return applied

    def migrating(self):
        return self.transaction()

    @staticmethod
    def q(sql: str) -> str:
        """burnin/ledger.py writes SQL with ? placeholders."""
        return sql


class SqliteBackend(Backend):
    """A file; every write one IMMEDIATE transaction, so that concurrent writers queue
    (several pytest-xdist workers, several runs) and a process killed mid-write leaves
    the file as it was before that transaction (SQLite's journal)."""

    begin = "BEGIN IMMEDIATE"
    begin_snapshot = "BEGIN"  # deferred: reads see one state, and take no write lock
    errors = (sqlite3.Error,)

    def __init__(self, path: Path):
        self.path = path
        self.where = str(path)
        self.migrations = _migrations("REAL", "INTEGER PRIMARY KEY AUTOINCREMENT")

    def connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
        return db

    def version(self, db) -> int:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        if "ledger_schema" in tables:
            return db.execute("SELECT coalesce(max(version), 0) FROM ledger_schema"
                              ).fetchone()[0]
        # A ledger from before versions: what its tables say
        if not {"quarantine", "history"} <= tables:
            return 0  # step 1 creates only what is missing
        columns = {row[1] for row in db.execute("PRAGMA table_info(quarantine)")}
        return 2 if "by_hand" in columns else 1

    def up_to_date(self, db) -> bool:
        indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = "
                                            "'index'")}
        return self.version(db) == SCHEMA_VERSION and {i for _, i, _ in ENSURE} <= indexes

    @contextmanager
    def migrating(self):
        db = self.connect()
        db.execute("PRAGMA journal_mode = WAL")
        db.close()
        with self.transaction() as db:
            yield db


@dataclass(frozen=True)
class _PgCursor:
    cursor: object

    def fetchone(self):
        return self.cursor.fetchone()

    def fetchall(self):
        return self.cursor.fetchall()


class _PgConnection:
    """psycopg's connection, taking the ledger's ? placeholders."""

    def __init__(self, conn):
        self.conn = conn

    def execute(self, sql: str, args=()):
        return _PgCursor(self.conn.execute(PostgresBackend.q(sql), args or None))

    def executemany(self, sql: str, rows: list) -> None:
        if rows:  # pipelined by psycopg: one round trip for all of them
            self.conn.cursor().executemany(PostgresBackend.q(sql), rows)

    def close(self) -> None:
        self.conn.close()


class PostgresBackend(Backend):
    """A PostgreSQL database, shared by controllers on different machines.

    Every write transaction is SERIALIZABLE: PostgreSQL then guarantees the outcome of
    some one-at-a-time order of them, so a clean re-validation run that read a node's
    count can never release it over a failure another run committed meanwhile; what it
    refuses (a serialization failure, a deadlock) burnin/ledger.py retries, a bounded
    number of times. The migration runs READ COMMITTED under an advisory lock, so that
    whoever waited for the lock reads the version the first one committed.
    """

    begin = "BEGIN ISOLATION LEVEL SERIALIZABLE"
    begin_snapshot = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
    real = "DOUBLE PRECISION"

    def __init__(self, url: str):
        import psycopg  # only a PostgreSQL ledger needs the driver

        self.psycopg = psycopg
        self.url = url
        self.where = url
        self.migrations = _migrations("DOUBLE PRECISION",
                                      "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY")
        self.errors = (psycopg.Error,)
        self.retryable = (psycopg.errors.SerializationFailure,
                          psycopg.errors.DeadlockDetected)

    def connect(self) -> _PgConnection:
        return _PgConnection(self.psycopg.connect(
            self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
            application_name="burnin"))

    @staticmethod
    def q(sql: str) -> str:
        return sql.replace("?", "%s")

    def version(self, db) -> int:
        if db.execute("SELECT to_regclass('ledger_schema')").fetchone()[0] is None:
            return 0
        return db.execute("SELECT coalesce(max(version), 0) FROM ledger_schema").fetchone()[0]

    def lock_for_migration(self, db) -> None:
        db.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))

    def migrating(self):
        return self.transaction("BEGIN ISOLATION LEVEL READ COMMITTED")
