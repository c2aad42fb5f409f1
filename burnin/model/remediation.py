"""The remediation ladder's vocabulary: the kinds of failure a held node is remediated
for, the steps a site may allow, the inventory's `remediation:` settings, and which kind
a held node's ledger reasons show (docs/operator/remediation.md).

A held node's ledger entry keeps its failed checks and their messages; the messages are
its judges' failure texts (each of a FailureKind, burnin/checks/base.py), so the kind is
read back from their words here, in one place."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# The steps, mildest first. rma is the end of every ladder: a person replaces a part.
RESET, REBOOT, RMA = "reset", "reboot", "rma"
STEPS = (RESET, REBOOT, RMA)

# Kinds of failure, as the ladder's keys: the judges' own kinds (burnin/checks/base.py's
# FailureKinds, spaces as underscores), and those of no own kind: a slow device (a floor
# or a throughput), a link (inter-node, fabric, PCIe), and whatever else (unreachable).
OWN_KINDS = ("xid", "ecc", "device_count", "memory_pattern", "wrong_result", "digest",
             "diverged")
KINDS = (*OWN_KINDS, "link", "slow", "other")

# The words each own kind's failure texts carry (the judges' messages); the first kind
# of this order any reason shows is the node's: an XID explains a wrong result after it.
_WORDS = (
    ("xid", re.compile(r"\bS?XID\b", re.I)),
    ("ecc", re.compile(r"\bECC\b|row remap|remapped rows|retired pages|page retire", re.I)),
    ("device_count", re.compile(r"GPU count|\bGPU is lost\b|\blost\b|missing|unseen|"
                                r"fell off|sees \d+ of", re.I)),
    ("memory_pattern", re.compile(r"memory pattern|read back", re.I)),
    ("wrong_result", re.compile(r"wrong|checksum|mismatch", re.I)),
    ("digest", re.compile(r"digest", re.I)),
    ("diverged", re.compile(r"diverge", re.I)),
)
_LINK = re.compile(r"\blinks?\b|NVLink|PCIe|\bports?\b|\bCRC\b|replay|InfiniBand|\bHCA",
                   re.I)
_UNREACHABLE = re.compile(r"unreachable|could not reach|timed out|no answer", re.I)

DEFAULT_LADDER = {
    "xid": (RESET, REBOOT, RMA), "ecc": (RESET, REBOOT, RMA),
    "device_count": (RESET, REBOOT, RMA), "memory_pattern": (REBOOT, RMA),
    "wrong_result": (RESET, REBOOT, RMA), "digest": (RESET, REBOOT, RMA),
    "diverged": (RESET, REBOOT, RMA), "link": (REBOOT, RMA), "slow": (RESET, REBOOT, RMA),
    "other": (REBOOT, RMA),
}


@dataclass(frozen=True)
class RemediationSettings:
    """The inventory's `remediation:` section (burnin/inventory/remediation.py checks it)."""

    # kind -> the steps the site allows for it, in order; a kind not named: DEFAULT_LADDER's
    ladder: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # a node remediated this many times for the same kind (within quarantine.repeat_days)
    # that fails that way again goes straight to RMA
    max_remediations: int = 3
    reset_command: tuple[str, ...] = ("nvidia-smi", "-r")  # on the node, over its transport
    # reboot: "slurm" (scontrol reboot ASAP nextstate=DRAIN), "command" (reboot_command on
    # the controller), or "auto": slurm where quarantine.actions has slurm
    reboot: str = "auto"
    reboot_command: tuple[str, ...] = ()  # argv; {node} and {address} are replaced
    busy_command: tuple[str, ...] = ()  # argv, {node}: exit 0 busy, 1 idle, else: busy
    ticket_command: tuple[str, ...] = ()  # argv, {node}, {bundle}: opens the RMA ticket
    rma_dir: str = "rma"  # bundles go to <rma_dir>/nodes/<node>/
    reports: str = "reports"  # where the re-validation runs write reports/<run-id>/
    command_timeout_s: float = 600.0  # each step's command
    revalidate_timeout_s: float = 3600.0  # each re-validation run
    output_bytes: int = 2000  # of a command's output kept in the ledger

    def steps(self, kind: str) -> tuple[str, ...]:
        return self.ladder.get(kind, DEFAULT_LADDER.get(kind, (RMA,)))


def kind_of_reasons(checks: tuple[str, ...], reasons: tuple[str, ...],
                    link_checks: frozenset[str] = frozenset(),
                    declared: dict[str, frozenset[str]] | None = None) -> str:
    """The kind of failure a held node's ledger entry shows (one of KINDS): its reasons'
    words, each reason ("check: message") read only for the own kinds its check declares
    (`declared`: check -> its Check.failure_kinds' names, as KINDS spells them; a check
    not in it, or no `declared`: any own kind), and whether it failed one of `link_checks`
    (the inter-node ones). The caller reads both from the check table."""
    found = set()
    for reason in reasons:
        check = reason.partition(":")[0].strip()
        allowed = declared.get(check) if declared is not None else None
        found |= {kind for kind, words in _WORDS
                  if (allowed is None or kind in allowed) and words.search(reason)}
    for kind, _ in _WORDS:  # the first of this order wins
        if kind in found:
            return kind
    text = "\n".join(reasons)
    if link_checks & set(checks) or _LINK.search(text):
        return "link"
    if _UNREACHABLE.search(text) or not checks:
        return "other"
    return "slow"
