"""After a run's transaction commits, its actions, each recorded: a
Slurm drain is marked in the ledger before it is asked for, so that a record refused
after it never loses that burnin drained the node; a drain that did not happen takes the
mark back. The Slurm commands are recorded instead of run (no Slurm in the fast tier:
tests/test_slurm.py drains real nodes); the ledger is a real SQLite file."""

from __future__ import annotations

import sqlite3

import pytest

from burnin.gate import actions
from burnin.gate.actions import ActionResult
from burnin.gate.quarantine import GateReport, quarantine_actions, settle
from burnin.ledger.api import Ledger, LedgerError
from burnin.model.nodes import Inventory, Node, QuarantineSettings
from burnin.model.outcome import CaseResult


@pytest.fixture
def ledger(tmp_path):
    return Ledger(tmp_path / "q.db")


def inventory(*names: str) -> Inventory:
    return Inventory("inv.yaml", "c1", tuple(Node(n, n) for n in names), {},
                     QuarantineSettings(actions=("slurm",)))


def failing(*names: str) -> dict:
    return {(n, "sdc"): CaseResult(n, "sdc", "failed", "cuda:3 wrong") for n in names}


@pytest.fixture
def drains(monkeypatch, ledger):
    """slurm_drain recorded: [(node, what the ledger said of the drain when it was asked
    for)]; `drained` says whether this drain happens."""
    seen, drained = [], [True]

    def drain(name, checks, reasons):
        entry = ledger.get(name)
        seen.append((name, entry.drained_by_burnin if entry else None))
        if drained[0]:
            return ActionResult("slurm", name, True, "drained: burnin: ...", drained=True)
        return ActionResult("slurm", name, True, "already drained by someone else ('admin')")
    monkeypatch.setattr(actions, "slurm_drain", drain)
    return seen, drained


def refuse_history(ledger: Ledger, event: str) -> None:
    db = sqlite3.connect(ledger.path, isolation_level=None)
    db.execute(f"CREATE TRIGGER refuse BEFORE INSERT ON history WHEN NEW.event = '{event}' "
               "BEGIN SELECT RAISE(ABORT, 'injected fault'); END")
    db.close()


def test_a_drain_whose_record_is_refused_is_still_known_to_be_burnin_s(ledger, drains):
    seen, _ = drains
    refuse_history(ledger, "action")
    rep = settle(inventory("n1"), ledger, "r1", failing("n1"), revalidate=False, act=True)
    assert seen == [("n1", True)], "the drain was asked for before the ledger marked it"
    assert rep.quarantined == ["n1"] and ledger.get("n1").drained_by_burnin
    assert len(rep.unrecorded) == 1 and rep.unrecorded[0].startswith(
        "slurm on n1: drained: burnin: ... (the quarantine ledger ")
    assert "injected fault" in rep.unrecorded[0]
    assert ("not recorded in the ledger: " + rep.unrecorded[0], True) in rep.lines(2)


def test_a_drain_that_did_not_happen_takes_the_mark_back(ledger, drains):
    seen, drained = drains
    drained[0] = False
    rep = settle(inventory("n1"), ledger, "r1", failing("n1"), revalidate=False, act=True)
    assert seen == [("n1", True)] and rep.unrecorded == []
    assert not ledger.get("n1").drained_by_burnin, "burnin would resume an admin's drain"
    assert ledger.history("n1")[-1]["why"] == "slurm: already drained by someone else ('admin')"


def test_a_drain_by_hand_is_marked_first_too(ledger, drains):
    seen, _ = drains
    ledger.quarantine_by_hand("n1", "c1", "fan", "ann")
    results = quarantine_actions(ledger, QuarantineSettings(actions=("slurm",)), "n1", [],
                                 ["by hand (ann): fan"], None, who="ann")
    assert seen == [("n1", True)] and results[0].drained
    assert ledger.get("n1").drained_by_burnin
    assert ledger.history("n1")[-1]["who"] == "ann"


def test_a_refused_run_transaction_raises_and_marks_nothing(ledger, drains):
    seen, _ = drains
    refuse_history(ledger, "quarantined")
    with pytest.raises(LedgerError, match="injected fault"):
        settle(inventory("n1", "n2"), ledger, "r1", failing("n1", "n2"), revalidate=False,
               act=True)
    assert seen == [] and ledger.quarantined() == set()
    assert ledger._read(lambda db: db.execute("SELECT count(*) FROM runs").fetchone()) == (0,)


def test_what_the_run_says_of_its_gate():
    rep = GateReport(quarantined=["n2"], clean={"n1": 1, "n3": 1}, released=["n3"],
                     not_counted={"n4": ("sdc", "burn")}, unrecorded=["slurm on n2: x (y)"])
    assert rep.lines(2) == [
        ("quarantined: n2", False), ("released from quarantine: n3", False),
        ("n1: clean re-validation run 1 of 2", False),
        ("n4: clean, but not counted toward release: this run did not include sdc, burn, "
         "which it is in quarantine for", True),
        ("not recorded in the ledger: slurm on n2: x (y)", True)]
