"""The quarantine ledger under concurrent writers and under SIGKILL mid-transaction, on
both engines: an SQLite file and a real PostgreSQL (tests/support/pgserver.py)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from burnin.ledger.api import Ledger


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request, tmp_path) -> str:
    """The test's ledger: a file, or a new database of the session's PostgreSQL."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.db")
    return request.getfixturevalue("pg_url")


def count(where: str, sql: str, *args) -> int:
    return Ledger(where)._read(lambda db: db.execute(sql, args).fetchone()[0])

WRITER = """
import sys
import pytest

from burnin.ledger.api import Ledger
ledger = Ledger(sys.argv[1])
who, count = sys.argv[2], int(sys.argv[3])
for i in range(count):
    ledger.record_failure(f"{who}-{i}", "c", ["sdc"], [f"reason {i}"], {"sdc": i}, "run")
    print(i, flush=True)
"""


def test_eight_writers_at_once_lose_nothing(where, finding):
    path = where
    Ledger(path)
    # 250 writes each, on either engine: each write is a transaction of its own, each
    # SQLite commit an fsync (and a checkpoint when its connection was the last one open),
    # so 1,000 each took 45 s on this machine's disk; the writers overlap for seconds
    # either way. BURNIN_LEDGER_WRITES=1000 for the longer run.
    each = int(os.environ.get("BURNIN_LEDGER_WRITES", "250"))
    started = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"w{k}", str(each)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for k in range(8)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err.decode()
    ledger = Ledger(path)
    names = ledger.quarantined()
    assert names == {f"w{k}-{i}" for k in range(8) for i in range(each)}
    assert count(path, "SELECT count(*) FROM history") == 8 * each
    finding(f"ledger ({where.split(':')[0] if '://' in where else 'sqlite'}): 8 writers x "
            f"{each:,} entries: {len(names)} entries, none lost, in "
            f"{time.monotonic() - started:.1f} s")


def test_sigkill_mid_transaction_leaves_the_ledger_consistent(where):
    path = where
    Ledger(path)
    committed = 0
    for round_ in range(6):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"k{round_}",
                                 "100000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        lines = 0
        while lines < 5 + 7 * round_:  # let it commit a while, then kill it mid-stream
            assert proc.stdout.readline(), proc.stderr.read().decode()
            lines += 1
        proc.send_signal(signal.SIGKILL)
        rest = proc.stdout.read().decode().split()
        proc.wait()
        printed = lines + len(rest)
        if "://" not in where:
            db = sqlite3.connect(path)
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            db.close()
        rows = count(path, "SELECT count(*) FROM quarantine WHERE node LIKE ?",
                     f"k{round_}-%")
        history = count(path, "SELECT count(*) FROM history WHERE node LIKE ?",
                        f"k{round_}-%")
        # Every reported commit is there; at most the one in flight committed unreported;
        # entry and history were written in one transaction, so they agree.
        assert printed <= rows <= printed + 1 and rows == history
        committed += rows
    assert len(Ledger(path).quarantined()) == committed


def test_clean_runs_release_and_a_new_failure_resets_them(where):
    ledger = Ledger(where)
    assert ledger.record_failure("n1", "c", ["burn"], ["burn: XID 79"], {}, "r1") is True
    assert ledger.record_clean("n1", "r2", 2) == (1, False)
    assert ledger.record_failure("n1", "c", ["sdc"], ["sdc: wrong"], {}, "r3") is False
    assert ledger.get("n1").clean_runs == 0 and ledger.get("n1").checks == ("sdc",)
    assert ledger.record_clean("n1", "r4", 2) == (1, False)
    assert ledger.record_clean("n1", "r5", 2) == (2, True)
    assert ledger.get("n1") is None
    events = [h["event"] for h in ledger.history("n1")]
    assert events == ["quarantined", "clean", "failed-again", "clean", "released"]


def test_manual_release_keeps_who_and_why(where):
    ledger = Ledger(where)
    ledger.record_failure("n1", "c", ["health"], ["health: ECC off"], {}, "r1")
    assert ledger.release("n1", "GPU 3 replaced, RMA 4411", "alice").node == "n1"
    last = ledger.history("n1")[-1]
    assert (last["event"], last["who"], last["why"]) == ("released", "alice",
                                                        "GPU 3 replaced, RMA 4411")
    assert ledger.release("n1", "again", "alice") is None


def test_ledger_in_a_new_directory_is_created(tmp_path):
    Ledger(tmp_path / "a" / "b" / "l.db").record_failure("n", "c", [], [], {}, "r")
    assert Path(tmp_path / "a" / "b" / "l.db").exists()


def test_a_runs_failures_go_in_together_or_not_at_all(where):
    ledger = Ledger(where)
    ok = [(f"n{i}", ["burn"], [f"burn: slow {i}"], {"burn": "slow"}) for i in range(500)]
    assert ledger.record_failures("c", ok, "run-1") == {f"n{i}": True for i in range(500)}
    assert len(ledger.quarantined()) == 500
    again = ledger.record_failures("c", ok[:2] + [("m1", ["sdc"], ["sdc: x"], {})], "run-2")
    assert again == {"n0": False, "n1": False, "m1": True}
    # One bad record (figures JSON cannot hold) and the whole batch is rolled back, and
    # the caller hears of it: a write swallowed would let the gate report "quarantined".
    bad = [("m2", ["sdc"], ["sdc: x"], {}), ("m3", ["sdc"], ["sdc: x"], {"sdc": object()})]
    with pytest.raises(TypeError, match="not JSON serializable"):
        ledger.record_failures("c", bad, "run-3")
    assert "m2" not in ledger.quarantined() and "m3" not in ledger.quarantined()
    assert ledger.history("m2") == []
