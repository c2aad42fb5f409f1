"""The wave planner of `burnin run --rolling` (burnin/cli/rolling.py runs the waves): which
nodes are due, and which of them may go out of service together, under the inventory's
`rolling:` budget. Plain functions of the fleet's state, no Slurm and no clock of their
own, so that a plan is tested in milliseconds and a fleet of 10,000 nodes is planned in
one pass."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from burnin.model.nodes import Node
from burnin.model.rolling import RollingSettings, amount


def groups_of(node: Node, group_by: Iterable[str]) -> tuple[str, ...]:
    """The capacity groups a node counts in: `partition=<srun partition>` (a node with none
    is in Slurm's default partition, named `partition=`) and `<label>=<value>` for each
    grouping label it has."""
    out = []
    for key in group_by:
        if key == "partition":
            srun = node.transport_settings.get("srun")
            out.append(f"partition={getattr(srun, 'partition', None) or ''}")
        elif key in node.labels:
            out.append(f"{key}={node.labels[key]}")
    return tuple(out)


def due(names: Iterable[str], validated: Mapping[str, float], now: float,
        every: float) -> list[str]:
    """The nodes not validated within `every` seconds before `now`: never-validated first,
    then the longest ago, in the given order among equals."""
    order = {n: i for i, n in enumerate(names)}
    late = [n for n in order if now - validated.get(n, float("-inf")) >= every]
    return sorted(late, key=lambda n: (validated.get(n, float("-inf")), order[n]))


@dataclass(frozen=True)
class Wave:
    nodes: tuple[str, ...]
    waiting: tuple[str, ...]   # due, but the budget has no room for them in this wave


def plan_wave(candidates: list[str], out: Iterable[str], unavailable: Iterable[str],
              nodes: Mapping[str, Node], selected: int, settings: RollingSettings) -> Wave:
    """The next wave from `candidates` (in order of preference): at most `max_out` nodes
    out of service at once, counting `out` (this loop's nodes already out), and no group
    of `group_by` left with fewer than `min_available` nodes in service, counting
    `unavailable` (nodes Slurm gives no job now: drained, down, anyone's) and `out`.
    `nodes` holds every node of the inventory (a group's size counts all of them);
    `selected` is how many the rolling run covers (`max_out` as a fraction is of them)."""
    # Each node's groups once, each group's floor once, and no look at a candidate once
    # the wave is full: a wave of 10,000 nodes costs O(nodes), as its docstring says.
    of = {name: groups_of(node, settings.group_by) for name, node in nodes.items()}
    size = Counter(g for groups in of.values() for g in set(groups))
    floor = {g: amount(settings.min_available, n) for g, n in size.items()}
    gone = set(out) | set(unavailable)
    missing = Counter(g for name in gone if name in of for g in of[name])
    room = max(amount(settings.max_out, selected), 1) - len(set(out))
    taken: list[str] = []
    waiting: list[str] = []
    for i, name in enumerate(candidates):
        if room <= 0:
            waiting += candidates[i:]
            break
        groups = of[name]
        if name in gone or any(size[g] - missing[g] - 1 < floor[g] for g in groups):
            waiting.append(name)
            continue
        taken.append(name)
        room -= 1
        missing.update(groups)
    return Wave(tuple(taken), tuple(waiting))
