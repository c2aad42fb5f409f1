"""The pcie judge and its fleet medians (burnin/checks/pcie.py)."""

from __future__ import annotations

import pytest
from support.judging import H100, failed, judge, outcome, summary

from burnin.checks.pcie import evidence, figures, link, placement

NAME = "NVIDIA H100 80GB HBM3"


def rate(gbps):
    return {"bytes": 1, "copies": 3, "seconds": 1.0, "gbps": gbps}


def gpu(i=0, h2d=50.0, d2h=50.0, name=NAME, concurrent=None, **extra):
    d = {"device": f"cuda:{i}", "name": name, "uuid": f"GPU-{i}",
         "h2d": None if h2d is None else rate(h2d), "d2h": None if d2h is None else rate(d2h)}
    if concurrent is not None:
        d["concurrent"] = {"h2d": rate(concurrent[0]), "d2h": rate(concurrent[1])}
    d.update(extra)
    return d


def pcie(*devices, aggregate=None, errors=(), node="n1"):
    return outcome("pcie", list(devices), {"aggregate": aggregate, "gpus": len(devices)},
                   errors, node)


def agg(h2d, d2h, gpus=2):
    return {"h2d": {"gbps": h2d, "gpus": gpus}, "d2h": {"gbps": d2h, "gpus": gpus}}


EMPTY = {"gpu": {}, "aggregate": {}}


def test_pcie_passes_even_gpus_at_the_floor():
    assert judge("pcie", pcie(gpu(0), gpu(1)), fleet=EMPTY, model=H100, devices=2) == ((), ())
    assert judge("pcie", failed("pcie", "timeout"), fleet=EMPTY) == (("timeout",), ())


def test_pcie_nothing_measured_fails():
    assert judge("pcie", pcie(), fleet=EMPTY) == (("no GPU was measured",), ())
    assert judge("pcie", pcie(errors=["cuda: no device"]), fleet=None) == (
        ("probe error: cuda: no device",), ())
    missing = gpu(0, h2d=None)
    assert judge("pcie", pcie(missing), fleet=EMPTY)[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): no host-to-device figure",)
    assert judge("pcie", pcie({"device": "cuda:0", "error": "OOM"}), fleet=EMPTY,
                 devices=1) == ((), ())
    assert judge("pcie", pcie(missing, gpu(1, h2d=1.0)), fleet=EMPTY, model=H100)[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): no host-to-device figure",
        "cuda:1 (NVIDIA H100 80GB HBM3, GPU-1): host-to-device 1.000 GB/s, below the floor of "
        "50 GB/s")
    assert judge("pcie", pcie(gpu(0), gpu(1), aggregate=agg(1.0, 1.0)), fleet=None) == (
        (), ()), "no fleet figures: judged against the node alone"


def test_pcie_below_the_floor_names_the_link_and_where_it_ran():
    slow = gpu(0, h2d=20.0, link={"width": 8, "gen": 4, "max_width": 16, "max_gen": 5},
               affinity={"bound": True, "numa_node": 1, "cpus": "56-111"})
    assert judge("pcie", pcie(slow), fleet=EMPTY, model=H100)[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): host-to-device 20.000 GB/s, below the floor of "
        "50 GB/s (link x8 Gen4, max x16 Gen5) (NUMA node 1, CPUs 56-111)",)
    assert judge("pcie", pcie(slow), fleet=EMPTY, model=H100,
                 settings={"min_gbps": 10}) == ((), ())
    assert judge("pcie", pcie(gpu(0, d2h=49.9)), fleet=EMPTY, model=H100)[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): device-to-host 49.900 GB/s, below the floor of "
        "50 GB/s",)


def test_link_and_placement():
    assert link({}) == "" and placement({}) == ""
    assert link({"link": {"width": 16, "gen": 5, "max_width": 16, "max_gen": 5}}) == \
        " (link x16 Gen5)"
    assert link({"link": {"gen": 4}}) == " (link x? Gen4, max x? Gen?)"
    assert link({"link": {"width": 16}}) == " (link x16 Gen?, max x? Gen?)"
    assert link({"link": {"width": None, "gen": None}}) == ""
    assert placement({"affinity": {"bound": False, "numa_node": None,
                                   "why": "NVML has no affinity"}}) == \
        "copies not bound to the GPU's CPUs: NVML has no affinity"
    assert placement({"affinity": {"bound": True, "numa_node": None, "cpus": "0-3"}}) == \
        "NUMA node ?, CPUs 0-3"
    assert placement({"affinity": {"bound": True, "numa_node": 0, "cpus": "0-3"}}) == \
        "NUMA node 0, CPUs 0-3"
    assert link({"affinity": {"bound": True, "numa_node": 0, "cpus": "0-3"}}) == \
        " (NUMA node 0, CPUs 0-3)"


def test_pcie_against_the_fleet_and_the_node():
    fleet = {"gpu": {NAME: {"h2d": (50.0, 3), "d2h": (50.0, 2)}}, "aggregate": {}}
    o = pcie(gpu(0, h2d=39.0, d2h=30.0), gpu(1, h2d=50.0, d2h=50.0), gpu(2, h2d=51.0, d2h=50.0))
    assert judge("pcie", o, fleet=fleet) == ((
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): host-to-device 39.000 GB/s, below 0.8 x "
        "50.000 GB/s, the median of the run's 3 nodes with this model",
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): device-to-host 30.000 GB/s, below 0.8 x "
        "50.000 GB/s, the median of the node's 3 GPUs"), ())
    assert judge("pcie", o, fleet=fleet, settings={"peer_fraction": 0}) == ((), ())
    assert judge("pcie", o, fleet=fleet, drop=("peer_fraction",))[0] != (), "0.8 by default"
    at = pcie(gpu(0, h2d=40.0, d2h=40.0), gpu(1, h2d=50.0, d2h=50.0), gpu(2))
    assert judge("pcie", at, fleet=fleet) == ((), ())
    assert judge("pcie", at, fleet=fleet, drop=("peer_fraction",)) == ((), ()), \
        "0.8 by default"
    pair = pcie(gpu(0, h2d=30.0), gpu(1, h2d=50.0))
    assert judge("pcie", pair, fleet=EMPTY)[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): host-to-device 30.000 GB/s, below 0.8 x "
        "40.000 GB/s, the median of the node's 2 GPUs",)
    lone = pcie(gpu(0, h2d=1.0, d2h=1.0))
    assert judge("pcie", lone, fleet=EMPTY) == ((), ()), "one GPU has no peers on its node"


def test_pcie_peer_spreads_widen_the_margin_by_the_runs_own_spread():
    # the run's GPUs of this model stray 5% (robust spread): 6 spreads (the default) widen
    # the margin to 30%, 2 spreads leave the fraction's 20%
    fleet = {"gpu": {NAME: {"h2d": (50.0, 3), "d2h": (50.0, 3)}},
             "spread": {NAME: {"h2d": (0.05, None), "d2h": (0.05, None)}}, "aggregate": {}}
    o = pcie(gpu(0, h2d=38.0))
    assert judge("pcie", o, fleet=fleet) == ((), ())
    assert judge("pcie", o, fleet=fleet, drop=("peer_spreads",)) == ((), ()), "6 by default"
    assert judge("pcie", o, fleet=fleet, settings={"peer_spreads": 2})[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): host-to-device 38.000 GB/s, below 0.8 x "
        "50.000 GB/s, the median of the run's 3 nodes with this model",)


def test_pcie_all_gpus_at_once():
    o = pcie(gpu(0, 100.0, 100.0, concurrent=(20.0, 50.0)),
             gpu(1, 100.0, 100.0, concurrent=(50.0, 50.0)),
             gpu(2, 100.0, 100.0, concurrent=(50.0, 40.0)))
    assert judge("pcie", o, fleet=EMPTY) == ((
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): host-to-device 20.000 GB/s with all GPUs "
        "copying at once, below 0.8 x 50.000 GB/s, the node's median GPU then",), ())
    assert judge("pcie", o, fleet=EMPTY, settings={"peer_fraction": 0.3}) == ((), ())
    one = pcie(gpu(0, concurrent=(1.0, 1.0)))
    assert judge("pcie", one, fleet=EMPTY) == ((), ())
    pair = pcie(gpu(0, concurrent=(10.0, 50.0)), gpu(1, concurrent=(50.0, 50.0)))
    assert judge("pcie", pair, fleet=EMPTY)[0] == (
        "cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): host-to-device 10.000 GB/s with all GPUs "
        "copying at once, below 0.8 x 30.000 GB/s, the node's median GPU then",)


def test_pcie_aggregate_floor_and_fleet():
    o = pcie(gpu(0), gpu(1), aggregate=agg(80.0, 100.0))
    assert judge("pcie", o, fleet=EMPTY, settings={"min_aggregate_gbps": 90}) == ((
        "all 2 GPUs at once: host-to-device 80.000 GB/s in aggregate, below the floor of "
        "90 GB/s",), ())
    assert judge("pcie", o, fleet=EMPTY, settings={"min_aggregate_gbps": 80}) == ((), ())
    fleet = {"gpu": {}, "aggregate": {(NAME, 2): {"h2d": (110.0, 3), "d2h": (130.0, 3)}}}
    assert judge("pcie", o, fleet=fleet) == ((
        "all 2 GPUs at once: host-to-device 80.000 GB/s in aggregate, below 0.8 x 110.000 "
        "GB/s, the median of the run's 3 nodes with 2 GPUs of this model",
        "all 2 GPUs at once: device-to-host 100.000 GB/s in aggregate, below 0.8 x 130.000 "
        "GB/s, the median of the run's 3 nodes with 2 GPUs of this model"), ())
    at = pcie(gpu(0), gpu(1), aggregate=agg(88.0, 104.0))
    assert judge("pcie", at, fleet=fleet) == ((), ()), "at 0.8 x the median is not below"
    two_nodes = {"gpu": {}, "aggregate": {(NAME, 2): {"h2d": (100.0, 2), "d2h": (130.0, 2)}}}
    assert judge("pcie", o, fleet=two_nodes) == ((), ())
    mixed = pcie(gpu(0), gpu(1, name="A100"), aggregate=agg(1.0, 1.0))
    assert judge("pcie", mixed, fleet=fleet) == ((), ())
    assert judge("pcie", o, fleet=fleet, settings={"peer_fraction": 0}) == ((), ())
    assert judge("pcie", pcie(gpu(0), aggregate={"h2d": None, "d2h": None}),
                 fleet=fleet) == ((), ())


def test_pcie_fleet_summary():
    outcomes = {
        "n1": pcie(gpu(0, 40.0, 20.0), gpu(1, 50.0, 30.0), aggregate=agg(90.0, 50.0),
                   node="n1"),
        "n2": pcie(gpu(0, 60.0, 40.0), gpu(1, 60.0, 40.0), aggregate=agg(110.0, 70.0),
                   node="n2"),
        "n3": pcie(gpu(0, 10.0, None), gpu(1, 30.0, None, name="A100"),
                   {"device": "cuda:2", "error": "x", "h2d": rate(999.0)},
                   aggregate=agg(1.0, 1.0, 3), node="n3"),
        "n4": pcie(*[gpu(i, 999.0, 999.0) for i in range(5)], node="n4"),
        "n6": pcie(gpu(0, 70.0, 70.0), gpu(1, 70.0, 70.0),
                   {"device": "cuda:2", "name": NAME, "error": "lost"},
                   aggregate=agg(130.0, 90.0), node="n6"),
        "n5": failed("pcie", "x", "n5"),
    }
    got = summary("pcie", outcomes, {"n1": 2, "n2": 2, "n3": 3, "n4": 2, "n6": 3})
    # spread: (about the fleet's median, about the node's own), each node one vote: its
    # GPUs' median deviation (h2d about 52.5: n1 1/7, n2 1/7, n3 0.81, n6 1/3)
    assert got == {"gpu": {NAME: {"h2d": (52.5, 4), "d2h": (40.0, 3)},
                           "A100": {"h2d": (30.0, 1)}},
                   "spread": {NAME: {"h2d": (pytest.approx(1.4826 * (1 / 7 + 1 / 3) / 2), 0.0),
                                     "d2h": (pytest.approx(1.4826 * 0.375), 0.0)},
                              "A100": {"h2d": (0.0, None)}},
                   "aggregate": {(NAME, 2): {"h2d": (110.0, 3), "d2h": (70.0, 3)}}}
    assert summary("pcie", {}) == {"gpu": {}, "spread": {}, "aggregate": {}}


def test_a_gpu_within_the_runs_own_spread_passes_and_one_at_half_fails():
    """Ten nodes whose GPUs copy at 50 GB/s +-10% (a robust spread of 14.8%): the margin
    below the fleet's median is held at half of it."""
    fleet = summary("pcie", {f"n{i}": pcie(gpu(0, 55.0, 50.0), gpu(1, 45.0, 50.0), node=f"n{i}")
                             for i in range(1, 11)})
    assert judge("pcie", pcie(gpu(0, 30.0, 50.0), gpu(1, 50.0, 50.0)), fleet=fleet)[0] == ()
    (failure,), _ = judge("pcie", pcie(gpu(0, 24.0, 50.0), gpu(1, 50.0, 50.0)), fleet=fleet)
    assert "host-to-device 24.000 GB/s, below 0.5 x 50.000 GB/s (6 x the robust spread of " \
        "14.8% below it), the median of the run's 10 nodes with this model" in failure


def test_pcie_figures_and_evidence():
    d = gpu(0, concurrent=(40.0, 41.0), link={"width": 16, "gen": 5}, pci_bus_id="18:00.0")
    rec = {"data": {"devices": [d, gpu(1, h2d=None, d2h=None)],
                    "figures": {"aggregate": {"h2d": {"gbps": 90.0}, "d2h": None}}}}
    got = [(f.metric, f.labels, f.value) for f in figures(rec)]
    lab = (("device", "cuda:0"),)
    assert got == [
        ("pcie_gbps", (*lab, ("direction", "h2d"), ("mode", "single")), 50.0),
        ("pcie_gbps", (*lab, ("direction", "h2d"), ("mode", "concurrent")), 40.0),
        ("pcie_gbps", (*lab, ("direction", "d2h"), ("mode", "single")), 50.0),
        ("pcie_gbps", (*lab, ("direction", "d2h"), ("mode", "concurrent")), 41.0),
        ("pcie_link_width_lanes", lab, 16), ("pcie_link_generation", lab, 5),
        ("pcie_aggregate_gbps", (("direction", "h2d"),), 90.0)]
    helps = {f.metric: f.help for f in figures(rec)}
    assert helps == {
        "pcie_gbps": "Host-GPU copy rate, one GPU at a time (single) or all at once "
                     "(concurrent)",
        "pcie_link_width_lanes": "PCIe link width under load, as NVML reports it",
        "pcie_link_generation": "PCIe link gen under load, as NVML reports it",
        "pcie_aggregate_gbps": "All GPUs copying at once: node total"}
    assert figures({"data": {"devices": [], "figures": {}}}) == []
    ev = evidence(rec)["pcie.json"]
    assert ev["aggregate"] == rec["data"]["figures"]["aggregate"]
    assert ev["devices"]["cuda:0"] == {
        "uuid": "GPU-0", "pci_bus_id": "18:00.0", "link": {"width": 16, "gen": 5},
        "affinity": None, "h2d": rate(50.0), "d2h": rate(50.0), "bidir": None,
        "concurrent": {"h2d": rate(40.0), "d2h": rate(41.0)}, "pinned": None, "error": None}


def test_pcie_a_gpu_that_reported_an_error_is_no_yardstick_for_the_others():
    """A GPU whose worker failed is not in the node's median: here 4.0 GB/s is below 0.8 of
    the median of the two healthy readings (7.0), though not of all three (4.0); the broken
    GPU is judged by its error, not by a figure from a worker that failed."""
    broken = gpu(0, h2d=1.0, d2h=50.0, error="worker for cuda:0 is gone")
    verdict = judge("pcie", pcie(broken, gpu(1, h2d=10.0), gpu(2, h2d=4.0)), fleet=EMPTY,
                    settings={"min_gbps": 0.5})
    assert "cuda:2 (NVIDIA H100 80GB HBM3, GPU-2): host-to-device 4.000 GB/s, below 0.8 x " \
           "7.000 GB/s, the median of the node's 2 GPUs" in verdict[0]
    assert not any(f.startswith("cuda:0") for f in verdict[0]), verdict

