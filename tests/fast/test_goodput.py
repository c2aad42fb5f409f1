"""Goodput (burnin/figures/goodput.py): a node's relative speed is its slowest speed-bearing
figure over the fleet's median of it, and its price for a job of N nodes is
N x (1 - speed); `burnin admit --min-speed` keeps out what is slower, or unknown."""

from __future__ import annotations

import math

import pytest

from burnin.checks import Figure
from burnin.figures.goodput import Speed, break_even, speeds
from burnin.gate.admit import Report, decide, too_slow
from burnin.model.outcome import Outcome


def tflops(device: str, value: float) -> tuple[str, Figure]:
    return ("burn", Figure("device_tflops", (("check", "burn"), ("device", device)), value, ""))


def stream(n: int, phase: str, value: float) -> tuple[str, Figure]:
    return ("storage", Figure("storage_gbps", (("stream", str(n)), ("phase", phase)), value, ""))


def test_the_slowest_speed_bearing_figure_against_the_fleets_median_sets_the_speed():
    figs = {"n1": [tflops("cuda:0", 700.0), tflops("cuda:1", 690.0), stream(0, "read", 4.0)],
            "n2": [tflops("cuda:0", 700.0), tflops("cuda:1", 710.0), stream(0, "read", 2.0)],
            "n3": [tflops("cuda:0", 630.0), tflops("cuda:1", 700.0), stream(0, "read", 4.0)],
            # a temperature is no speed, and a sdc TFLOPS is not burn's
            "n4": [("burn", Figure("gpu_temperature_max_celsius", (("device", "cuda:0"),),
                                   90.0, "")),
                   ("sdc", Figure("device_tflops", (("check", "sdc"), ("device", "cuda:0")),
                                  1.0, ""))]}
    got = speeds(figs, min_voters=1)
    assert set(got) == {"n1", "n2", "n3"}
    # node medians 695, 705, 665: the fleet's 695; n3's slowest device 630
    assert got["n3"] == Speed(pytest.approx(630 / 695), "burn", "burn TFLOPS cuda:0", 630.0,
                              695.0)
    # n2's storage stream at half the median is slower than any of its TFLOPS
    assert got["n2"].check == "storage" and got["n2"].speed == pytest.approx(0.5)
    assert got["n2"].figure == "storage read stream 0"
    assert got["n1"].speed == pytest.approx(690 / 695)


def test_nodes_are_compared_with_their_own_model_only():
    figs = {"a1": [tflops("cuda:0", 300.0)], "a2": [tflops("cuda:0", 300.0)],
            "h1": [tflops("cuda:0", 700.0)], "h2": [tflops("cuda:0", 630.0)]}
    got = speeds(figs, {"a1": "A100", "a2": "A100", "h1": "H100", "h2": "H100"}, 1)
    assert got["a1"].speed == 1.0 and got["a2"].speed == 1.0
    assert got["h2"].speed == pytest.approx(630 / 665)


def test_figures_that_are_no_speed_set_none():
    figs = {"n1": [tflops("cuda:0", math.nan)], "n2": [tflops("cuda:0", math.inf)],
            "n3": [tflops("cuda:0", -1.0)], "n4": [tflops("cuda:0", 0.0)]}
    assert speeds(figs, min_voters=1) == {}  # the only real figure, 0, is no median to divide by


def test_the_price_of_a_node_for_a_job_and_where_it_pays_for_itself():
    s = Speed(0.97, "burn", "burn TFLOPS cuda:3", 679.0, 700.0)
    assert s.cost(64) == pytest.approx(64 * 0.03)  # 1.92 node-hours per job-hour
    assert break_even(64) == pytest.approx(1 - 1 / 64)
    assert not s.pays(64) and s.pays(16)  # 0.97 < 0.984; 0.97 > 0.9375
    assert Speed(1.02, "burn", "x", 1.0, 1.0).cost(8) == 0.0
    props = s.properties(64)
    assert props["relative_speed"] == "0.9700" and props["goodput_job_nodes"] == "64"
    assert props["goodput_cost_node_hours_per_hour"] == "1.9200"
    assert props["goodput_pays_for_itself"] == "false"
    assert props["speed_set_by"] == "burn: burn TFLOPS cuda:3 679 against the fleet's median 700"


def test_min_speed_keeps_out_a_slower_node_and_one_of_unknown_speed():
    report = Report(cases={n: [("health", Outcome.PASSED, "")] for n in ("fast", "slow", "none",
                                                                         "nan")},
                    properties={"fast": {"relative_speed": "0.9900"},
                                "slow": {"relative_speed": "0.9500",
                                         "speed_set_by": "burn: burn TFLOPS cuda:3 ..."},
                                "none": {}, "nan": {"relative_speed": "nan"}})
    decisions = {d.node: d for d in decide(report, ["health"], min_speed=0.97)}
    assert decisions["fast"].admitted
    assert decisions["slow"].reasons == (
        "relative speed 0.950, below --min-speed 0.97 (set by burn: burn TFLOPS cuda:3 ...)",)
    assert not decisions["none"].admitted and "not in the report" in decisions["none"].reasons[0]
    assert not decisions["nan"].admitted
    assert all(d.admitted for d in decide(report, ["health"]))  # off by default
    assert too_slow({"relative_speed": "0.97"}, 0.97) == []  # the bound itself passes
    assert decisions["none"].reasons == (
        "relative speed: not in the report, which --min-speed 0.97 needs (no check that "
        "measures a speed ran on the node)",)
    assert too_slow({"relative_speed": "0.5"}, 0.97) == [
        "relative speed 0.500, below --min-speed 0.97 (set by ?)"]


def test_min_speed_adds_to_a_node_s_other_reasons_and_needs_no_properties_at_all():
    report = Report(cases={"n1": [("health", Outcome.FAILED, "ECC off")],
                           "n2": [("health", Outcome.PASSED, "")]},
                    properties={"n1": {"relative_speed": "0.5"}})  # n2: no properties
    decisions = {d.node: d for d in decide(report, ["health"], min_speed=0.9,
                                           quarantined={"n1": "burn: slow"})}
    assert decisions["n1"].reasons == (
        "in quarantine: burn: slow", "relative speed 0.500, below --min-speed 0.9 (set by ?)",
        "health: failure: ECC off")
    assert decisions["n2"].reasons == (
        "relative speed: not in the report, which --min-speed 0.9 needs (no check that "
        "measures a speed ran on the node)",)


def test_break_even_and_paying_at_the_bound():
    assert break_even(64) == pytest.approx(1 - 1 / 64)
    assert break_even(1) == 0.0 and break_even(0) == 0.0 and break_even(-3) == 0.0
    at = Speed(break_even(4), "burn", "x", 0.75, 1.0)
    assert at.pays(4) is False  # at the break-even a job gains nothing from it
    assert Speed(0.76, "burn", "x", 0.76, 1.0).properties(4)["goodput_pays_for_itself"] \
        == "true"
    assert at.properties(4)["goodput_pays_for_itself"] == "false"


def test_figures_that_are_no_speed_are_left_out_and_the_rest_still_counted():
    figs = {"n1": [("nocheck", Figure("device_tflops", (), 5.0, "")), tflops("cuda:0", 0.0),
                   tflops("cuda:1", float("inf")), tflops("cuda:2", 0.5)],
            "n2": [tflops("cuda:0", 0.5)], "n3": [tflops("cuda:0", 0.4)]}
    got = speeds(figs, min_voters=1)
    # n1: 0 and 0.5 count (its median 0.25), inf does not; the fleet's median 0.4
    assert got["n1"] == Speed(0.0, "burn", "burn TFLOPS cuda:0", 0.0, 0.4)
    assert got["n3"].speed == 1.0 and got["n2"].speed == pytest.approx(1.25)
    # a node of no model and a node of model "" are one group; a zero median none
    assert speeds(figs, {"n1": ""}, 1)["n3"].speed == 1.0
    assert speeds({"z1": [tflops("cuda:0", 0.0)], "z2": [tflops("cuda:0", 0.0)]},
                  min_voters=1) == {}
    zero_first = {n: [tflops("cuda:0", 0.0), stream(0, "read", 1.0)] for n in ("z1", "z2")}
    assert {n: s.check for n, s in speeds(zero_first, min_voters=1).items()} == {"z1": "storage",
                                                                    "z2": "storage"}


def test_a_tie_between_figures_keeps_the_first_check_that_set_it():
    figs = {"n1": [tflops("cuda:0", 5.0), stream(0, "read", 1.0)],
            "n2": [tflops("cuda:0", 10.0), stream(0, "read", 2.0)],
            "n3": [tflops("cuda:0", 10.0), stream(0, "read", 2.0)]}
    got = speeds(figs, min_voters=1)["n1"]
    assert got.speed == 0.5 and got.check == "burn"


def test_of_run_prices_the_checks_that_ran_for_the_inventory_s_job_size():
    from types import SimpleNamespace

    from burnin.figures.goodput import of_run
    from burnin.model.nodes import GoodputSettings, Node
    kept = {"burn": {n: [tflops("cuda:0", tf)[1]] for n, tf in
                     (("n1", 10.0), ("n2", 10.0), ("n3", 9.0), ("a1", 4.0))}}
    run = SimpleNamespace(  # a1 an A100: compared with none of the H100s
        nodes=[Node(n, n, gpu_model="A100-SXM4-80GB" if n == "a1" else "H100-SXM5-80GB")
               for n in kept["burn"]],
        store=SimpleNamespace(has=lambda name: name in kept),
        figures=lambda name: kept[name],
        inventory=SimpleNamespace(goodput=GoodputSettings(job_nodes=64, min_voters=1)))
    got, job_nodes = of_run(run)
    assert job_nodes == 64 and got["n3"].speed == 0.9 and got["n1"].speed == 1.0
    assert got["a1"].speed == 1.0
    assert got["n3"].figure == "burn TFLOPS cuda:0"
    run.inventory = SimpleNamespace(goodput=GoodputSettings(min_voters=1))
    assert of_run(run)[1] == 4  # the run's node count
    kept.clear()
    assert of_run(run) == ({}, 4)


def test_fewer_than_five_voters_of_a_model_give_no_relative_speed():
    # Three nodes: one node's own figure would set another's speed.
    few = {n: [tflops("cuda:0", v)] for n, v in (("n1", 100.0), ("n2", 100.0), ("n3", 50.0))}
    assert speeds(few) == {}
    five = {**few, "n4": [tflops("cuda:0", 100.0)], "n5": [tflops("cuda:0", 100.0)]}
    assert speeds(five)["n3"].speed == 0.5
    # five in the run, but of two models: neither model has five voters
    assert speeds(five, {"n1": "A", "n2": "A", "n3": "A", "n4": "B", "n5": "B"}) == {}
    assert speeds(few, min_voters=3)["n3"].speed == 0.5
