"""node-check's state from one run to the next (burnin/nodecheck/state.py keeps the file),
merged under the lock with what another node-check wrote meanwhile: a Prolog whose dcgmi
takes seconds and a HealthCheckProgram that drains for an XID in those seconds both keep
what they found. The cursor only moves forward (unless this run found it past the log's
end); held events are added by the run that found them and let go only by the run that
saw a person resume the node (or by a reboot); last_good changes only after a clean run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from burnin.errors import StateError
from burnin.nodecheck import budget, state
from burnin.nodecheck.model import CheckResult, Finding


def load(state_dir: Path, deadline: float) -> tuple[dict | None, list[Finding]]:
    """(the state, findings): None where it could not be read at all (its directory not
    node-check's, a lock held past the budget); {} and a held `state` finding where the
    file is invalid: node-check starts over, and whatever drain it held stays held."""
    def read() -> tuple[dict, str]:
        with state.locked(state_dir, deadline):
            return state.load(state_dir)

    try:
        data, problem = budget.bounded("state", read, deadline)
    except (StateError, TimeoutError) as e:
        return None, [Finding("state", f"node-check's state cannot be read: {e}")]
    if problem:
        return {}, [invalid(problem)]
    return data, []


def invalid(problem: str) -> Finding:
    # An event: a drain for it is held, so that the drain this file held is not let go.
    return Finding("state", f"node-check's state is invalid, started over from boot: "
                            f"{problem}", event=True)


def save(state_dir: Path, last: dict | None, results: list[CheckResult],
         failures: list[Finding], deadline: float, findings: list[Finding]) -> list[str]:
    """Keep the cursor, the figures of a clean run and the events that hold a drain, merged
    with the file as it is now; return the held events (findings gets a `state` finding
    where they could not be kept)."""
    by = {r.check: r for r in results}
    before = last or {}
    events = [f.line()[:state.MAX_LINE] for f in failures if f.event]
    xid = by.get("xid")
    ours = before.get("cursor")
    reset = False
    if xid is not None and xid.finished:
        ours, reset = xid.state.get("cursor"), bool(xid.state.get("reset"))
    good: dict = {}
    if not failures:
        for check in ("gpu", "host"):
            r = by.get(check)
            if r is not None and r.finished:
                good.update({k: v for k, v in r.state.items() if k in state.LAST_GOOD
                             and isinstance(v, int) and not isinstance(v, bool) and v >= 0})
    merged: dict[str, Any] = {"cursor": ours,
                              "held": _held(list(before.get("held") or []), events),
                              "last_good": {**(before.get("last_good") or {}), **good}}

    def keep() -> None:
        with state.locked(state_dir, deadline):
            again, problem = state.load(state_dir)
            if problem:  # as it was read first, or replaced meanwhile: ours stands
                said = invalid(problem)
                if not any(f.text == said.text for f in findings):
                    findings.append(said)
                merged["held"] = _held(merged["held"], [said.line()[:state.MAX_LINE]])
                state.save(state_dir, merged)
                return
            # another node-check may have read further, found events, or seen a clean run
            cursor = again.get("cursor")
            if not reset and isinstance(cursor, (int, float)) and (
                    merged["cursor"] is None or cursor > merged["cursor"]):
                merged["cursor"] = cursor
            merged["held"] = _held(list(again.get("held") or []), events)
            merged["last_good"] = {**(again.get("last_good") or {}), **good}
            state.save(state_dir, merged)

    try:
        budget.bounded("state", keep, deadline)
    except (StateError, TimeoutError) as e:
        if last is not None:  # where it could not be read, that was said
            findings.append(Finding("state", f"node-check's state cannot be kept: {e}"))
    return list(merged["held"])


def _held(kept: list[str], found: list[str]) -> list[str]:
    return (kept + [e for e in found if e not in kept])[-state.MAX_HELD:]


def let_go(state_dir: Path, seen: list[str], deadline: float, findings: list[Finding]) -> None:
    """Forget the held events `seen` (a person resumed the node after them); events another
    node-check added since stay held."""
    def forget() -> None:
        with state.locked(state_dir, deadline):
            kept, problem = state.load(state_dir)
            if problem:
                return  # the next run says so, and starts over
            state.save(state_dir, {**kept, "held": [h for h in kept.get("held") or []
                                                     if h not in seen]})

    try:
        budget.bounded("state", forget, deadline)
    except (StateError, TimeoutError) as e:
        findings.append(Finding("state", f"node-check's held events cannot be let go: {e}"))
