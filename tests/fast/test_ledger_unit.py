"""burnin/ledger/api.py in-process: what each write keeps, what a failed write leaves, and the
guard against a lost ledger. (tests/test_ledger.py: concurrent writers and SIGKILL.)"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import pytest

from burnin.ledger.api import (
    BUSY_TIMEOUT_S,
    Entry,
    Ledger,
    LedgerError,
    LedgerLost,
    LedgerMissing,
    LedgerUrlError,
    ledger_path,
    parse_location,
)


def rows(path, sql):
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def test_a_new_ledger_is_private_has_its_marker_and_its_tables(tmp_path):
    ledger = Ledger(tmp_path / "d" / "q.db")
    assert ledger.path == tmp_path / "d" / "q.db"
    assert ledger.marker == tmp_path / "d" / ".q.db.burnin"
    assert ledger.path.stat().st_mode & 0o777 == 0o600
    assert re.fullmatch(r"burnin created q\.db here at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S*\n",
                        ledger.marker.read_text())
    assert rows(ledger.path, "PRAGMA journal_mode") == [("wal",)]
    tables = {r[0] for r in rows(ledger.path, "SELECT name FROM sqlite_master")}
    assert {"quarantine", "history", "history_node"} <= tables
    assert ledger.entries() == [] and ledger.quarantined() == set()


def test_a_home_relative_path_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert Ledger("~/q.db").path == tmp_path / "q.db"
    assert ledger_path("~/l.db", tmp_path / "r") == tmp_path / "l.db"
    assert ledger_path(None, tmp_path / "r") == tmp_path / "r" / "quarantine.db"
    assert ledger_path("", tmp_path / "r") == tmp_path / "r" / "quarantine.db"


def test_a_missing_ledger_is_not_created_when_asked_not_to(tmp_path):
    with pytest.raises(LedgerMissing, match=f"no quarantine ledger at {tmp_path}/q.db"):
        Ledger(tmp_path / "q.db", create=False)
    assert not (tmp_path / "q.db").exists()


def test_a_ledger_burnin_made_that_is_now_missing_or_empty_is_lost_not_new(tmp_path):
    path = tmp_path / "q.db"
    Ledger(path).record_failure("n1", "c", ["sdc"], ["sdc: x"], {}, "r1")
    os.remove(path)
    with pytest.raises(LedgerLost, match=r"q.db is missing, but burnin created one there "
                                         r"\(.*\.q\.db\.burnin says when\): restore it"):
        Ledger(path)
    with pytest.raises(LedgerLost):
        Ledger(path, create=False)
    path.write_bytes(b"")
    with pytest.raises(LedgerLost, match=r"q.db is empty \(0 bytes\), but burnin created it"):
        Ledger(path)
    assert path.stat().st_size == 0, "left for a person to restore"


def test_an_empty_file_without_the_marker_becomes_a_ledger(tmp_path):
    path = tmp_path / "q.db"
    path.write_bytes(b"")
    ledger = Ledger(path)
    assert re.fullmatch(r"burnin found q\.db here at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S*\n",
                        ledger.marker.read_text())
    ledger.record_failure("n1", "c", ["sdc"], ["sdc: x"], {}, "r1")
    assert ledger.quarantined() == {"n1"}


def test_a_ledger_from_before_by_hand_is_migrated_and_keeps_its_entries(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE quarantine (node TEXT PRIMARY KEY, cluster TEXT NOT NULL,
            checks TEXT NOT NULL, reasons TEXT NOT NULL, figures TEXT NOT NULL,
            run_id TEXT NOT NULL, since REAL NOT NULL, updated REAL NOT NULL,
            set_by TEXT NOT NULL, clean_runs INTEGER NOT NULL DEFAULT 0,
            drained_by_burnin INTEGER NOT NULL DEFAULT 0);
        INSERT INTO quarantine VALUES ('n1', 'c', '["sdc"]', '["sdc: x"]', '{}', 'r0', 1, 2,
                                       'burnin', 1, 1);
    """)
    db.close()
    ledger = Ledger(path)
    assert ledger.get("n1") == Entry("n1", "c", ("sdc",), ("sdc: x",), {}, "r0", 1.0, 2.0,
                                     "burnin", 1, True, False)
    columns = [r[1] for r in rows(path, "PRAGMA table_info(quarantine)")]
    assert columns[-1] == "by_hand"
    assert ("history_node",) in rows(path, "SELECT name FROM sqlite_master")
    assert ledger.marker.exists(), "guarded from now on"


@pytest.fixture
def locked(monkeypatch):
    """locked(path): another writer holds the ledger's write lock, and nobody waits."""
    import burnin.ledger.backends
    monkeypatch.setattr(burnin.ledger.backends, "BUSY_TIMEOUT_S", 0)
    held = []

    def lock(path):
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("BEGIN IMMEDIATE")
        held.append(db)
    yield lock
    for db in held:
        db.execute("ROLLBACK")
        db.close()


def test_a_ledger_without_its_history_index_gets_it(tmp_path):
    path = tmp_path / "q.db"
    Ledger(path).record_failure("n1", "c", ["sdc"], ["sdc: x"], {}, "r1")
    db = sqlite3.connect(path)
    db.execute("DROP INDEX history_node")
    db.commit()
    db.close()
    assert Ledger(path).quarantined() == {"n1"}
    assert ("history_node",) in rows(path, "SELECT name FROM sqlite_master")


def test_an_up_to_date_ledger_opens_without_writing(tmp_path, locked):
    path = tmp_path / "q.db"
    Ledger(path).record_failure("n1", "c", ["sdc"], ["sdc: x"], {}, "r1")
    locked(path)
    reader = Ledger(path)  # burnin admit, while a run writes
    assert reader.quarantined() == {"n1"}
    with pytest.raises(LedgerError, match=f"the quarantine ledger {path}: database is locked"):
        reader.check_writable()


def test_a_reader_that_cannot_write_the_marker_opens_the_ledger(tmp_path, monkeypatch):
    import burnin.ledger.backends
    path = tmp_path / "q.db"
    Ledger(path).record_failure("n1", "c", ["sdc"], ["sdc: x"], {}, "r1")
    (tmp_path / ".q.db.burnin").unlink()

    def refused(*a, **k):
        raise PermissionError("read-only")
    monkeypatch.setattr(burnin.ledger.backends, "write_atomically", refused)
    assert Ledger(path).quarantined() == {"n1"}
    assert not (tmp_path / ".q.db.burnin").exists()


def test_connections_wait_for_each_other_and_take_transactions_explicitly(tmp_path):
    ledger = Ledger(tmp_path / "q.db")
    db = ledger._connect()
    try:
        assert db.execute("PRAGMA busy_timeout").fetchone() == (BUSY_TIMEOUT_S * 1000,)
        assert db.isolation_level is None
    finally:
        db.close()




@pytest.mark.parametrize("text, expected", [
    ("/var/lib/burnin/q.db", Path("/var/lib/burnin/q.db")),
    ("relative/q.db", Path("relative/q.db")),
    ("sqlite:///var/lib/burnin/q.db", Path("/var/lib/burnin/q.db")),
    ("postgresql://burnin@db/burnin?sslmode=verify-full",
     "postgresql://burnin@db/burnin?sslmode=verify-full"),
    ("postgres://burnin@db:5433/burnin", "postgres://burnin@db:5433/burnin"),
    ("postgresql:///burnin?service=fleet", "postgresql:///burnin?service=fleet"),
    ("postgresql:///burnin", "postgresql:///burnin"),  # libpq's default socket, or PGHOST
    ("postgresql://burnin@/burnin?host=/run/postgresql",
     "postgresql://burnin@/burnin?host=/run/postgresql"),
])
def test_ledger_locations_that_are_accepted(text, expected):
    assert parse_location(text) == expected


@pytest.mark.parametrize("text, message", [
    ("postgresql://burnin:s3cret@db/burnin", "'postgresql://burnin:\\*\\*\\*@db/burnin': the "
                                             "ledger URL holds a password; take it out"),
    ("postgresql://burnin@db/burnin?password=s3cret", "holds a password"),
    ("postgresql://burnin@db:port/burnin", "is not a PostgreSQL URL"),
    ("sqlite://q.db", "an SQLite ledger is a path, or sqlite:///absolute/path"),
    ("sqlite:///", "an SQLite ledger is a path"),
    ("mysql://db/burnin", "a ledger is a path, sqlite:///path or postgresql://"),
    ("", "an empty ledger location"),
])
def test_ledger_locations_that_are_refused_say_why_and_never_the_password(text, message):
    with pytest.raises(LedgerUrlError, match=message) as refused:
        parse_location(text)
    assert "s3cret" not in str(refused.value)
    with pytest.raises(LedgerUrlError):
        Ledger(text)


def test_burnin_history_shows_a_node_over_time_and_flags_a_repeat_offender(tmp_path, capsys):
    import json

    from burnin.cli import main
    db = tmp_path / "q.db"
    ledger = Ledger(db)
    for i in range(3):
        ledger.record_failure("n1", "c", ["burn"], [f"burn: slow {i}"], {}, f"r{i}")
        ledger.release("n1", "reseated", "alice")
    ledger.record_failure("n2", "c", ["sdc"], ["sdc: wrong digest"], {}, "r9")
    assert main(["history", "n[1-2]", "--ledger", str(db)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("n1: a repeat offender: quarantined 3 times in 30 days; clean "
                      "re-validation runs do not release it, a person does (burnin "
                      "quarantine release)")
    assert out[1] == "n1: not in quarantine"
    assert sum("quarantined" in ln and "by burnin" in ln for ln in out) == 4
    assert main(["history", "n[1-2]", "--ledger", str(db), "--json"]) == 0
    shown = {n["node"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert shown["n1"]["repeat_offender"] and shown["n1"]["quarantined_in_window"] == 3
    assert not shown["n2"]["repeat_offender"] and shown["n2"]["in_quarantine"]
    assert [h["event"] for h in shown["n1"]["history"]] == ["quarantined", "released"] * 3
    assert main(["history", "n7", "--ledger", str(db)]) == 1  # a node it never knew

