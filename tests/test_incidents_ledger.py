"""The ledger's incidents table (burnin/ledger/incidents.py) on both engines: kept,
read back by node and by run, and made by the schema's migration on an old ledger."""

from __future__ import annotations

from pathlib import Path

import pytest

from burnin.gate.incidents import FRACTION, TOPOLOGY, Incident
from burnin.ledger.api import Ledger
from burnin.ledger.backends import SqliteBackend
from burnin.ledger.postgres import PostgresBackend

LEAF = Incident("allreduce_internode", TOPOLOGY, ("h4", "h5", "h6"), 6, "switch=leafB", 3, 0)
FLOOR = Incident("storage", FRACTION, tuple(f"n{i}" for i in range(1, 7)), 6)


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "ledger.db")
    return request.getfixturevalue("pg_url")


def test_a_run_s_incidents_are_kept_and_read_back_by_node_and_run(where):
    ledger = Ledger(where)
    ledger.record_incidents("c", "r1", [LEAF, FLOOR], now=100.0)
    ledger.record_incidents("c", "r2", [], now=200.0)  # nothing to keep: nothing written
    assert [k.incident for k in ledger.incidents()] == [LEAF, FLOOR]
    assert [k.incident for k in ledger.incidents(node="h5")] == [LEAF]
    assert [k.incident.check for k in ledger.incidents(run_id="r1")] == [
        "allreduce_internode", "storage"]
    assert ledger.incidents(run_id="r2") == [] and ledger.incidents(since=150.0) == []
    (kept,) = ledger.incidents(node="n3")
    assert (kept.run_id, kept.time) == ("r1", 100.0)
    assert kept.incident.message.startswith("shared cause suspected: storage failed on 6 of 6")
    assert ledger.quarantined() == set()  # an incident quarantines nobody


def test_an_old_ledger_gains_the_table_by_migration(where):
    if "://" not in where:
        Ledger(where)  # burnin made it; then its schema is taken back to step 3
        with SqliteBackend(Path(where)).transaction() as db:
            db.execute("DROP TABLE incidents")
            db.execute("DELETE FROM ledger_schema WHERE version >= 4")
    else:
        PostgresBackend(where).migrate(upto=3)
    ledger = Ledger(where)
    ledger.record_incidents("c", "r1", [LEAF])
    assert [k.incident for k in ledger.incidents()] == [LEAF]
