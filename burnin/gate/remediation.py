"""The remediation ladder: for every node the ledger holds, the next step its kind of
failure allows (inventory `remediation:`), each step proven by re-validation.

A step runs only on an idle node; after it, burnin re-validates the node with the checks
it failed, under the normal release rules (`burnin run --revalidate`: clean often enough
and it is released, failing again keeps it held). A step that did not heal escalates to
the next; a node remediated max_remediations times for one kind goes straight to RMA.
Every step, its command's bounded output and its result are a `remediation` event of the
node's ledger history, which is also how the next `burnin remediate` knows where each
node stands (docs/operator/remediation.md)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from burnin.checks import CHECKS
from burnin.gate import remediation_steps as steps
from burnin.ledger.api import Ledger
from burnin.ledger.runs import DAY
from burnin.model.nodes import Inventory, Node
from burnin.model.remediation import REBOOT, RESET, RMA, kind_of_reasons

EVENT = "remediation"
# Results a step's history event ends its first part with.
HEALED, NOT_HEALED, UNPROVEN, SKIPPED, FAILED, PENDING = (
    "healed", "not healed", "not re-validated", "skipped", "command failed", "pending")
_TAKEN = re.compile(r"^(reset|reboot) for (\w+): (healed|not healed|command failed|pending)\b")


@dataclass(frozen=True)
class Plan:
    """What the ladder would do for one held node."""

    node: str
    kind: str
    remediated: int  # steps taken for this kind within quarantine.repeat_days
    steps: tuple[str, ...]  # the steps left, in order ((): nothing to do)
    why: str  # said beside the plan
    # its last step, a reboot, was not back yet: re-validate it before any other step
    revalidate_first: bool = False

    def to_dict(self) -> dict:
        return {"node": self.node, "kind": self.kind, "remediated": self.remediated,
                "revalidate_first": self.revalidate_first, "steps": list(self.steps),
                "why": self.why}


@dataclass(frozen=True)
class Outcome:
    node: str
    result: str  # HEALED, NOT_HEALED (then at RMA), SKIPPED, UNPROVEN, or "rma"
    said: list[str]


def plan(inv: Inventory, ledger: Ledger, now: float | None = None) -> list[Plan]:
    """The plan for every node of `inv` the ledger holds, in inventory order."""
    now = time.time() if now is None else now
    held = {e.node: e for e in ledger.entries()}
    return [plan_node(inv, n, held[n.name], ledger.history(n.name), now)
            for n in inv.nodes if n.name in held]


def plan_node(inv: Inventory, node: Node, entry, history: list[dict], now: float) -> Plan:
    r = inv.remediation
    kind = kind_of_reasons(entry.checks, entry.reasons,
                           frozenset(name for name, c in CHECKS.items() if c.group),
                           {name: frozenset(k.name.replace(" ", "_") for k in c.failure_kinds)
                            for name, c in CHECKS.items()})
    window = now - inv.quarantine.repeat_days * DAY
    mine = [h for h in history if h["event"] == EVENT]
    taken = [m for h in mine if h["time"] >= window and (m := _TAKEN.match(h["why"]))
             and m.group(2) == kind and m.group(3) != PENDING]  # its outcome counts once
    ours = [m for h in mine if h["time"] >= entry.since and (m := _TAKEN.match(h["why"]))]
    pending = bool(ours) and ours[-1].group(3) == PENDING
    this_time = {m.group(1) for h in mine if h["time"] >= entry.since
                 and (m := _TAKEN.match(h["why"])) and m.group(2) == kind}
    if entry.by_hand:  # a person holds it, for reasons of theirs: no step of ours
        return Plan(node.name, kind, len(taken), (), "quarantined by hand: a person "
                    "remediates and releases it")
    if any(h["time"] >= entry.since and h["why"].startswith(f"{RMA} ") for h in mine):
        return Plan(node.name, kind, len(taken), (), "sent to RMA: waiting for a person")
    if len(taken) >= r.max_remediations and not pending:
        return Plan(node.name, kind, len(taken), (RMA,),
                    f"remediated {len(taken)} times for {kind} within "
                    f"{inv.quarantine.repeat_days:g} days: straight to RMA")
    allowed = {RESET: node.transport not in steps.LAUNCHERS,
               REBOOT: steps.can_reboot(inv, node), RMA: True}
    left = tuple(s for s in r.steps(kind) if allowed[s] and s not in this_time)
    return Plan(node.name, kind, len(taken), left,
                f"{kind} ({'; '.join(entry.reasons)[:200]})", revalidate_first=pending)


Revalidate = Callable[[Inventory, Ledger, Node, tuple[str, ...]], str]


def run(inv: Inventory, ledger: Ledger, probes_dir: Path, run_id: str,
        revalidate: Revalidate | None = None, say=print) -> list[Outcome]:
    """Carry out the plan of every held node, one node at a time. `revalidate(inv, ledger,
    node, checks)` -> HEALED, NOT_HEALED or UNPROVEN (default: `burnin run --revalidate` as
    a subprocess)."""
    again = revalidate or revalidate_by_run
    out = []
    for p in plan(inv, ledger):
        out.append(_ladder(inv, ledger, inv.node(p.node), p, probes_dir, run_id, again, say))
    return out


def _ladder(inv, ledger, node: Node, p: Plan, probes_dir, run_id, again, say) -> Outcome:
    said: list[str] = []

    def record(step: str, result: str, detail: str) -> None:
        why = f"{step} for {p.kind}: {result}" + (f"; {detail}" if detail else "")
        ledger.note(node.name, EVENT, why, run_id)
        said.append(why)
        say(f"{node.name}: {why}")

    if not p.steps and not p.revalidate_first:
        say(f"{node.name}: {p.why}")
        return Outcome(node.name, SKIPPED, [p.why])
    entry = ledger.get(node.name)
    if p.revalidate_first and entry is not None:
        state = steps.rebooting(inv, node)
        if state:  # said, not recorded: a timer would fill the history with it
            say(f"{node.name}: still rebooting ({state}): re-validated once it is back")
            return Outcome(node.name, UNPROVEN, said)
        why_busy = steps.busy(inv, node)
        if why_busy:
            record(REBOOT, SKIPPED, f"not idle: {why_busy}")
            return Outcome(node.name, SKIPPED, said)
        result = again(inv, ledger, node, entry.checks)
        record(REBOOT, result, "re-validated once the node was back from its reboot")
        if result in (HEALED, UNPROVEN):
            return Outcome(node.name, result, said)
        entry = ledger.get(node.name)
    for step in p.steps:
        if entry is None:  # released meanwhile (a person, another run)
            return Outcome(node.name, HEALED, said)
        if step == RMA:
            return _rma(inv, ledger, node, p, entry, run_id, record, said)
        why_busy = steps.busy(inv, node)
        if why_busy:
            record(step, SKIPPED, f"not idle: {why_busy}")
            return Outcome(node.name, SKIPPED, said)
        done = steps.reset(node, inv.remediation, probes_dir, run_id) if step == RESET \
            else steps.reboot(inv, node)
        detail = f"{done.said}" + (f"; output: {done.output}" if done.output else "")
        if done.pending:  # the next burnin remediate re-validates it once it is back
            record(step, PENDING, detail)
            return Outcome(node.name, UNPROVEN, said)
        if not done.ok:
            record(step, FAILED, detail)
            continue  # the step did nothing a re-validation could prove: the next one
        result = again(inv, ledger, node, entry.checks)
        record(step, result, detail)
        if result == HEALED:
            return Outcome(node.name, HEALED, said)
        if result == UNPROVEN:
            return Outcome(node.name, UNPROVEN, said)
        entry = ledger.get(node.name)
    return Outcome(node.name, NOT_HEALED, said)


def _rma(inv, ledger, node, p: Plan, entry, run_id, record, said) -> Outcome:
    r = inv.remediation
    bundle = steps.rma_bundle(inv, node, entry, ledger.history(node.name), p.kind,
                              _facts(Path(r.reports), node.name))
    detail = f"bundle {bundle}"
    if r.ticket_command:
        done = steps.local(steps.filled(r.ticket_command, node=node.name,
                                        address=node.address, bundle=str(bundle)),
                           r.command_timeout_s, r.output_bytes)
        detail += f"; ticket command {done.said}" + (f"; output: {done.output}"
                                                     if done.output else "")
    else:
        detail += "; no remediation.ticket_command: open the ticket by hand"
    record(RMA, "sent", detail)
    return Outcome(node.name, RMA, said)


# What identifies a part, of what the facts check's probe reads per GPU.
PART_KEYS = ("index", "name", "uuid", "pci_bus_id", "serial", "board_part_number", "vbios",
             "inforom_image")


def _facts(reports: Path, node: str) -> dict:
    """The node's parts as the facts check (health) last saw them in a run under
    `reports`: the host and, per GPU, what identifies it (PART_KEYS that were read)."""
    facts = {name for name, c in CHECKS.items() if c.facts}
    runs = sorted((p for p in reports.glob("*/results.jsonl") if p.parent.name != "latest"),
                  key=lambda p: p.stat().st_mtime, reverse=True) if reports.is_dir() else []
    for results in runs:
        try:
            lines = results.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            data = rec.get("data") if isinstance(rec, dict) else None
            if rec.get("node") == node and rec.get("check") in facts and \
                    isinstance(data, dict):
                devices = [{k: d[k] for k in PART_KEYS if k in d}
                           for d in data.get("devices") or () if isinstance(d, dict)]
                return {"run": results.parent.name, "host": data.get("node"),
                        "gpus": devices,
                        "serials": "read" if any("serial" in d for d in devices) else
                        "not read by the health probe: take them from the node "
                        "(nvidia-smi -q) for the ticket"}
    return {}


def revalidate_by_run(inv: Inventory, ledger: Ledger, node: Node,
                      checks: tuple[str, ...]) -> str:
    """`burnin run --revalidate` of `node` with `checks` (the ones it failed), once per
    clean run its release needs: HEALED when it is released, NOT_HEALED when it failed
    again, UNPROVEN when no verdict came back (or a clean one that does not release it)."""
    r = inv.remediation
    expr = " or ".join(checks) if checks else ""
    for _ in range(inv.quarantine.release_after):
        started = time.time()
        argv = [sys.executable, "-m", "burnin", "run", "--inventory", inv.path,
                "--revalidate", "--nodes", node.name, "--reports", r.reports,
                "-q", "-p", "no:cacheprovider"] + (["-k", expr] if expr else [])
        try:
            res = subprocess.run(argv, capture_output=True, timeout=r.revalidate_timeout_s,
                                 stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            ledger.note(node.name, "re-validation", f"burnin run --revalidate timed out "
                                                    f"after {r.revalidate_timeout_s:g} s")
            return UNPROVEN
        except OSError as e:
            ledger.note(node.name, "re-validation", f"burnin run could not start: {e}")
            return UNPROVEN
        if ledger.get(node.name) is None:
            return HEALED
        events = [h["event"] for h in ledger.history(node.name)
                  if h["time"] >= started]
        if "failed-again" in events or "quarantined" in events:
            return NOT_HEALED
        if "clean" not in events:  # no verdict: what the run said is why
            ledger.note(node.name, "re-validation", f"burnin run exit {res.returncode}, no "
                        "verdict on the node: " + steps.bounded(res.stdout + res.stderr,
                                                                 r.output_bytes))
            return UNPROVEN
    return UNPROVEN
