"""The quarantine ledger's behaviour through its API, whatever engine holds it: every case
here runs once per engine, through the `new_ledger` fixture (tests/conftest.py:
LEDGER_ENGINES), a callable that opens the test's own ledger (the same one at every call):
an SQLite file (the fast tier, which mutation testing runs) and a real PostgreSQL
(marked postgres and slow: `-m "not postgres"` leaves it out). A new engine is a row of
LEDGER_ENGINES; a new case is a test here."""

from __future__ import annotations

import time

import pytest

from burnin.ledger.api import Entry, NodeRun


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    return now


def test_check_writable_keeps_nothing(new_ledger):
    ledger = new_ledger()
    ledger.check_writable()
    assert ledger._read(lambda db: db.execute("SELECT count(*) FROM history").fetchone()) \
        == (0,)


def test_a_write_that_fails_rolls_back_all_of_it_and_re_raises(new_ledger):
    """A run's failures go in together or not at all, and the caller hears of a failure:
    otherwise the gate would report 'newly quarantined' while the ledger holds nothing."""
    ledger = new_ledger()
    bad = [("m2", ["sdc"], ["sdc: x"], {}), ("m3", ["sdc"], ["sdc: x"], {"sdc": object()})]
    with pytest.raises(TypeError, match="not JSON serializable"):
        ledger.record_failures("c", bad, "run-3")
    assert ledger.quarantined() == set() and ledger.history("m2") == []
    with pytest.raises(KeyboardInterrupt):  # whatever stops it, BaseException included
        with ledger._tx() as db:
            db.execute("INSERT INTO history (node, time, event, who, why) "
                       "VALUES ('x', 0, 'e', 'w', '')")
            raise KeyboardInterrupt
    assert ledger.history("x") == []
    ledger.note("y", "e", "kept")
    assert [h["why"] for h in ledger.history("y")] == ["kept"]


def test_record_failures_inserts_new_nodes_and_updates_known_ones(new_ledger, clock):
    ledger = new_ledger()
    assert ledger.record_failures("c1", [("n1", ["burn"], ["burn: slow"], {"burn": 1})],
                                  "r1", who="ci") == {"n1": True}
    ledger.record_clean("n1", "r2", 5)
    clock[0] = 2000.0
    out = ledger.record_failures("c2", [("n1", ["sdc"], ["sdc: wrong", "x" * 5000], {"sdc": 2}),
                                        ("n2", ["health"], ["health: ECC off"], {})], "r3")
    assert out == {"n1": False, "n2": True}
    assert ledger.get("n1") == Entry("n1", "c1", ("sdc",), ("sdc: wrong", "x" * 5000),
                                     {"sdc": 2}, "r3", 1000.0, 2000.0, "ci", 0, False, False)
    assert ledger.get("n2") == Entry("n2", "c2", ("health",), ("health: ECC off",), {}, "r3",
                                     2000.0, 2000.0, "burnin", 0, False, False)
    h = ledger.history("n1")
    assert [(x["event"], x["who"], x["run_id"], x["time"]) for x in h] == [
        ("quarantined", "ci", "r1", 1000.0), ("clean", "burnin", "r2", 1000.0),
        ("failed-again", "burnin", "r3", 2000.0)]
    assert h[0]["why"] == "burn: slow"
    assert h[2]["why"] == ("sdc: wrong; " + "x" * 5000)[:4000]
    assert ledger.record_failure("n3", "c1", [], [], {}, "r4", who="alice") is True
    assert (ledger.get("n3").run_id, ledger.get("n3").set_by) == ("r4", "alice")
    assert ledger.history("n3")[0]["who"] == "alice"
    assert ledger.record_failure("n3", "c1", [], [], {}, "r5") is False


def test_a_run_failing_more_nodes_than_one_lookup_holds_knows_every_one_already_held(
        new_ledger):
    # record_failures looks the run's nodes up 500 at a time: a node past the first chunk,
    # or at a chunk's edge, already in quarantine is failed again, not new
    ledger = new_ledger()
    nodes = [f"n{i:04}" for i in range(1201)]
    failures = [(n, ["burn"], ["slow"], {}) for n in nodes]
    assert set(ledger.record_failures("c1", failures, "r1").values()) == {True}
    again = ledger.record_failures("c1", failures[::-1], "r2")
    assert [n for n, new in again.items() if new] == []
    assert len(again) == 1201
    assert {ledger.history(n)[-1]["event"] for n in ("n0000", "n0499", "n0500", "n0501",
                                                     "n1000", "n1200")} == {"failed-again"}


def test_record_clean_counts_and_releases_at_release_after(new_ledger, clock):
    ledger = new_ledger()
    assert ledger.record_clean("nobody", "r1", 1) == (0, False)
    assert ledger.history("nobody") == []
    ledger.record_failure("n1", "c", ["burn"], ["burn: slow"], {}, "r0")
    clock[0] = 1500.0
    assert ledger.record_clean("n1", "r1", 3) == (1, False)
    assert ledger.get("n1").clean_runs == 1 and ledger.get("n1").updated == 1500.0
    assert ledger.record_clean("n1", "r2", 3) == (2, False)
    assert ledger.record_clean("n1", "r3", 3) == (3, True)
    assert ledger.get("n1") is None
    assert [(h["event"], h["who"], h["why"], h["run_id"]) for h in ledger.history("n1")[1:]] == [
        ("clean", "burnin", "clean re-validation run 1 of 3", "r1"),
        ("clean", "burnin", "clean re-validation run 2 of 3", "r2"),
        ("released", "burnin", "3 consecutive clean re-validation runs", "r3")]


def test_a_node_quarantined_by_hand_is_released_only_by_hand(new_ledger, clock):
    ledger = new_ledger()
    assert ledger.quarantine_by_hand("n1", "c", "fan noise", "alice") is True
    assert ledger.get("n1") == Entry("n1", "c", (), ("quarantined by hand by alice: fan noise",),
                                     {}, "", 1000.0, 1000.0, "alice", 0, False, True)
    assert ledger.record_clean("n1", "r1", 1) == (1, False)
    assert ledger.get("n1") is not None and ledger.get("n1").clean_runs == 1
    assert ledger.history("n1")[-1]["why"] == \
        "clean re-validation run 1; quarantined by hand: released only by hand"
    assert ledger.release("n1", "fan replaced", "bob").by_hand is True
    assert ledger.get("n1") is None
    assert [(h["event"], h["who"], h["why"], h["run_id"]) for h in ledger.history("n1")] == [
        ("quarantined", "alice", "fan noise", None),
        ("clean", "burnin", "clean re-validation run 1; quarantined by hand: released only "
                            "by hand", "r1"),
        ("released", "bob", "fan replaced", None)]


def test_quarantine_by_hand_holds_a_node_burnin_quarantined(new_ledger, clock):
    ledger = new_ledger()
    ledger.record_failure("n1", "c", ["burn"], ["burn: slow"], {"burn": 1}, "r0")
    ledger.record_clean("n1", "r1", 5)
    clock[0] = 3000.0
    assert ledger.quarantine_by_hand("n1", "other", "keep it", "alice") is False
    e = ledger.get("n1")
    assert (e.cluster, e.checks, e.reasons, e.clean_runs, e.by_hand, e.updated, e.set_by) == (
        "c", ("burn",), ("burn: slow", "quarantined by hand by alice: keep it"), 0, True,
        3000.0, "burnin")
    assert ledger.history("n1")[-1]["event"] == "held-by-hand"
    assert ledger.record_clean("n1", "r2", 1) == (1, False)


def test_set_drained_release_and_note(new_ledger):
    ledger = new_ledger()
    ledger.record_failure("n1", "c", ["burn"], ["burn: slow"], {}, "r0")
    ledger.record_failure("n2", "c", ["burn"], ["burn: slow"], {}, "r0")
    ledger.set_drained("n1", True)
    assert ledger.get("n1").drained_by_burnin and not ledger.get("n2").drained_by_burnin
    ledger.set_drained("n1", False)
    assert not ledger.get("n1").drained_by_burnin
    assert ledger.release("n3", "why", "bob") is None and ledger.history("n3") == []
    ledger.note("n2", "action", "slurm: drained \x1b[31m", "r9")
    ledger.note("n2", "action-failed", "hook", who="alice")
    assert ledger.history("n2")[1:] == [
        {**ledger.history("n2")[1], "event": "action", "who": "burnin",
         "why": "slurm: drained \\x1b[31m", "run_id": "r9"},
        {**ledger.history("n2")[2], "event": "action-failed", "who": "alice", "why": "hook",
         "run_id": None}]
    assert list(ledger.history("n2")[0]) == ["time", "event", "who", "why", "run_id"]
    assert [e.node for e in ledger.entries()] == ["n1", "n2"]


def test_entries_are_in_node_order(new_ledger):
    ledger = new_ledger()
    for n in ("n3", "n1", "n2"):
        ledger.record_failure(n, "c", [], [], {}, "r")
    assert [e.node for e in ledger.entries()] == ["n1", "n2", "n3"]
    assert ledger.get("n4") is None


def test_a_node_twice_in_one_run_is_new_once_then_failed_again(new_ledger):
    ledger = new_ledger()
    out = ledger.record_failures("c", [("n1", ["sdc"], ["sdc: a"], {}),
                                       ("n2", ["burn"], ["burn: b"], {}),
                                       ("n1", ["burn"], ["burn: c"], {"burn": 1})], "r1")
    assert out == {"n1": True, "n2": True}
    assert [(h["event"], h["why"]) for h in ledger.history("n1")] == [
        ("quarantined", "sdc: a"), ("failed-again", "burn: c")]
    assert ledger.get("n1").checks == ("burn",) and ledger.get("n1").figures == {"burn": 1}


DAY = 86400.0


def fail_and_release(ledger, clock, node: str, times: int, every_days: float) -> None:
    """`node` quarantined `times` times, `every_days` apart, released by hand after each."""
    for i in range(times):
        ledger.record_failure(node, "c", ["burn"], [f"burn: slow {i}"], {}, f"r{i}")
        if i < times - 1:
            ledger.release(node, "reseated", "alice")
            clock[0] += every_days * DAY


def test_a_repeat_offender_is_not_released_by_clean_runs_only_by_hand(new_ledger, clock):
    ledger = new_ledger()
    fail_and_release(ledger, clock, "n1", 3, 10)  # 3 times in 20 days
    fail_and_release(ledger, clock, "n2", 2, 10)  # twice: not yet
    assert ledger.repeat_offenders(3, 30) == {"n1": 3}
    assert ledger.record_clean("n1", "v1", 1, (3, 30)) == (1, False)
    assert ledger.record_clean("n1", "v2", 1, (3, 30)) == (2, False)
    assert ledger.get("n1").clean_runs == 2
    last = ledger.history("n1")[-1]
    assert (last["event"], last["who"], last["run_id"]) == ("clean", "burnin", "v2")
    assert last["why"] == ("clean re-validation run 2; a repeat offender (quarantined 3 times "
                           "in 30 days): released only by hand")
    assert ledger.record_clean("n2", "v1", 1, (3, 30)) == (1, True)
    assert ledger.release("n1", "board replaced", "bob") is not None
    assert ledger.get("n1") is None


def test_quarantines_older_than_the_window_do_not_count(new_ledger, clock):
    ledger = new_ledger()
    fail_and_release(ledger, clock, "n1", 3, 20)  # 3 times in 40 days
    assert ledger.repeat_offenders(3, 30) == {}
    assert ledger.repeat_offenders(3, 41) == {"n1": 3}
    assert ledger.repeat_offenders(2, 30) == {"n1": 2}
    assert ledger.record_clean("n1", "v1", 1, (3, 30)) == (1, True)
    # without the rule (None), as before: released at release_after
    fail_and_release(ledger, clock, "n2", 3, 1)
    assert ledger.record_clean("n2", "v1", 1) == (1, True)


def test_dump_and_load_copy_everything_in_order_and_refuse_a_ledger_that_holds_anything(
        new_ledger, clock, tmp_path):
    from burnin.ledger.api import Ledger
    from burnin.ledger.backends import LedgerNotEmpty
    ledger = new_ledger()
    ledger.record_failure("n2", "c", ["burn"], ["burn: slow"], {"burn": "x"}, "r1")
    ledger.quarantine_by_hand("n1", "c", "fans", "alice")
    clock[0] += 5
    ledger.record_clean("n2", "v1", 3)
    ledger.set_drained("n2", True)
    ledger.record_runs("c", [NodeRun("n2", "r1", clock[0], "failed", ("burn",), ("slow",),
                                     0.5, {"set_by": "burn"})], keep_days=30)
    quarantine, history, runs = ledger.dump()
    assert [r[0] for r in quarantine] == ["n1", "n2"]
    assert [(r[0], r[2]) for r in history] == [("n2", "quarantined"), ("n1", "quarantined"),
                                               ("n2", "clean")]
    copy = Ledger(tmp_path / "copy.db")
    copy.load(quarantine, history, runs, force=False)
    assert copy.entries() == ledger.entries()
    assert [copy.history(n) for n in ("n1", "n2")] == [ledger.history(n) for n in ("n1", "n2")]
    assert copy.runs("n2") == ledger.runs("n2") and len(copy.runs("n2")) == 1
    with pytest.raises(LedgerNotEmpty, match=r"holds 2 node\(s\) in quarantine, 3 history "
                                             r"event\(s\) and 1 kept run"):
        copy.load([], [], [], force=False)
    history_only = Ledger(tmp_path / "history-only.db")
    history_only.note("n9", "action", "drained")
    with pytest.raises(LedgerNotEmpty, match=r"holds 0 node\(s\) in quarantine, 1 history"):
        history_only.load(quarantine, history, runs, force=False)
    runs_only = Ledger(tmp_path / "runs-only.db")
    runs_only.record_runs("c", [NodeRun("n9", "r", clock[0], "passed")], keep_days=30)
    with pytest.raises(LedgerNotEmpty, match=r"and 1 kept run"):
        runs_only.load(quarantine, history, runs, force=False)
    copy.load([], history[:1], [], force=True)  # everything replaced
    assert copy.entries() == [] and [h["event"] for h in copy.history("n2")] == ["quarantined"]
    assert copy.runs("n2") == []


def test_runs_are_kept_per_node_in_order_and_let_go_past_the_retention(new_ledger, clock):
    """Every run's verdict on every node it judged, bounded by keep_days: a run's rows and
    the pruning of old ones in one transaction."""
    ledger = new_ledger()
    start = clock[0]
    for day in range(5):
        clock[0] = start + day * DAY
        gone = ledger.record_runs("c", [
            NodeRun("n1", f"r{day}", clock[0], "passed", speed=1.0 - day / 100,
                    figures={"set_by": "burn: burn TFLOPS cpu"}),
            NodeRun("n2", f"r{day}", clock[0], "failed", ("sdc", "burn"),
                    ("sdc: wrong" + "x" * 3000, "burn: slow"))], keep_days=2.5)
        assert gone == (2 if day >= 3 else 0)  # day 0's at day 3, day 1's at day 4
    runs = ledger.runs("n1")
    assert [r.run_id for r in runs] == ["r2", "r3", "r4"]
    assert runs[-1] == NodeRun("n1", "r4", start + 4 * DAY, "passed", (), (), 0.96,
                               {"set_by": "burn: burn TFLOPS cpu"})
    failed = ledger.runs("n2")[0]
    assert failed.checks == ("sdc", "burn") and failed.speed is None
    assert len(failed.reasons[0]) == 1000 and failed.reasons[1] == "burn: slow"
    assert ledger.speeds_since(start + 3 * DAY) == {"n1": [(start + 3 * DAY, 0.97),
                                                           (start + 4 * DAY, 0.96)]}
    assert ledger.runs("n3") == []


def test_exposure_counts_quarantines_in_the_window_from_a_node_s_first_kept_run(
        new_ledger, clock):
    ledger = new_ledger()
    start = clock[0]
    ledger.record_runs("c", [NodeRun("n1", "r0", start, "passed"),
                             NodeRun("n2", "r0", start, "passed")], keep_days=90)
    fail_and_release(ledger, clock, "n1", 2, 10)  # at start and start + 10 days
    clock[0] = start + 20 * DAY
    ledger.record_runs("c", [NodeRun("n3", "r9", clock[0], "passed")], keep_days=90)
    assert ledger.exposure_since(start) == {"n1": (start, 2), "n2": (start, 0),
                                            "n3": (clock[0], 0)}
    assert ledger.exposure_since(start + 5 * DAY) == {"n3": (clock[0], 0)}
