"""The train check's judge (the fast tier: in-process, no probe) on the documents the real
probe prints (tests/corpus/), each rule given the figure that must trip it, and the one
that must not."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from burnin.checks import CHECKS, Fleet, Judging
from burnin.checks.train import fleet_summary, judge
from burnin.checks.train_job import job_id
from burnin.inventory.schema import Node
from burnin.model.gpu_reference import GPU_MODELS
from burnin.probe.protocol import ProbeOutcome

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
H100 = GPU_MODELS["H100-SXM5-80GB"]


def doc(kind: str = "cpu") -> dict:
    """A recorded document, its ranks' times made equal (as tests/support/replay.py does): on this
    loaded machine a recording's ranks may differ as much as a straggler's."""
    d = json.loads((CORPUS / f"train.{kind}.json").read_text())
    for r in d["devices"]:
        r["compute_s"] = d["devices"][0]["compute_s"]
    return d


def outcome(name: str, data: dict) -> ProbeOutcome:
    return ProbeOutcome(name, "train", True, data=data)


def verdict(data: dict, gpus: int = 0, model=None, fleet: dict | None = None, **settings):
    fleet = fleet or {"n1": outcome("n1", data)}
    summary = fleet_summary(Fleet(fleet))
    return judge(Node(name="n1", address="n1"), outcome("n1", data),
                 Judging(settings, summary, model=model, gpus=gpus,
                         devices=2 if gpus else 1))


def test_the_recorded_documents_fit_the_schema_and_pass():
    for kind, gpus in (("cpu", 0), ("gpu", 2)):
        assert CHECKS["train"].schema.problem(doc(kind), "") == "", kind
        assert verdict(doc(kind), gpus=gpus).passed


def test_a_loss_that_is_not_finite_fails():
    d = doc()
    d["figures"]["losses"][2] = "nan"
    (failure,) = verdict(d).failures
    assert failure.startswith("loss not finite at step 3 of ")


def test_a_loss_that_does_not_fall_fails_and_one_that_falls_passes():
    d = doc()
    d["figures"]["losses"] = [4.0, 3.95, 3.9, 3.9, 3.85]
    (failure,) = verdict(d).failures
    assert failure.startswith("loss does not fall: 4.0000 at step 1")
    d["figures"]["losses"] = [4.0, 3.9, 3.8, 3.8, 3.79]  # 3.797 < 0.95 x 4
    assert verdict(d).passed


def test_two_replicas_that_differ_are_both_named():
    d = doc("gpu")
    d["figures"]["diverged"] = [{"step": 5, "fingerprints": [7, 9]}]
    (failure,) = verdict(d, gpus=2).failures
    assert failure.startswith("replicas differ after step 5: rank 0 (cuda:0, ")
    assert "rank 1 (cuda:1, " in failure and "GPU-corpus1" in failure


def test_final_digests_that_differ_between_ranks_fail():
    d = doc()
    d["devices"][1]["digest"] = "f" * 64
    (failure,) = verdict(d).failures
    assert failure.startswith("final parameters differ between replicas: ")


def test_mfu_on_a_gpu_is_over_the_models_datasheet_peak():
    d = doc("gpu")
    d["figures"]["model_tflops"] = 2 * 400.0  # 400 per device of a 989 TFLOPS peak: 40.4%
    (failure,) = verdict(d, gpus=2, model=H100, min_mfu=0.5).failures
    assert failure == "MFU 40.4% of the 989 TFLOPS dense BF16 peak per device, below the " \
                      "floor of 50.0%"
    assert verdict(d, gpus=2, model=H100, min_mfu=0.4).passed
    assert verdict(d, gpus=2, model=H100).passed, "no floor by default: peers only"
    d["figures"]["model_tflops"] = 2 * 1100.0
    assert verdict(d, gpus=2, model=H100).failures[0].startswith("implausible: MFU 111.2%")


def test_mfu_on_a_cpu_is_over_its_measured_gemm_rate():
    d = doc()
    d["figures"]["mfu"] = 0.2
    (failure,) = verdict(d, min_mfu=0.3).failures
    assert failure.startswith("MFU 20.0% of the node's own measured GEMM rate")


@pytest.mark.parametrize("fraction", [None, 0.5])
def test_a_node_far_below_its_peers_tokens_per_s_fails(fraction):
    fleet = {}
    for name, rate in (("a", 1000.0), ("b", 1010.0), ("c", 990.0), ("n1", 400.0)):
        d = doc()
        d["figures"]["tokens_per_s"] = rate
        fleet[name] = outcome(name, d)
    settings = {} if fraction is None else {"peer_fraction": fraction}
    (failure,) = verdict(fleet["n1"].data, fleet=fleet, **settings).failures
    assert failure.startswith("straggler: 400 tokens/s, below 0.5 x 995.000 tokens/s")
    fleet["n1"].data["figures"]["tokens_per_s"] = 600.0
    assert verdict(fleet["n1"].data, fleet=fleet, **settings).passed


def test_peers_are_the_nodes_running_the_same_job_only():
    fleet = {}
    for name, rate in (("a", 1000.0), ("b", 1010.0), ("c", 990.0), ("n1", 400.0)):
        d = doc()
        d["figures"]["tokens_per_s"] = rate
        if name == "n1":  # a bigger model, as its node group's settings sent it
            for shape in (d["figures"]["shape"], d["figures"]["job_spec"]["shape"]):
                shape["d_model"] = 64
            d["figures"]["job"] = job_id(d["figures"]["job_spec"])
        fleet[name] = outcome(name, d)
    assert verdict(fleet["n1"].data, fleet=fleet, d_model=64).passed
    # Its document's word alone is no bigger model: the controller sent it the others'.
    assert not verdict(fleet["n1"].data, fleet=fleet, d_model=32).passed


def test_a_straggler_rank_is_named_by_rank_and_device():
    d = doc("gpu")
    d["devices"][1]["compute_s"] = d["devices"][0]["compute_s"] * 1.3
    (failure,) = verdict(d, gpus=2).failures
    assert failure.startswith("straggler: rank 1 (cuda:1, ") and "GPU-corpus1" in failure
    d["devices"][1]["compute_s"] = d["devices"][0]["compute_s"] * 1.2
    assert verdict(d, gpus=2).passed
    cpu = doc()  # two ranks sharing one CPU: one device, no straggler among them
    cpu["devices"][1]["compute_s"] = cpu["devices"][0]["compute_s"] * 10
    assert verdict(cpu).passed


def test_the_odd_final_digest_out_fails_alone_and_two_that_differ_do_not():
    fleet = {n: outcome(n, doc()) for n in ("a", "b", "n1")}
    for d in fleet["n1"].data["devices"]:
        d["digest"] = "e" * 64
    fleet["n1"].data["figures"]["digest"] = "e" * 64
    (failure,) = verdict(fleet["n1"].data, fleet=fleet).failures
    assert failure.startswith("final parameter digest eeeeeeeeeeee differs from ")
    del fleet["b"]
    assert verdict(fleet["n1"].data, fleet=fleet).passed, "of two, neither is the odd one"


def test_a_node_that_reports_wrong_ranks_or_nothing_fails():
    d = doc()
    d["devices"] = d["devices"][:1]
    assert any("reported 1 device(s), expected 2" in f for f in verdict(d).failures)
    empty = copy.deepcopy(doc())
    empty["devices"], empty["figures"] = [], {}
    assert verdict(empty).failures[-1] == "no training result was reported"
