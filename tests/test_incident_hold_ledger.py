"""An open incident's hold in the ledger (burnin/ledger/incidents.py) on both engines:
open until a person closes it or a later run passes all its nodes, its nodes held for
admission meanwhile, and the schema step that made incidents closable."""

from __future__ import annotations

from pathlib import Path

import pytest

from burnin.errors import IncidentError
from burnin.gate.incidents import FRACTION, TOPOLOGY, Incident
from burnin.ledger.api import Ledger
from burnin.ledger.backends import SqliteBackend
from burnin.ledger.postgres import PostgresBackend

LEAF = Incident("allreduce_internode", TOPOLOGY, ("h4", "h5", "h6"), 6, "switch=leafB", 3, 0)
FLOOR = Incident("storage", FRACTION, ("n1", "n2", "n3"), 6)


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "ledger.db")
    return request.getfixturevalue("pg_url")


def test_an_incident_holds_its_nodes_until_a_person_closes_it(where):
    ledger = Ledger(where)
    ledger.record_incidents("c", "r1", [LEAF, FLOOR], now=100.0)
    leaf, floor = ledger.incidents(still_open=True)
    assert (leaf.incident.id, floor.incident.id) != (0, 0) and leaf.closed is None
    held = ledger.incident_holds()
    assert sorted(held) == ["h4", "h5", "h6", "n1", "n2", "n3"]
    assert held["h5"].startswith(f"incident {leaf.incident.id} of run r1 still open "
                                 "(switch=leafB)")
    assert ledger.quarantined() == set()  # held for admission, not quarantined
    done = ledger.close_incident(leaf.incident.id, "leafB's uplink replaced", "alice")
    assert (done.closed_by, done.closed_why) == ("alice", "leafB's uplink replaced")
    assert sorted(ledger.incident_holds()) == ["n1", "n2", "n3"]
    assert [k.incident for k in ledger.incidents(still_open=True)] == [FLOOR]
    (closed,) = [k for k in ledger.incidents() if k.closed is not None]
    assert closed.incident == LEAF
    (event,) = ledger.history("h4")
    assert event["event"] == "incident-closed" and event["who"] == "alice"
    with pytest.raises(IncidentError, match="closed already by alice"):
        ledger.close_incident(leaf.incident.id, "again", "bob")
    with pytest.raises(IncidentError, match="no incident 999"):
        ledger.close_incident(999, "x", "bob")


def test_a_later_run_passing_all_its_nodes_in_its_check_closes_it(where):
    ledger = Ledger(where)
    ledger.record_incidents("c", "r1", [FLOOR], now=100.0)
    # the run that found it does not close it; nor one passing only some of its nodes,
    # nor one passing them all in another check
    assert ledger.settle_incidents("r1", {"storage": {"n1", "n2", "n3"}}) == []
    assert ledger.settle_incidents("r2", {"storage": {"n1", "n2"}, "sdc": {"n3"}}) == []
    assert ledger.settle_incidents("r2", {"sdc": {"n1", "n2", "n3"}}) == []
    (done,) = ledger.settle_incidents("r3", {"storage": {"n1", "n2", "n3", "n4"}})
    assert done.closed_by == "burnin" and "run r3 passed all its nodes" in done.closed_why
    assert ledger.incident_holds() == {}


def test_the_schema_step_closes_incidents_kept_before_it(where):
    """Incidents kept before they held their nodes held nobody: the upgrade closes them,
    saying so, rather than hold every node of half a year's incidents at once."""
    Ledger(where)
    backend = PostgresBackend(where) if "://" in where else SqliteBackend(Path(where))
    with backend.transaction() as db:  # the ledger as it was before step 5
        db.execute("DROP TABLE incidents")
        db.execute("DELETE FROM ledger_schema WHERE version >= 4")
    backend.migrate(upto=4)
    with backend.transaction() as db:
        db.execute("INSERT INTO incidents (cluster, run_id, time, check_name, rule, "
                   "component, nodes, judged, message, figures) VALUES "
                   "('c', 'r0', 50, 'storage', 'fraction', '', '[\"n1\"]', 6, 'm', "
                   "'{\"check\": \"storage\", \"rule\": \"fraction\", \"nodes\": [\"n1\"], "
                   "\"judged\": 6}')")
    ledger = Ledger(where)  # the step runs
    (old,) = ledger.incidents()
    assert old.closed == 50.0 and old.closed_why == "kept before incidents held their nodes"
    assert ledger.incident_holds() == {}
