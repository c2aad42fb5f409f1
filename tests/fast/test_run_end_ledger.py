"""A run's end as the ledger writes it (burnin/ledger/run_end.py), on a real SQLite file:
a clean run that did not include every check a node is in quarantine for is noted and
not counted, the nodes after it still are; the run's incidents go in with its verdicts;
an action's record names who took it."""

from __future__ import annotations

import time

import pytest

from burnin.ledger.api import Ledger
from burnin.ledger.incidents import KeptIncident
from burnin.ledger.run_end import RunVerdicts
from burnin.model.incident import FRACTION, Incident
from burnin.model.outcome import ActionResult


@pytest.fixture
def ledger(tmp_path):
    return Ledger(tmp_path / "q.db")


def test_a_clean_run_short_of_a_node_s_checks_is_noted_and_the_next_node_still_counts(
        ledger):
    ledger.record_failure("n1", "c1", ["sdc", "burn", "health"], ["sdc: wrong"], {}, "r1")
    ledger.record_failure("n2", "c1", ["health"], ["health: ecc"], {}, "r1")
    before = time.time()
    done = ledger.record_run_end(RunVerdicts(
        "c1", "r2", [], 30, clean={"n1": frozenset({"health"}), "n2": frozenset({"health"})},
        release_after=1, who="ann"))
    after = time.time()
    assert done.not_counted == {"n1": ("sdc", "burn")}
    assert done.clean == {"n2": 1} and done.released == ("n2",), \
        "a node short of its checks stopped the count of the nodes after it"
    assert ledger.quarantined() == {"n1"} and ledger.get("n1").clean_runs == 0
    last = ledger.history("n1")[-1]
    assert before <= last.pop("time") <= after
    assert last == {
        "event": "not-counted", "who": "ann", "run_id": "r2",
        "why": "clean, but this run did not include sdc, burn, which it is in quarantine "
               "for: not counted toward release"}


def test_a_run_s_incidents_are_kept_with_its_verdicts(ledger):
    incident = Incident("sdc", FRACTION, ("n1", "n2", "n3"), 4, figures={"share": 0.75})
    before = time.time()
    ledger.record_run_end(RunVerdicts("c1", "r1", [], 30, incidents=(incident,)))
    after = time.time()
    kept = ledger.incidents(run_id="r1")
    assert kept == [KeptIncident("r1", kept[0].time, incident)]
    assert before <= kept[0].time <= after
    assert ledger.incidents(node="n2") == kept


def test_an_action_is_recorded_as_burnin_s_unless_told_who(ledger):
    ledger.record_failure("n1", "c1", ["sdc"], ["sdc: wrong"], {}, "r1")
    ledger.record_actions("n1", [ActionResult("slurm", "n1", True, "drained", drained=True)],
                          "r1")
    assert ledger.history("n1")[-1]["who"] == "burnin"
