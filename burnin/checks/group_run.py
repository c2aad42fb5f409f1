"""What a group check (allreduce_internode, collectives_internode, train_internode)
receives from the engine, and the records it gets back: the check decides what its group
is and how its figures are read and judged; the engine (burnin/engine/groups.py) forms
the group, launches it and searches it for the node that spoils it.

Nothing here runs a probe. A group check reaches the engine's group machinery only
through GroupRun.groups, which the engine fills in, so that the checks layer never
imports the engine above it (tests/test_architecture.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome
from burnin.transports import Launcher

# The most nodes in one group of the search's first round (burnin/engine/group_search.py):
# the records of the groups a node was tested in are bounded by it.
MAX_GROUP = 64


@dataclass(frozen=True)
class Facts:
    """Each member's ranks (one per device) and GPUs, learned once, before any thread."""

    ranks: dict[str, int]
    gpus: dict[str, int | None]


@dataclass(frozen=True)
class Formed:
    """What forming a group left: the members still in it, their last outcomes, its
    figures (None: it never completed), the pairs tried to find who spoilt it, and the
    nodes taken out on the way with why (the controller's own evidence)."""

    members: list[Node]
    outcomes: dict[str, ProbeOutcome]
    group: dict | None
    pairs: list[dict]
    culprits: dict[str, str]

    def said(self) -> str:
        """What the members of a group that did not complete said, or why they failed."""
        return "; ".join(f"{n} said: {'; '.join(o.data['errors'])}" if o.ok else
                         f"{n}: {o.reason}" for n, o in self.outcomes.items()
                         if not o.ok or o.data["errors"])


# A group's figures from its members' outcomes, None where it did not complete as laid
# out; `busbw_gbps` is what localisation compares (group_figures: the all-reduce's).
GroupFigures = Callable[[dict[str, ProbeOutcome], list[Node], Facts], dict | None]
# One group run over these nodes and read: its figures, or None (measurer).
GroupMeasure = Callable[[list[Node]], dict | None]


@dataclass(frozen=True)
class Groups:
    """The engine's group machinery as a group check calls it (burnin/engine/groups.py
    says what each does). Each takes the GroupRun first, so that a group runs through
    whatever that GroupRun holds (a test's own probe included)."""

    # (members, their Facts or None when fewer than two, the others' outcomes)
    members: Callable[..., tuple[list[Node], Facts | None, dict[str, ProbeOutcome]]]
    run_group: Callable[..., dict[str, ProbeOutcome]]    # one launch: each member's outcome
    form: Callable[..., Formed]                           # run until it completes
    measurer: Callable[..., GroupMeasure]                 # a group run and read
    localise: Callable[..., tuple[list[dict], dict[str, str]]]        # by pairs
    search_slow: Callable[..., tuple[list[dict], dict[str, str], object]]  # group testing


@dataclass(frozen=True, slots=True)
class GroupRun:
    """All a group check can reach of its run (burnin/engine/run.py makes one per group check):
    the run's nodes, what the single-node checks left known of each, its own settings,
    the one payload builder, the launch layer's means to start a group, and the engine's
    group machinery over them. Nothing else of the run: the outcome store, judging and
    reports stay out of its reach."""

    nodes: tuple[Node, ...]
    settings: Callable[[str, Node], dict]           # a check's, for a node (its group's)
    failed: Callable[[], dict[str, list[str]]]      # {node: single-node checks it failed}
    devices: Callable[[Node], int | None]           # devices it must report; None: unknown
    gpus: Callable[[Node], int | None]              # of which GPUs (0: a CPU-only node)
    # The probe's payload for a node with these GPUs and settings (burnin/probe/protocol.py).
    payload: Callable[[Node, int | None, dict], dict]
    probe: Callable[..., ProbeOutcome]              # burnin/engine/launch.py: Launch.probe
    launcher: Callable[[Node], Launcher | None]     # Launch.launcher
    probe_tasks: Callable[..., dict[str, list[ProbeOutcome]]]  # Launch.probe_tasks
    at_once: Callable[[list, Callable], list]       # Launch.at_once
    groups: Groups                                  # burnin/engine/groups.py: GROUPS
    # Another check's fleet summary when it ran in this run, else None (never runs it):
    # the fabric check's majority HCA count and port rate set a default inter-node floor.
    fleet_of: Callable[[str], object] = lambda check: None
