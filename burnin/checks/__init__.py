"""The checks burnin knows: one table, the one place a check is declared.

Each row is a Check (burnin/checks/base.py) from its own module: probe, settings and
their profile defaults, the probe document's shape, fleet summary, judge, report figures,
to which nodes it applies, and for a group check how it executes. Settings here are what
`checks.<name>` in an inventory may set; anything else there is a typo and stops the run.

Layer 5: may import every layer below it: core, model, transports, ledger, probe. A
check's page part is named by a string (Check.page), never imported from here. Nor does a
check launch a probe: a group check reaches the engine's group machinery through the
GroupRun it is given (group_run.py; burnin/engine/groups.py runs the groups).
"""

from __future__ import annotations

from burnin.checks import (
    allreduce,
    allreduce_internode,
    burn,
    collectives,
    collectives_internode,
    dcgm,
    fabric,
    gpupairs,
    hca,
    health,
    memory,
    pcie,
    sdc,
    storage,
    train,
    train_internode,
)
from burnin.checks.base import (
    DEFAULT_PROFILE,
    PROFILES,
    Check,
    Figure,
    Fleet,
    Judging,
    Kind,
    Measure,
    Setting,
)

# Table order is run order: single-node checks first; group checks take only nodes that
# passed them. After health, the short hardware checks (as DCGM's diagnostic orders them:
# PCIe, the copies between GPU pairs, then memory) and DCGM's own diagnostic where it is
# installed, before the long burn; the collectives beside all-reduce after it; train, a
# real job over the parts the checks before it measured one by one; fabric after the
# load, judging its counters' growth since health read them; each HCA port alone after
# that window, where perftest is installed; the collectives across nodes after the
# inter-node all-reduce, whose fabric they cross the same way; the train job across nodes
# last, as one over that fabric.
CHECKS: dict[str, Check] = {c.name: c for c in (
    health.CHECK, pcie.CHECK, gpupairs.CHECK, memory.CHECK, dcgm.CHECK, sdc.CHECK,
    burn.CHECK, storage.CHECK, allreduce.CHECK, collectives.CHECK, train.CHECK, fabric.CHECK,
    hca.CHECK, allreduce_internode.CHECK, collectives_internode.CHECK,
    train_internode.CHECK,
)}
CHECK_ORDER = tuple(CHECKS)
SINGLE_NODE = tuple(c.name for c in CHECKS.values() if not c.group)
FACTS = next(c.name for c in CHECKS.values() if c.facts)


def add(check: Check) -> None:
    """Put `check` (one an installed distribution brings: burnin/extensions.py) in the
    table, in run order: after every single-node check if it is one, else after every
    check. The table is changed in place, since its readers hold it by reference. A name
    already in the table is the caller's to refuse."""
    rows = list(CHECKS.values())
    at = len(rows) if check.group else next(
        (i for i, c in enumerate(rows) if c.group), len(rows))
    rows.insert(at, check)
    CHECKS.clear()
    CHECKS.update((c.name, c) for c in rows)


def single_node() -> list[str]:
    """The single-node checks of the table as it is now (an installed one included)."""
    return [c.name for c in CHECKS.values() if not c.group]


def applicable(gpus: int | None, nodes: int, equipped: frozenset[str] | None = None
               ) -> list[str]:
    """The checks of the suite that apply to a node with `gpus` GPUs (None: unknown) in a
    run of `nodes` nodes, where the tools of the checks in `equipped` were found (None:
    unknown): what admission requires of it by default."""
    return [c.name for c in CHECKS.values() if c.applies(gpus, nodes, equipped)]


def resolve_settings(check: str, profile: str, *overrides: dict) -> dict:
    """The settings a check runs with: profile defaults, then the inventory's overrides."""
    return CHECKS[check].resolve(profile, *overrides)


__all__ = ["CHECKS", "CHECK_ORDER", "DEFAULT_PROFILE", "FACTS", "PROFILES", "SINGLE_NODE",
           "Check", "Figure", "Fleet", "Judging", "Kind", "Measure", "Setting", "add", "applicable",
           "resolve_settings", "single_node"]
