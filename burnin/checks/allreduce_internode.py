"""The inter-node all-reduce, a group check the controller executes: one group over the
nodes that passed the single-node checks, then, when the group is slow or does not
complete, localisation: by adaptive group testing, or by pairs. The check decides when to
localise and judges what comes back; the engine forms, runs and searches the groups
(GroupRun.groups: burnin/engine/groups.py).

A node is blamed only on what the controller itself observes: its probe did not run or
finish, it said it could not take part itself, or it fails with a partner the controller
saw complete a pair. What one node says about another (the rendezvous master's "did not
join: n3") is never evidence: in a two-node group either side could blame the other.
"""

from __future__ import annotations

from burnin.checks.allreduce import BUSBW, SIZE
from burnin.checks.allreduce import CHECK as INTRA
from burnin.checks.base import Check, Figure, Judging, Setting, timeout
from burnin.checks.group_outcomes import by_node, member_outcome, own_failures, unformed
from burnin.checks.group_outcomes import excluded as excluded  # the suite's skip reason
from burnin.checks.group_run import MAX_GROUP, GroupRun
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import COUNT, Bool, List, Num, Obj, Str, document

NAME = "allreduce_internode"
GPU_MAX_BYTES = 8 << 30  # the inter-node sweep's top on GPUs, unless the inventory says
# With no floor in the inventory, a group below this share of its nodes' line rate is
# slow. A ring all-reduce's busbw between nodes is bounded by each node's NICs together
# (nccl-tests' busbw is defined to compare with the hardware's peak: its PERFORMANCE.md);
# half of it is a margin, not a published figure: a fabric below it is broken, not tuned.
LINE_FRACTION = 0.5
_outcome = member_outcome(NAME, "allreduce")
# From this many members, a slow group's nodes are found by adaptive group testing
# (burnin/engine/group_search.py); fewer have too few groups to compare: pairs.
SEARCH_FROM = 4


def internode(run: GroupRun) -> dict[str, ProbeOutcome]:
    """The allreduce_internode outcome of every selected node."""
    groups = run.groups  # the engine's (burnin/engine/groups.py)
    members, facts, result = groups.members(run, _outcome, "run")
    if facts is None:
        return result
    # Each member's settings are its node group's: the allreduce check's sizes, floors
    # and fractions, under this check's own (timeout_s). A group's members must agree on
    # what they measure: the group runs and is judged with its first member's (the
    # rendezvous master's), each member's probe under its own timeout_s.
    own = {n.name: {**run.settings(INTRA.name, n),
                    **{k: v for k, v in run.settings(NAME, n).items() if v is not None}}
           for n in members}
    settings = own[members[0].name]
    if run.settings(NAME, members[0]).get("max_bytes") is None and \
            any(facts.gpus[m.name] for m in members):
        # Inter-node figures are published at the 8-16 GiB plateau (nccl-tests): judged
        # at the intra-node check's 1 GiB, a fabric reads below what it does.
        settings = {**settings, "max_bytes": GPU_MAX_BYTES}
    timeouts = {name: float(s["timeout_s"]) for name, s in own.items()}
    formed = groups.form(run, members, settings, facts, timeouts)
    group = formed.group
    if unformed(formed, result, _outcome, "all-reduce") or group is None:
        return result
    members, outcomes, pairs = formed.members, formed.outcomes, formed.pairs
    floor, floor_source = settings.get("min_internode_busbw_gbps"), "set in the inventory"
    if floor is None:
        floor, floor_source = line_floor(run.fleet_of("fabric"))
    fraction = settings.get("pair_fraction", 0.5)
    named: dict[str, str] = {}
    # With a floor, localise when the group is below it; with none (CPU fleets), the
    # pairs are the only yardstick: compare them whenever there are peers to compare.
    if (floor is not None and group["busbw_gbps"] < floor) or (
            floor is None and fraction > 0 and len(members) >= 3):
        if len(members) >= SEARCH_FROM:
            tried, named, _ = groups.search_slow(run, members, settings, floor, facts,
                                                 timeouts)
        else:  # too few for groups to compare: each node paired with the others
            tried, named = groups.localise(run, members, settings, floor, facts,
                                           timeouts=timeouts)
        pairs += tried
    of = by_node(pairs)
    for n in members:
        devices = outcomes[n.name].data["devices"]
        fig = {"group": group, "pairs": of.get(n.name, []),
               "wrong_elements": sum(d.get("wrong_elements", 0) for d in devices),
               "ranks": sorted(d["rank"] for d in devices)}
        if n.name in named:
            fig.update(slow_with_good_partner=True, verdict=named[n.name])
        elif floor is not None and group["busbw_gbps"] < floor and not named:
            fig["group_failure"] = (f"inter-node busbw {group['busbw_gbps']:.3f} GB/s below the "
                                    f"floor of {floor:g} GB/s, and no single node was localised")
        if floor is not None:
            fig["floor_gbps"], fig["floor_source"] = floor, floor_source
        result[n.name] = _outcome(n.name, **fig)
    return result


def line_floor(fabric) -> tuple[float | None, str]:
    """The default inter-node floor from the nodes' own links: LINE_FRACTION of the fleet's
    line rate per node (the majority HCA count x their majority port rate, as the fabric
    check found them in this run, each node one vote, so a node cannot lower it), in
    GB/s; (None, '') when the fabric check did not run or found no HCA."""
    if not isinstance(fabric, dict):
        return None, ""
    hcas, _, voters = fabric.get("hcas", (None, "", 0))
    rates = [r for r, _, n in (fabric.get("rate") or {}).values() if r and n >= 2]
    if not hcas or not rates or voters < 2:
        return None, ""
    line = hcas * max(rates) / 8
    return LINE_FRACTION * line, (f"{LINE_FRACTION:g} of the nodes' line rate, {hcas} HCAs x "
                                  f"{max(rates):g} Gb/s = {line:g} GB/s (fabric check)")


def _size(n: int) -> str:
    return f"{n / (1 << 30):g} GiB" if n >= 1 << 30 else f"{n / (1 << 20):g} MiB"


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, NAME, (outcome.reason,))
    fig = outcome.data["figures"]
    failures = own_failures(outcome, "all-reduce", "sums")
    group = fig.get("group", {})
    pairs = ", ".join(f"{'+'.join(p['nodes'])} {p['busbw_gbps']:.3f}" for p in fig.get("pairs", []))
    mib = f"{group.get('bytes', 0) / (1 << 20):g} MiB"
    if fig.get("slow_with_good_partner"):
        failures.append(f"localised as the slow node: {fig['verdict']}; its pairs (GB/s): "
                        f"{pairs}; group busbw {group.get('busbw_gbps', 0):.3f} GB/s at "
                        f"{mib} over {group.get('members', 0)} nodes")
    elif fig.get("group_failure"):
        failures.append(fig["group_failure"])
    floor = fig.get("floor_gbps")
    if (fig.get("slow_with_good_partner") or fig.get("group_failure")) and group.get("bytes"):
        failures[-1] += (f" (judged at {_size(group['bytes'])}, the sweep's best; floor "
                         + (f"{floor:g} GB/s, {fig.get('floor_source', '')})"
                            if floor is not None else
                            "none: the fleet's fast groups are the yardstick)"))
    return Verdict(node.name, NAME, tuple(failures),
                   floors={"busbw inter": floor} if floor is not None else {})


def figures(record: dict) -> list[Figure]:
    g = record["data"]["figures"].get("group")
    if not g:
        return []
    return [Figure("allreduce_busbw_gbps", (("scope", "inter"), ("bytes", str(g["bytes"]))),
                   g["busbw_gbps"], "All-reduce bus bandwidth at the judged size")]


PAIR = Obj(nodes=List(Str(256), max=4 * MAX_GROUP), busbw_gbps=Num(0, 1e5), retest=Bool(),
           completed=Bool(), round=COUNT, kind=Str(16))
# The controller writes these records itself, from the members' validated documents.
SCHEMA = document(Obj(), Obj(group=Obj(members=COUNT, rank0=Str(256), busbw_gbps=Num(0),
                                       bytes=COUNT, sweep=List(SIZE, max=64)),
                             pairs=List(PAIR, max=1 << 20), wrong_elements=COUNT,
                             floor_gbps=Num(0), floor_source=Str(512),
                             ranks=List(COUNT, max=1024)))

CHECK = Check(page="burnin.report.summary.checks:internode", page_order=70, measures=(BUSBW,),
              name=NAME, doc="nodes talk to each other at full speed; the slow one is named",
              judge=judge, schema=SCHEMA, figures=figures, execute=internode, probe="allreduce",
              settings={"timeout_s": timeout(300, 600, 1200),
                        "max_bytes": Setting("int", None, "default 8 GiB on GPUs, the "
                                             "allreduce check's (16 MiB) on CPUs"),
                        "min_bytes": Setting("int", None, "default the allreduce check's")})
