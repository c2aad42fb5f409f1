"""The inventory's `rolling:` settings: how `burnin run --rolling` re-validates a fleet in
production, in waves, without touching a job (docs/operator/rolling.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Slurm's drain reason of a node a rolling wave took out of service. It starts with
# burnin's prefix (burnin/transports/slurmctl.py), so a run re-tests the node inside a
# reservation of its own and drains it again with this reason; the loop resumes only a
# node whose reason is exactly this.
ROLLING_REASON = "burnin: rolling"
# A node that a rolling run did not pass and that no quarantine drain took over.
FAILED_REASON = "burnin: rolling: not validated"

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def duration_s(text: object) -> float | None:
    """Seconds of "7d", "12h", "90m", "30s", "2w" (or a plain number of seconds); None
    for anything else."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text) if text >= 0 else None
    if not isinstance(text, str):
        return None
    m = _DURATION.fullmatch(text.strip())
    return float(m.group(1)) * _UNITS[m.group(2)] if m else None


def amount(value: object, total: int) -> int:
    """A count (an int) or a fraction of `total` (a float below 1), as a count of nodes:
    a fraction rounds down, but a positive fraction of a non-empty set is at least one."""
    if isinstance(value, float) and value < 1:
        return max(int(value * total), 1 if value > 0 and total else 0)
    return int(value) if isinstance(value, (int, float)) else 0


@dataclass(frozen=True)
class RollingHooks:
    """The site's commands that stand in for Slurm on a fleet without it: argv lists run on
    the controller, `{node}` and `{address}` filled in (each word stays one argument)."""

    busy: tuple[str, ...]              # exit 0: the node has work; 1: idle; else: busy
    out: tuple[str, ...]               # exit 0: taken out of service (no new work)
    back: tuple[str, ...]              # exit 0: back in service
    timeout_s: float = 60.0            # each call; a hook that takes longer has failed
    output_bytes: int = 2000           # the last characters of its output kept in the ledger


@dataclass(frozen=True)
class RollingSettings:
    max_out: int | float = 1           # nodes out of service at once: a count or a fraction
    min_available: int | float = 0     # per group, nodes that stay in service
    group_by: tuple[str, ...] = ("partition",)  # "partition" (srun's) or label names
    drain_timeout_s: float = 3600.0    # how long a wave waits for its nodes' jobs to end
    every: float = 7 * 86400.0         # a node validated this recently is not due
    poll_s: float = 5.0                # how often Slurm is asked while a wave waits
    retries: int = 3                   # waves a busy node is tried in, per invocation
    hooks: RollingHooks | None = None  # set: the hooks take nodes out and back, not Slurm
