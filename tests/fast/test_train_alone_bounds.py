"""The train check's "alone in its job" rule at its bounds (burnin/checks/train.py), which
mutation testing found untested: exactly PEERS nodes sent one job is enough to be alone
among, two nodes that ran a job are not alone in it, and the failure says which job,
which shape and why it counts. On the real probe's recorded documents (tests/corpus/)."""

from __future__ import annotations

import json
from pathlib import Path

from burnin.checks import CHECKS, Fleet, Judging
from burnin.checks.base import PEERS
from burnin.checks.train import fleet_summary, judge
from burnin.checks.train_job import job_id
from burnin.inventory.schema import Node
from burnin.probe.protocol import ProbeOutcome

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
SHAPE = {"d_model": 32, "layers": 1, "heads": 2, "seq_len": 16, "vocab": 64, "batch": 4}
# What tests/corpus/record.py sent the probe that recorded the documents; the shape left
# out, as when the probe sizes the model from the device.
UNSIZED = {**CHECKS["train"].resolve("quick", {"steps": 6, "warmup_steps": 2, "lr": 0.01}),
           **dict.fromkeys(SHAPE)}


def fleet_docs(*names: str) -> dict[str, dict]:
    """The recorded CPU document for each node (equal ranks, as tests/support/replay.py)."""
    out = {}
    for n in names:
        d = json.loads((CORPUS / "train.cpu.json").read_text())
        for r in d["devices"]:
            r["compute_s"] = d["devices"][0]["compute_s"]
        out[n] = d
    return out


def judged(docs: dict[str, dict], node: str = "n1"):
    """(failures, warnings) of `node` among `docs`, every CPU node of one device sent
    UNSIZED."""
    names = list(docs)
    nodes = {n: Node(name=n, address=n, gpus=0) for n in names}
    fleet = Fleet({n: ProbeOutcome(n, "train", True, data=docs[n]) for n in names},
                  dict.fromkeys(names, 1), dict.fromkeys(names, None), nodes,
                  settings=dict.fromkeys(names, UNSIZED))
    v = judge(nodes[node], fleet.outcomes[node],
              Judging(UNSIZED, fleet_summary(fleet), model=None, gpus=0, devices=1))
    return v.failures, v.warnings


def _own_job(doc: dict, d_model: int) -> str:
    fig = doc["figures"]
    for shape in (fig["shape"], fig["job_spec"]["shape"]):
        shape["d_model"] = d_model
    fig["job"] = job_id(fig["job_spec"])
    return fig["job"]


def test_exactly_peers_nodes_sent_one_job_is_enough_to_be_alone_and_the_failure_says_so():
    assert PEERS == 3
    docs = fleet_docs("a", "b", "n1")  # PEERS nodes, no more
    job = _own_job(docs["n1"], 16)
    (failure,) = judged(docs)[0]
    shape = docs["n1"]["figures"]["shape"]
    assert failure == (
        f"alone in its job: 3 nodes were sent the same one (settings, GPU model, device "
        f"count), and none other ran what it ran ({job[:12]}: model shape {shape}, device, "
        "threads, torch, CUDA): its figures have no peers and its digest no consensus")


def test_two_nodes_that_ran_one_job_are_not_alone_in_it():
    docs = fleet_docs("a", "b", "c", "n1")
    _own_job(docs["n1"], 16)
    _own_job(docs["c"], 16)
    failures = judged(docs)[0]
    assert not [f for f in failures if f.startswith("alone in its job")], failures
