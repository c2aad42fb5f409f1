"""Slurm as the controller asks it: nodes (state, reason, GPUs as GRES), and why a node
cannot be given to a new job, in Slurm's own words. Plain queries; nothing here changes
Slurm's state except `scontrol(...)` calls made by the caller."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

from ClusterShell.NodeSet import NodeSet

from burnin.model.drain import NODE_CHECK_PREFIX, REASON_PREFIX  # noqa: F401  (the allocation's)
from burnin.transports import BUSY as BUSY_REASON

TIMEOUT_S = 60
# Base states and flags under which Slurm gives a node to nobody (scontrol's State=).
REFUSING = ("DOWN", "DRAIN", "FAIL", "FUTURE", "NOT_RESPONDING", "POWERED_DOWN",
            "POWERING_DOWN", "POWERING_UP", "POWER_DOWN", "REBOOT_ISSUED", "REBOOT_REQUESTED",
            "INVALID_REG", "MAINT", "RESERVED")
BUSY = ("ALLOCATED", "MIXED")


def slurm_env() -> dict:
    """The environment for Slurm's commands: the surrounding job's SLURM_* variables (an
    sbatch job's node count, tasks, memory) would be read as options; every call names its
    job explicitly instead. SLURM_CONF stays: it says which cluster."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("SLURM_") or k == "SLURM_CONF"}


def scontrol(*args: str) -> tuple[bool, str]:
    """(ok, stdout or the error's text)."""
    try:
        res = subprocess.run(["scontrol", *args], capture_output=True, text=True,
                             timeout=TIMEOUT_S, env=slurm_env())
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    return res.returncode == 0, res.stdout if res.returncode == 0 else \
        (res.stderr or res.stdout).strip()


@dataclass(frozen=True)
class SlurmNode:
    """A node as `scontrol show node` reports it."""

    name: str
    state: str     # e.g. IDLE+DRAIN, ALLOCATED, DOWN+NOT_RESPONDING
    reason: str    # the drain or down reason, '' when none
    gpus: int      # GPUs declared as GRES

    @property
    def flags(self) -> set[str]:
        return set(self.state.split("+"))

    @property
    def drained(self) -> bool:
        """Drained or draining: Slurm gives it no new job until someone resumes it. A node
        only DOWN is not: it comes back into service when its slurmd registers again."""
        return "DRAIN" in self.flags


def gres_gpus(gres: str) -> int:
    """GPUs in a Gres= field: gpu:8, gpu:h100:8(S:0-1), gpu:a:2,gpu:b:2 -> 8, 8, 4."""
    return sum(int(n) for n in re.findall(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)", gres))


def show_nodes(names: list[str]) -> dict[str, SlurmNode]:
    """Every named node Slurm knows, in one call (an unknown name is simply absent)."""
    return read_nodes(names)[0]


def read_nodes(names: list[str]) -> tuple[dict[str, SlurmNode], str]:
    """(every named node Slurm knows, why Slurm could not be asked: '' when it could). An
    unknown name is simply absent: scontrol names it on stderr and exits non-zero, but
    still shows the others."""
    try:
        res = subprocess.run(["scontrol", "show", "node", "--oneliner",
                              str(NodeSet.fromlist(names))],
                             capture_output=True, text=True, timeout=TIMEOUT_S, env=slurm_env())
    except (OSError, subprocess.TimeoutExpired) as e:
        return {}, f"scontrol show node: {e}"
    out = {}
    for line in res.stdout.splitlines():
        fields = dict(re.findall(r"(?:^| )(NodeName|State|Gres)=(\S*)", line))
        if "NodeName" not in fields:
            continue
        reason = line.split(" Reason=", 1)[1].rsplit(" [", 1)[0].strip() \
            if " Reason=" in line else ""
        out[fields["NodeName"]] = SlurmNode(fields["NodeName"], fields.get("State", ""),
                                            reason, gres_gpus(fields.get("Gres", "")))
    said = (res.stderr or res.stdout).strip().splitlines()
    why = "" if out or res.returncode == 0 else \
        f"scontrol show node exited {res.returncode}: {said[-1] if said else 'no output'}"
    return out, why


# What a node in a MAINT reservation of the run's own shows: that is not a refusal of it.
OWN_RESERVATION = ("MAINT", "MAINTENANCE", "RESERVED")


def refusal(node: SlurmNode, ours: tuple[str, ...] = ()) -> str:
    """Why Slurm would not give this node to a new job now, in its own words, or ''.
    `ours`: flags the run set itself (OWN_RESERVATION), which refuse nobody."""
    flags = node.flags
    bad = [f for f in REFUSING if f in flags and f not in ours]
    if bad:
        why = f"Slurm state {node.state}"
        return f"{why}, reason: {node.reason}" if node.reason else why
    if flags & set(BUSY):
        return f"{BUSY_REASON}running other jobs (Slurm state {node.state})"
    return ""
