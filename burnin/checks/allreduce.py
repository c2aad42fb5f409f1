"""The allreduce check's judges.

Intra-node: busbw at the largest size of the sweep, against the inventory's floor or the
gpu_model's (for a full 8-GPU node), or, with no floor (CPU nodes), against a share of
the run's median. Inter-node: the group's figures, and for a node the localisation named
(slow with known-good partners) its pair figures.
"""

from __future__ import annotations

import statistics

from burnin.inventory import Node
from burnin.probe import ProbeOutcome
from burnin.reference import GPU_MODELS
from burnin.verdict import Verdict


def judged(sweep: list[dict]) -> dict | None:
    """The size the verdict is taken on: the largest of the sweep."""
    return sweep[-1] if sweep else None


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):g} MiB"


def intra_summary(fleet: dict[str, ProbeOutcome]) -> dict:
    rates = [judged(o.data["figures"].get("sweep", []))["busbw_gbps"] for o in fleet.values()
             if o.ok and o.data["figures"].get("sweep")]
    return {"median": statistics.median(rates) if rates else None, "nodes": len(rates)}


def judge_intra(node: Node, outcome: ProbeOutcome, summary: dict, settings: dict) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, "allreduce", (outcome.reason,))
    fig = outcome.data["figures"]
    failures = list(outcome.data["errors"])
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
    model = GPU_MODELS.get(node.gpu_model or "")
    floor = settings.get("min_busbw_gbps") or (
        model.allreduce_intra_gbps if model and world == 8 else None)
    what = f"intra-node busbw {busbw:.3f} GB/s at {_mib(top['bytes'])} ({world} ranks)"
    if floor is not None:
        if busbw < floor:
            failures.append(f"{what}, below the floor of {floor:g} GB/s")
    elif summary.get("nodes", 0) >= 2:
        fraction = settings.get("peer_fraction", 0.5)
        if busbw < fraction * summary["median"]:
            failures.append(f"{what}, below {fraction:g} x {summary['median']:.3f} GB/s, the "
                            "run's median")
    return Verdict(node.name, "allreduce", tuple(failures))


def excluded(outcome: ProbeOutcome) -> str:
    """Why a node took no part in the inter-node run ('' when it did)."""
    return outcome.data.get("figures", {}).get("excluded", "") if outcome.ok else ""


def judge_inter(node: Node, outcome: ProbeOutcome) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, "allreduce_internode", (outcome.reason,))
    fig = outcome.data["figures"]
    failures = list(outcome.data["errors"])
    if fig.get("wrong_elements"):
        failures.append(f"{fig['wrong_elements']} wrong elements in this node's all-reduce "
                        "results, expected exact sums")
    group = fig.get("group", {})
    pairs = ", ".join(f"{'+'.join(p['nodes'])} {p['busbw_gbps']:.3f}" for p in fig.get("pairs", []))
    if fig.get("slow_with_good_partner"):
        failures.append(f"localised as the slow node: {fig['verdict']}; its pairs (GB/s): "
                        f"{pairs}; group busbw {group.get('busbw_gbps', 0):.3f} GB/s at "
                        f"{_mib(group.get('bytes', 0))} over {len(group.get('nodes', []))} nodes")
    elif fig.get("group_failure"):
        failures.append(fig["group_failure"])
    return Verdict(node.name, "allreduce_internode", tuple(failures))
