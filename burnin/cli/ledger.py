"""`burnin ledger init [LOCATION]`: create a quarantine ledger, on purpose (nothing else
creates one where one was expected: burnin/ledger/open.py). Exit 0 when it is there
(created now, or already whole); 2 when it cannot be created or one there is lost.

`burnin ledger copy SRC DST`: move a quarantine ledger between engines (an SQLite file
into PostgreSQL when a fleet's controllers start to share one, and back), entries,
history and kept runs in order.

SRC is read in one transaction and DST written in one: a copy interrupted half-way leaves
DST as it was. A DST that holds anything is refused (exit 2) unless --force, which
replaces what it holds. Exit 0 when copied; 2 when a ledger cannot be opened, read or
written, or DST is not empty."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from burnin.inventory.schema import InventoryError, load_inventory
from burnin.ledger.api import LedgerError, LedgerLost, LedgerNotEmpty, LedgerUrlError
from burnin.ledger.open import ledger_site, open_configured, open_ledger


def init(args) -> int:
    """The `ledger init` command."""
    try:
        inventory = load_inventory(args.inventory) if args.inventory else None
        ledger = open_configured(inventory.quarantine if inventory else None,
                                 Path("reports"), given=args.location, create=True)
    except InventoryError as e:
        print(f"burnin ledger init: invalid inventory:\n{e}", file=sys.stderr)
        return 2
    except (OSError, LedgerError, LedgerLost, LedgerUrlError) as e:
        print(f"burnin ledger init: {e}; nothing created", file=sys.stderr)
        return 2
    said = "created" if ledger.created else "already there, whole; nothing changed"
    if args.json:
        print(json.dumps({"ledger": ledger.where, "created": ledger.created}, indent=2))
    else:
        print(f"quarantine ledger {ledger.where}: {said}")
    return 0


def _insecure(inventory) -> bool:
    return bool(inventory and inventory.quarantine.ledger_insecure)


def copy(args) -> int:
    """The `ledger copy` command: DST is created when it is not there (copying into it
    is the explicit act), SRC must be there, whole."""
    try:
        inventory = load_inventory(args.inventory) if args.inventory else None
        source = open_ledger(ledger_site(None, Path("reports"), given=args.src),
                             insecure=_insecure(inventory))
        quarantine, history, runs = source.dump()
        target = open_ledger(ledger_site(None, Path("reports"), given=args.dst),
                             create=True, insecure=_insecure(inventory))
        if source.where == target.where:
            print(f"burnin ledger copy: {args.src} and {args.dst} are the same ledger",
                  file=sys.stderr)
            return 2
        target.load(quarantine, history, runs, force=args.force)
    except LedgerNotEmpty as e:
        print(f"burnin ledger copy: {e}; nothing copied (--force replaces what it holds)",
              file=sys.stderr)
        return 2
    except InventoryError as e:
        print(f"burnin ledger copy: invalid inventory:\n{e}", file=sys.stderr)
        return 2
    except (OSError, LedgerError, LedgerLost, LedgerUrlError) as e:
        print(f"burnin ledger copy: {e}; nothing copied", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"from": source.where, "to": target.where,
                          "quarantined": len(quarantine), "history": len(history),
                          "runs": len(runs)}, indent=2))
    else:
        print(f"copied {len(quarantine)} node(s) in quarantine, {len(history)} history "
              f"event(s) and {len(runs)} kept run(s) from {source.where} to {target.where}")
    return 0


def add_parser(sub) -> None:
    ledger = sub.add_parser("ledger", help="the quarantine ledger as a whole")
    ledger_sub = ledger.add_subparsers(dest="action", required=True)
    i = ledger_sub.add_parser("init", help="create a quarantine ledger (the only command "
                                           "that does; docs/operator/ledger.md)")
    i.add_argument("location", metavar="LOCATION", nargs="?",
                   help="a path, sqlite:///path or postgresql://... (default: the "
                        "inventory's quarantine.ledger, or reports/quarantine.db)")
    i.add_argument("--inventory", help="take the ledger (and quarantine.ledger_insecure) "
                                       "from it")
    i.add_argument("--json", action="store_true", help="machine-readable output")
    i.set_defaults(func=init)
    c = ledger_sub.add_parser("copy", help="copy a ledger, history included, into another "
                                           "(SQLite <-> PostgreSQL)")
    c.add_argument("src", metavar="SRC", help="a path, sqlite:///path or postgresql://...")
    c.add_argument("dst", metavar="DST", help="a path, sqlite:///path or postgresql://...")
    c.add_argument("--inventory", help="its quarantine.ledger_insecure applies to both")
    c.add_argument("--force", action="store_true",
                   help="replace what DST holds (refused by default when it is not empty)")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.set_defaults(func=copy)
