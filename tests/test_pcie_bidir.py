"""The pcie check's bidirectional round: host-to-device and device-to-host at once, per GPU
alone and with all GPUs at once. A link that carries either direction alone at full rate
but not both together (a root port or switch uplink that cannot sustain both) fails by
this round's floor (the model's pcie_bidir_gbps, or min_bidir_gbps) or its peers."""

from __future__ import annotations

import copy

import pytest
from test_pcie import H100, SETTINGS, device, outcome, pcie_probe, verdicts

from burnin.checks import Fleet, Judging
from burnin.checks.pcie import fleet_summary
from burnin.checks.pcie import judge as pcie_judge
from burnin.model.gpu_reference import model_from
from burnin.model.nodes import Node

RATE = {"bytes": 1 << 30, "copies": 4, "seconds": 1.0}


def with_bidir(dev: dict, alone: float, together: float | None = None) -> dict:
    dev = copy.deepcopy(dev)
    dev["bidir"] = {**RATE, "gbps": alone}
    dev["concurrent"]["bidir"] = {**RATE, "gbps": alone / 2 if together is None else together}
    return dev


def measured(name: str, *devices: dict) -> object:
    o = outcome(name, *devices)
    o.data["figures"]["directions"] = ["h2d", "d2h", "bidir"]
    o.data["figures"]["aggregate"]["bidir"] = {
        "gbps": sum(d["concurrent"].get("bidir", {}).get("gbps", 0) for d in devices),
        "gpus": len(devices),
        "bytes": 1, "seconds": 1.0}
    return o


def test_the_probe_measures_both_directions_at_once_alone_and_all_together(nvml):
    nvml(devices=[{"uuid": "GPU-a"}, {"uuid": "GPU-b"}])
    data = pcie_probe({}, gpus=2)
    assert data["figures"]["directions"] == ["h2d", "d2h", "bidir"]
    for d in data["devices"]:
        assert d["bidir"]["gbps"] > 0 and d["bidir"]["bytes"] == 2 * d["bidir"]["copies"] << 20
        # nvbandwidth's CE bidirectional figure is the measured stream alone (its
        # README.md): half of burnin's summed figure, and what its floors are read from.
        assert d["bidir"]["stream_gbps"] == pytest.approx(d["bidir"]["gbps"] / 2, abs=1e-4)
        assert d["concurrent"]["bidir"]["gbps"] > 0
        assert len(d["rounds"]["bidir"]) == 1
    assert data["figures"]["aggregate"]["bidir"]["gpus"] == 2


def test_a_gpu_slow_only_both_ways_fails_by_its_peers_and_by_the_floor():
    devs = [with_bidir(device(i, 52.0), 90.0) for i in range(3)]
    devs.append(with_bidir(device(3, 52.0), 55.0, 45.0))  # each way alone at full rate
    v = verdicts({"g1": measured("g1", *devs)})["g1"]
    assert v.failures == (
        f"cuda:3 ({H100}, GPU-3): bidirectional (host-to-device and device-to-host at once) "
        "55.000 GB/s, below 0.8 x 90.000 GB/s, the median of the node's 4 GPUs "
        "(link x16 Gen5)",)
    v = verdicts({"g1": measured("g1", *devs)}, min_bidir_gbps=60)["g1"]
    assert v.failures[0] == (
        f"cuda:3 ({H100}, GPU-3): bidirectional (host-to-device and device-to-host at once) "
        "55.000 GB/s, below the floor of 60 GB/s (both directions summed: twice "
        "nvbandwidth's bidirectional figure) (link x16 Gen5)")
    assert v.floors["pcie bidirectional"] == 60


def test_the_models_bidirectional_floor_is_the_default():
    model = model_from("Gen5", {"nvml_names": [H100], "pcie_gbps": 40, "pcie_bidir_gbps": 70})
    o = measured("g1", with_bidir(device(0, 52.0), 65.0))
    v = pcie_judge(Node(name="g1", address="g1", gpus=1), o,
                   Judging(SETTINGS, fleet_summary(Fleet({"g1": o}, {"g1": 1})), model, 1, 1))
    assert v.failures == (
        f"cuda:0 ({H100}, GPU-0): bidirectional (host-to-device and device-to-host at once) "
        "65.000 GB/s, below the floor of 70 GB/s (both directions summed: twice "
        "nvbandwidth's bidirectional figure) (link x16 Gen5)",)


def test_a_document_that_says_it_measured_both_ways_must_hold_the_figure():
    o = measured("g1", device(0, 52.0))  # says bidir, has none
    v = verdicts({"g1": o})["g1"]
    assert v.failures == (f"cuda:0 ({H100}, GPU-0): no bidirectional (host-to-device and "
                          "device-to-host at once) figure",)
    # A run from before the round (burnin rejudge): judged on what it measured.
    assert verdicts({"g1": outcome("g1", device(0, 52.0))})["g1"].passed
