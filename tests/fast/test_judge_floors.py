"""Each judge states, on its verdict, the floors it held the node to (Verdict.floors):
what summary.html draws. Its own floor where the model's applies, the inventory's or the
node group's where given, and none where it judged against no floor."""

from __future__ import annotations

from support.judging import H100, outcome

from burnin.checks import CHECKS, Judging
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict


def allreduce(busbw: float, ranks: int = 8):
    return outcome("allreduce", [{"rank": i} for i in range(ranks)], {"world": ranks, "sweep": [
        {"bytes": 1 << 30, "busbw_gbps": busbw, "wrong_elements": 0}]})


def stream(i: int) -> dict:
    return {"stream": i, "file": f"/data/burnin-{i}.dat",
            **{p: {"bytes": 1, "seconds": 1, "gbps": 2.0} for p in ("read", "write")}}


def floors(check: str, o, settings: dict | None = None, **judging) -> dict:
    spec = CHECKS[check]
    j = Judging(settings={**spec.resolve("quick"), **(settings or {})}, **judging)
    return spec.judge(Node(o.node, o.node), o, j).floors


def test_burn_states_the_models_floor_or_the_one_it_was_given():
    o = outcome("burn", [{"device": "cuda:0", "name": "NVIDIA H100 80GB HBM3", "tflops": 700.0}])
    fleet = {}
    assert floors("burn", o, fleet=fleet, model=H100, devices=1, gpus=1) == {"burn": 600.0}
    assert floors("burn", o, {"min_tflops": 650}, fleet=fleet, model=H100, devices=1,
                  gpus=1) == {"burn": 650.0}
    assert floors("burn", o, fleet=fleet, devices=1, gpus=1) == {}  # no model, no floor


def test_allreduce_states_the_models_floor_only_for_its_rank_count():
    full = allreduce(450.0)
    assert floors("allreduce", full, fleet={}, model=H100, devices=8, gpus=8) == {
        "allreduce": 400.0}
    four = allreduce(450.0, ranks=4)
    assert floors("allreduce", four, fleet={}, model=H100, devices=4, gpus=4) == {}
    assert floors("allreduce", full, fleet={}, devices=8, gpus=8) == {}  # no model, no floor
    assert floors("allreduce", four, {"min_busbw_gbps": 120}, fleet={}, model=H100,
                  devices=4, gpus=4) == {"allreduce": 120.0}


def test_storage_states_each_phases_floor():
    o = outcome("storage", [stream(0), stream(1)], {"path": "/data", "gpus": 0, "direct": True,
                                                     "integrity_errors": 0})
    assert floors("storage", o, {"min_read_gbps_per_gpu": 1.5}, devices=1, gpus=0) == {
        "storage read": 1.5}


def test_pcie_states_its_floor_and_its_aggregate_floor():
    o = outcome("pcie", [{"device": "cuda:0", "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0",
                          **{d: {"bytes": 1, "copies": 3, "seconds": 1.0, "gbps": 55.0}
                             for d in ("h2d", "d2h")}}],
                {"aggregate": None, "gpus": 1})
    empty = {"gpu": {}, "aggregate": {}}
    assert floors("pcie", o, fleet=empty, model=H100, devices=1, gpus=1) == {"pcie": 50.0}
    assert floors("pcie", o, {"min_gbps": 20, "min_aggregate_gbps": 90}, fleet=empty,
                  devices=1, gpus=1) == {"pcie": 20.0, "pcie aggregate": 90.0}


def test_a_verdicts_floors_are_plain_numbers_without_the_unset():
    v = Verdict("n1", "pcie", floors={"pcie": 25, "pcie aggregate": None})
    assert v.floors == {"pcie": 25.0}
