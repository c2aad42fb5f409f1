"""burnin/ledger.py in-process: what each write keeps, what a failed write leaves, and the
guard against a lost ledger. (tests/test_ledger.py: concurrent writers and SIGKILL.)"""

from __future__ import annotations

import os
import re
import sqlite3
import time

import pytest

from burnin.ledger import BUSY_TIMEOUT_S, Entry, Ledger, LedgerError, LedgerLost, ledger_path


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    return now


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
    with pytest.raises(FileNotFoundError, match=f"no quarantine ledger at {tmp_path}/q.db"):
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
    import burnin.ledger_backends
    monkeypatch.setattr(burnin.ledger_backends, "BUSY_TIMEOUT_S", 0)
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
    import burnin.ledger
    path = tmp_path / "q.db"
    Ledger(path).record_failure("n1", "c", ["sdc"], ["sdc: x"], {}, "r1")
    (tmp_path / ".q.db.burnin").unlink()

    def refused(*a, **k):
        raise PermissionError("read-only")
    monkeypatch.setattr(burnin.ledger, "write_atomically", refused)
    assert Ledger(path).quarantined() == {"n1"}
    assert not (tmp_path / ".q.db.burnin").exists()


def test_check_writable_keeps_nothing(tmp_path):
    ledger = Ledger(tmp_path / "q.db")
    ledger.check_writable()
    assert rows(ledger.path, "SELECT count(*) FROM history") == [(0,)]


def test_connections_wait_for_each_other_and_take_transactions_explicitly(tmp_path):
    ledger = Ledger(tmp_path / "q.db")
    db = ledger._connect()
    try:
        assert db.execute("PRAGMA busy_timeout").fetchone() == (BUSY_TIMEOUT_S * 1000,)
        assert db.isolation_level is None
    finally:
        db.close()


def test_a_write_that_fails_rolls_back_all_of_it_and_re_raises(tmp_path):
    """A run's failures go in together or not at all, and the caller hears of a failure:
    otherwise the gate would report 'newly quarantined' while the ledger holds nothing."""
    ledger = Ledger(tmp_path / "q.db")
    bad = [("m2", ["sdc"], ["sdc: x"], {}), ("m3", ["sdc"], ["sdc: x"], {"sdc": object()})]
    with pytest.raises(TypeError, match="not JSON serializable"):
        ledger.record_failures("c", bad, "run-3")
    assert ledger.quarantined() == set() and ledger.history("m2") == []
    with pytest.raises(KeyboardInterrupt):  # whatever stops it, BaseException included
        with ledger._tx() as db:
            db.execute("INSERT INTO history (node, time, event, who, why) "
                       "VALUES ('x', 0, 'e', 'w', '')")
            raise KeyboardInterrupt
    assert ledger.history("x") == []
    ledger.note("y", "e", "kept")
    assert [h["why"] for h in ledger.history("y")] == ["kept"]


def test_record_failures_inserts_new_nodes_and_updates_known_ones(tmp_path, clock):
    ledger = Ledger(tmp_path / "q.db")
    assert ledger.record_failures("c1", [("n1", ["burn"], ["burn: slow"], {"burn": 1})],
                                  "r1", who="ci") == {"n1": True}
    ledger.record_clean("n1", "r2", 5)
    clock[0] = 2000.0
    out = ledger.record_failures("c2", [("n1", ["sdc"], ["sdc: wrong", "x" * 5000], {"sdc": 2}),
                                        ("n2", ["health"], ["health: ECC off"], {})], "r3")
    assert out == {"n1": False, "n2": True}
    assert ledger.get("n1") == Entry("n1", "c1", ("sdc",), ("sdc: wrong", "x" * 5000),
                                     {"sdc": 2}, "r3", 1000.0, 2000.0, "ci", 0, False, False)
    assert ledger.get("n2") == Entry("n2", "c2", ("health",), ("health: ECC off",), {}, "r3",
                                     2000.0, 2000.0, "burnin", 0, False, False)
    h = ledger.history("n1")
    assert [(x["event"], x["who"], x["run_id"], x["time"]) for x in h] == [
        ("quarantined", "ci", "r1", 1000.0), ("clean", "burnin", "r2", 1000.0),
        ("failed-again", "burnin", "r3", 2000.0)]
    assert h[0]["why"] == "burn: slow"
    assert h[2]["why"] == ("sdc: wrong; " + "x" * 5000)[:4000]
    assert ledger.record_failure("n3", "c1", [], [], {}, "r4", who="alice") is True
    assert (ledger.get("n3").run_id, ledger.get("n3").set_by) == ("r4", "alice")
    assert ledger.history("n3")[0]["who"] == "alice"
    assert ledger.record_failure("n3", "c1", [], [], {}, "r5") is False


def test_record_clean_counts_and_releases_at_release_after(tmp_path, clock):
    ledger = Ledger(tmp_path / "q.db")
    assert ledger.record_clean("nobody", "r1", 1) == (0, False)
    assert ledger.history("nobody") == []
    ledger.record_failure("n1", "c", ["burn"], ["burn: slow"], {}, "r0")
    clock[0] = 1500.0
    assert ledger.record_clean("n1", "r1", 3) == (1, False)
    assert ledger.get("n1").clean_runs == 1 and ledger.get("n1").updated == 1500.0
    assert ledger.record_clean("n1", "r2", 3) == (2, False)
    assert ledger.record_clean("n1", "r3", 3) == (3, True)
    assert ledger.get("n1") is None
    assert [(h["event"], h["who"], h["why"], h["run_id"]) for h in ledger.history("n1")[1:]] == [
        ("clean", "burnin", "clean re-validation run 1 of 3", "r1"),
        ("clean", "burnin", "clean re-validation run 2 of 3", "r2"),
        ("released", "burnin", "3 consecutive clean re-validation runs", "r3")]


def test_a_node_quarantined_by_hand_is_released_only_by_hand(tmp_path, clock):
    ledger = Ledger(tmp_path / "q.db")
    assert ledger.quarantine_by_hand("n1", "c", "fan noise", "alice") is True
    assert ledger.get("n1") == Entry("n1", "c", (), ("quarantined by hand by alice: fan noise",),
                                     {}, "", 1000.0, 1000.0, "alice", 0, False, True)
    assert ledger.record_clean("n1", "r1", 1) == (1, False)
    assert ledger.get("n1") is not None and ledger.get("n1").clean_runs == 1
    assert ledger.history("n1")[-1]["why"] == \
        "clean re-validation run 1; quarantined by hand: released only by hand"
    assert ledger.release("n1", "fan replaced", "bob").by_hand is True
    assert ledger.get("n1") is None
    assert [(h["event"], h["who"], h["why"], h["run_id"]) for h in ledger.history("n1")] == [
        ("quarantined", "alice", "fan noise", None),
        ("clean", "burnin", "clean re-validation run 1; quarantined by hand: released only "
                            "by hand", "r1"),
        ("released", "bob", "fan replaced", None)]


def test_quarantine_by_hand_holds_a_node_burnin_quarantined(tmp_path, clock):
    ledger = Ledger(tmp_path / "q.db")
    ledger.record_failure("n1", "c", ["burn"], ["burn: slow"], {"burn": 1}, "r0")
    ledger.record_clean("n1", "r1", 5)
    clock[0] = 3000.0
    assert ledger.quarantine_by_hand("n1", "other", "keep it", "alice") is False
    e = ledger.get("n1")
    assert (e.cluster, e.checks, e.reasons, e.clean_runs, e.by_hand, e.updated, e.set_by) == (
        "c", ("burn",), ("burn: slow", "quarantined by hand by alice: keep it"), 0, True,
        3000.0, "burnin")
    assert ledger.history("n1")[-1]["event"] == "held-by-hand"
    assert ledger.record_clean("n1", "r2", 1) == (1, False)


def test_set_drained_release_and_note(tmp_path):
    ledger = Ledger(tmp_path / "q.db")
    ledger.record_failure("n1", "c", ["burn"], ["burn: slow"], {}, "r0")
    ledger.record_failure("n2", "c", ["burn"], ["burn: slow"], {}, "r0")
    ledger.set_drained("n1", True)
    assert ledger.get("n1").drained_by_burnin and not ledger.get("n2").drained_by_burnin
    ledger.set_drained("n1", False)
    assert not ledger.get("n1").drained_by_burnin
    assert ledger.release("n3", "why", "bob") is None and ledger.history("n3") == []
    ledger.note("n2", "action", "slurm: drained \x1b[31m", "r9")
    ledger.note("n2", "action-failed", "hook", who="alice")
    assert ledger.history("n2")[1:] == [
        {**ledger.history("n2")[1], "event": "action", "who": "burnin",
         "why": "slurm: drained \\x1b[31m", "run_id": "r9"},
        {**ledger.history("n2")[2], "event": "action-failed", "who": "alice", "why": "hook",
         "run_id": None}]
    assert list(ledger.history("n2")[0]) == ["time", "event", "who", "why", "run_id"]
    assert [e.node for e in ledger.entries()] == ["n1", "n2"]


def test_entries_are_in_node_order(tmp_path):
    ledger = Ledger(tmp_path / "q.db")
    for n in ("n3", "n1", "n2"):
        ledger.record_failure(n, "c", [], [], {}, "r")
    assert [e.node for e in ledger.entries()] == ["n1", "n2", "n3"]
    assert ledger.get("n4") is None
