"""What the ledger remembers of a node, priced (burnin/figures/track_record.py): the speed
trend and its warning, failures per node-day and their cost to a job, the fleet's rate, on a real
SQLite ledger."""

from __future__ import annotations

import time

import pytest

from burnin.figures import track_record as track
from burnin.ledger.api import Ledger, NodeRun
from burnin.model.nodes import GoodputSettings, QuarantineSettings
from burnin.report.summary import ledger_part

DAY = track.DAY
T0 = 1_800_000_000.0


def test_the_trend_is_the_least_squares_line_per_week():
    t = track.trend([(T0 + d * DAY, 1.0 - 0.002 * d) for d in range(8)])
    assert t.per_week == pytest.approx(-0.014)
    assert (t.runs, t.days, t.first, t.last) == (8, pytest.approx(7.0), 1.0, 0.986)
    assert t.fit == pytest.approx(1.0)
    assert track.trend([(T0, 1.0)]) is None
    assert track.trend([(T0, 1.0), (T0, 0.9)]) is None  # no time passed: no slope
    two = track.trend([(T0, 1.0), (T0 + 7 * DAY, 0.9)])
    assert two.per_week == pytest.approx(-0.1) and two.fit == pytest.approx(1.0)
    flat = track.trend([(T0 + d * DAY, 0.95) for d in range(5)])
    assert flat.per_week == 0.0 and flat.fit == 0.0  # a flat line explains nothing


# Falling 2.8% a week, with noise of +-0.05 that does not lean with time (its signs sum to
# nothing against the days): only the fit keeps this out of "steadily falling".
NOISY_FALL = [(d, 1.0 - 0.004 * d + 0.05 * sign)
              for d, sign in enumerate((1, -1, -1, 1, 1, -1, -1, 1))]


def test_the_noisy_fall_fails_on_its_fit_alone():
    t = track.trend([(T0 + d * DAY, s) for d, s in NOISY_FALL])
    assert t.per_week == pytest.approx(-0.028)  # the noise does not bend the slope
    assert t.runs >= track.TREND_MIN_POINTS and t.days >= track.TREND_MIN_DAYS
    assert t.fit < track.TREND_MIN_FIT and not t.steady_fall(0.01)


@pytest.mark.parametrize("points,drop,steady", [
    ([(d, 1.0 - 0.002 * d) for d in range(8)], 0.01, True),     # 1.4% a week
    ([(d, 1.0 - 0.002 * d) for d in range(8)], 0.02, False),    # under the setting
    ([(d, 1.0 - 0.002 * d) for d in range(3)], 0.01, False),    # three runs only
    ([(d / 10, 1.0 - 0.02 * d) for d in range(8)], 0.01, False),  # less than 2 days
    # Alternating: its odd days' bumps outweigh the fall, so on balance it rises.
    ([(d, 1.0 - 0.002 * d + (0.05 if d % 2 else 0)) for d in range(8)], 0.01, False),
    ([(d, 1.0 + 0.002 * d) for d in range(8)], 0.01, False),    # rising
    (NOISY_FALL, 0.01, False),  # falling fast enough, but the line explains little of it
])
def test_a_steady_fall_needs_runs_days_a_slope_and_a_fit(points, drop, steady):
    t = track.trend([(T0 + d * DAY, s) for d, s in points])
    assert t.steady_fall(drop) is steady


def test_a_steady_fall_s_bounds_are_inclusive():
    at = track.Trend(per_week=-0.01, runs=track.TREND_MIN_POINTS, days=track.TREND_MIN_DAYS,
                     first=1.0, last=0.98, fit=track.TREND_MIN_FIT)
    assert at.steady_fall(0.01) is True


def test_the_warning_says_when_the_break_even_is_reached():
    t = track.trend([(T0 + d * DAY, 1.0 - 0.002 * d) for d in range(8)])
    w = track.warning_of(t, 0.01, 64)  # break-even 0.984, reached from 0.986 in ~1 day
    assert w == ("relative speed falling 1.4% a week over 8 runs in 7 days (1.000 to 0.986); "
                 "at this pace it reaches 0.984, the break-even of a 64-node job, in about "
                 "1 days")
    below = track.warning_of(t, 0.01, 1000)
    assert below.endswith("; below 0.999, the break-even of a 1000-node job")
    assert track.warning_of(t, 0.05, 64) == "" and track.warning_of(None, 0.01, 64) == ""
    far = track.warning_of(t, 0.01, 20)  # break-even 0.95: 0.036 / 0.014 a week away
    assert far.endswith("reaches 0.950, the break-even of a 20-node job, in about 18 days")
    on = track.trend([(T0 + d * DAY, 1.0 - 0.0025 * d) for d in range(9)])  # ends at 0.98
    assert track.warning_of(on, 0.01, 50).endswith("; below 0.980, the break-even of a "
                                                   "50-node job")


def test_failures_per_node_day_and_their_cost_to_a_job():
    goodput = GoodputSettings(restart_minutes=10, checkpoint_minutes=60)
    fleet = track.FleetTrack(512, goodput, 30.0, {
        "n1": track.NodeTrack(3, 30.0), "n2": track.NodeTrack(0, 30.0),
        "n3": track.NodeTrack(1, 0.25), "n4": track.NodeTrack()})
    assert fleet.nodes["n1"].per_day == pytest.approx(0.1)
    assert fleet.nodes["n3"].per_day == 1.0  # a quarter day counts as one
    assert fleet.nodes["n4"].per_day is None
    # 512 nodes x 0.1 a day / 24 x (10 + 30) / 60 hours
    assert fleet.failure_cost("n1") == pytest.approx(512 * 0.1 / 24 * 40 / 60)
    assert fleet.failure_cost("n2") == 0.0 and fleet.failure_cost("n4") is None
    assert fleet.per_1000_node_days == pytest.approx(1000 * 4 / 60.25)
    props = fleet.properties("n1")
    assert props["failures_per_node_day"] == "0.1000"
    assert props["failures_counted"] == "3 quarantine(s) in 30.0 node-days (last 30 days)"
    assert props["goodput_failure_cost_node_hours_per_hour"] == f"{512 * 0.1 / 24 * 40 / 60:.4f}"
    assert fleet.properties("n4") == {} and fleet.properties("n9") == {}
    assert fleet.failure_cost("n9") is None
    falling = track.trend([(T0 + d * DAY, 1.0 - 0.002 * d) for d in range(8)])
    warned = track.FleetTrack(64, goodput, 30.0, {"n1": track.NodeTrack(0, 30.0, falling,
                                                                        "falling")})
    assert warned.properties("n1")["speed_trend_per_week"] == "-0.0140"
    assert warned.properties("n1")["speed_warning"] == "falling"


def test_of_ledger_reads_the_window_and_adds_this_run_as_the_newest_point(tmp_path):
    ledger = Ledger(tmp_path / "q.db")
    now = time.time()  # the quarantines below are stamped by the ledger's own clock
    for d in range(6):  # n1 a run a day, 0.5% slower each; n2 steady
        t = now - (6 - d) * DAY
        ledger.record_runs("c", [NodeRun("n1", f"r{d}", t, "passed", speed=1.0 - 0.005 * d),
                                 NodeRun("n2", f"r{d}", t, "passed", speed=1.0)],
                           keep_days=1e6, now=t)
    for i in range(3):  # n3 quarantined three times in the window
        ledger.record_failure("n3", "c", ["burn"], ["burn: slow"], {}, f"q{i}")
        ledger.release("n3", "reseated", "alice")
    ledger.record_runs("c", [NodeRun("n3", "x", now - 10 * DAY, "failed")], keep_days=1e6,
                       now=now)
    q = QuarantineSettings(repeat_times=2, repeat_days=30.0)
    fleet = track.of_ledger(ledger, ["n1", "n2", "n3", "n4"],
                            {"n1": 0.97, "n2": 1.0, "n4": 1.0}, 64, GoodputSettings(), q, now)
    assert fleet.repeat_times == 2
    assert fleet.nodes["n1"].trend.runs == 7 and fleet.nodes["n1"].trend.last == 0.97
    assert fleet.nodes["n1"].warning.startswith("relative speed falling 3.5% a week")
    assert fleet.nodes["n2"].warning == "" and fleet.nodes["n4"].trend is None
    assert fleet.nodes["n3"].quarantines == 3 and fleet.nodes["n3"].node_days == 10.0
    assert fleet.repeat_offenders == {"n3": 3}
    assert fleet.properties("n3")["repeat_offender"] == "quarantined 3 times in 30 days"
    # the window ends at `now`: 35 days on, those quarantines are out of it
    later = track.of_ledger(ledger, ["n3"], {}, 64, GoodputSettings(), q, now + 35 * DAY)
    assert later.repeat_offenders == {} and later.nodes["n3"].quarantines == 0
    fleet.save(tmp_path)
    kept = track.load(tmp_path)
    assert kept["nodes"]["n1"]["warning"] == fleet.nodes["n1"].warning
    assert kept["repeat_offenders"] == {"n3": 3} and kept["job_nodes"] == 64
    assert track.load(tmp_path / "nowhere") is None


def test_a_trend_is_fitted_to_the_last_thirty_runs_this_one_included(tmp_path):
    ledger = Ledger(tmp_path / "q.db")
    now = time.time()
    ledger.record_runs("c", [NodeRun("n1", f"r{d}", now - (40 - d) * DAY / 2, "passed",
                                     speed=1.0) for d in range(40)], keep_days=1e6, now=now)
    fleet = track.of_ledger(ledger, ["n1"], {"n1": 1.0}, 8, GoodputSettings(),
                            QuarantineSettings(), now)
    assert fleet.nodes["n1"].trend.runs == track.TREND_POINTS


def test_record_runs_lets_go_by_the_time_it_is_given(tmp_path):
    ledger = Ledger(tmp_path / "q.db")
    now = time.time()
    ledger.record_runs("c", [NodeRun("n1", "r0", now, "passed")], keep_days=1, now=now)
    assert ledger.record_runs("c", [], keep_days=1, now=now + 2 * DAY) == 1
    assert ledger.runs("n1") == []


def test_a_kept_run_as_the_cli_prints_it():
    run = NodeRun("n1", "r1", 5.0, "failed", ("sdc",), ("sdc: wrong",), 0.9, {"set_by": "x"})
    assert run.as_dict() == {"run_id": "r1", "time": 5.0, "outcome": "failed",
                             "checks": ["sdc"], "reasons": ["sdc: wrong"], "speed": 0.9,
                             "figures": {"set_by": "x"}}


def test_the_pace_of_a_job_is_its_slowest_member_on_the_fastest_nodes():
    speeds = [1.0, 0.99, 0.98, 0.90, 0.80]
    assert ledger_part.pace(speeds, 3) == 0.98
    assert ledger_part.pace(speeds, 5) == 0.80
    assert ledger_part.pace(speeds, 64) == 0.80  # more than the fleet: all of it
    assert ledger_part.pace([], 3) is None


def test_the_inventory_sets_the_prices_and_the_retention(tmp_path):
    from burnin.inventory.schema import InventoryError, load_inventory
    path = tmp_path / "inv.yaml"
    path.write_text("version: 1\nnodes: [{name: n1}]\n"
                    "goodput: {job_nodes: 8, restart_minutes: 5, checkpoint_minutes: 30,\n"
                    "          speed_drop_per_week: 0.02}\n"
                    "quarantine: {keep_runs_days: 14}\n")
    inv = load_inventory(path)
    assert inv.goodput == GoodputSettings(8, 5, 30, 0.02)
    assert inv.quarantine.keep_runs_days == 14
    path.write_text("version: 1\nnodes: [{name: n1}]\n")
    assert load_inventory(path).goodput == GoodputSettings(None, 10.0, 60.0, 0.01)
    for bad, words in (("goodput: {restart_minutes: -1}", "a number, 0 or above"),
                       ("goodput: {speed_drop_per_week: 2}", "a number from 0 to 1"),
                       ("goodput: {checkpoint: 60}", "checkpoint"),
                       ("quarantine: {keep_runs_days: 0}", "a number above 0")):
        path.write_text(f"version: 1\nnodes: [{{name: n1}}]\n{bad}\n")
        with pytest.raises(InventoryError, match=words):
            load_inventory(path)


def test_the_page_part_names_at_most_a_few_dozen_nodes_and_counts_the_rest():
    from burnin.report.summary.model import PageRun
    nodes = {f"n{i}": {"quarantines": 3, "node_days": 30.0, "warning": f"falling {i}"}
             for i in range(1, 201)}
    report = PageRun("c", "r1", {}, {}, {}, {}, set(),
                     speeds={f"n{i}": (1.0 - i / 1000, "burn") for i in range(1, 201)},
                     history={"job_nodes": 64, "window_days": 30.0, "repeat_times": 3,
                              "nodes": nodes,
                              "repeat_offenders": {n: 3 for n in nodes}})
    html = ledger_part.render(report)
    assert html.count("<li>") == ledger_part.LISTED
    assert "Speed falling run after run (200 node(s)):" in html
    assert html.count(" and 150 more (junit.xml names each)") == 2
    assert "<b>100.0 per 1,000 node-days</b> (600 quarantine(s) over 6,000 node-days" in html
    assert "pace of a 64-node job 0.936; break-even 0.984" in html
    assert ledger_part.render(PageRun("c", "r1", {}, {}, {}, {}, set())) == ""


def test_a_kept_history_with_a_negative_job_size_costs_the_chart_not_the_part():
    """pace() is None for a job of fewer than one node; a history.json that says -1
    (0 falls back to the node count) drew a TypeError in place of the whole part, the
    repeat offenders with it. Found by mypy."""
    from burnin.report.summary.model import PageRun
    report = PageRun("c", "r1", {}, {}, {}, {}, set(),
                     speeds={"n1": (1.0, "burn"), "n2": (0.9, "burn")},
                     history={"job_nodes": -1, "window_days": 30.0, "repeat_times": 3,
                              "nodes": {"n2": {"quarantines": 3, "node_days": 30.0}},
                              "repeat_offenders": {"n2": 3}})
    html = ledger_part.render(report)
    assert "Repeat offenders" in html and "n2</a> (3 times)" in html
    assert "<svg" not in html  # no job, no pace to draw
