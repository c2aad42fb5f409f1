"""What a group check (allreduce_internode, collectives_internode) writes for its members
itself, from what the group showed: a member's outcome, why it took no part, its own
failures before its group's, and the outcomes of a group that lost members or never
formed (burnin/checks/groups.py: form)."""

from __future__ import annotations

from collections.abc import Callable

from burnin.checks.groups import Formed
from burnin.probe.protocol import ProbeOutcome


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
