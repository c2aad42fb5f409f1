"""burnin/gate/quarantine.py: a finished run's verdicts become quarantine, release and actions."""

from __future__ import annotations

import pytest

from burnin.gate import actions
from burnin.gate.actions import ActionResult
from burnin.gate.quarantine import GateReport, quarantine_actions, settle, split_by_quarantine
from burnin.ledger.api import Ledger
from burnin.model.nodes import Inventory, Node, QuarantineSettings
from burnin.model.outcome import CaseResult


def inventory(*names: str, actions_=(), release_after=2, command=()) -> Inventory:
    return Inventory("inv.yaml", "c1", tuple(Node(n, n) for n in names), {},
                     QuarantineSettings(None, tuple(actions_), release_after, tuple(command)))


def cases(*rows: tuple[str, str, str, str]) -> dict:
    return {(node, check): CaseResult(node, check, outcome, message)
            for node, check, outcome, message in rows}


@pytest.fixture
def ledger(tmp_path):
    return Ledger(tmp_path / "q.db")


@pytest.fixture
def done(monkeypatch):
    """The actions, recorded instead of run: [(what, args)]."""
    calls = []

    def drain(name, checks, reasons):
        calls.append(("drain", name, list(checks), list(reasons)))
        return ActionResult("slurm", name, True, "drained: burnin: ...", drained=True)

    def resume(name):
        calls.append(("resume", name))
        return ActionResult("slurm", name, True, "resumed")

    def hook(template, name, checks, reason):
        calls.append(("hook", tuple(template), name, list(checks), reason))
        return ActionResult("command", name, False, "hook failed: exit status 3")

    monkeypatch.setattr(actions, "slurm_drain", drain)
    monkeypatch.setattr(actions, "slurm_resume", resume)
    monkeypatch.setattr(actions, "command_hook", hook)
    return calls


def test_failed_and_error_outcomes_are_quarantined_alike(ledger, done):
    """An error (a fixture or setup that broke on the node) is a failure of that node."""
    inv = inventory("n1", "n2", "n3")
    rep = settle(inv, ledger, "r1", cases(
        ("n1", "sdc", "passed", ""), ("n1", "burn", "passed", ""),
        ("n2", "burn", "error", "probe burn killed at its timeout"),
        ("n3", "sdc", "failed", "GPU 3 wrong"), ("n3", "health", "skipped", "busy")),
        revalidate=False, act=True)
    assert rep == GateReport(quarantined=["n2", "n3"])
    assert ledger.quarantined() == {"n2", "n3"}
    n2 = ledger.get("n2")
    assert (n2.cluster, n2.checks, n2.reasons, n2.figures, n2.run_id) == (
        "c1", ("burn",), ("burn: probe burn killed at its timeout",),
        {"burn": "probe burn killed at its timeout"}, "r1")
    assert ledger.get("n3").checks == ("sdc",)
    assert done == []


def test_every_failed_check_of_a_node_is_recorded_in_check_order(ledger, done):
    rep = settle(inventory("n1"), ledger, "r1", cases(
        ("n1", "sdc", "failed", "wrong"), ("n1", "burn", "error", "XID 79"),
        ("n1", "health", "passed", "")), revalidate=False, act=True)
    assert rep.quarantined == ["n1"]
    e = ledger.get("n1")
    assert e.checks == ("burn", "sdc")
    assert e.reasons == ("burn: XID 79", "sdc: wrong")
    assert e.figures == {"burn": "XID 79", "sdc": "wrong"}


def test_a_node_already_in_quarantine_is_still_failing_and_gets_no_new_action(ledger, done):
    inv = inventory("n1", "n2", actions_=("slurm",))
    ledger.record_failure("n1", "c1", ["burn"], ["burn: slow"], {}, "r0")
    rep = settle(inv, ledger, "r1", cases(("n1", "burn", "failed", "slow"),
                                          ("n2", "sdc", "failed", "wrong")),
                 revalidate=False, act=True)
    assert (rep.quarantined, rep.still_failing) == (["n2"], ["n1"])
    assert done == [("drain", "n2", ["sdc"], ["sdc: wrong"])]
    assert ledger.get("n2").drained_by_burnin and not ledger.get("n1").drained_by_burnin
    assert [h["event"] for h in ledger.history("n1")] == ["quarantined", "failed-again"]


def test_without_act_nothing_is_written_and_nothing_is_done(ledger, done):
    inv = inventory("n1", "n2", actions_=("slurm", "command"))
    ledger.record_failure("n2", "c1", ["burn"], ["burn: slow"], {}, "r0")
    rep = settle(inv, ledger, "r1", cases(("n1", "sdc", "failed", "wrong"),
                                          ("n2", "sdc", "passed", "")),
                 revalidate=True, act=False)
    assert rep == GateReport(would_quarantine=["n1"])
    assert ledger.quarantined() == {"n2"} and ledger.get("n2").clean_runs == 0
    assert done == []


def test_a_clean_revalidation_counts_and_releases_and_resumes_what_burnin_drained(
        ledger, done):
    inv = inventory("n1", "n2", "n3", actions_=("slurm",), release_after=2)
    for n in ("n1", "n2", "n3"):
        ledger.record_failure(n, "c1", ["burn"], ["burn: slow"], {}, "r0")
    ledger.set_drained("n1", True)
    clean = cases(("n1", "burn", "passed", ""), ("n2", "burn", "passed", ""),
                  ("n3", "burn", "passed", ""), ("n3", "sdc", "skipped", "busy"))
    rep = settle(inv, ledger, "r1", clean, revalidate=True, act=True)
    assert rep == GateReport(clean={"n1": 1, "n2": 1})
    rep = settle(inv, ledger, "r2", clean, revalidate=True, act=True)
    assert rep.clean == {"n1": 2, "n2": 2} and rep.released == ["n1", "n2"]
    assert done == [("resume", "n1")], "n2 was not drained by burnin: left as it is"
    assert [(a.action, a.node, a.message) for a in rep.actions] == [("slurm", "n1", "resumed")]
    assert ledger.quarantined() == {"n3"}, "a skipped check is not a clean run"
    assert ledger.history("n1")[-1] == {**ledger.history("n1")[-1], "event": "action",
                                        "why": "slurm: resumed", "run_id": "r2"}
    assert [(h["event"], h["run_id"]) for h in ledger.history("n2")[1:]] == [
        ("clean", "r1"), ("released", "r2")]


def test_a_release_resumes_nothing_without_the_slurm_action(ledger, done):
    inv = inventory("n1", release_after=1)
    ledger.record_failure("n1", "c1", ["burn"], ["burn: slow"], {}, "r0")
    ledger.set_drained("n1", True)
    rep = settle(inv, ledger, "r1", cases(("n1", "burn", "passed", "")), revalidate=True,
                 act=True)
    assert rep.released == ["n1"] and rep.actions == [] and done == []


def test_a_node_released_during_the_revalidation_is_reported_as_nothing(ledger, done):
    """Another controller or an operator released it while this run tested it: the
    ledger records no clean run, so the run must not say 'clean re-validation run 0'."""
    inv = inventory("n1", "n2", release_after=3)
    ledger.record_failure("n2", "c1", ["burn"], ["burn: slow"], {}, "r0")
    rep = settle(inv, ledger, "r1", cases(("n1", "burn", "passed", ""),
                                          ("n2", "burn", "passed", "")), revalidate=True,
                 act=True)
    assert rep.clean == {"n2": 1} and rep.released == [] and ledger.history("n1") == []


def test_clean_runs_count_only_in_a_revalidation(ledger, done):
    inv = inventory("n1", release_after=1)
    ledger.record_failure("n1", "c1", ["burn"], ["burn: slow"], {}, "r0")
    rep = settle(inv, ledger, "r1", cases(("n1", "burn", "passed", "")), revalidate=False,
                 act=True)
    assert rep == GateReport() and ledger.quarantined() == {"n1"}


def test_a_failing_node_in_a_revalidation_stays_and_its_count_resets(ledger, done):
    inv = inventory("n1", release_after=3)
    ledger.record_failure("n1", "c1", ["burn"], ["burn: slow"], {}, "r0")
    ledger.record_clean("n1", "r1", 3)
    rep = settle(inv, ledger, "r2", cases(("n1", "burn", "failed", "slow"),
                                          ("n1", "sdc", "passed", "")),
                 revalidate=True, act=True)
    assert rep == GateReport(still_failing=["n1"]) and ledger.get("n1").clean_runs == 0


def test_quarantine_actions_drain_run_the_hook_and_note_each(ledger, done):
    ledger.record_failure("n1", "c1", ["burn"], ["burn: slow"], {}, "r0")
    q = QuarantineSettings(None, ("slurm", "command"), 2, ("/bin/hook", "{node}"))
    results = quarantine_actions(ledger, q, "n1", ["burn", "sdc"], ["burn: slow", "sdc: x"],
                                 "r1", who="alice")
    assert [r.action for r in results] == ["slurm", "command"]
    assert done == [("drain", "n1", ["burn", "sdc"], ["burn: slow", "sdc: x"]),
                    ("hook", ("/bin/hook", "{node}"), "n1", ["burn", "sdc"],
                     "burn: slow; sdc: x")]
    assert ledger.get("n1").drained_by_burnin
    notes = [(h["event"], h["who"], h["why"], h["run_id"]) for h in ledger.history("n1")[1:]]
    assert notes == [("action", "alice", "slurm: drained: burnin: ...", "r1"),
                     ("action-failed", "alice", "command: hook failed: exit status 3", "r1")]


def test_a_drain_that_did_not_drain_leaves_the_node_not_drained_by_burnin(
        ledger, monkeypatch):
    monkeypatch.setattr(actions, "slurm_drain", lambda n, c, r: ActionResult(
        "slurm", n, True, "already drained by someone else", drained=False))
    ledger.record_failure("n1", "c1", ["burn"], ["burn: slow"], {}, "r0")
    q = QuarantineSettings(None, ("slurm",), 2, ())
    results = quarantine_actions(ledger, q, "n1", ["burn"], ["burn: slow"], None)
    assert [r.message for r in results] == ["already drained by someone else"]
    assert not ledger.get("n1").drained_by_burnin
    assert ledger.history("n1")[-1]["who"] == "burnin"
    assert quarantine_actions(ledger, QuarantineSettings(), "n1", [], [], None) == []


def test_settle_runs_every_new_nodes_actions(ledger, done):
    inv = inventory("n1", "n2", actions_=("command",), command=("/bin/hook",))
    rep = settle(inv, ledger, "r1", cases(("n1", "sdc", "failed", "x"),
                                          ("n2", "burn", "failed", "y")),
                 revalidate=False, act=True)
    assert done == [("hook", ("/bin/hook",), "n1", ["sdc"], "sdc: x"),
                    ("hook", ("/bin/hook",), "n2", ["burn"], "burn: y")]
    assert [(a.action, a.node, a.ok) for a in rep.actions] == [("command", "n1", False),
                                                               ("command", "n2", False)]
    assert [(h["event"], h["run_id"]) for h in ledger.history("n2")] == [
        ("quarantined", "r1"), ("action-failed", "r1")]


def test_a_clean_run_keeps_its_verdicts_and_writes_nothing_else(ledger, done):
    """Nothing failed and nothing is re-validated: the run's verdict on each node it
    judged is kept (burnin history), and no quarantine entry or history event is made.
    A node only skipped (held, or busy with another run) was not judged: nothing kept."""
    rep = settle(inventory("n1", "n2"), ledger, "r1",
                 cases(("n1", "sdc", "passed", ""), ("n2", "sdc", "skipped", "busy")),
                 revalidate=False, act=True)
    assert rep == GateReport()
    assert [(r.run_id, r.outcome, r.checks) for r in ledger.runs("n1")] == [("r1", "passed", ())]
    assert ledger.runs("n2") == [] and ledger.history("n1") == []
    assert ledger.entries() == []


def test_a_dry_run_keeps_nothing(ledger, done):
    settle(inventory("n1"), ledger, "r1", cases(("n1", "sdc", "failed", "wrong")),
           revalidate=False, act=False)
    assert ledger.runs("n1") == [] and ledger.entries() == []


def test_each_judged_node_s_run_is_kept_with_its_speed(ledger, done):
    from burnin.figures.goodput import Speed
    speeds = {"n3": Speed(0.9, "burn", "burn TFLOPS cpu", 45.0, 50.0)}
    settle(inventory("n1", "n2", "n3"), ledger, "r1",
           cases(("n1", "sdc", "skipped", "busy"), ("n2", "sdc", "failed", "GPU 0 wrong"),
                 ("n3", "sdc", "passed", "")), revalidate=False, act=True, speeds=speeds)
    assert [(r.outcome, r.checks, r.reasons) for r in ledger.runs("n2")] == [
        ("failed", ("sdc",), ("sdc: GPU 0 wrong",))]
    (n3,) = ledger.runs("n3")
    assert (n3.outcome, n3.speed) == ("passed", 0.9)
    assert n3.figures == {"set_by": "burn: burn TFLOPS cpu 45 against the fleet's median 50"}
    assert ledger.runs("n2")[0].speed is None and ledger.runs("n2")[0].figures == {}


def test_a_repeat_offender_passing_re_validation_is_counted_not_released(ledger, done):
    for i in range(3):
        ledger.record_failure("n1", "c1", ["sdc"], ["sdc: x"], {}, f"r{i}")
        if i < 2:
            ledger.release("n1", "reseated", "alice")
    rep = settle(inventory("n1", release_after=1), ledger, "v1",
                 cases(("n1", "sdc", "passed", "")), revalidate=True, act=True)
    assert rep.clean == {"n1": 1} and rep.released == []
    assert ledger.quarantined() == {"n1"}


def test_a_node_s_worst_outcome_and_its_reasons_are_kept(ledger, done):
    settle(inventory("n1"), ledger, "r1",
           cases(("n1", "sdc", "failed", "GPU 3 wrong"), ("n1", "burn", "error", "hung"),
                 ("n1", "health", "passed", "")), revalidate=False, act=True)
    (run,) = ledger.runs("n1")
    assert run.outcome == "error" and set(run.checks) == {"sdc", "burn"}
    assert set(run.reasons) == {"sdc: GPU 3 wrong", "burn: hung"}


def test_split_by_quarantine(ledger):
    nodes = [Node(n, n) for n in ("n1", "n2", "n3")]
    ledger.record_failure("n2", "c1", ["burn"], ["burn: slow"], {}, "r0")
    assert split_by_quarantine(nodes, ledger, revalidate=False) == (
        [nodes[0], nodes[2]], [nodes[1]])
    assert split_by_quarantine(nodes, ledger, revalidate=True) == ([nodes[1]], [])
