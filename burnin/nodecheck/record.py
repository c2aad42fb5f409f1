"""Where node-check's findings are written down besides Slurm. With a PostgreSQL ledger
(`quarantine.ledger: postgresql://...`, reachable from the nodes) each finding that drains
the node or fails its prolog or epilog is a ledger event (event `node-check`, who
`node-check on HOST`), and a drain node-check lifts is one too (`node-check-resumed`).
With the SQLite default the ledger lives on the controller, out of the nodes' reach: the
Slurm drain reason is the record, and the next run reports the node skipped with it.

Only the existing ledger API (burnin/ledger/api.py), opened only when there is something to
write; psycopg is imported only then. Within the time budget: the write runs in a thread
the caller does not wait for past the deadline."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from burnin.ledger.backends import LedgerUrlError, parse_location
from burnin.nodecheck.budget import remaining

FOUND = "node-check"
RESUMED = "node-check-resumed"


def shared_ledger(where: str | None) -> str | None:
    """The PostgreSQL ledger URL, or None for none or an SQLite one (the controller's)."""
    if not where:
        return None
    try:
        location = parse_location(where)
    except LedgerUrlError:
        return None
    return location if isinstance(location, str) else None


def record(where: str | None, node: str, event: str, lines: list[str],
           deadline: float, insecure: bool = False) -> str | None:
    """Write `lines` as `event`s of `node`; None when written or nothing to do, else why
    not (for stderr: the drain or exit status already says what was found)."""
    url = shared_ledger(where)
    if url is None or not lines:
        return None
    outcome: list[str | None] = []

    def write() -> None:
        try:
            from burnin.ledger.open import ledger_site, open_ledger
            # the one opener: never created here, the TLS rule as for every command
            ledger = open_ledger(ledger_site(url, Path("reports")), insecure=insecure)
            who = f"node-check on {socket.gethostname()}"
            for line in lines:
                ledger.note(node, event, line, None, who=who)
            outcome.append(None)
        except Exception as e:  # a ledger that refuses is reported, never a traceback
            outcome.append(f"{type(e).__name__}: {e}")

    t = threading.Thread(target=write, daemon=True, name="node-check-ledger")
    t.start()
    t.join(remaining(deadline))
    if not outcome:
        return "the ledger did not answer within the time budget"
    return outcome[0]
