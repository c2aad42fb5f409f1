"""burnin/ledger/api.py's engine-facing edges in-process: a write the engine refused for a
concurrent one is run again with bounded, growing pauses and then given up; a copy's
read takes no write lock; a PostgreSQL ledger without its driver says what to install.
(The refusals themselves come from PostgreSQL: tests/test_ledger_postgres.py.)"""

from __future__ import annotations

import sqlite3
import sys
import threading

import pytest

import burnin.ledger.api as ledger_module
from burnin.ledger.api import PAUSE_S, WRITE_ATTEMPTS, Ledger, LedgerError


class Refused(Exception):
    """What the engine raises for a transaction that lost to a concurrent one."""


@pytest.fixture
def refusing(tmp_path, monkeypatch):
    """(ledger, the pauses it asked for): its engine refuses the first `times` writes."""
    ledger = Ledger(tmp_path / "q.db")
    monkeypatch.setattr(ledger._backend, "retryable", (Refused,))
    pauses: list[tuple[float, float]] = []
    slept: list[float] = []
    monkeypatch.setattr(ledger_module.random, "uniform",
                        lambda lo, hi: pauses.append((lo, hi)) or hi)
    monkeypatch.setattr(ledger_module.time, "sleep", slept.append)
    return ledger, pauses, slept


def refused_first(times: int, calls: list[int]):
    def work(db):
        calls.append(1)
        if len(calls) <= times:
            raise Refused("could not serialize access")
        db.execute("INSERT INTO history (node, time, event, who, why) "
                   "VALUES ('n1', 0, 'noted', 'burnin', '')")
        return "written"
    return work


def test_a_write_refused_for_a_concurrent_one_runs_again_after_growing_bounded_pauses(
        refusing):
    ledger, pauses, slept = refusing
    calls: list[int] = []
    assert ledger._write(refused_first(3, calls)) == "written"
    assert len(calls) == 4
    # a random pause up to 10, 20, 40 ms after the 1st, 2nd, 3rd refusal
    assert pauses == [(0, 0.01), (0, 0.02), (0, 0.04)]
    assert slept == [0.01, 0.02, 0.04]
    assert [h["event"] for h in ledger.history("n1")] == ["noted"]  # once, not four times


def test_a_write_refused_every_time_is_given_up_after_write_attempts_pauses_capped(refusing):
    ledger, pauses, _ = refusing
    calls: list[int] = []
    with pytest.raises(Refused):
        ledger._write(refused_first(10 ** 6, calls))
    assert len(calls) == WRITE_ATTEMPTS
    assert len(pauses) == WRITE_ATTEMPTS - 1  # none after the last refusal
    assert max(hi for _, hi in pauses) == PAUSE_S  # doubled up to the cap, not past it
    assert ledger.history("n1") == []


def test_a_write_that_is_not_a_refusal_is_not_run_again(refusing):
    ledger, pauses, _ = refusing
    calls: list[int] = []

    def work(db):
        calls.append(1)
        raise ValueError("a bug, not contention")
    with pytest.raises(ValueError):
        ledger._write(work)
    assert (len(calls), pauses) == (1, [])


def test_a_copy_reads_while_another_writer_holds_the_ledger(tmp_path):
    # `burnin ledger copy` of a busy ledger (a run writing its verdicts) reads one
    # snapshot at once; a write transaction would wait for the writer (60 s)
    ledger = Ledger(tmp_path / "q.db")
    ledger.note("n1", "noted", "before the writer")
    writer = sqlite3.connect(tmp_path / "q.db", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO history (node, time, event, who, why) "
                   "VALUES ('n2', 0, 'noted', 'burnin', 'not committed')")
    out: list = []
    reader = threading.Thread(target=lambda: out.append(ledger.dump()), daemon=True)
    try:
        reader.start()
        reader.join(timeout=30)  # for a hang only: the read takes milliseconds
        assert not reader.is_alive(), "the copy waited for the writer"
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    quarantine, history, runs = out[0]
    assert [h[0] for h in history] == ["n1"]  # what was committed, not the writer's


def test_a_postgresql_ledger_without_its_driver_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg raises ImportError
    with pytest.raises(LedgerError) as refused:
        Ledger("postgresql://burnin@db.example/fleet")
    assert str(refused.value) == (
        "the quarantine ledger postgresql://burnin@db.example/fleet is PostgreSQL, and the "
        "psycopg driver is not installed: pip install 'psycopg[binary]'")
