"""The outcome store (burnin/engine/outcome_store.py): each check's outcomes made once per
run, however many pytest-xdist workers ask (each a store over the same run directory), and
recorded in results.jsonl under the check's name, whichever probe made them."""

from __future__ import annotations

import json
import threading

import pytest

from burnin.engine.outcome_store import ControllerFault, OutcomeStore
from burnin.probe.protocol import ProbeOutcome

DOC = {"probe": "allreduce", "schema": 1, "node": {}, "devices": [], "figures": {},
       "errors": []}


def test_a_check_runs_once_for_every_worker_of_the_run(tmp_path):
    calls = []

    def execute(check):
        calls.append(check)
        return {"n1": ProbeOutcome("n1", "allreduce", True, "", DOC),
                "n2": ProbeOutcome("n2", "allreduce", False, "ssh: connection refused")}

    workers = [OutcomeStore(tmp_path / "r1", "r1") for _ in range(3)]
    got = []
    threads = [threading.Thread(target=lambda s=s: got.append(s.get("allreduce_internode",
                                                                      execute)))
               for s in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert calls == ["allreduce_internode"]
    assert all(g["n2"].reason == "ssh: connection refused" for g in got) and len(got) == 3
    assert all(s.has("allreduce_internode") for s in workers)
    assert not workers[0].has("health")
    lines = (tmp_path / "r1" / "results.jsonl").read_text().splitlines()
    assert [json.loads(ln)["check"] for ln in lines] == ["allreduce_internode"] * 2


def test_a_check_asking_for_another_while_it_runs_goes_straight_in(tmp_path):
    store = OutcomeStore(tmp_path / "r1", "r1")

    def execute(check):
        if check == "allreduce_internode":  # a group check wants the single-node outcomes
            store.get("health", execute)
        return {"n1": ProbeOutcome("n1", check, True, "", {**DOC, "probe": check})}

    assert store.get("allreduce_internode", execute)["n1"].ok
    assert store.has("health")


def test_a_run_directory_that_cannot_be_written_is_the_controllers_fault(tmp_path):
    (tmp_path / "reports").write_text("a file where the reports directory should be")
    store = OutcomeStore(tmp_path / "reports" / "r1", "r1")
    with pytest.raises(ControllerFault, match="cannot write the run's directory"):
        store.get("health", lambda check: {})
