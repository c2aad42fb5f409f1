"""The controller's open-files limit: raised to the hard limit at the run's start, and a
run the hard limit cannot carry refused before any node is touched.

What the run holds open is bounded by its fan-out, not by its fleet: each running probe
holds a few descriptors (the local transport: its stdin, stdout and stderr pipes and a
selector), and a node's claim holds none (burnin/transports/claims.py). Some 250 more
are pytest's, the reports', the ledger's and pytest-xdist's. A run that passes the limit
part-way ends as a controller fault with every node after it unjudged
(benchmarks/RESULTS.md, "Claims and the open-files limit").

Layer 8 (engine): imports only the standard library.
"""

from __future__ import annotations

import resource

PER_PROBE = 4  # descriptors a running probe holds in the controller
BASE = 256  # the controller's own, whatever the fan-out


def needed(fanout: int) -> int:
    """Descriptors a run with this fan-out may hold open at once."""
    return PER_PROBE * fanout + BASE


def raise_to_hard(fanout: int) -> str:
    """Lift this process's soft open-files limit to its hard limit (the processes it
    starts, pytest-xdist's workers, inherit it); why the run cannot go on where even the
    hard limit is short of needed(fanout), else ""."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass  # the soft limit stays; judged below as it is
    if soft == resource.RLIM_INFINITY or soft >= needed(fanout):
        return ""
    return (f"--fanout {fanout} needs about {needed(fanout)} open files, but this process "
            f"may open at most {soft} (ulimit -n; hard limit {hard}): lower --fanout to "
            f"{max(1, (soft - BASE) // PER_PROBE)} or less, or raise the limit (ulimit -Hn, "
            "LimitNOFILE= of a systemd unit, nofile in /etc/security/limits.conf)")
