"""The train check judges the job the controller sent (burnin/checks/train_job.py), on the
documents the real probe prints (tests/corpus/): a node at a tenth of its peers' tokens/s
used to pass by changing `figures.job` or `shape` in its document, or by leaving out its
digest and job, each of which left it alone in a job of its own, out of every comparison."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from burnin.checks import CHECKS, Fleet, Judging
from burnin.checks.train import fleet_summary, judge
from burnin.checks.train_job import job_id, sent_job
from burnin.inventory.schema import Node
from burnin.model.gpu_reference import GPU_MODELS
from burnin.probe.protocol import ProbeOutcome

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
SHAPE = {"d_model": 32, "layers": 1, "heads": 2, "seq_len": 16, "vocab": 64, "batch": 4}
# What tests/corpus/record.py sent the probe that recorded the documents.
RECORDED = {"steps": 6, "warmup_steps": 2, "lr": 0.01, **SHAPE}
H100 = GPU_MODELS["H100-SXM5-80GB"]


def doc(kind: str = "cpu", tokens: float | None = None) -> dict:
    d = json.loads((CORPUS / f"train.{kind}.json").read_text())
    for r in d["devices"]:  # as tests/support/replay.py: equal ranks, no straggler
        r["compute_s"] = d["devices"][0]["compute_s"]
    if tokens is not None:
        d["figures"]["tokens_per_s"] = tokens
    return d


def settings(**over) -> dict:
    return {**CHECKS["train"].resolve("quick", RECORDED), **over}


def judged(docs: dict[str, dict], node: str = "n1", sent: dict | None = None,
           sent_to: dict[str, dict] | None = None, gpus: int = 0, model=None):
    """(failures, warnings) of `node` among `docs`, every node sent `sent` (or its own of
    `sent_to`), each a CPU node of one device (or of two GPUs of `model`)."""
    names = list(docs)
    each = {n: (sent_to or {}).get(n, sent or settings()) for n in names}
    devices = 2 if gpus else 1
    nodes = {n: Node(name=n, address=n, gpus=gpus) for n in names}
    fleet = Fleet({n: ProbeOutcome(n, "train", True, data=docs[n]) for n in names},
                  dict.fromkeys(names, devices), dict.fromkeys(names, model), nodes,
                  settings=each)
    v = judge(nodes[node], fleet.outcomes[node],
              Judging(each[node], fleet_summary(fleet), model=model, gpus=gpus,
                      devices=devices))
    return v.failures, v.warnings


def slow_fleet(**edit) -> dict[str, dict]:
    """a, b, c at full speed; n1 at a tenth of it, its figures edited by `edit`."""
    docs = {n: doc(tokens=t) for n, t in (("a", 1000.0), ("b", 1010.0), ("c", 990.0))}
    docs["n1"] = doc(tokens=100.0)
    for key, value in edit.items():
        if value is None:
            docs["n1"]["figures"].pop(key)
        else:
            docs["n1"]["figures"][key] = value
    return docs


def test_the_recorded_documents_run_the_job_they_were_sent():
    for kind, gpus in (("cpu", 0), ("gpu", 2)):
        d = doc(kind)
        want = sent_job(settings(), gpus, 2 if gpus else 1)
        assert want == {"steps": 6, "warmup_steps": 2, "lr": 0.01,
                        "dtype": "bf16" if gpus else "fp32", "world": 2, "shape": SHAPE}
        assert d["figures"]["job"] == job_id(d["figures"]["job_spec"])
        assert judged({n: doc(kind) for n in ("a", "b", "n1")}, gpus=gpus) == ((), ())


def test_a_node_at_a_tenth_of_its_peers_fails_as_it_is():
    (failure,) = judged(slow_fleet())[0]
    assert failure.startswith("straggler: 100 tokens/s, below 0.5 x 995.000 tokens/s")


@pytest.mark.parametrize("edit, said", [
    ({"job": "0" * 64}, "its job id 000000000000 is not its job spec's"),
    ({"shape": dict(SHAPE, d_model=64)},
     "its figures' shape {'d_model': 64, 'layers': 1"),
    ({"job": None, "digest": None}, "its document names no job or digest"),
    ({"job_spec": None}, "its document names no job_spec"),
    ({"digest": "e" * 64}, "its digest eeeeeeeeeeee is not its ranks'"),
], ids=["job", "shape", "no job or digest", "no spec", "digest"])
def test_a_slow_node_that_rewrites_its_job_fails(edit, said):
    failures, _ = judged(slow_fleet(**edit))
    assert any(said in f for f in failures), failures


def test_a_spec_rewritten_whole_differs_from_the_job_sent():
    docs = slow_fleet()
    fig = docs["n1"]["figures"]
    for shape in (fig["shape"], fig["job_spec"]["shape"]):
        shape["d_model"] = 64  # a bigger model, said everywhere in its document
    fig["job"] = job_id(fig["job_spec"])
    (failure,) = judged(docs)[0]
    assert failure == ("its document's job differs from the one the controller sent: its "
                       f"model shape {dict(SHAPE, d_model=64)} differs from the {SHAPE} the "
                       "controller sent")
    fig["job_spec"]["steps"] = fig["steps"] = 2
    fig["job"] = job_id(fig["job_spec"])
    (failure,) = judged(docs)[0]
    assert "its job's steps 2 differs from the 6 the controller sent" in failure


def test_a_spec_that_names_another_device_than_its_ranks_fails():
    docs = slow_fleet()
    fig = docs["n1"]["figures"]
    fig["job_spec"]["device"] = "a faster CPU"
    fig["job"] = job_id(fig["job_spec"])
    (failure,) = judged(docs)[0]
    assert failure.endswith("its job's device 'a faster CPU' is not its ranks' "
                            "'Intel(R) Xeon(R) Processor'")


def test_a_node_alone_in_a_job_sized_from_its_device_fails_among_peers():
    """The shape not given: the probe sizes it from the device, and the node's word is
    all there is of it. Peers the controller sent the same job ran another: alone in
    its own, it has no peers to be slow against, and fails for that."""
    unsized = settings(**dict.fromkeys(SHAPE))
    docs = slow_fleet()
    fig = docs["n1"]["figures"]
    for shape in (fig["shape"], fig["job_spec"]["shape"]):
        shape["d_model"] = 16
    fig["job"] = job_id(fig["job_spec"])
    (failure,) = judged(docs, sent=unsized)[0]
    assert failure.startswith("alone in its job: 4 nodes were sent the same one")
    # Fewer than PEERS nodes sent it: nobody to be alone among.
    assert judged({n: docs[n] for n in ("a", "n1")}, sent=unsized)[0] == ()
    # Sent another job (its node group's: 7 steps), which it ran: in a class of its own.
    fig["job_spec"]["steps"] = fig["steps"] = 7
    fig["job"] = job_id(fig["job_spec"])
    fig["tokens_per_s"] = 1000.0
    assert judged(docs, sent=unsized, sent_to={"n1": dict(unsized, steps=7)})[0] == ()


def test_a_cpu_node_of_another_kind_runs_a_job_of_its_own_and_is_not_alone():
    """CPUs of two kinds round differently: an honest CPU fleet of two kinds runs two
    jobs, and the inventory names no CPU model, so a CPU-only node's peers are the nodes
    of its CPU."""
    docs = {n: doc() for n in ("a", "b", "c", "n1")}
    for d in docs["n1"]["devices"]:
        d["name"] = "AMD EPYC"
    fig = docs["n1"]["figures"]
    fig["job_spec"]["device"] = "AMD EPYC"
    fig["job"] = job_id(fig["job_spec"])
    fig["digest"] = "e" * 64
    for d in docs["n1"]["devices"]:
        d["digest"] = "e" * 64
    assert judged(docs) == ((), ())
    # A GPU node's device is its inventory's GPU model: no such way out there.
    gpu = {n: doc("gpu") for n in ("a", "b", "c", "n1")}
    for d in gpu["n1"]["devices"]:
        d["name"] = "NVIDIA H100 PCIe"
    gpu["n1"]["figures"]["job_spec"]["device"] = "NVIDIA H100 PCIe"
    gpu["n1"]["figures"]["job"] = job_id(gpu["n1"]["figures"]["job_spec"])
    (failure,) = judged(gpu, gpus=2, model=H100)[0]
    assert failure.startswith("alone in its job: 4 nodes were sent the same one")


def test_a_document_whose_job_is_not_the_one_sent_votes_nowhere():
    """Two nodes whose documents say a digest their ranks do not hold cannot outvote the
    third: they vote on no digest, and fail themselves."""
    docs = {n: doc() for n in ("a", "b", "n1")}
    for n in ("a", "b"):
        docs[n]["figures"]["digest"] = "e" * 64
    assert judged(docs) == ((), ())
    (failure,) = judged(docs, node="a")[0]
    assert "its digest eeeeeeeeeeee is not its ranks'" in failure


def test_mfu_is_over_the_peak_of_the_dtype_the_job_ran():
    d = doc("gpu")
    d["figures"]["model_tflops"] = 2 * 400.0  # 400 per device of a 989 TFLOPS BF16 peak
    (failure,) = judged({"n1": d}, sent=settings(min_mfu=0.5), gpus=2, model=H100)[0]
    assert failure == ("MFU 40.4% of the 989 TFLOPS dense BF16 peak per device, below the "
                       "floor of 50.0%")
    # The same figures from an fp32 job: the table has no FP32 peak; not judged, and said.
    fp32 = copy.deepcopy(d)
    fp32["figures"]["dtype"] = fp32["figures"]["job_spec"]["dtype"] = "fp32"
    fp32["figures"]["job"] = job_id(fp32["figures"]["job_spec"])
    failures, warnings = judged({"n1": fp32}, sent=settings(min_mfu=0.5, dtype="fp32"),
                                gpus=2, model=H100)
    assert failures == ()
    assert warnings == ("MFU not judged: the GPU model table has no dense FP32 peak for "
                        "H100-SXM5-80GB (checks.train.peak_tflops sets one)",)
    # An fp32 peak the inventory gives is the one.
    (failure,) = judged({"n1": fp32}, sent=settings(min_mfu=0.5, dtype="fp32",
                                                    peak_tflops=1000.0), gpus=2, model=H100)[0]
    assert failure.startswith("MFU 40.0% of the 1000 TFLOPS dense FP32 peak per device")
