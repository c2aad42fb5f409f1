"""What a group check (allreduce_internode, collectives_internode, train_internode)
reads of its members' outcomes and writes for them itself, from what the group showed:
pure functions of the documents, which the engine's group machinery (burnin/engine/
groups.py) calls too. Reading: the layout each member was given and whether it reported
it, a group's all-reduce figure, the members the controller itself saw fail. Writing: a
member's outcome, why it took no part, its own failures before its group's, and the
outcomes of a group that lost members or never formed (Formed)."""

from __future__ import annotations

from collections.abc import Callable

from burnin.checks.allreduce import judged
from burnin.checks.group_run import Facts, Formed
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome


def layout(nodes: list[Node], facts: Facts) -> tuple[int, dict[str, int]]:
    """(world size, each node's first rank)."""
    offsets, first = {}, 0
    for n in nodes:
        offsets[n.name] = first
        first += facts.ranks[n.name]
    return first, offsets


def laid_out(outcomes: dict[str, ProbeOutcome], nodes: list[Node], facts: Facts,
             first_rank: int | None = None,
             also: Callable[[ProbeOutcome, int], bool] | None = None) -> bool:
    """Every member ran, said no error and reported the layout the controller gave it
    (`first_rank`: what a document that leaves it out is taken to say); with `also`, each
    member's document also shows what `also(outcome, its ranks)` asks (the train job's:
    that it trained)."""
    world, offsets = layout(nodes, facts)
    for n in nodes:
        o = outcomes.get(n.name)
        if o is None or not o.ok or o.data["errors"]:
            return False
        fig = o.data["figures"]
        if (fig.get("world"), fig.get("first_rank", first_rank), fig.get("ranks_here")) != (
                world, offsets[n.name], facts.ranks[n.name]):
            return False
        if also is not None and not also(o, facts.ranks[n.name]):
            return False
    return True


def group_figures(outcomes: dict[str, ProbeOutcome], nodes: list[Node],
                  facts: Facts) -> dict | None:
    """The group's busbw, when the whole group completed as laid out: the lowest of its
    members' own sweeps at their judged sizes (every rank measures the group's times),
    so that no one member's document, rank 0's included, reports its group fast; a
    member that reports no sweep leaves the group incomplete."""
    if not laid_out(outcomes, nodes, facts):
        return None
    tops = []
    for n in nodes:
        sweep = outcomes[n.name].data["figures"].get("sweep")
        top = judged(sweep) if sweep else None
        if top is None:
            return None
        tops.append((top["busbw_gbps"], top, sweep))
    busbw, top, sweep = min(tops, key=lambda t: t[0])
    # How many members, not their names: every member's record carries this, and a list
    # of n names in each of n records is O(n^2) in results.jsonl (1 GB at 10,000 nodes).
    return {"members": len(nodes), "rank0": nodes[0].name, "sweep": sweep,
            "bytes": top["bytes"], "busbw_gbps": busbw}


def observed(outcomes: dict[str, ProbeOutcome]) -> dict[str, str]:
    """The members the controller itself saw fail: a probe that did not run, did not
    finish or printed no valid document, and a node that said it could not take part
    (its own words about itself can only hurt itself). Never what a node says of another."""
    out = {n: o.reason for n, o in outcomes.items() if not o.ok}
    for n, o in outcomes.items():
        if o.ok and o.data["figures"].get("unable"):
            out.setdefault(n, "; ".join(o.data["errors"]) or "it could not take part")
    return out


def member_outcome(check: str, probe: str) -> Callable[..., ProbeOutcome]:
    """A group check's outcome for one member, which the controller writes itself from
    what the group showed: `outcome(name, **figures)`."""
    def outcome(name: str, **figures) -> ProbeOutcome:
        return ProbeOutcome(name, check, True, data={"probe": probe, "schema": 1, "node": {},
                                                     "devices": [], "errors": [],
                                                     "figures": figures})
    return outcome


def excluded(outcome: ProbeOutcome) -> str:
    """Why a node took no part in a group check ('' when it did)."""
    return outcome.data.get("figures", {}).get("excluded", "") if outcome.ok else ""


def own_failures(outcome: ProbeOutcome, what: str, exact: str) -> list[str]:
    """What a member's own document says against it, before its group's verdict: the
    errors it reported and the wrong elements in its results (`what`: "all-reduce";
    `exact`: what each element should have been, "sums")."""
    failures = list(outcome.data["errors"])
    wrong = outcome.data["figures"].get("wrong_elements")
    if wrong:
        failures.append(f"{wrong} wrong elements in this node's {what} results, expected "
                        f"exact {exact}")
    return failures


def unformed(formed: Formed, result: dict[str, ProbeOutcome],
             outcome: Callable[..., ProbeOutcome], what: str) -> bool:
    """Write into `result` the outcome of each member taken out of the group (with why),
    and, where the group never completed, of every member left (fail closed, with what
    the members said); True when the group never completed. `what`: the group's words
    ("all-reduce")."""
    for name, why in formed.culprits.items():
        result[name] = outcome(name, pairs=[p for p in formed.pairs if name in p["nodes"]],
                               group_failure=f"did not take part in the inter-node {what}: "
                                             f"{why}")
    if formed.group is not None:
        return False
    of = by_node(formed.pairs)
    for n in formed.members:
        result.setdefault(n.name, outcome(
            n.name, pairs=of.get(n.name, []),
            group_failure=f"the inter-node {what} did not complete, and no node could be "
                          "singled out with a known-good partner "
                          f"({formed.said() or 'no error'})"))
    return True


def by_node(pairs: list[dict]) -> dict[str, list[dict]]:
    """{node: the pairs it was measured in, in order}: one pass, where asking each member
    for its pairs would cost members x pairs (18 s of CPU at 10,000 nodes)."""
    out: dict[str, list[dict]] = {}
    for p in pairs:
        for name in dict.fromkeys(p["nodes"]):
            out.setdefault(name, []).append(p)
    return out
