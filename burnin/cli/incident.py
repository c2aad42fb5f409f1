"""`burnin incident list` and `burnin incident close ID --reason WHY`: the shared-cause
incidents the ledger holds open (burnin/ledger/incidents.py), and a person closing one.

An open incident holds its nodes out of admission (`burnin admit --inventory/--ledger`)
until a person closes it here or a later run passes all of its nodes in its check
(docs/operator/incidents.md). Closing one quarantines nobody and admits nobody: it only
lets the next report speak for its nodes again. Exit 0 when done; 2 when the ledger
cannot be opened or written, or there is no open incident of that number."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from pathlib import Path

from burnin.errors import IncidentError
from burnin.inventory.schema import InventoryError, load_inventory
from burnin.ledger.api import Ledger, LedgerError
from burnin.ledger.incidents import KeptIncident
from burnin.ledger.open import open_configured


def add_parser(sub) -> None:
    """`incident` and its actions, on the burnin command's subparsers."""
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--ledger", help="ledger: a file, sqlite:///path or "
                                        "postgresql://user@host/db (default: the "
                                        "inventory's, or reports/quarantine.db)")
    where.add_argument("--inventory", help="take the ledger from it")
    where.add_argument("--json", action="store_true", help="machine-readable output")
    p = sub.add_parser("incident", help="shared-cause incidents: list the open ones, close "
                                        "one (its nodes are held out of admission until "
                                        "then; docs/operator/incidents.md)")
    actions = p.add_subparsers(dest="action", required=True)
    listed = actions.add_parser("list", parents=[where],
                                help="the open incidents (--all: closed ones too)")
    listed.add_argument("--all", action="store_true", help="closed incidents too")
    close = actions.add_parser("close", parents=[where],
                               help="close incident ID: its nodes are held no more")
    close.add_argument("id", type=int, metavar="ID", help="the incident's number "
                                                          "(`burnin incident list`)")
    close.add_argument("--reason", required=True, help="what a person found and did")
    close.add_argument("--who", help="who closes it (default: the current user)")
    p.set_defaults(func=run)


def open_ledger_of(args, reports: Path = Path("reports")) -> Ledger:
    """The ledger --ledger or --inventory names (never created here)."""
    inventory = load_inventory(args.inventory) if args.inventory else None
    return open_configured(inventory.quarantine if inventory else None, reports,
                           given=args.ledger)


def run(args) -> int:
    """The `incident` command."""
    try:
        ledger = open_ledger_of(args)
        if args.action == "close":
            kept = ledger.close_incident(args.id, args.reason, args.who or getpass.getuser())
            _show([kept], args.json, "closed")
            return 0
        _show(ledger.incidents(still_open=not args.all), args.json, "open")
        return 0
    except InventoryError as e:
        print(f"burnin incident: invalid inventory:\n{e}", file=sys.stderr)
    except IncidentError as e:
        print(f"burnin incident {args.action}: {e}", file=sys.stderr)
    except (OSError, LedgerError) as e:
        print(f"burnin incident: the quarantine ledger: {e}", file=sys.stderr)
    return 2


def _show(kept: list[KeptIncident], as_json: bool, what: str) -> None:
    if as_json:
        print(json.dumps({"incidents": [{
            **k.incident.as_dict(), "id": k.incident.id, "run_id": k.run_id, "time": k.time,
            "message": k.incident.message, "closed": k.closed, "closed_by": k.closed_by,
            "closed_why": k.closed_why} for k in kept]}, indent=2))
        return
    if not kept:
        print(f"no {what} incident")
    for k in kept:
        i = k.incident
        state = "open" if k.closed is None else f"closed by {k.closed_by}: {k.closed_why}"
        print(f"incident {i.id}  run {k.run_id}  {_when(k.time)}  {state}\n"
              f"  {i.message}\n  {len(i.nodes)} node(s): {', '.join(i.nodes)}")


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
