"""`burnin ledger init [LOCATION]`: create a quarantine ledger, on purpose (nothing else
creates one where one was expected: burnin/ledger/open.py). Exit 0 when it is there
(created now, or already whole); 2 when it cannot be created or one there is lost.

`burnin ledger copy SRC DST`: move a quarantine ledger between engines (an SQLite file
into PostgreSQL when a fleet's controllers start to share one, and back), entries,
history and kept runs in order.

SRC is read in one transaction and DST written in one: a copy interrupted half-way leaves
DST as it was. A DST that holds anything is refused (exit 2) unless --force, which
replaces what it holds. Exit 0 when copied; 2 when a ledger cannot be opened, read or
written, or DST is not empty.

`burnin history --watch [NODES]`: the replace-soon list (burnin/figures/replace_soon.py):
every node (or each of NODES) whose wear counters or relative speed, as the ledger's kept
runs show them, have reached their limit or steadily move to reach it within the
horizon, soonest first, with each reason and its projected date. Exit 0 when no node is
on the list; 1 when some node is; 2 when the ledger, the inventory or NODES cannot be
used. `burnin history NODES` without --watch is the quarantine history
(burnin/cli/quarantine.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ClusterShell.NodeSet import NodeSet, NodeSetException

from burnin.cli import quarantine as cli_quarantine
from burnin.figures import replace_soon
from burnin.figures.goodput import break_even
from burnin.inventory.schema import InventoryError, load_inventory
from burnin.ledger.api import LedgerError, LedgerNotEmpty
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
    except (OSError, LedgerError) as e:
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
    except (OSError, LedgerError) as e:
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


def history(args) -> int:
    """The `history` command: with --watch the replace-soon list, else each node's
    quarantine history."""
    if not args.watch:
        if not args.nodes:
            print("burnin history: NODES expected (or --watch for the replace-soon list)",
                  file=sys.stderr)
            return 2
        return cli_quarantine.run(args)
    try:
        nodes = set(NodeSet(args.nodes)) if args.nodes else None
    except NodeSetException as e:
        print(f"burnin history: {args.nodes!r} is not a hostlist: {e}", file=sys.stderr)
        return 2
    try:
        given = getattr(args, "inventory", None)  # `where`'s options: absent when not given
        inventory = load_inventory(given) if given else None
        ledger = open_configured(inventory.quarantine if inventory else None, Path("reports"),
                                 given=getattr(args, "ledger", None))
        job = inventory.goodput.job_nodes if inventory else None
        listed = replace_soon.of_ledger(ledger, time.time(), nodes,
                                        speed_floor=break_even(job) if job else None)
    except InventoryError as e:
        print(f"burnin history: invalid inventory:\n{e}", file=sys.stderr)
        return 2
    except (OSError, LedgerError) as e:
        print(f"burnin history: cannot read the quarantine ledger: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([{"node": fs[0].node, "projected": _iso(fs[0].projected),
                           "reasons": [{"counter": f.counter, "device": f.device,
                                        "value": f.value, "limit": f.limit,
                                        "per_day": f.per_day, "reached": f.reached,
                                        "projected": _iso(f.projected), "reason": f.reason,
                                        "source": f.source} for f in fs]}
                          for fs in listed], indent=2))
    elif not listed:
        print("replace soon: no node (no wear counter or speed reaches its limit within "
              f"{replace_soon.rules().horizon_days:g} days)")
    else:
        print(f"replace soon: {len(listed)} node(s), soonest first")
        for rank, fs in enumerate(listed, 1):
            print(f"{rank:>3}. {fs[0].node}  {_iso(fs[0].projected)[:10]}  {fs[0].reason}")
            for f in fs[1:]:
                print(f"     {'':{len(fs[0].node)}}  {_iso(f.projected)[:10]}  {f.reason}")
    return 1 if listed else 0


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


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
