"""Where the quarantine ledger lives: an SQLite file (the embedded default) or a PostgreSQL
database (one ledger for controllers on different machines). burnin/ledger/api.py holds the
ledger's logic and its SQL, written once; a backend only connects, opens a transaction
the way its engine needs, and keeps its schema's version.

The schema (burnin/ledger/schema.py) is versioned: each of its steps is applied once, in
one transaction, recorded in `ledger_schema`, under a lock that makes two controllers
opening an old schema at once migrate it once (SQLite: BEGIN IMMEDIATE; PostgreSQL: an
advisory lock).
"""

from __future__ import annotations

import importlib
import os
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from burnin.core.safefiles import private_dirs, write_atomically
from burnin.errors import (  # noqa: F401  (raised here, caught by callers)
    LedgerError,
    LedgerLost,
    LedgerMissing,
    LedgerNotEmpty,
    LedgerUrlError,
)
from burnin.ledger.schema import (  # postgres.py and tests read these here too
    ENSURE,
    SCHEMA_VERSION,
    TABLES,
    VERSION_TABLE,
    _migrations,
)
from burnin.ledger.url import shown

BUSY_TIMEOUT_S = 60
CONNECT_TIMEOUT_S = 10
# pg_advisory_xact_lock's key for migrations: b"burnin" read as an integer.
MIGRATION_LOCK = 0x6275726E696E


def parse_location(text: str | Path) -> Path | str:
    """A ledger's location: a Path for SQLite (a path or sqlite:///absolute/path), the URL
    for any other engine of BACKENDS, chosen by its scheme (postgresql://user@host:port/db
    ?sslmode=...). LedgerUrlError for anything else, and for what the engine refuses (a
    PostgreSQL URL that carries a password: an inventory is no place for one)."""
    if isinstance(text, Path):
        return text.expanduser()
    if text == "":
        raise LedgerUrlError("an empty ledger location: a ledger is " + _accepted())
    scheme, sep, _ = text.partition(":")
    if not sep or ("://" not in text and scheme != "sqlite") or not scheme.isidentifier():
        return Path(text).expanduser()  # a plain path (a colon in a file name included)
    if scheme.lower() not in BACKENDS:
        raise LedgerUrlError(f"{shown(text)!r}: a ledger is " + _accepted())
    return backend_class(scheme.lower()).locate(text)


def _accepted() -> str:
    examples = dict.fromkeys(backend_class(s).example for s in BACKENDS)
    return "a path, " + " or ".join(examples)


def backend_for(location: Path | str) -> Backend:
    """The engine that holds the ledger at `location` (as parse_location gives it): the
    one place that maps a location to its backend."""
    if isinstance(location, Path):
        return backend_class("sqlite")(location)
    return backend_class(location.partition(":")[0].lower())(location)


def transport_problem(location: Path | str) -> str:
    """Why the ledger at `location` may be reached unverified over the network ('' when
    it cannot: a file, a unix socket, verified TLS): its engine's say."""
    if isinstance(location, Path):
        return ""
    return backend_class(location.partition(":")[0].lower()).transport_problem(location)


def backend_class(scheme: str) -> type[Backend]:
    """BACKENDS' class for `scheme`, imported on first use (its driver too)."""
    found = BACKENDS[scheme]
    if isinstance(found, str):
        module, _, name = found.partition(":")
        found = getattr(importlib.import_module(module), name)
    return found




class Backend:
    """One engine: connections, transactions, the schema's version, and whether a ledger
    is there at all. A new engine is a subclass and a row of BACKENDS (below), or, from
    outside the repository, an installed distribution's entry point (burnin/extensions.py)."""

    where: str  # what messages call this ledger (never a secret: url.shown)
    example = ""  # a location of this engine, as messages show what is accepted
    migrations: dict[int, tuple[str, ...]]
    real = "REAL"
    retryable: tuple[type[BaseException], ...] = ()
    errors: tuple[type[BaseException], ...] = ()

    if TYPE_CHECKING:  # each engine is made from its location (backend_for); none here
        def __init__(self, location: Any) -> None: ...

    @classmethod
    def locate(cls, text: str) -> Path | str:
        """The location `text` names (parse_location's answer); LedgerUrlError when this
        engine cannot open it."""
        return text

    @classmethod
    def transport_problem(cls, location: Path | str) -> str:
        """Why reaching `location` may be read or changed on the way ('' when not)."""
        return ""

    def connect(self):
        raise NotImplementedError

    def tables(self, db) -> set[str]:
        """Which of the ledger's TABLES the database holds."""
        raise NotImplementedError

    def scrub(self, message: str) -> str:
        """The engine's error `message` as it may be shown: no secret of the location."""
        return message

    def open(self, create: bool) -> bool:
        """Make sure a whole ledger is here, and its schema current. With `create`, make
        one where there is none at all (and say so: True). LedgerMissing where there is
        none (and not `create`); LedgerLost where one was and lost tables (a dropped
        table, a failed restore): recreating them empty would release every node the
        ledger held."""
        with self.reading() as db:
            version, present = self.version(db), self.tables(db)
        made = version == 0 and not present
        if made:
            if not create:
                raise self.missing()
        else:
            expected = {"quarantine"} | ({"history", "ledger_schema"} | (
                {"runs"} if version >= 3 else set()) | (
                {"incidents"} if version >= 4 else set()) if self.versioned(present) else set())
            lost = sorted(expected - present)
            if lost:
                raise LedgerLost(
                    f"the quarantine ledger {self.where} has lost its table(s) "
                    f"{', '.join(lost)} (a dropped table, a failed restore, a wrong "
                    "database): an empty one would release every node it held, so burnin "
                    "opens it no more. Restore it from a backup; or, to start anew on "
                    "purpose, drop what is left and run `burnin ledger init`")
        self.migrate()
        return made

    def missing(self) -> LedgerMissing:
        return LedgerMissing(
            f"no quarantine ledger at {self.where}: none was ever created there "
            f"(`burnin ledger init {self.where}` creates one). If one was there, this is a "
            "wrong location, a wrong or recreated database, or a failed restore: restore it "
            "from a backup")

    def versioned(self, present: set[str]) -> bool:
        """Whether the ledger keeps its version (and so must hold every table up to it):
        SQLite's from before versions may not; their tables say their version."""
        return True

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
        """burnin/ledger/api.py writes SQL with ? placeholders."""
        return sql


class SqliteBackend(Backend):
    """A file; every write one IMMEDIATE transaction, so that concurrent writers queue
    (several pytest-xdist workers, several runs) and a process killed mid-write leaves
    the file as it was before that transaction (SQLite's journal)."""

    begin = "BEGIN IMMEDIATE"
    begin_snapshot = "BEGIN"  # deferred: reads see one state, and take no write lock
    errors = (sqlite3.Error,)
    example = "sqlite:///path"

    def __init__(self, path: Path):
        self.path = path
        self.where = str(path)
        self.migrations = _migrations("REAL", "INTEGER PRIMARY KEY AUTOINCREMENT")

    @classmethod
    def locate(cls, text: str) -> Path | str:
        if not text.startswith("sqlite:///") or len(text) == len("sqlite:///"):
            raise LedgerUrlError(f"{text!r}: an SQLite ledger is a path, or "
                                 "sqlite:///absolute/path")
        return Path(text[len("sqlite://"):])

    @property
    def marker(self) -> Path:
        """The file beside the ledger that says burnin created one here: without it, a
        deleted or truncated ledger would silently become an empty one."""
        return self.path.with_name(f".{self.path.name}.burnin")

    def open(self, create: bool) -> bool:
        """Backend.open, and the marker: a file burnin created that is now missing or
        empty is LedgerLost, not a new ledger."""
        marker = self.marker
        if not self.path.exists():
            if marker.exists():
                raise LedgerLost(f"the quarantine ledger {self.path} is missing, but burnin "
                                 f"created one there ({marker} says when): restore it from "
                                 f"a backup, or remove {marker} to start an empty ledger")
            if not create:
                raise self.missing()  # before connecting: that would make the file
            private_dirs(self.path.parent)
            # owner-only from its first byte: it holds evidence
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            super().open(create=True)
            write_atomically(marker, f"burnin created {self.path.name} here at "
                                     f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n")
            return True
        if self.path.is_file() and self.path.stat().st_size == 0 and marker.exists():
            raise LedgerLost(f"the quarantine ledger {self.path} is empty (0 bytes), but burnin "
                             f"created it ({marker} says when): restore it from a backup, or "
                             f"remove both files to start an empty ledger")
        try:  # a file burnin made that holds no ledger is one lost, not one to make
            made = super().open(create and not marker.exists())
        except LedgerMissing:
            if not marker.exists():
                raise
            raise LedgerLost(f"the quarantine ledger {self.path} holds no ledger tables, but "
                             f"burnin created a ledger there ({marker} says when): restore "
                             f"it from a backup, or remove both files to start an empty "
                             f"ledger") from None
        if not marker.exists():  # a ledger from before the marker: from now on, guarded
            try:
                write_atomically(marker, f"burnin found {self.path.name} here at "
                                         f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n")
            except OSError:
                pass  # a reader without write access (burnin admit) guards nothing
        return made

    def versioned(self, present: set[str]) -> bool:
        return "ledger_schema" in present

    def tables(self, db) -> set[str]:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = "
                                         "'table'")} & set(TABLES)

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


# The engines, by a location's scheme (a plain path is SQLite): the one place that says
# which engine opens which ledger. A new engine is a Backend subclass and a row here.
# A row is the class, or "module:Class", imported only when a ledger of it is opened.
BACKENDS: dict[str, type[Backend] | str] = {
    "sqlite": SqliteBackend,
    "postgresql": "burnin.ledger.postgres:PostgresBackend",
    "postgres": "burnin.ledger.postgres:PostgresBackend",
}
