"""Running a group check's groups across nodes, and finding the node that spoils one, on
evidence the controller can see for itself: the engine's side of a group check, which
reaches it through GroupRun.groups (GROUPS, below; burnin/checks/group_run.py). The check
says what its group runs and how its figures read (a Check, a GroupFigures); this module
launches it, forms it and localises it.

Every node of a group starts its probe at once with its share of the ranks (one per
device, each count the controller's own: the inventory's or the node's health facts);
the first node is the rendezvous master. A group's busbw is the lowest its members' own
documents report, and only when every member ran, reported no error, reported the
layout the controller gave it and a sweep (burnin/checks/group_outcomes.py:
group_figures). A slow group's nodes are found by adaptive group testing over the
topology (search_slow: burnin/engine/group_search.py); a group of fewer than four, or one
that did not form, by pairs (localise: n/2 pairs at a time, two rounds; nodes in a good
pair are known-good, and each remaining suspect is re-paired with a known-good node).
Either way a node is named only when it fails with a good partner.

Where the nodes' transport launches many tasks as one (srun), a group is one step with
one task per rank (one per GPU), each task reporting its rank, and a node's ranks are put
together into its outcome.

Everything of the run comes through the GroupRun each function takes (tests/fast/
test_group_run.py holds it to that): nothing here imports the rest of the engine.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from burnin.checks.allreduce import CHECK as INTRA
from burnin.checks.base import Check
from burnin.checks.group_outcomes import group_figures, layout, observed
from burnin.checks.group_run import (
    Facts,
    Formed,
    GroupFigures,
    GroupMeasure,
    GroupRun,
    Groups,
)
from burnin.engine.group_search import QUANTILE, find_slow, quantile, topology_label
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome
from burnin.transports import Launcher, rendezvous_address


def group_members(run: GroupRun, exclude: Callable[..., ProbeOutcome], what: str
                  ) -> tuple[list[Node], Facts | None, dict[str, ProbeOutcome]]:
    """The nodes an inter-node `what` (a "run", a "job") takes: those that passed the
    single-node checks and whose device count is known, with their Facts; the others'
    outcomes (`exclude(name, excluded=why)`) say why not. Facts is None where fewer than
    two are left, each of them then excluded too."""
    failed = run.failed()
    result: dict[str, ProbeOutcome] = {}
    for n in run.nodes:
        if n.name in failed:
            result[n.name] = exclude(n.name, excluded=f"not in the inter-node {what}: failed "
                                                      + ", ".join(failed[n.name]))
        elif run.devices(n) is None:
            result[n.name] = exclude(n.name, excluded=f"not in the inter-node {what}: its "
                                                      "device count is unknown (no health "
                                                      "facts)")
    members = [n for n in run.nodes if n.name not in result]
    if len(members) < 2:
        for n in members:
            result[n.name] = exclude(n.name, excluded="fewer than two nodes passed the "
                                                      f"single-node checks: no inter-node {what}")
        return members, None, result
    # Every member's device count is known (those unknown are excluded above).
    facts = Facts({n.name: d for n in members if (d := run.devices(n)) is not None},
                  {n.name: run.gpus(n) for n in members})
    return members, facts, result


def run_group(run: GroupRun, nodes: list[Node], settings: dict, facts: Facts,
              timeouts: dict[str, float] | None = None,
              probe: Check = INTRA) -> dict[str, ProbeOutcome]:
    """One group over `nodes` (the all-reduce's, or `probe`'s: the train job's), all
    started at once: each with the group's `settings`, under its own timeout (default:
    the settings' timeout_s). Where the nodes' transport launches many tasks as one
    (srun), the all-reduce runs as one task per rank, another probe as one per node."""
    port = random.randrange(30000, 60000)
    world, offsets = layout(nodes, facts)
    out: dict[str, ProbeOutcome] = {}

    # Only the rendezvous master (the first node) waits for the others by name: the
    # member list goes to it alone, so that a group of n nodes costs O(n), not O(n^2).
    names = [n.name for n in nodes]
    master = rendezvous_address(nodes[0])

    def payload(node: Node) -> dict:
        group = {"world": world, "rank_offset": offsets[node.name],
                 "ranks_here": facts.ranks[node.name],
                 "master_addr": master, "master_port": port}
        if node is nodes[0]:
            group["nodes"] = names
        mine = {**settings, "timeout_s": timeout(node)}
        return {**run.payload(node, facts.gpus[node.name], mine), "group": group}

    def timeout(node: Node) -> float:
        return float((timeouts or {}).get(node.name, settings["timeout_s"]))

    launcher = run.launcher(nodes[0])
    if launcher is not None and all(run.launcher(n) is launcher for n in nodes):
        payloads, limits = {n.name: payload(n) for n in nodes}, {n.name: timeout(n) for n in nodes}
        if probe is INTRA:
            return _as_ranks(run, launcher, nodes, payloads, limits, facts.ranks)
        # Another probe starts its node's ranks itself: one launch, one task per node.
        return {name: outs[0] for name, outs in run.probe_tasks(
            launcher, nodes, probe, payloads, limits).items()}

    def one(node: Node) -> None:
        out[node.name] = run.probe(node, probe, payload(node), timeout(node))

    run.at_once(nodes, one)
    return out


def _as_ranks(run: GroupRun, launcher: Launcher, nodes: list[Node], payloads: dict[str, dict],
              timeouts: dict[str, float], ranks: dict[str, int]) -> dict[str, ProbeOutcome]:
    """The group as one launch with one task per rank (Slurm: one step, one task per GPU);
    each task is its node's next rank (probes/allreduce.py: per_task)."""
    for p in payloads.values():
        p["group"]["per_task"] = True
    payloads[nodes[0].name]["group"]["ranks"] = [ranks[n.name] for n in nodes]  # the master's
    per_task = run.probe_tasks(launcher, nodes, INTRA, payloads, timeouts,
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


def form(run: GroupRun, members: list[Node], settings: dict, facts: Facts,
         timeouts: dict[str, float] | None = None, probe: Check = INTRA,
         figures_of: GroupFigures = group_figures, what: str = "an all-reduce") -> Formed:
    """Run the group over `members` until it completes: a member the controller saw fail
    (observed), or else one that cannot complete a group with a partner that can
    (localise, complete=True), is taken out and the rest run again."""
    group, outcomes, pairs, culprits = None, {}, [], {}
    while len(members) >= 2:
        outcomes = run_group(run, members, settings, facts, timeouts, probe)
        group = figures_of(outcomes, members, facts)
        if group is not None:
            break
        found = observed(outcomes)
        if not found:  # nobody failed where the controller could see it: try pairs
            tried, found = localise(run, members, settings, None, facts, complete=True,
                                    measure=measurer(run, settings, facts, timeouts, probe,
                                                     figures_of), what=what)
            pairs += tried
        if not found:
            break
        culprits.update(found)
        members = [n for n in members if n.name not in found]
    return Formed(members, outcomes, group, pairs, culprits)


def measurer(run: GroupRun, settings: dict, facts: Facts,
             timeouts: dict[str, float] | None = None, probe: Check = INTRA,
             figures_of: GroupFigures = group_figures) -> GroupMeasure:
    """A group of the given nodes run with `probe` and read by `figures_of` (default:
    the all-reduce's busbw)."""
    def measure(nodes: list[Node]) -> dict | None:
        return figures_of(run_group(run, nodes, settings, facts, timeouts, probe), nodes,
                          facts)
    return measure


def localise(run: GroupRun, members: list[Node], settings: dict, floor: float | None,
             facts: Facts, complete: bool = False, timeouts: dict[str, float] | None = None,
             measure: GroupMeasure | None = None, what: str = "an all-reduce"):
    """(every pair's figure, {node: why it is named}). With `complete`, a pair is good
    when it completes at all (a group that did not form); else when its busbw reaches the
    floor, or with no floor pair_fraction of a high quantile (QUANTILE) of the pairs.
    `measure` runs and reads each pair (default: the all-reduce's); `what` names the group
    in the words."""
    group = measure or measurer(run, settings, facts, timeouts)

    def measure_pairs(pairs: list[tuple[Node, Node]]) -> list[dict]:
        def one(pair: tuple[Node, Node]) -> dict:
            a, b = pair
            g = group([a, b])
            return {"nodes": [a.name, b.name], "busbw_gbps": g["busbw_gbps"] if g else 0.0,
                    "completed": g is not None}
        return run.at_once(pairs, one)

    n = len(members)
    rounds = [[(members[i], members[i + 1]) for i in range(0, n - 1, 2)],
              [(members[i], members[(i + 1) % n]) for i in range(1, n, 2)]]
    if n % 2:  # the odd one out meets the first node in the first round
        rounds[0].append((members[-1], members[0]))
    figures = [f for r in rounds for f in measure_pairs([p for p in r if p[0] != p[1]])]
    if complete:
        def good_pair(f):
            return f["completed"]
    else:
        # A high quantile of the pairs, not their median: once a quarter of the nodes are
        # slow, most pairs are, and a median would be a slow pair.
        threshold = floor if floor is not None else settings.get("pair_fraction", 0.5) * \
            quantile([f["busbw_gbps"] for f in figures if f["completed"]] or [0.0],
                      QUANTILE)

        def good_pair(f):
            return f["completed"] and f["busbw_gbps"] >= threshold
    good = {x for f in figures if good_pair(f) for x in f["nodes"]}
    suspects = [m for m in members if m.name not in good]
    named = {}
    partners = [m for m in members if m.name in good]
    if partners:
        retest = [(s, partners[i % len(partners)]) for i, s in enumerate(suspects)]
        for i in range(0, len(retest), max(1, len(partners))):  # a partner in one pair at once
            for f in measure_pairs(retest[i:i + len(partners)]):
                f["retest"] = True
                figures.append(f)
                if good_pair(f):
                    continue
                partner = f["nodes"][1]
                named[f["nodes"][0]] = (
                    f"could not complete {what} with known-good {partner}"
                    if not f["completed"] else
                    f"{f['busbw_gbps']:.3f} GB/s paired with known-good {partner}, below "
                    f"{threshold:.3f} GB/s")
    return figures, named


def search_slow(run: GroupRun, members: list[Node], settings: dict, floor: float | None,
                facts: Facts, timeouts: dict[str, float] | None = None,
                measure: GroupMeasure | None = None, what: str = "an all-reduce"):
    """(every group's figure, {node: why it is named}, the Search): adaptive group
    testing over the members' topology (burnin/engine/group_search.py), each round's
    groups run at once on real probes (`measure`: default the all-reduce's)."""
    group = measure or measurer(run, settings, facts, timeouts)
    by_name = {m.name: m for m in members}
    label = topology_label({m.name: m.labels for m in members})
    where = {m.name: m.labels.get(label, "") if label else "" for m in members}

    def measure_groups(groups: list[list[str]]) -> list[tuple[bool, float]]:
        def one(names: list[str]) -> tuple[bool, float]:
            g = group([by_name[x] for x in names])
            return (g is not None, g["busbw_gbps"] if g else 0.0)
        return run.at_once(groups, one)

    found = find_slow([m.name for m in members], where, measure_groups, floor,
                      settings.get("pair_fraction", 0.5), label, what)
    return found.tests, found.named, found


# What GroupRun.groups holds (burnin/engine/run.py: Run.group_run).
GROUPS = Groups(members=group_members, run_group=run_group, form=form, measurer=measurer,
                localise=localise, search_slow=search_slow)
