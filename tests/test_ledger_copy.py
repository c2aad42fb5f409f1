"""`burnin ledger copy SRC DST`: SQLite into a real PostgreSQL and back, entries and
history as they were, and a destination that holds anything left alone unless --force."""

from __future__ import annotations

import json
import sqlite3

import pytest

from burnin.cli import main
from burnin.ledger.api import Ledger, NodeRun

pytestmark = pytest.mark.slow


def filled(where) -> Ledger:
    ledger = Ledger(where)
    ledger.record_failures("c", [("n1", ["sdc"], ["sdc: wrong ü"], {"sdc": {"bad": 3}}),
                                 ("n2", ["burn"], ["burn: slow"], {"burn": 0.5})], "r1")
    ledger.record_clean("n2", "r2", 3)
    ledger.set_drained("n1", True)
    ledger.quarantine_by_hand("n3", "c", "fan noise", "alice")
    ledger.record_failure("n4", "c", ["pcie"], ["pcie: x4"], {}, "r3")
    ledger.release("n4", "reseated", "bob")
    ledger.note("n1", "action", "slurm: drained", "r1")
    ledger.record_runs("c", [NodeRun("n1", "r1", 100.0, "failed", ("sdc",), ("sdc: wrong ü",)),
                             NodeRun("n2", "r1", 100.0, "passed", speed=0.97,
                                     figures={"set_by": "burn"})], keep_days=1e6)
    return ledger


def state(ledger: Ledger):
    nodes = ("n1", "n2", "n3", "n4")
    return (ledger.entries(), {n: ledger.history(n) for n in nodes},
            {n: ledger.runs(n) for n in nodes})


def test_sqlite_to_postgresql_and_back_keeps_everything(tmp_path, pg_url, capsys):
    source = filled(tmp_path / "q.db")
    assert main(["ledger", "copy", str(tmp_path / "q.db"), pg_url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"from": str(tmp_path / "q.db"), "to": pg_url, "quarantined": 3,
                   "history": 7, "runs": 2}
    assert state(Ledger(pg_url)) == state(source)
    # and back, into a new file named by URL
    back = f"sqlite://{tmp_path}/back.db"
    assert main(["ledger", "copy", pg_url, back]) == 0
    assert "copied 3 node(s) in quarantine, 7 history event(s) and 2 kept run(s)" \
        in capsys.readouterr().out
    assert state(Ledger(tmp_path / "back.db")) == state(source)
    # history goes on in order after the copy
    Ledger(pg_url).record_clean("n2", "r9", 3)
    assert [h["run_id"] for h in Ledger(pg_url).history("n2")] == ["r1", "r2", "r9"]


def test_a_destination_that_holds_anything_is_refused_unless_forced(tmp_path, pg_url,
                                                                    capsys):
    filled(tmp_path / "q.db")
    Ledger(pg_url).note("x", "action", "something")  # history only, no entry
    assert main(["ledger", "copy", str(tmp_path / "q.db"), pg_url]) == 2
    err = capsys.readouterr().err
    assert "holds 0 node(s) in quarantine, 1 history event(s) and 0 kept run(s); nothing " \
           "copied " \
           "(--force replaces what it holds)" in err
    assert Ledger(pg_url).entries() == [] and len(Ledger(pg_url).history("x")) == 1
    assert main(["ledger", "copy", str(tmp_path / "q.db"), pg_url, "--force"]) == 0
    assert Ledger(pg_url).history("x") == []
    assert state(Ledger(pg_url)) == state(Ledger(tmp_path / "q.db"))


def test_bad_sources_and_destinations_exit_2_with_a_message(tmp_path, pg_url, capsys):
    assert main(["ledger", "copy", str(tmp_path / "none.db"), pg_url]) == 2
    err = capsys.readouterr().err
    assert f"no quarantine ledger at {tmp_path}/none.db: none was ever created there " \
           f"(`burnin ledger init {tmp_path}/none.db` creates one)" in err
    assert err.endswith("; nothing copied\n") and not (tmp_path / "none.db").exists()
    filled(tmp_path / "q.db")
    assert main(["ledger", "copy", str(tmp_path / "q.db"), "postgresql://u:pw@h/db"]) == 2
    err = capsys.readouterr().err
    assert "holds a password" in err and "pw" not in err.replace("password", "")
    assert main(["ledger", "copy", str(tmp_path / "q.db"), str(tmp_path / "q.db")]) == 2
    assert "are the same ledger" in capsys.readouterr().err
    assert main(["ledger", "copy", pg_url, str(tmp_path / "q.db")]) == 2  # empty pg: none
    assert "no quarantine ledger at postgresql://" in capsys.readouterr().err


def test_a_source_a_run_is_writing_is_copied_without_taking_its_lock(tmp_path, pg_url,
                                                                    monkeypatch):
    """The copy reads one snapshot and writes nothing to its source: a run holding the
    source's write lock (or a user who may only read it) does not stop it."""
    import burnin.ledger.backends
    source = filled(tmp_path / "q.db")
    monkeypatch.setattr(burnin.ledger.backends, "BUSY_TIMEOUT_S", 0)  # nobody waits
    writer = sqlite3.connect(tmp_path / "q.db", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        assert main(["ledger", "copy", str(tmp_path / "q.db"), pg_url]) == 0
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert state(Ledger(pg_url)) == state(source)
