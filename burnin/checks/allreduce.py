"""The allreduce check's judges.

Intra-node: busbw at the judged size of the sweep (the best one: where the bus
saturates), against the inventory's floor or the gpu_model's (for a full 8-GPU node),
and against a share of the median of the run's nodes of the same model and rank count.
The model's floor is set a margin below what a healthy node measures without NVLink
SHARP (burnin/data/gpu_models.yaml says from which sources), so it catches a broken
fabric; the node-to-fleet rule catches the node that is merely slower than its peers.
Inter-node: the group's figures, and for a node the localisation named (slow with
known-good partners) its pair figures.
"""

from __future__ import annotations

from dataclasses import replace

from burnin.checks.base import (
    DEVICE_COUNT,
    PEER_SPREADS,
    PEERS,
    WRONG_RESULT,
    Check,
    Figure,
    Fleet,
    Judging,
    Measure,
    Setting,
    count_problem,
    peer_bound,
    peer_medians,
    timeout,
)
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import COUNT, Bool, Int, List, Num, Obj, Str, document

# A size within this share of the sweep's best has reached the bus's saturation: the
# smallest such size is the saturation size (gpu_first_run reports it per device).
SATURATED = 0.95
# peer_fraction when the inventory gives none. GPUs: a healthy 8-GPU node measures within
# a few per cent of its peers at the judged size, while one without NVLink SHARP among
# peers with it measures about 0.8 of them (370 against 460 GB/s on H100): such a node
# is a straggler that slows every job it joins. CPU nodes (gloo, shared cores) are noisy.
PEER_FRACTION = {"gpu": 0.85, "cpu": 0.5}


def judged(sweep: list[dict]) -> dict | None:
    """The size the verdict is taken on: the best busbw of the sweep. nccl-tests' busbw
    still grows past 1 GiB with NVLink SHARP (about 460 GB/s at 1 GiB, 480 at 16 GiB on
    8 x H100), so the largest size is not always the best, and a dip at one size (a
    clock change, a neighbour's burst) must not decide alone."""
    if not sweep:
        return None
    return max(sweep, key=lambda s: (s["busbw_gbps"], s["bytes"]))


def saturation(sweep: list[dict], share: float = SATURATED) -> dict | None:
    """The smallest size whose busbw is within `share` of the sweep's best."""
    top = judged(sweep)
    if top is None:
        return None
    return min((s for s in sweep if s["busbw_gbps"] >= share * top["busbw_gbps"]),
               key=lambda s: s["bytes"])


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):g} MiB"


def _peer_key(model, world) -> tuple[str, int]:
    """Nodes are compared with the nodes of the same model and rank count only: an 8-GPU
    H100 node is no yardstick for a 4-GPU one, nor for a CPU node's gloo."""
    return (model.key if model is not None else "", int(world or 0))


def intra_summary(fleet: Fleet) -> dict:
    """{(model, world): {median, nodes}} over the nodes that reported a sweep."""
    rates: dict[tuple[str, int], list[float]] = {}
    for name, o in fleet.voters():
        fig = o.data["figures"]
        if fig.get("sweep"):
            key = _peer_key(fleet.models.get(name), fig.get("world"))
            top = judged(fig["sweep"])
            if top is not None:  # never None: the sweep is not empty
                rates.setdefault(key, []).append(top["busbw_gbps"])
    # each node one vote: how far its figure strays from the median (the run's noise)
    return peer_medians(rates)


def _ranks_problem(outcome: ProbeOutcome, j: Judging) -> list[str]:
    """One rank per GPU; on a CPU node one per CPU device, or `ranks` with a single one."""
    if j.devices is None:
        return []
    want = j.devices if j.gpus or j.devices > 1 else j.settings.get("ranks", 2)
    return count_problem(outcome.data["devices"], replace(j, devices=want))


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    summary, settings, model = j.fleet, j.settings, j.model
    if not outcome.ok:
        return Verdict(node.name, "allreduce", (outcome.reason,))
    fig = outcome.data["figures"]
    failures = list(outcome.data["errors"])
    failures += _ranks_problem(outcome, j)
    sweep = fig.get("sweep", [])
    for size in sweep:
        if size["wrong_elements"]:
            failures.append(WRONG_RESULT(f"{size['wrong_elements']} wrong elements in the "
                                         f"all-reduce result at {_mib(size['bytes'])}, "
                                         "expected exact sums"))
    top = judged(sweep)
    if top is None:
        failures.append("no bandwidth sweep was reported")
        return Verdict(node.name, "allreduce", tuple(failures))
    world = fig.get("world", 1)
    if world < 2:
        return Verdict(node.name, "allreduce", tuple(failures),
                       ("one rank: busbw is 0 by definition; nothing to judge",))
    busbw = top["busbw_gbps"]
    floor = settings.get("min_busbw_gbps") or (
        model.allreduce_intra_gbps if model and world == model.allreduce_ranks else None)
    what = (f"intra-node busbw {busbw:.3f} GB/s at {_mib(top['bytes'])}, the best of the "
            f"sweep ({world} ranks)")
    if floor is not None and busbw < floor:
        failures.append(f"{what}, below the floor of {floor:g} GB/s")
    peers = (summary or {}).get(_peer_key(model, world), {})
    fraction = settings.get("peer_fraction")
    if fraction is None:
        fraction = PEER_FRACTION["cpu" if j.gpus == 0 else "gpu"]
    if peers.get("nodes", 0) >= PEERS:
        bound, words = peer_bound(peers["median"], peers.get("spread"), fraction,
                                  settings.get("peer_spreads", PEER_SPREADS), "GB/s")
        if busbw < bound:
            failures.append(f"{what}, below {words}, the median of the run's "
                            f"{peers['nodes']} nodes of this model and rank count")
    return Verdict(node.name, "allreduce", tuple(failures),
                   floors={} if floor is None else {"allreduce": floor})


def figures(record: dict) -> list[Figure]:
    sweep = record["data"]["figures"].get("sweep")
    if not sweep:
        return []
    # The figure is the sweep's best; its label names the sweep's largest size (the best
    # of sizes up to it), which the settings fix: a label naming the best size itself
    # would move between runs and break every series, trend and comparison on it.
    top = judged(sweep)
    if top is None:  # never: the sweep is not empty
        return []
    return [Figure("allreduce_busbw_gbps", (("scope", "intra"),
                                            ("bytes", str(max(s["bytes"] for s in sweep)))),
                   top["busbw_gbps"],
                   "All-reduce bus bandwidth, the best of the sweep up to `bytes`")]


SIZE = Obj(bytes=Int(1), iters=Int(1), time_us=Num(0), algbw_gbps=Num(0, 1e5),
           busbw_gbps=Num(0, 1e5), wrong_elements=COUNT,
           required=("bytes", "busbw_gbps", "wrong_elements"))
RANK = Obj(rank=Int(0, 1 << 20), host=Str(256), device=Str(64), wrong_elements=COUNT)
SCHEMA = document(RANK, Obj(world=Int(1, 1 << 20), ranks_here=Int(0, 1024),
                            first_rank=Int(0, 1 << 20), mode=Str(64), joined=Bool(),
                            unable=Bool(),
                            sweep=List(SIZE, max=64), backend=Str(64)))

SETTINGS = {
    "timeout_s": timeout(300, 600, 1200),
    "min_busbw_gbps": Setting("positive", None, "intra-node floor; default: the gpu_model's "
                              "for a full node"),
    "min_internode_busbw_gbps": Setting("positive", None, "inter-node floor"),
    "peer_fraction": Setting("fraction", None, "intra-node: fail below this share of the "
                             "median of the run's nodes of the same model and rank count; "
                             "default 0.85 on GPU nodes, 0.5 on CPU nodes; lower where "
                             "the run's nodes spread wider"),
    "peer_spreads": Setting("positive", PEER_SPREADS, "intra-node: robust spreads of the "
                            "run's nodes a node may fall below their median"),
    "pair_fraction": Setting("fraction", 0.5, "inter-node, with no floor: a group or pair "
                             "below this share of the fleet's fast ones (their 90% "
                             "quantile, not the median) is slow; 0: no localisation"),
    "min_bytes": Setting("int", None, "default 1 MiB on GPUs, 64 KiB on CPUs"),
    "max_bytes": Setting("int", None, "default 1 GiB on GPUs, 16 MiB on CPUs"),
    "warmup": Setting("int", 5),
    "seconds_per_size": Setting("positive", {"quick": 0.2, "standard": 0.5, "extended": 2.0}),
    "ranks": Setting("int", 2, "ranks on a CPU-only node, intra-node"),
    "rendezvous_timeout_s": Setting("positive", 60),
}

# Shared with the inter-node all-reduce: the label `scope` (intra, inter) tells them apart.
BUSBW = Measure("allreduce_busbw_gbps", "GB/s", "busbw {scope} GB/s", "busbw {scope}",
                speed=True)
CHECK = Check(name="allreduce", doc="GPUs inside a node talk at full speed", judge=judge,
              schema=SCHEMA, summarize=intra_summary, figures=figures, settings=SETTINGS,
              page="burnin.report.summary.checks:allreduce", page_order=60, measures=(BUSBW,),
              fleet_page="burnin.report.summary.fleet_checks:allreduce",
              failure_kinds=(WRONG_RESULT, DEVICE_COUNT))
