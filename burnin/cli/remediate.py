"""`burnin remediate --inventory FILE [--dry-run] [--json]`: the remediation ladder over
every node the ledger holds (burnin/gate/remediation.py; docs/operator/remediation.md).

Exit 0: nothing held, or every held node was healed (re-validated and released); with
--dry-run, the plan was shown. 1: some held node is still held after its steps (not
healed, sent to RMA, waiting for RMA, skipped because it was not idle, or not
re-validated). 2: bad input (the inventory, a ledger that cannot be used). 3: another
`burnin remediate` of the same reports directory is running: nothing done."""

from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path

from burnin.core.shipped_files import shipped
from burnin.engine.run import new_run_id
from burnin.errors import NotShipped
from burnin.gate import remediation, remediation_steps
from burnin.inventory.schema import InventoryError, load_inventory
from burnin.ledger.api import LedgerError
from burnin.ledger.open import open_configured
from burnin.model.verdict import clean


def add_parser(sub) -> None:
    p = sub.add_parser(
        "remediate",
        help="the remediation ladder for every node the ledger holds: GPU reset, reboot, "
             "RMA, each step proven by re-validation; exit 0 all healed or none held, 1 "
             "some still held, 2 bad input (docs/operator/remediation.md)")
    p.add_argument("--inventory", required=True, help="the inventory: its nodes, its "
                                                       "remediation: and quarantine: sections")
    p.add_argument("--dry-run", action="store_true",
                   help="show each held node's kind of failure and the steps it would get")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=main)


def main(args) -> int:
    try:
        inv = load_inventory(args.inventory)
    except InventoryError as e:
        print(f"invalid inventory:\n{e}", file=sys.stderr)
        return 2
    try:
        # never created here: a ledger that is not there holds nobody we could vouch for
        ledger = open_configured(inv.quarantine, Path(inv.remediation.reports))
        if args.dry_run:
            return _show(remediation.plan(inv, ledger), args.json)
        refused = remediation_steps.untrusted_by_root(inv.remediation)
        if refused:  # before any node is touched
            print("burnin remediate: " + "\nburnin remediate: ".join(refused),
                  file=sys.stderr)
            return 2
        probes = shipped("probes")
        lock = _lock(Path(inv.remediation.reports))
        if lock is None:
            print(f"burnin remediate: another burnin remediate holds "
                  f"{Path(inv.remediation.reports) / LOCK}: nothing done", file=sys.stderr)
            return 3
        say = (lambda _: None) if args.json else (lambda line: print(clean(line)))
        try:
            outcomes = remediation.run(inv, ledger, probes, f"remediate-{new_run_id()}",
                                       say=say)
        finally:
            os.close(lock)
    except LedgerError as e:
        print(f"burnin remediate: cannot use the quarantine ledger: {e}", file=sys.stderr)
        return 2
    except (OSError, NotShipped) as e:  # the reports or RMA directory, the shipped probes
        print(f"burnin remediate: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([{"node": o.node, "result": o.result, "steps": o.said}
                          for o in outcomes], indent=2))
    else:
        healed = [o.node for o in outcomes if o.result == remediation.HEALED]
        print(f"{len(outcomes)} held node(s): {len(healed)} healed and released, "
              f"{len(outcomes) - len(healed)} still held")
    return 0 if all(o.result == remediation.HEALED for o in outcomes) else 1


LOCK = "remediate.lock"


def _lock(reports: Path) -> int | None:
    """One `burnin remediate` at a time over these nodes (a timer and a person): a step
    and its re-validation are not to meet another's on the same node. The open lock file,
    or None when another holds it; the kernel lets it go when this process ends."""
    reports.mkdir(parents=True, exist_ok=True)
    fd = os.open(reports / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _show(plans: list[remediation.Plan], as_json: bool) -> int:
    if as_json:
        print(json.dumps([p.to_dict() for p in plans], indent=2))
        return 0
    for p in plans:
        first = ("re-validate after reboot",) if p.revalidate_first else ()
        print(clean(f"{p.node}: {p.kind}, remediated {p.remediated} time(s): "
                    f"{' -> '.join(first + p.steps) or 'nothing to do'}  ({p.why})"))
    print(f"{len(plans)} held node(s)")
    return 0
