"""The allreduce check's judges.

Intra-node: busbw at the largest size of the sweep, against the inventory's floor or the
gpu_model's (for a full 8-GPU node), or, with no floor (CPU nodes), against a share of
the run's median. Inter-node: the group's figures, and for a node the localisation named
(slow with known-good partners) its pair figures.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from burnin.checks.base import PEERS, Check, Figure, Fleet, Judging, Setting, count_problem, timeout
from burnin.nodes import Node
from burnin.probe import ProbeOutcome
from burnin.schema import COUNT, Bool, Int, List, Num, Obj, Str, document
from burnin.verdict import Verdict


def judged(sweep: list[dict]) -> dict | None:
    """The size the verdict is taken on: the largest of the sweep."""
    return sweep[-1] if sweep else None


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):g} MiB"


def intra_summary(fleet: Fleet) -> dict:
    rates = [judged(o.data["figures"]["sweep"])["busbw_gbps"] for _, o in fleet.voters()
             if o.data["figures"].get("sweep")]
    return {"median": statistics.median(rates) if rates else None, "nodes": len(rates)}


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
            failures.append(f"{size['wrong_elements']} wrong elements in the all-reduce result "
                            f"at {_mib(size['bytes'])}, expected exact sums")
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
    what = f"intra-node busbw {busbw:.3f} GB/s at {_mib(top['bytes'])} ({world} ranks)"
    if floor is not None:
        if busbw < floor:
            failures.append(f"{what}, below the floor of {floor:g} GB/s")
    elif summary.get("nodes", 0) >= PEERS:
        fraction = settings.get("peer_fraction", 0.5)
        if busbw < fraction * summary["median"]:
            failures.append(f"{what}, below {fraction:g} x {summary['median']:.3f} GB/s, the "
                            "run's median")
    return Verdict(node.name, "allreduce", tuple(failures))


def figures(record: dict) -> list[Figure]:
    sweep = record["data"]["figures"].get("sweep")
    if not sweep:
        return []
    top = sweep[-1]
    return [Figure("allreduce_busbw_gbps", (("scope", "intra"), ("bytes", str(top["bytes"]))),
                   top["busbw_gbps"], "All-reduce bus bandwidth at the judged size")]


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
    "peer_fraction": Setting("fraction", 0.5, "intra-node, with no floor: fail below this "
                             "share of the run's median"),
    "pair_fraction": Setting("fraction", 0.5, "inter-node, with no floor: a pair below this "
                             "share of the median pair is slow; 0: no localisation"),
    "min_bytes": Setting("int", None, "default 1 MiB on GPUs, 64 KiB on CPUs"),
    "max_bytes": Setting("int", None, "default 1 GiB on GPUs, 16 MiB on CPUs"),
    "warmup": Setting("int", 5),
    "seconds_per_size": Setting("positive", {"quick": 0.2, "standard": 0.5, "extended": 2.0}),
    "ranks": Setting("int", 2, "ranks on a CPU-only node, intra-node"),
    "rendezvous_timeout_s": Setting("positive", 60),
}

CHECK = Check(name="allreduce", doc="GPUs inside a node talk at full speed", judge=judge,
              schema=SCHEMA, summarize=intra_summary, figures=figures, settings=SETTINGS)
