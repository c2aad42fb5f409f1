"""The ledger is the only authority: a node it holds is never in service while held.

Slurm can disagree with the ledger: someone resumed a node burnin drained, node-check
lifted a drain of its own from a node that a run has since quarantined (before runs
replaced node-check's reason), a drain failed, or the node was quarantined by hand with
no inventory at hand. `reconcile` finds, among the inventory's nodes the ledger holds,
each one whose Slurm state lets it take jobs, and drains it with its ledger reason; an
administrator's own drain stays as it is. It runs at the end of every run (after the
run's ledger transaction and actions) and as `burnin quarantine reconcile` (a timer),
only where the inventory's quarantine.actions has slurm. Each node it drains, or fails
to, is an event in the node's history.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from burnin.gate import actions
from burnin.ledger.api import Entry, Ledger, LedgerError
from burnin.model.drain import NODE_CHECK_PREFIX, REASON_PREFIX
from burnin.model.nodes import Inventory
from burnin.model.outcome import ActionResult
from burnin.transports.slurmctl import SlurmNode, read_nodes

# What reconcile makes of a held node's Slurm state (decide):
DRAIN = "drain"          # in service (or only down): drain it with its ledger reason
REPLACE = "replace"      # under node-check's drain, which node-check lifts: the ledger's
HELD = "held"            # drained with burnin's reason: as it should be
ADMIN = "admin"          # someone else's drain: left as it is
UNKNOWN = "unknown"      # Slurm does not know the node: it cannot be drained


def decide(state: SlurmNode | None) -> str:
    """What to do with a node the ledger holds, from its Slurm state."""
    if state is None:
        return UNKNOWN
    if not state.drained:
        return DRAIN
    if state.reason.startswith(NODE_CHECK_PREFIX):
        return REPLACE
    return HELD if state.reason.startswith(REASON_PREFIX) else ADMIN


def ledger_reason(entry: Entry) -> list[str]:
    """The reasons the entry holds the node for, as a drain reason's details."""
    return list(entry.reasons) or ["in quarantine"]


@dataclass
class Reconciled:
    """What a reconcile found and did. `checked` is False where it did not run
    (quarantine.actions without slurm); `unreachable` says why Slurm could not be asked."""

    checked: bool = False
    drained: list[ActionResult] = field(default_factory=list)   # held, was in service
    failed: list[ActionResult] = field(default_factory=list)    # held, still in service
    left: dict[str, str] = field(default_factory=dict)          # admin drains: {node: reason}
    unrecorded: list[str] = field(default_factory=list)         # the ledger refused the event
    unreachable: str = ""

    @property
    def mismatches(self) -> int:
        """Held nodes Slurm had in service (or under node-check's drain)."""
        return len(self.drained) + len(self.failed)

    def lines(self) -> list[tuple[str, bool]]:
        """The run's terminal summary: (line, in red)."""
        if not self.checked:
            return []
        out = [(f"reconciled with the ledger: {r.node} was held but in service in Slurm; "
                f"{r.message}", True) for r in self.drained]
        out += [(f"NOT reconciled: {r.node} is held by the ledger but may take jobs in "
                 f"Slurm: {r.message}", True) for r in self.failed]
        out += [(f"not recorded in the ledger: {u}", True) for u in self.unrecorded]
        if self.unreachable and not self.failed:
            out.append((f"held nodes not reconciled with Slurm: {self.unreachable}", True))
        return out

    def properties(self) -> dict[str, str]:
        """junit.xml's properties of the run (every testsuite's)."""
        if not self.checked:
            return {}
        props = {"quarantine_reconciled": str(len(self.drained)),
                 "quarantine_not_reconciled": str(len(self.failed))}
        if self.drained:
            props["quarantine_reconciled_nodes"] = ",".join(r.node for r in self.drained)
        if self.failed:
            props["quarantine_not_reconciled_nodes"] = ",".join(r.node for r in self.failed)
        if self.unreachable:
            props["quarantine_reconcile_error"] = self.unreachable
        return props

    def node_properties(self, node: str) -> dict[str, str]:
        """junit.xml's properties of one node's testsuite."""
        for r in self.drained + self.failed:
            if r.node == node:
                return {"quarantine_reconciled": r.message}
        return {}


def reconcile(inventory: Inventory, ledger: Ledger, run_id: str | None,
              who: str = "burnin") -> Reconciled:
    """Drain every node of the inventory that the ledger holds and Slurm has in service,
    with its ledger reason; replace node-check's reason on a held node the same way. Each
    drain is marked in the ledger before it is asked for (as a run's are), then recorded
    in the node's history. A ledger that refuses the record is said, not raised: the
    drain has happened."""
    out = Reconciled()
    if "slurm" not in inventory.quarantine.actions:
        return out
    out.checked = True
    names = {n.name for n in inventory.nodes}
    held = {e.node: e for e in ledger.entries() if e.node in names}
    if not held:
        return out
    states, out.unreachable = read_nodes(sorted(held))
    for name, entry in sorted(held.items()):
        state = None if out.unreachable else states.get(name)
        what = decide(state)
        if what == HELD:
            continue
        if what == ADMIN:
            out.left[name] = state.reason if state else ""
            continue
        if what == UNKNOWN:
            result = ActionResult("slurm", name, False, out.unreachable or
                                  "Slurm does not know this node (scontrol show node)")
        else:
            ledger.set_drained(name, True)
            result = actions.slurm_drain(name, list(entry.checks), ledger_reason(entry))
            if result.ok and not result.drained:  # an administrator drained it meanwhile
                ledger.set_drained(name, False)
                out.left[name] = result.message
                continue
        (out.drained if result.drained else out.failed).append(result)
        try:
            ledger.record_reconciled(name, result, run_id, who)
        except LedgerError as e:  # the drain stands; the ledger's refusal is said
            out.unrecorded.append(f"reconcile of {name}: {result.message} ({e})")
    return out
