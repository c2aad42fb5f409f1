"""The collectives across nodes, a group check the controller executes: all-gather,
reduce-scatter, all-to-all and send/recv (probes/collectives.py in a group: one rank per
device of every node that passed the single-node checks, gloo on CPU nodes, NCCL on GPUs),
formed and searched as the inter-node all-reduce is (by the engine, through
GroupRun.groups: burnin/engine/groups.py), with nccl-tests' bus-bandwidth factor per
operation.

A group's figure per operation is the lowest its members' own sweeps report at their
judged sizes. Localisation looks, one operation at a time, at those below their floor
(the inventory's `min_<op>_gbps`, else for all-gather and reduce-scatter, ring
collectives bounded by each node's NICs together as all-reduce is, half the nodes' line
rate the fabric check found: burnin/checks/allreduce_internode.py line_floor), and at
those without a floor, judged by the fleet's own fast groups (pair_fraction), where there
are peers. Each group launch measures every operation, and the searches share them
(Shared): a node slow in one operation costs about one search, not four. A node is named
only when it is slow with a known-good partner, and its verdict says in which operation.
All-to-all and send/recv have no line floor: NCCL's all-to-all across nodes is bounded by
the fabric's bisection rather than a node's NICs, and a ring of sends crosses each node
boundary on one rank's link, not the node's.

A node is blamed only on what the controller itself observes, as for all-reduce: its
probe did not run or finish, it said it could not take part, its own results were wrong,
or it was slow with a known-good partner.
"""

from __future__ import annotations

import threading

from burnin.checks.allreduce import judged
from burnin.checks.allreduce_internode import SEARCH_FROM, line_floor
from burnin.checks.base import Check, Figure, Judging, Measure, Setting, timeout
from burnin.checks.collectives import CHECK as INTRA
from burnin.checks.collectives import OPS, WORDS
from burnin.checks.group_outcomes import by_node, laid_out, member_outcome, own_failures, unformed
from burnin.checks.group_outcomes import excluded as excluded  # the suite's skip reason
from burnin.checks.group_run import MAX_GROUP, Facts, GroupMeasure, GroupRun
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import COUNT, Bool, List, Num, Obj, Str, document

NAME = "collectives_internode"
# Ring collectives whose busbw is bounded by each node's NICs together (nccl-tests'
# doc/PERFORMANCE.md: the same bus bandwidth as all-reduce's): the line-rate floor applies.
LINE_BOUND = ("all_gather", "reduce_scatter")
WHAT = "the collectives"  # the group, in the words of a verdict
_outcome = member_outcome(NAME, "collectives")
# What the collectives check's settings give the group (its floors are inside a node's).
SHARED = ("min_bytes", "max_bytes", "warmup", "seconds_per_size", "ranks",
          "rendezvous_timeout_s")


def group_ops(outcomes: dict[str, ProbeOutcome], nodes: list[Node], facts: Facts
              ) -> dict | None:
    """{op: the lowest of the members' judged figures}, when the group completed as laid
    out and every member reported every operation; else None. Its `busbw_gbps`, what a
    pair that only had to complete shows, is its lowest operation's."""
    if not laid_out(outcomes, nodes, facts):
        return None
    ops = {}
    for op in OPS:
        tops = [t for n in nodes
                if (t := judged((outcomes[n.name].data["figures"].get("ops") or {}).get(op)
                                or [])) is not None]
        if len(tops) < len(nodes):
            return None
        low = min(tops, key=lambda t: t["busbw_gbps"])
        ops[op] = {"bytes": low["bytes"], "busbw_gbps": low["busbw_gbps"]}
    return {**ops, "busbw_gbps": min(f["busbw_gbps"] for f in ops.values())}


class Shared:
    """Every group launch of the search, kept: one launch measures every operation, so
    that the search for one operation reads what a launch of another's already measured
    (the first round's groups are the same for all), never a launch it made itself again
    (a confirmation is a new launch)."""

    def __init__(self, measure: GroupMeasure):
        self.measure = measure
        self.launches: dict[tuple[str, ...], list[dict | None]] = {}
        self.read: dict[tuple[str, tuple[str, ...]], int] = {}
        self.lock = threading.Lock()

    def of(self, op: str) -> GroupMeasure:
        """The search's measure for `op`: that operation's busbw of a group."""
        def measure(nodes: list[Node]) -> dict | None:
            key = tuple(n.name for n in nodes)
            with self.lock:
                at = self.read.get((op, key), 0)
                self.read[(op, key)] = at + 1
                kept = self.launches.get(key, [])
                ops = kept[at] if at < len(kept) else None
                fresh = at >= len(kept)
            if fresh:
                ops = self.measure(nodes)
                with self.lock:
                    self.launches.setdefault(key, []).append(ops)
            return {"busbw_gbps": ops[op]["busbw_gbps"]} if ops else None
        return measure


def internode(run: GroupRun) -> dict[str, ProbeOutcome]:
    """The collectives_internode outcome of every selected node."""
    groups = run.groups  # the engine's (burnin/engine/groups.py)
    members, facts, result = groups.members(run, _outcome, "run")
    if facts is None:
        return result
    # As allreduce_internode: each member's settings are its node group's; the group runs
    # with its first member's (the rendezvous master's), each probe under its own timeout.
    own = {n.name: {**{k: v for k, v in run.settings(INTRA.name, n).items() if k in SHARED},
                    **{k: v for k, v in run.settings(NAME, n).items() if v is not None}}
           for n in members}
    settings = own[members[0].name]
    timeouts = {name: float(s["timeout_s"]) for name, s in own.items()}
    formed = groups.form(run, members, settings, facts, timeouts, INTRA, group_ops, WHAT)
    if unformed(formed, result, _outcome, "collectives") or formed.group is None:
        return result
    members, pairs = formed.members, formed.pairs
    ops = {op: {k: formed.group[op][k] for k in ("bytes", "busbw_gbps")} for op in OPS}
    floors = _floors(settings, run.fleet_of("fabric"))
    # With a floor, an operation is sought when the group is below it; with none, the
    # fleet's fast groups are the only yardstick: sought whenever there are peers.
    targets: dict[str, float | None] = {op: f for op, (f, _) in floors.items()
                                        if ops[op]["busbw_gbps"] < f}
    if settings.get("pair_fraction", 0.5) > 0 and len(members) >= 3:
        targets.update({op: None for op in OPS if op not in floors})
    shared = Shared(groups.measurer(run, settings, facts, timeouts, INTRA, group_ops))
    named: dict[str, list[str]] = {}
    for op, floor in targets.items():
        if len(members) >= SEARCH_FROM:
            tried, found, _ = groups.search_slow(run, members, settings, floor, facts,
                                                 timeouts, shared.of(op), WHAT)
        else:  # too few for groups to compare: each node paired with the others
            tried, found = groups.localise(run, members, settings, floor, facts,
                                           timeouts=timeouts, measure=shared.of(op), what=WHAT)
        pairs += [{**t, "op": op} for t in tried]
        for name, why in found.items():
            named.setdefault(name, []).append(f"{WORDS[op]}: {why}")
    of = by_node(pairs)
    for n in members:
        fig: dict = {"group": {"members": len(members), "rank0": members[0].name, "ops": ops},
                     "pairs": of.get(n.name, []),
                     "wrong_elements": sum(d.get("wrong_elements", 0) for d in
                                           formed.outcomes[n.name].data["devices"]),
                     "floors": {op: f for op, (f, _) in floors.items()},
                     "floor_source": "; ".join(f"{WORDS[op]}: {s}"
                                               for op, (_, s) in floors.items())}
        if n.name in named:
            fig.update(slow_with_good_partner=True, verdict="; ".join(named[n.name]))
        elif not named and any(ops[op]["busbw_gbps"] < floors[op][0] for op in floors):
            fig["group_failure"] = "; ".join(
                f"inter-node {WORDS[op]} busbw {ops[op]['busbw_gbps']:.3f} GB/s below the "
                f"floor of {f:g} GB/s ({s})" for op, (f, s) in floors.items()
                if ops[op]["busbw_gbps"] < f) + ", and no single node was localised"
        result[n.name] = _outcome(n.name, **fig)
    return result


def _floors(settings: dict, fabric) -> dict[str, tuple[float, str]]:
    """{op: (floor GB/s, its source)}: the inventory's, else the line-rate one where it
    bounds the operation."""
    line, source = line_floor(fabric)
    out = {}
    for op in OPS:
        if settings.get(f"min_{op}_gbps") is not None:
            out[op] = (float(settings[f"min_{op}_gbps"]), "set in the inventory")
        elif line is not None and op in LINE_BOUND:
            out[op] = (line, source)
    return out


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, NAME, (outcome.reason,))
    fig = outcome.data["figures"]
    failures = own_failures(outcome, "collectives", "values")
    group = fig.get("group", {})
    if fig.get("slow_with_good_partner"):
        failures.append(f"localised as the slow node: {fig['verdict']}; the group of "
                        f"{group.get('members', 0)} nodes: " + ", ".join(
                            f"{WORDS[op]} {f['busbw_gbps']:.3f}"
                            for op, f in group.get("ops", {}).items()) + " GB/s")
    elif fig.get("group_failure"):
        failures.append(fig["group_failure"])
    return Verdict(node.name, NAME, tuple(failures),
                   floors={f"busbw {op} inter": f for op, f in fig.get("floors", {}).items()})


def figures(record: dict) -> list[Figure]:
    g = record["data"]["figures"].get("group")
    return [Figure(BUSBW.metric, (("op", op), ("bytes", str(f["bytes"]))), f["busbw_gbps"],
                   "Collective bus bandwidth across nodes (nccl-tests' formula) at the "
                   "judged size") for op, f in (g or {}).get("ops", {}).items() if op in OPS]


GROUP_OP = Obj(bytes=COUNT, busbw_gbps=Num(0, 1e5))
FLOOR = Num(0)
# allreduce_internode's pair record, with the operation the search sought.
TESTED = Obj(nodes=List(Str(256), max=4 * MAX_GROUP), busbw_gbps=Num(0, 1e5), retest=Bool(),
             completed=Bool(), round=COUNT, kind=Str(16), op=Str(32))
# The controller writes these records itself, from the members' validated documents.
SCHEMA = document(Obj(), Obj(group=Obj(members=COUNT, rank0=Str(256),
                                       ops=Obj(all_gather=GROUP_OP, reduce_scatter=GROUP_OP,
                                               all_to_all=GROUP_OP, send_recv=GROUP_OP)),
                             pairs=List(TESTED, max=1 << 20), wrong_elements=COUNT,
                             floors=Obj(all_gather=FLOOR, reduce_scatter=FLOOR,
                                        all_to_all=FLOOR, send_recv=FLOOR),
                             floor_source=Str(2048)))


def _floor(op: str) -> Setting:
    return Setting("positive", None, f"inter-node {WORDS[op]} busbw floor (GB/s); default "
                   + ("half the nodes' line rate (fabric check)" if op in LINE_BOUND else
                      "none: the fleet's fast groups judge"))


BUSBW = Measure("collectives_internode_busbw_gbps", "GB/s", "busbw {op} inter GB/s",
                "busbw {op} inter")
CHECK = Check(name=NAME, doc="the nodes' other collectives together at full speed; the "
              "slow node is named", judge=judge, schema=SCHEMA, figures=figures,
              execute=internode, probe="collectives", page_order=72, measures=(BUSBW,),
              page="burnin.report.summary.collectives_part:internode",
              settings={"timeout_s": timeout(300, 600, 1200),
                        **{f"min_{op}_gbps": _floor(op) for op in OPS},
                        "pair_fraction": Setting("fraction", 0.5, "a group below this share "
                                                 "of the fleet's fast groups is slow"),
                        "max_bytes": Setting("int", None, "default the collectives check's"),
                        "min_bytes": Setting("int", None, "default the collectives check's")})
