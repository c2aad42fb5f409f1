"""The burn judge, its telemetry rules and its fleet median (burnin/checks/burn.py)."""

from __future__ import annotations

import pytest
from support.judging import H100, failed, judge, outcome, summary

from burnin.checks.burn import (
    BYTES_PER_SAMPLE,
    DEVICE_BYTES,
    DOCUMENT_BYTES,
    UNKNOWN_DEVICES,
    _mean_clock,
    device_rules,
    evidence,
    figures,
    output_bound,
    samples_bound,
    schema_bound,
    shape,
    telemetry_rules,
)

NAME = "NVIDIA H100 80GB HBM3"


def dev(i=0, tflops=700.0, name=NAME, **extra) -> dict:
    return {"device": f"cuda:{i}", "name": name, "tflops": tflops, **extra}


def burn(*devices, errors=(), node="n1", figures=None):
    return outcome("burn", list(devices), figures=figures, errors=errors, node=node)


# --- telemetry ------------------------------------------------------------------------

def test_mean_clock_counts_only_clocks_a_gpu_can_run_at():
    series = {"sm_mhz": [1000, 2000, "x", None, -1, 100001, 0, 100000.0]}
    assert _mean_clock({"telemetry": {"series": series}}) == 25750.0
    assert _mean_clock({"telemetry": {"series": {"sm_mhz": [-5]}}}) is None
    assert _mean_clock({}) is None
    assert _mean_clock({"telemetry": None}) is None
    assert _mean_clock({"telemetry": {"series": None}}) is None
    assert _mean_clock({"telemetry": {"series": {}}}) is None


def test_xids_and_hardware_counters_fail():
    tel = {"xid": [{"xid": 79, "t": 12.4}, {"xid": 13, "t": 30.6}],
           "before": {"ecc_uncorrected": 1}, "after": {"ecc_uncorrected": 3,
                                                       "remapped_rows": {"pending": True,
                                                                         "failed": True}}}
    assert telemetry_rules(tel, {}) == ([
        "XID 79 (GPU has fallen off the bus) at 12 s into the burn",
        "XID 13 (Graphics Engine Exception) at 31 s into the burn",
        "2 new uncorrectable ECC errors during the burn, expected 0",
        "row remap pending after the burn, expected none",
        "row remap failed, expected none"], [])


def test_a_counter_read_only_once_is_no_growth():
    assert telemetry_rules({"before": {"ecc_uncorrected": 1},
                            "after": {"ecc_uncorrected": None}}, {}) == ([], [])
    assert telemetry_rules({"before": {"ecc_uncorrected": None},
                            "after": {"ecc_uncorrected": 4}}, {}) == ([], [])
    assert telemetry_rules({"before": None, "after": None}, {}) == ([], [])
    assert telemetry_rules({"before": {"ecc_uncorrected": 2},
                            "after": {"ecc_uncorrected": 2}}, {}) == ([], [])


def test_fault_clock_events_fail_and_a_power_cap_does_not():
    reasons = [0x0, 0x4, 0x8, 0x8 | 0x40, None, 0x20, 0x80, 0x1]
    fail, warn = telemetry_rules({"series": {"reasons": reasons}}, {})
    assert fail == ["clock event hw_slowdown in 2 of 7 samples",
                    "clock event sw_thermal_slowdown in 1 of 7 samples",
                    "clock event hw_thermal_slowdown in 1 of 7 samples",
                    "clock event hw_power_brake in 1 of 7 samples"]
    assert telemetry_rules({"series": {"reasons": [0x4, 0x1, 0x2]}}, {}) == ([], [])


def test_temperature_at_the_slowdown_threshold_fails():
    tel = {"series": {"temp_c": [60, None, 87]}, "temp_slowdown_c": 87}
    assert telemetry_rules(tel, {})[0] == [
        "temperature reached 87 C, at or above the slowdown threshold of 87 C"]
    assert telemetry_rules({**tel, "temp_slowdown_c": 88}, {}) == ([], [])
    assert telemetry_rules({**tel, "temp_slowdown_c": None}, {}) == ([], [])
    assert telemetry_rules({"series": {"temp_c": [None]}, "temp_slowdown_c": 1}, {}) == ([], [])


def test_a_pcie_link_below_its_max_under_load_fails():
    tel = {"pcie_gen": 4, "pcie_max_gen": 5, "pcie_width": 8, "pcie_max_width": 16}
    assert telemetry_rules(tel, {})[0] == ["PCIe link gen 4 under load, max 5",
                                           "PCIe link width 8 under load, max 16"]
    full = {"pcie_gen": 5, "pcie_max_gen": 5, "pcie_width": 16, "pcie_max_width": 16}
    assert telemetry_rules(full, {}) == ([], [])
    assert telemetry_rules({"pcie_gen": 4, "pcie_max_gen": None, "pcie_width": None,
                            "pcie_max_width": 16}, {}) == ([], [])


def test_correctable_errors_warn_and_fail_past_their_limit():
    tel = {"before": {"ecc_corrected": 0, "pcie_replay": 0, "nvlink_crc": 10,
                      "nvlink_recovery": 0},
           "after": {"ecc_corrected": 101, "pcie_replay": 100, "nvlink_crc": 11,
                     "nvlink_recovery": 0}}
    assert telemetry_rules(tel, {"max_correctable_ecc": 100, "max_pcie_replays": 100,
                                 "max_nvlink_errors": 100}) == (
        ["101 correctable ECC errors during the burn, above the limit of 100"],
        ["100 PCIe replays during the burn (limit 100)",
         "1 NVLink CRC errors during the burn (limit 100)"])
    assert telemetry_rules(tel, {}) == (
        ["101 correctable ECC errors during the burn, above the limit of 100"],
        ["100 PCIe replays during the burn (limit 100)",
         "1 NVLink CRC errors during the burn (limit 100)"]), "100 by default"
    tight = telemetry_rules(tel, {"max_correctable_ecc": 200, "max_pcie_replays": 99,
                                  "max_nvlink_errors": 0})
    assert tight == (["100 PCIe replays during the burn, above the limit of 99",
                      "1 NVLink CRC errors during the burn, above the limit of 0"],
                     ["101 correctable ECC errors during the burn (limit 200)"])
    recovered = {"before": {"nvlink_recovery": 1}, "after": {"nvlink_recovery": 3}}
    assert telemetry_rules(recovered, {"max_nvlink_errors": 1})[0] == [
        "2 NVLink recoveries during the burn, above the limit of 1"]


# --- a device -------------------------------------------------------------------------

def test_device_rules_floor_and_stragglers():
    settings = {"peer_fraction": 0.9}
    fleet = {"tflops": 700.0, "nodes": 3, "clock": None}
    assert device_rules(dev(tflops=630.0), settings, 600, fleet, 700, 8) == ([], [])
    assert device_rules(dev(tflops=599.9), settings, 600, {}, None, 1) == (
        ["599.9 TFLOPS, below the floor of 600 TFLOPS"], [])
    assert device_rules(dev(tflops=600.0), settings, 600, {}, None, 1) == ([], []), \
        "at the floor is not below it"
    assert device_rules(dev(tflops=629.9), settings, None, fleet, None, 1) == (
        ["straggler: 629.900 TFLOPS, below 0.9 x 700.000 TFLOPS, the median of the run's 3 "
         "nodes with this model"], [])
    two = {"tflops": 700.0, "nodes": 2}
    assert device_rules(dev(tflops=100.0), settings, None, two, None, 1) == ([], [])
    assert device_rules(dev(tflops=629.9), settings, None, two, 700.0, 2) == (
        ["straggler: 629.900 TFLOPS, below 0.9 x 700.000 TFLOPS, the median of the node's 2 "
         "devices"], [])
    assert device_rules(dev(tflops=630.0), settings, None, two, 700.0, 2) == ([], [])
    assert device_rules(dev(tflops=1.0), settings, None, {}, 700.0, 1) == ([], [])
    assert device_rules(dev(tflops=1.0), settings, None, {}, 0.0, 2) == ([], [])
    assert device_rules(dev(tflops=629.0), {}, None, fleet, None, 1)[0][0].startswith(
        "straggler: 629.000 TFLOPS, below 0.9 x"), "0.9 by default"
    assert device_rules(dev(tflops=1.0), {"peer_fraction": 0}, None, fleet, 700.0, 2) == (
        [], []), "0 turns the rule off"
    assert device_rules({"device": "cuda:0"}, settings, 1, {}, None, 1) == (
        ["0.0 TFLOPS, below the floor of 1 TFLOPS"], [])


def test_device_rules_products_that_differ():
    d = dev(mismatched_products=2, verified=10, mismatched_elements=17)
    assert device_rules(d, {}, None, {}, None, 1) == (
        ["2 of 10 verified products differ from the first (17 elements), expected bitwise "
         "identical"], [])


def test_device_rules_clocks():
    series = {"sm_mhz": [1500, 1500]}
    fleet = {"tflops": 700.0, "nodes": 3, "clock": 1980.0}
    slow = dev(telemetry={"series": series})
    assert device_rules(slow, {"clock_fraction": 0.9}, None, fleet, None, 1) == (
        ["mean SM clock 1500 MHz, below 0.9 x 1980 MHz, the median of the run's nodes with "
         "this model"], [])
    assert device_rules(slow, {}, None, fleet, None, 1)[0] != [], "0.9 by default"
    assert device_rules(slow, {"clock_fraction": 0.75}, None, fleet, None, 1) == ([], [])
    ok = dev(telemetry={"series": {"sm_mhz": [1782, 1782]}})
    assert device_rules(ok, {"clock_fraction": 0.9}, None, fleet, None, 1) == ([], [])
    assert device_rules(ok, {}, None, fleet, None, 1) == ([], []), "0.9 by default"
    edges = dev(telemetry={"series": {"sm_mhz": [0, 100000]}})
    assert device_rules(edges, {}, None, {}, None, 1) == ([], []), \
        "0 and 100,000 MHz are readings (an idle clock, the bound)"
    assert device_rules(slow, {"clock_fraction": 0.9}, None, {**fleet, "clock": None}, None,
                        1) == ([], [])
    liar = dev(telemetry={"series": {"sm_mhz": [1e308, 1980, -3]}})
    assert device_rules(liar, {}, None, {}, None, 1) == (
        ["telemetry reads an SM clock of 1e+308 MHz, which no GPU runs at: its readings "
         "cannot be trusted"], [])
    warned = dev(telemetry={"before": {"pcie_replay": 0}, "after": {"pcie_replay": 1},
                            "xid": [{"xid": 79, "t": 1.0}]})
    assert device_rules(warned, {}, None, {}, None, 1) == (
        ["XID 79 (GPU has fallen off the bus) at 1 s into the burn"],
        ["1 PCIe replays during the burn (limit 100)"])


# --- a node ---------------------------------------------------------------------------

def test_a_healthy_node_passes_and_a_failed_probe_fails():
    assert judge("burn", burn(dev(0), dev(1)), fleet={}, model=H100) == ((), ())
    assert judge("burn", failed("burn", "probe burn exited with status 3"), fleet={}) == (
        ("probe burn exited with status 3",), ())


def test_the_node_judge_names_the_device_and_applies_the_floor():
    o = burn(dev(0, 560.0), dev(1, 700.0, uuid="GPU-1"), {"device": "cuda:2", "error": "OOM"},
             errors=["cuda:2: out of memory"])
    assert judge("burn", o, fleet={}, model=H100, devices=3) == ((
        "probe error on cuda:2: out of memory",
        f"cuda:0 ({NAME}): 560.0 TFLOPS, below the floor of 600 TFLOPS",
        f"cuda:0 ({NAME}): straggler: 560.000 TFLOPS, below 0.9 x 630.000 TFLOPS, the median "
        "of the node's 2 devices"), ())
    assert judge("burn", o, fleet={}, settings={"min_tflops": 500}, devices=3,
                 model=H100) == ((
        "probe error on cuda:2: out of memory",
        f"cuda:0 ({NAME}): straggler: 560.000 TFLOPS, below 0.9 x 630.000 TFLOPS, the median "
        "of the node's 2 devices"), ())
    assert judge("burn", burn(dev(0, 1.0)), fleet={}) == ((), ()), "no model: no floor"


def test_a_figure_beyond_the_models_peak_fails():
    assert judge("burn", burn(dev(0, 5000.0)), fleet={}, model=H100)[0] == (
        f"cuda:0 ({NAME}): implausible: 5000.0 TFLOPS is beyond the H100's peak of 1000 "
        "TFLOPS",)


def test_a_wrong_device_count_fails():
    assert judge("burn", burn(dev(0)), fleet={}, devices=2)[0] == (
        "the probe reported 1 device(s), expected 2 (the inventory's count, or what the "
        "node's health facts showed)",)


def test_devices_of_several_models_are_compared_within_their_model():
    o = burn(dev(0, 700.0), dev(1, 700.0), dev(2, 100.0, name="A100"), dev(3, 80.0, name="A100"))
    assert judge("burn", o, fleet={}) == ((
        "cuda:3 (A100): straggler: 80.000 TFLOPS, below 0.9 x 90.000 TFLOPS, the median of the "
        "node's 4 devices",), ())


def test_a_run_of_two_nodes_is_judged_against_the_floor_alone_and_says_so():
    warning = ("fewer than 3 nodes of this model reported: of two that differ neither is the "
               "odd one out, so no comparison with peers; judged against the model's floor "
               "alone")
    assert judge("burn", burn(dev(0, 10.0)), fleet={NAME: {"tflops": 700.0, "nodes": 2}}) == (
        (), (warning,))
    assert judge("burn", burn(dev(0, 700.0)), fleet={NAME: {"tflops": 700.0, "nodes": 1}}) == (
        (), ())
    three = judge("burn", burn(dev(0, 10.0)), fleet={NAME: {"tflops": 700.0, "nodes": 3,
                                                            "clock": None}})
    assert three == ((f"cuda:0 ({NAME}): straggler: 10.000 TFLOPS, below 0.9 x 700.000 "
                      "TFLOPS, the median of the run's 3 nodes with this model",), ())


def test_telemetry_warnings_reach_the_verdict():
    d = dev(0, telemetry={"before": {"ecc_corrected": 0}, "after": {"ecc_corrected": 5}})
    d1 = dev(1, telemetry={"before": {"pcie_replay": 0}, "after": {"pcie_replay": 2}})
    assert judge("burn", burn(d, d1), fleet={}) == (
        (), (f"cuda:0 ({NAME}): 5 correctable ECC errors during the burn (limit 100)",
             f"cuda:1 ({NAME}): 2 PCIe replays during the burn (limit 100)"))


# --- the fleet ------------------------------------------------------------------------

def clocked(i, tflops, mhz, name=NAME):
    return dev(i, tflops, name=name, telemetry={"series": {"sm_mhz": [mhz]}})


def test_the_fleet_median_is_one_vote_per_node_and_per_model():
    outcomes = {
        "n1": burn(clocked(0, 600.0, 1900), clocked(1, 700.0, 1980), clocked(2, 800.0, 1700),
                   node="n1"),
        "n2": burn({"device": "cuda:2", "error": "x", "tflops": 1.0}, dev(1, 0.0),
                   clocked(0, 650.0, 1800), node="n2"),
        "n3": burn(dev(0, 900.0), dev(1, 100.0, name=None), node="n3"),
        "n4": failed("burn", "down", "n4"),
    }
    # spread: each node's median deviation from the fleet's 700 (n1: 600, 700, 800 -> 1/7;
    # n2: 650 -> 1/14; n3: 900 -> 2/7) is one vote; within: about each node's own median,
    # from the nodes of several devices (n1: 1/7)
    assert summary("burn", outcomes) == {
        NAME: {"tflops": 700.0, "nodes": 3, "clock": 1850.0,
               "spread": pytest.approx(1.4826 / 7), "within": pytest.approx(1.4826 / 7)},
        "?": {"tflops": 100.0, "nodes": 1, "clock": None, "spread": 0.0, "within": None}}
    assert summary("burn", {}) == {}


def test_a_node_with_a_wrong_count_or_an_implausible_figure_does_not_vote():
    outcomes = {"n1": burn(dev(0, 600.0), node="n1"), "n2": burn(dev(0, 700.0), node="n2"),
                "liar": burn(*[dev(i, 5000.0) for i in range(20)], node="liar"),
                "fast": burn(dev(0, 650.0), dev(1, 2000.0), node="fast")}
    models = {n: H100 for n in outcomes}
    counts = {"n1": 1, "n2": 1, "liar": 1, "fast": 2}
    assert summary("burn", outcomes, counts, models) == {
        NAME: {"tflops": 650.0, "nodes": 2, "clock": None,
               "spread": pytest.approx(1.4826 * 50 / 650), "within": None}}
    assert summary("burn", outcomes, counts)[NAME]["nodes"] == 3, "no model: no peak to pass"
    assert summary("burn", outcomes, {}, models)[NAME]["nodes"] == 2


def test_the_device_count_filter_keeps_a_liar_from_making_stragglers():
    honest = {"n1": burn(dev(0, 600.0), node="n1"), "n2": burn(dev(0, 680.0), node="n2")}
    liar = burn(*[dev(i, 5000.0) for i in range(20)], node="liar")
    fleet = summary("burn", {**honest, "liar": liar}, {"n1": 1, "n2": 1, "liar": 1})
    # peer_spreads 0 here too: with the run's spread, the filter's absence went unseen
    assert judge("burn", honest["n1"], fleet=fleet, devices=1,
                 settings={"peer_spreads": 0})[0] == ()
    unfiltered = summary("burn", {**honest, "liar": liar})
    # peer_spreads 0: the bound is the fraction alone, as the liar's vote moves it
    assert judge("burn", honest["n1"], fleet=unfiltered, devices=1,
                 settings={"peer_spreads": 0})[0] != (), \
        "with the liar voting, the honest n1 is made a straggler"


# --- bounds, figures, evidence ----------------------------------------------------------

def test_the_document_bound_follows_the_settings_and_devices():
    s = {"timeout_s": 420, "sample_s": 1.0}
    assert samples_bound(s) == 422
    assert samples_bound({"timeout_s": "10", "sample_s": "3"}) == 5
    assert output_bound(s, 8) == 9 * (422 * BYTES_PER_SAMPLE + DEVICE_BYTES) + DOCUMENT_BYTES
    assert output_bound(s, None) == output_bound(s, UNKNOWN_DEVICES)
    assert output_bound(s, 0) == 1 * (422 * BYTES_PER_SAMPLE + DEVICE_BYTES) + DOCUMENT_BYTES
    assert schema_bound(s, 8) is shape(422)
    series = {"t": list(range(423))}
    d = burn(dev(0, telemetry={"series": series})).data
    assert schema_bound(s, 1).problem(d, "") == \
        "devices[0].telemetry.series.t: 423 items, at most 422 expected"
    series["t"].pop()
    assert schema_bound(s, 1).problem(d, "") == ""


def test_figures_and_evidence():
    rec = {"data": {"devices": [
        dev(0, 700.0, telemetry={"series": {"temp_c": [50, None, 71]}}),
        {"device": "cuda:1", "tflops": None, "telemetry": {"series": {"temp_c": [None]}}},
        {"device": 2}], "figures": {"cpu_telemetry": {"series": {"t": [1]}}}}}
    got = [(f.metric, f.labels, f.value, f.help, f.better) for f in figures(rec)]
    assert got == [
        ("device_tflops", (("check", "burn"), ("device", "cuda:0")), 700.0,
         "Sustained GEMM throughput per device", "higher"),
        ("gpu_temperature_max_celsius", (("device", "cuda:0"),), 71,
         "Hottest GPU temperature during the burn", "lower")]
    assert evidence(rec) == {"telemetry.json": {
        "cuda:0": {"series": {"temp_c": [50, None, 71]}},
        "cuda:1": {"series": {"temp_c": [None]}}, "cpu": {"series": {"t": [1]}}}}
    assert evidence({"data": {"devices": [], "figures": {}}}) == {"telemetry.json": {}}
    assert evidence({"data": {}}) == {"telemetry.json": {}}


@pytest.mark.parametrize("samples", [1, 1502])
def test_shape_bounds_every_series(samples):
    s = shape(samples)
    d = burn(dev(0, tflops_series=[[0.0, 1.0]] * samples)).data
    assert s.problem(d, "") == ""
    d["devices"][0]["tflops_series"].append([0.0, 1.0])
    assert s.problem(d, "") == (f"devices[0].tflops_series: {samples + 1} items, at most "
                                f"{samples} expected")


# --- the peer bound widens with the run's own noise ---------------------------

def noisy_fleet(slow: float, n: int = 10) -> dict:
    """n nodes of two devices at 700 TFLOPS +-3.372%, a robust spread of 5% (1.4826 x
    3.372%), and n1's first device at `slow`."""
    d = 0.05 / 1.4826
    return {f"n{i}": burn(dev(0, slow if i == 1 else 700 * (1 + d)), dev(1, 700 * (1 - d)),
                          node=f"n{i}") for i in range(1, n + 1)}


def test_a_device_within_the_runs_own_noise_passes_and_one_far_below_fails():
    fleet = summary("burn", noisy_fleet(600.0))
    assert fleet[NAME]["spread"] == pytest.approx(0.05)
    # 6 spreads of 5% is a margin of 30%: 600 TFLOPS (0.857 of the median) is noise here,
    # which the fixed 0.9 alone would have failed
    assert judge("burn", noisy_fleet(600.0)["n1"], fleet=fleet) == ((), ())
    slow = noisy_fleet(450.0)
    (failure,), _ = judge("burn", slow["n1"], fleet=summary("burn", slow))
    assert failure == (f"cuda:0 ({NAME}): straggler: 450.000 TFLOPS, below 0.7 x 700.000 "
                       "TFLOPS (6 x the robust spread of 5.0% below it), the median of the "
                       "run's 10 nodes with this model")


def test_peer_spreads_sets_how_many_spreads_and_the_fraction_stays_the_least_margin():
    slow = noisy_fleet(600.0)
    fleet = summary("burn", slow)
    (failure,), _ = judge("burn", slow["n1"], fleet=fleet, settings={"peer_spreads": 1.5})
    assert "below 0.9 x 700.000 TFLOPS, the median" in failure  # 7.5% < the 10% margin
    assert judge("burn", slow["n1"], fleet=fleet, settings={"peer_spreads": 3}) == ((), ())
    assert judge("burn", slow["n1"], fleet=fleet,
                 settings={"peer_fraction": 0, "peer_spreads": 0}) == ((), ())
    assert judge("burn", slow["n1"], fleet=fleet, drop=("peer_spreads",)) == ((), ()), \
        "6 by default: a margin of 30%"


def test_the_node_rule_widens_with_the_spread_inside_the_fleets_nodes():
    """Two nodes (no fleet rule): a device against its node's median, with the devices'
    spread about their own nodes' medians."""
    two = {f"n{i}": burn(dev(0, 700.0), dev(1, 630.0), dev(2, 770.0), dev(3, 700.0),
                         node=f"n{i}") for i in (1, 2)}
    fleet = summary("burn", two)
    assert fleet[NAME]["within"] == pytest.approx(1.4826 * 0.05)  # deviations 0, .1, .1, 0
    assert judge("burn", burn(dev(0, 500.0), dev(1, 630.0), dev(2, 770.0), dev(3, 700.0)),
                 fleet=fleet)[0] == ()
    slow = burn(dev(0, 300.0), dev(1, 630.0), dev(2, 770.0), dev(3, 700.0))
    (failure,), _ = judge("burn", slow, fleet=fleet)
    assert failure.endswith("straggler: 300.000 TFLOPS, below 0.555 x 665.000 TFLOPS (6 x the "
                            "robust spread of 7.4% below it), the median of the node's 4 "
                            "devices")
