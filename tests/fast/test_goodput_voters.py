"""Who votes for the fleet median a relative speed is taken against:
a document its judge could not read never does."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from burnin.checks import CHECKS
from burnin.engine.run import Run
from burnin.figures import goodput
from burnin.inventory.schema import load_inventory
from burnin.probe.protocol import ProbeOutcome

CORPUS = Path(__file__).resolve().parent.parent / "corpus"


def test_a_document_its_judge_could_not_read_never_votes(tmp_path, monkeypatch):
    inv = tmp_path / "inv.yaml"
    inv.write_text(json.dumps({"version": 1, "defaults": {"transport": "local", "gpus": 0},
                               "nodes": [{"name": "n[1-6]"}]}))
    inventory = load_inventory(inv)
    run = Run(inventory, list(inventory.nodes), "quick", tmp_path / "reports", "t")
    doc = json.loads((CORPUS / "burn.cpu.json").read_text())
    run.store.adopt("burn", {f"n{i}": ProbeOutcome(f"n{i}", "burn", True, data=doc)
                             for i in range(1, 7)})
    real = CHECKS["burn"].judge

    def judge(node, outcome, j):
        if node.name == "n6":  # its document breaks the judge: the node fails alone
            raise KeyError("devices")
        return real(node, outcome, j)
    monkeypatch.setitem(CHECKS, "burn", replace(CHECKS["burn"], judge=judge))
    assert run.verdict("burn", inventory.nodes[5]).failures[0].startswith(
        "its burn document could not be judged")
    assert "n6" not in run.figures("burn")
    assert set(run.figures("burn")) == {f"n{i}" for i in range(1, 6)}
    speeds, _ = goodput.of_run(run)
    assert set(speeds) == {f"n{i}" for i in range(1, 6)}  # five voters, n6 none
