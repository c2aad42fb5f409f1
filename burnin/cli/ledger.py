"""`burnin ledger copy SRC DST`: move a quarantine ledger between engines (an SQLite file
into PostgreSQL when a fleet's controllers start to share one, and back), entries,
history and kept runs in order.

SRC is read in one transaction and DST written in one: a copy interrupted half-way leaves
DST as it was. A DST that holds anything is refused (exit 2) unless --force, which
replaces what it holds. Exit 0 when copied; 2 when a ledger cannot be opened, read or
written, or DST is not empty."""

from __future__ import annotations

import json
import sys

from burnin.ledger.api import Ledger, LedgerError, LedgerLost, LedgerNotEmpty, LedgerUrlError


def copy(args) -> int:
    """The `ledger copy` command."""
    try:
        source = Ledger(args.src, create=False)
        quarantine, history, runs = source.dump()
        target = Ledger(args.dst)
        if source.where == target.where:
            print(f"burnin ledger copy: {args.src} and {args.dst} are the same ledger",
                  file=sys.stderr)
            return 2
        target.load(quarantine, history, runs, force=args.force)
    except LedgerNotEmpty as e:
        print(f"burnin ledger copy: {e}; nothing copied (--force replaces what it holds)",
              file=sys.stderr)
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
    c = ledger_sub.add_parser("copy", help="copy a ledger, history included, into another "
                                           "(SQLite <-> PostgreSQL)")
    c.add_argument("src", metavar="SRC", help="a path, sqlite:///path or postgresql://...")
    c.add_argument("dst", metavar="DST", help="a path, sqlite:///path or postgresql://...")
    c.add_argument("--force", action="store_true",
                   help="replace what DST holds (refused by default when it is not empty)")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.set_defaults(func=copy)
