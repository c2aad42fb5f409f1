"""Replaying a ledger's history: every node's events, in order, must be a story that could
have happened (nobody released who was not in, nobody quarantined twice without a release
between), and its end must be what the quarantine table holds. A lost update or a release
over a concurrent failure breaks one of the two."""

from __future__ import annotations

from burnin.ledger.api import Ledger

NEEDS_IN = {"failed-again", "held-by-hand", "clean", "released"}


def contradictions(ledger: Ledger, nodes: list[str]) -> list[str]:
    """What in `ledger` contradicts its own history, for `nodes`; [] when nothing does."""
    problems = []
    for node in nodes:
        inside, clean = False, 0
        for i, h in enumerate(ledger.history(node)):
            event = h["event"]
            if event == "quarantined" and inside or event in NEEDS_IN and not inside:
                problems.append(f"{node}: event {i} {event!r} while "
                                f"{'in' if inside else 'out of'} quarantine")
            if event in ("quarantined", "failed-again", "held-by-hand"):
                inside, clean = True, 0
            elif event == "clean":
                clean += 1
            elif event == "released":
                inside, clean = False, 0
        entry = ledger.get(node)
        if (entry is not None) != inside:
            problems.append(f"{node}: history says {'in' if inside else 'out'}, the "
                            f"ledger says {'in' if entry else 'out'}")
        elif entry is not None and entry.clean_runs != clean:
            problems.append(f"{node}: history counts {clean} clean runs, the ledger "
                            f"{entry.clean_runs}")
    return problems
