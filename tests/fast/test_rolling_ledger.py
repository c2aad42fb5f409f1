"""The ledger's memory of rolling runs (burnin/ledger/rolling.py), on every engine of
LEDGER_ENGINES (tests/conftest.py): when each node was last validated, and each node's
last rolling step, with other history events in between ignored."""

from __future__ import annotations

import time

from burnin.ledger.rolling import FAILED, OUT, RELEASED, VALIDATED


def test_last_validated_and_last_step_per_node(new_ledger, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    ledger = new_ledger()
    for node, event in (("n1", OUT), ("n1", VALIDATED), ("n2", OUT), ("n2", RELEASED),
                        ("n2", OUT), ("n3", OUT), ("n3", FAILED)):
        now[0] += 10
        ledger.note(node, event, "wave")
    now[0] += 10
    ledger.note("n1", OUT, "the next week's wave")
    ledger.note("n2", "quarantined", "not a rolling event")
    assert ledger.rolling_validated() == {"n1": 1020.0}
    assert ledger.rolling_last() == {"n1": OUT, "n2": OUT, "n3": FAILED}
