"""The PostgreSQL engine of the quarantine ledger (a row of burnin/ledger/backends.py's
BACKENDS): one database shared by controllers on different machines. Imported only when
a postgresql:// ledger is opened; psycopg only when one is connected to."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from burnin.ledger.backends import (
    CONNECT_TIMEOUT_S,
    MIGRATION_LOCK,
    TABLES,
    Backend,
    LedgerError,
    LedgerUrlError,
    _migrations,
)
from burnin.ledger.url import scrub, shown, tls_problem


@dataclass(frozen=True)
class _PgCursor:
    cursor: Any  # psycopg's (no stubs in the environment)

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
    refuses (a serialization failure, a deadlock) burnin/ledger/api.py retries, a bounded
    number of times. The migration runs READ COMMITTED under an advisory lock, so that
    whoever waited for the lock reads the version the first one committed.
    """

    begin = "BEGIN ISOLATION LEVEL SERIALIZABLE"
    begin_snapshot = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
    real = "DOUBLE PRECISION"
    example = "postgresql://user@host/db"

    def __init__(self, url: str):
        self.url = url
        self.where = shown(url)
        try:
            import psycopg  # only a PostgreSQL ledger needs the driver
        except ImportError:
            raise LedgerError(f"the quarantine ledger {self.where} is PostgreSQL, and the "
                              "psycopg driver is not installed: pip install "
                              "'psycopg[binary]'") from None
        self.psycopg = psycopg
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

    @classmethod
    def locate(cls, text: str) -> str:
        try:
            url = urlsplit(text)
            password = url.password
            url.port  # noqa: B018  (ValueError when it is no number)
        except ValueError as e:
            raise LedgerUrlError(f"{shown(text)!r} is not a PostgreSQL URL: {e}") from None
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        if password is not None or "password" in query:
            raise LedgerUrlError(
                f"{shown(text)!r}: the ledger URL holds a password; take it out and give "
                "it in PGPASSWORD, ~/.pgpass or a service= entry of ~/.pg_service.conf")
        return text

    @classmethod
    def transport_problem(cls, location: Path | str) -> str:
        return tls_problem(str(location))

    def scrub(self, message: str) -> str:
        return scrub(message, self.url)

    def tables(self, db) -> set[str]:
        found = db.execute("SELECT " + ", ".join(f"to_regclass('{t}')" for t in TABLES)
                           ).fetchone()
        return {t for t, oid in zip(TABLES, found, strict=True) if oid is not None}

    def version(self, db) -> int:
        if db.execute("SELECT to_regclass('ledger_schema')").fetchone()[0] is None:
            return 0
        return db.execute("SELECT coalesce(max(version), 0) FROM ledger_schema").fetchone()[0]

    def lock_for_migration(self, db) -> None:
        db.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))

    def migrating(self):
        return self.transaction("BEGIN ISOLATION LEVEL READ COMMITTED")
