"""The intra-node all-reduce judge against published figures: the size it judges, the
floors of burnin/data/gpu_models.yaml (each with its source beside it), and the peer rule
that catches what a floor set under the no-NVLS figure lets through."""

from __future__ import annotations

import re
from importlib import resources

import pytest
import yaml

from burnin.checks.allreduce import figures, intra_summary, judge, judged, saturation
from burnin.checks.base import Fleet, Judging
from burnin.model.gpu_reference import GPU_MODELS
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome

H100 = GPU_MODELS["H100-SXM5-80GB"]
MIB = 1 << 20
# busbw (GB/s) of a healthy 8 x H100 at 64 MiB .. 1 GiB: nccl-tests' shape, NVLS off
# (NCCL_ALGO=Ring, plateau about 370) and on (about 460 at 1 GiB, still growing): see the
# sources in gpu_models.yaml.
RING = {64: 300.0, 128: 335.0, 256: 352.0, 512: 360.0, 1024: 363.0}
NVLS = {64: 346.0, 128: 402.0, 256: 436.0, 512: 450.0, 1024: 463.0}


def sweep(rates: dict[int, float]) -> list[dict]:
    return [{"bytes": mib * MIB, "iters": 10, "time_us": 1.0, "busbw_gbps": v,
             "wrong_elements": 0} for mib, v in rates.items()]


def outcome(name: str, rates: dict[int, float], world: int = 8) -> ProbeOutcome:
    devices = [{"rank": r, "host": name, "device": f"cuda:{r}", "wrong_elements": 0}
               for r in range(world)]
    return ProbeOutcome(name, "allreduce", True, data={
        "probe": "allreduce", "schema": 1, "node": {}, "devices": devices, "errors": [],
        "figures": {"world": world, "ranks_here": world, "first_rank": 0,
                    "mode": "intra-node", "sweep": sweep(rates), "backend": "nccl"}})


def verdicts(fleet: dict[str, ProbeOutcome], models: dict | None = None,
             gpus: dict | None = None, **settings) -> dict:
    """Each node judged as the run judges it: H100 nodes of 8 GPUs unless told."""
    models = models or dict.fromkeys(fleet, H100)
    gpus = gpus or dict.fromkeys(fleet, 8)
    devices = {n: len(o.data["devices"]) for n, o in fleet.items()}
    summary = intra_summary(Fleet(fleet, devices, models))
    return {n: judge(Node(name=n, address=n, gpus=gpus[n]), o,
                     Judging(settings, summary, models[n], devices[n], gpus[n]))
            for n, o in fleet.items()}


def test_a_healthy_8xh100_without_nvlink_sharp_passes_the_model_floor():
    """On main the floor was 460 GB/s, the NVLS figure at multi-GB sizes: a healthy node
    without NVLS (a VM, NCCL_NVLS_ENABLE=0, no fabric manager multicast) measures about
    363 at 1 GiB and failed."""
    v = verdicts({"g1": outcome("g1", RING)})["g1"]
    assert v.failures == ()


def test_a_broken_fabric_fails_the_floor_naming_the_best_size():
    pcie = {64: 21.0, 128: 23.0, 256: 24.0, 512: 24.5, 1024: 24.0}  # NVLink down: PCIe P2P
    (failure,) = verdicts({"g1": outcome("g1", pcie)})["g1"].failures
    assert failure == ("intra-node busbw 24.500 GB/s at 512 MiB, the best of the sweep "
                       "(8 ranks), below the floor of 300 GB/s")


def test_the_judged_size_is_the_best_of_the_sweep_not_the_last():
    """A dip at the sweep's last size (a clock change, a neighbour's burst) decided the
    verdict on main; the bus's saturation is what is judged."""
    dip = {**RING, 1024: 280.0}
    assert judged(sweep(dip))["bytes"] == 512 * MIB
    assert verdicts({"g1": outcome("g1", dip)})["g1"].failures == ()
    assert saturation(sweep(NVLS))["bytes"] == 512 * MIB  # 450 >= 0.95 x 463 > 436
    assert saturation(sweep(RING))["bytes"] == 256 * MIB  # 352 >= 0.95 x 363 > 335


def test_the_metric_label_names_the_sweeps_largest_size_so_series_stay_put():
    (fig,) = figures({"data": outcome("g1", {**RING, 1024: 280.0}).data})
    assert fig.value == 360.0 and dict(fig.labels)["bytes"] == str(1024 * MIB)


def test_a_node_without_nvls_among_peers_with_it_is_a_straggler():
    """The floor sits under the no-NVLS figure, so the node-to-fleet rule must apply
    beside it (on main a floor switched it off): 363 against a median of 463 is 0.78."""
    fleet = {f"g{i}": outcome(f"g{i}", NVLS) for i in range(1, 4)}
    fleet["g4"] = outcome("g4", RING)
    v = verdicts(fleet)
    assert all(v[f"g{i}"].failures == () for i in range(1, 4)), v
    (failure,) = v["g4"].failures
    assert failure == ("intra-node busbw 363.000 GB/s at 1024 MiB, the best of the sweep "
                       "(8 ranks), below 0.85 x 463.000 GB/s, the median of the run's 4 "
                       "nodes of this model and rank count")
    assert verdicts(fleet, peer_fraction=0)["g4"].failures == ()  # the inventory may say so


def test_peers_are_nodes_of_the_same_model_and_rank_count():
    """On main one median covered every node: three CPU nodes (gloo, about 1 GB/s) beside
    three 8-GPU nodes had a median of 230 GB/s, and failed against it."""
    fleet = {f"g{i}": outcome(f"g{i}", NVLS) for i in range(1, 4)}
    fleet.update({f"c{i}": outcome(f"c{i}", {1: 1.0, 2: 1.1}, world=2) for i in range(1, 4)})
    models = {n: H100 if n.startswith("g") else None for n in fleet}
    gpus = {n: 8 if n.startswith("g") else 0 for n in fleet}
    v = verdicts(fleet, models, gpus)
    assert {n: x.failures for n, x in v.items()} == dict.fromkeys(fleet, ())
    fleet["c4"] = outcome("c4", {1: 0.3, 2: 0.4}, world=2)  # a CPU node at 0.36 of its peers
    models["c4"], gpus["c4"] = None, 0
    assert "below 0.5 x 1.100 GB/s" in verdicts(fleet, models, gpus)["c4"].failures[0]


def _model_blocks() -> dict[str, str]:
    """Each model's text in the shipped YAML, comments included."""
    text = resources.files("burnin").joinpath("data", "gpu_models.yaml").read_text("utf-8")
    starts = [(m.group(1), m.start()) for m in re.finditer(r"^([A-Za-z0-9-]+):$", text, re.M)]
    ends = [s for _, s in starts[1:]] + [len(text)]
    return {key: text[start:end] for (key, start), end in zip(starts, ends, strict=True)}


@pytest.mark.parametrize("key", [k for k, m in GPU_MODELS.items()
                                 if m.allreduce_intra_gbps is not None])
def test_every_all_reduce_floor_has_its_source_and_date_beside_it(key):
    blocks = _model_blocks()
    block = blocks[key]
    same = re.search(r"the same NVLink fabric as ([A-Za-z0-9-]+)", block)
    if same:  # a twin points at the model whose sources it shares, with the same floor
        assert yaml.safe_load(blocks[same.group(1)])[same.group(1)]["allreduce_intra_gbps"] \
            == GPU_MODELS[key].allreduce_intra_gbps
        block = blocks[same.group(1)]
    assert re.search(r"https://github\.com/\S+", block), key
    assert re.search(r"\b20\d\d-\d\d-\d\d\b", block), key
    assert re.search(r"Floor: .*= \d+, rounded to \d+", block), key
