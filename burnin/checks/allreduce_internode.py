"""The inter-node all-reduce, a group check the controller executes: one group over the
nodes that passed the single-node checks, then, when the group is slow, localisation by
pairs.

Every node of a group starts its probe at once with its share of the ranks; the first
node is the rendezvous master. Where the nodes' transport launches many tasks as one
(srun), the group is one step with one task per rank (one per GPU), each task reporting
its rank, and a node's ranks are put together into its outcome.

A node whose probe cannot run, or never joins within the rendezvous timeout, is named
and the group is run again without it. Localisation: every node is paired with others
(n/2 pairs at a time, two rounds), nodes in a fast pair are known-good, and each
remaining suspect is re-paired with a known-good node: a node is named only when it is
slow with a good partner. Every pair's figure is recorded.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

from burnin.checks.allreduce import CHECK as INTRA
from burnin.checks.allreduce import SIZE, judged
from burnin.checks.base import Check, Figure, Judging, timeout
from burnin.nodes import Node
from burnin.probe import ProbeOutcome, run_probes
from burnin.schema import COUNT, Bool, List, Num, Obj, Str, document
from burnin.verdict import Verdict

NAME = "allreduce_internode"


@dataclass(frozen=True)
class Facts:
    """Each member's ranks (one per device) and GPUs, learned once, before any thread."""

    ranks: dict[str, int]
    gpus: dict[str, int | None]


def run_group(run, nodes: list[Node], settings: dict, facts: Facts) -> dict[str, ProbeOutcome]:
    """One all-reduce group over `nodes`, all started at once: one rank per device, each
    node's count the controller's (the inventory's, or its health facts'), never a
    guess, so that every node agrees on the world size and its ranks."""
    port = random.randrange(30000, 60000)
    ranks, gpus = facts.ranks, facts.gpus
    world = sum(ranks[n.name] for n in nodes)
    offsets, first = {}, 0
    for n in nodes:
        offsets[n.name] = first
        first += ranks[n.name]
    out: dict[str, ProbeOutcome] = {}

    def payload(node: Node) -> dict:
        return {"check": "allreduce", "node": node.name, "run_id": run.run_id,
                "gpus": gpus[node.name], "cpu_devices": node.cpu_devices,
                "settings": settings,
                "group": {"world": world, "rank_offset": offsets[node.name],
                          "ranks_here": ranks[node.name],
                          "master_addr": nodes[0].address, "master_port": port,
                          "nodes": [n.name for n in nodes]}}

    launcher = run.launcher(nodes[0])
    if launcher is not None and all(run.launcher(n) is launcher for n in nodes):
        return _as_ranks(run, launcher, nodes, {n.name: payload(n) for n in nodes},
                         float(settings["timeout_s"]), ranks)

    def one(node: Node) -> None:
        try:
            out[node.name] = run.probe(node, INTRA, payload(node),
                                       float(settings["timeout_s"]))
        except Exception as e:  # contained: this node's failure, reported as such
            out[node.name] = ProbeOutcome(node.name, "allreduce", False,
                                          f"cannot start the probe: {type(e).__name__}: {e}")

    run.at_once(nodes, one)
    return out


def _as_ranks(run, launcher, nodes: list[Node], payloads: dict[str, dict], timeout_s: float,
              ranks: dict[str, int]) -> dict[str, ProbeOutcome]:
    """The group as one launch with one task per rank (Slurm: one step, one task per GPU);
    each task is its node's next rank (probes/allreduce.py: per_task)."""
    for p in payloads.values():
        p["group"].update(per_task=True, ranks=[ranks[n.name] for n in nodes])
    if run.cancel.is_set():
        return {n.name: ProbeOutcome(n.name, "allreduce", False, "not started: the run was "
                                     "interrupted") for n in nodes}
    per_task = run_probes(launcher, nodes, INTRA.probe_name, payloads,
                          dict.fromkeys(payloads, timeout_s), max_output=INTRA.max_output,
                          schema=INTRA.schema, lifeline=True, cancel=run.cancel,
                          tasks={n.name: ranks[n.name] for n in nodes})
    return {name: node_of_ranks(name, outs) for name, outs in per_task.items()}


def node_of_ranks(name: str, outs: list[ProbeOutcome]) -> ProbeOutcome:
    """A node's ranks, one validated document each, as the node's one outcome."""
    for i, o in enumerate(outs):
        if not o.ok:
            reason = o.reason if len(outs) == 1 else f"rank task {i} on the node: {o.reason}"
            return ProbeOutcome(name, o.probe, False, reason, {}, o.duration_s, o.exit_code,
                                o.stderr_tail)
    figs = [o.data["figures"] for o in outs]
    figures = {"world": figs[0]["world"], "ranks_here": len(outs), "mode": "inter-node",
               "first_rank": min(f["first_rank"] for f in figs)}
    for f in figs:
        figures.update({k: f[k] for k in ("sweep", "backend") if k in f})
        if f.get("joined") is False:
            figures["joined"] = False
    data = {"probe": outs[0].data["probe"], "schema": outs[0].data["schema"],
            "node": outs[0].data["node"], "figures": figures,
            "devices": [d for o in outs for d in o.data["devices"]],
            "errors": list(dict.fromkeys(e for o in outs for e in o.data["errors"]))}
    return ProbeOutcome(name, outs[0].probe, True, "", data, max(o.duration_s for o in outs), 0,
                        outs[0].stderr_tail)


def group_figures(outcomes: dict[str, ProbeOutcome]) -> dict | None:
    """Rank 0's sweep and the judged size, when the whole group completed."""
    if not all(o.ok and not o.data["errors"] for o in outcomes.values()):
        return None
    for o in outcomes.values():
        sweep = o.data["figures"].get("sweep")
        if sweep:
            top = judged(sweep)
            return {"nodes": list(outcomes), "sweep": sweep, "bytes": top["bytes"],
                    "busbw_gbps": top["busbw_gbps"]}
    return None


def absent(outcomes: dict[str, ProbeOutcome], members: list[Node]) -> dict[str, str]:
    """Who kept the group from forming, and why: probes that could not run, nodes the
    master saw no hello from, or the master itself when no other node could reach it."""
    culprits = {n: o.reason for n, o in outcomes.items() if not o.ok}
    master = outcomes.get(members[0].name)
    for e in (master.data["errors"] if master and master.ok else []):
        if e.startswith("did not join the rendezvous: "):
            for name in e.split(": ", 1)[1].split(", "):
                culprits.setdefault(name, "no hello reached the rendezvous master within "
                                          "the rendezvous timeout")
    others = [o for n, o in outcomes.items() if n != members[0].name]
    if others and all(o.ok and any(e.startswith("cannot reach the rendezvous master")
                                   for e in o.data["errors"]) for o in others):
        culprits.setdefault(members[0].name, "no other node could reach it as the "
                                             "rendezvous master")
    return culprits


def internode(run) -> dict[str, ProbeOutcome]:
    """The allreduce_internode outcome of every selected node."""
    settings = run.settings("allreduce")
    failed = run.failed_single_node_checks()
    result: dict[str, ProbeOutcome] = {}
    for n in run.nodes:
        if n.name in failed:
            result[n.name] = _outcome(n.name, excluded="not in the inter-node run: failed "
                                                       + ", ".join(failed[n.name]))
    for n in run.nodes:
        if n.name not in result and run.devices(n) is None:
            result[n.name] = _outcome(n.name, excluded="not in the inter-node run: its device "
                                                       "count is unknown (no health facts)")
    members = [n for n in run.nodes if n.name not in result]
    facts = Facts({n.name: run.devices(n) for n in members}, {n.name: run.gpus(n) for n in members})
    if len(members) < 2:
        for n in members:
            result[n.name] = _outcome(n.name, excluded="fewer than two nodes passed the "
                                                       "single-node checks: no inter-node run")
        return result
    outcomes = run_group(run, members, settings, facts)
    group = group_figures(outcomes)
    if group is None:  # name who never joined, and run again without them
        culprits = absent(outcomes, members)
        for name, reason in culprits.items():
            result[name] = ProbeOutcome(name, NAME, False,
                                        f"did not join the inter-node all-reduce: {reason}")
        members = [n for n in members if n.name not in culprits]
        if culprits and len(members) >= 2:
            outcomes = run_group(run, members, settings, facts)
            group = group_figures(outcomes)
    if group is None:
        why = "; ".join(f"{n}: {o.reason or '; '.join(o.data['errors'])}"
                        for n, o in outcomes.items() if not o.ok or o.data["errors"])
        for n in members:
            result.setdefault(n.name, _outcome(
                n.name, group_failure=f"the inter-node all-reduce did not complete: {why}"))
        return result
    floor = settings.get("min_internode_busbw_gbps")
    fraction = settings.get("pair_fraction", 0.5)
    named: dict[str, str] = {}
    pairs: list[dict] = []
    # With a floor, localise when the group is below it; with none (CPU fleets), the
    # pairs are the only yardstick: compare them whenever there are peers to compare.
    if (floor is not None and group["busbw_gbps"] < floor) or (
            floor is None and fraction > 0 and len(members) >= 3):
        pairs, named = localise(run, members, settings, floor, facts)
    wrong = {name: sum(d.get("wrong_elements", 0) for d in o.data["devices"])
             for name, o in outcomes.items()}
    for n in members:
        mine = [p for p in pairs if n.name in p["nodes"]]
        fig = {"group": group, "pairs": mine, "wrong_elements": wrong.get(n.name, 0)}
        if n.name in named:
            fig.update(slow_with_good_partner=True, verdict=named[n.name])
        elif floor is not None and group["busbw_gbps"] < floor and not named:
            fig["group_failure"] = (f"inter-node busbw {group['busbw_gbps']:.3f} GB/s below the "
                                    f"floor of {floor:g} GB/s, and no single node was localised")
        result[n.name] = _outcome(n.name, **fig)
    return result


def localise(run, members: list[Node], settings: dict, floor: float | None, facts: Facts):
    """(every pair's figure, {node: why it is named})."""
    def measure(pairs: list[tuple[Node, Node]]) -> list[dict]:
        def one(pair: tuple[Node, Node]) -> dict:
            a, b = pair
            g = group_figures(run_group(run, [a, b], settings, facts))
            return {"nodes": [a.name, b.name], "busbw_gbps": g["busbw_gbps"] if g else 0.0}
        return run.at_once(pairs, one)

    n = len(members)
    rounds = [[(members[i], members[i + 1]) for i in range(0, n - 1, 2)],
              [(members[i], members[(i + 1) % n]) for i in range(1, n, 2)]]
    if n % 2:  # the odd one out meets the first node in the first round
        rounds[0].append((members[-1], members[0]))
    figures = [f for r in rounds for f in measure(r)]
    threshold = floor if floor is not None else settings.get("pair_fraction", 0.5) * \
        statistics.median(f["busbw_gbps"] for f in figures)
    good = {x for f in figures if f["busbw_gbps"] >= threshold for x in f["nodes"]}
    suspects = [m for m in members if m.name not in good]
    named = {}
    partners = [m for m in members if m.name in good]
    if partners:
        retest = [(s, partners[i % len(partners)]) for i, s in enumerate(suspects)]
        for i in range(0, len(retest), max(1, len(partners))):  # a partner in one pair at once
            for f in measure(retest[i:i + len(partners)]):
                f["retest"] = True
                figures.append(f)
                if f["busbw_gbps"] < threshold:
                    named[f["nodes"][0]] = (f"{f['busbw_gbps']:.3f} GB/s paired with "
                                            f"known-good {f['nodes'][1]}, below "
                                            f"{threshold:.3f} GB/s")
    return figures, named


def _outcome(name: str, **figures) -> ProbeOutcome:
    return ProbeOutcome(name, NAME, True, data={"probe": "allreduce", "schema": 1,
                                                 "node": {}, "devices": [], "errors": [],
                                                 "figures": figures})


def excluded(outcome: ProbeOutcome) -> str:
    """Why a node took no part in the inter-node run ('' when it did)."""
    return outcome.data.get("figures", {}).get("excluded", "") if outcome.ok else ""


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, NAME, (outcome.reason,))
    fig = outcome.data["figures"]
    failures = list(outcome.data["errors"])
    if fig.get("wrong_elements"):
        failures.append(f"{fig['wrong_elements']} wrong elements in this node's all-reduce "
                        "results, expected exact sums")
    group = fig.get("group", {})
    pairs = ", ".join(f"{'+'.join(p['nodes'])} {p['busbw_gbps']:.3f}" for p in fig.get("pairs", []))
    mib = f"{group.get('bytes', 0) / (1 << 20):g} MiB"
    if fig.get("slow_with_good_partner"):
        failures.append(f"localised as the slow node: {fig['verdict']}; its pairs (GB/s): "
                        f"{pairs}; group busbw {group.get('busbw_gbps', 0):.3f} GB/s at "
                        f"{mib} over {len(group.get('nodes', []))} nodes")
    elif fig.get("group_failure"):
        failures.append(fig["group_failure"])
    return Verdict(node.name, NAME, tuple(failures))


def figures(record: dict) -> list[Figure]:
    g = record["data"]["figures"].get("group")
    if not g:
        return []
    return [Figure("allreduce_busbw_gbps", (("scope", "inter"), ("bytes", str(g["bytes"]))),
                   g["busbw_gbps"], "All-reduce busbw at the judged size, GB/s")]


PAIR = Obj(nodes=List(Str(256), max=2), busbw_gbps=Num(0, 1e5), retest=Bool())
# The controller writes these records itself, from the members' validated documents.
SCHEMA = document(Obj(), Obj(group=Obj(nodes=List(Str(256), max=1 << 20), busbw_gbps=Num(0),
                                       bytes=COUNT, sweep=List(SIZE, max=64)),
                             pairs=List(PAIR, max=1 << 20), wrong_elements=COUNT))

CHECK = Check(name=NAME, doc="nodes talk to each other at full speed; the slow one is named",
              judge=judge, schema=SCHEMA, figures=figures, execute=internode, probe="allreduce",
              settings={"timeout_s": timeout(300, 600, 1200)})
