"""`burnin quarantine list | show NODE | add NODES | add --run RUN --check CHECK |
release NODES | reconcile --inventory FILE`: the ledger by hand.

NODES is a Slurm hostlist (gpu[001-004],gpu017). Exit 0 when done; 1 when a named node
was not in quarantine (release, show: nothing to do for it; the others are done) or a
quarantine action failed (add: the ledger entry stays); 2 when the ledger, the inventory
or a hostlist cannot be used. reconcile (burnin/gate/reconcile.py): 0 when nothing was
to be done or every held node in service was drained, 1 when some could not be drained
(they may take jobs), 2 on bad input (no inventory, a ledger that cannot be used)."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from pathlib import Path
from typing import Any

from ClusterShell.NodeSet import NodeSet, NodeSetException

from burnin.gate import actions
from burnin.gate.quarantine import quarantine_actions
from burnin.gate.reconcile import Reconciled, reconcile
from burnin.inventory.schema import InventoryError, load_inventory
from burnin.ledger.api import Entry, Ledger, LedgerError
from burnin.ledger.open import open_configured
from burnin.model.nodes import QuarantineSettings


def add_parser(sub, history_command) -> None:
    """`quarantine` and `history` (which shares its --ledger/--inventory/--json; its
    command is burnin/cli/ledger.py's, which imports this module)."""
    q = sub.add_parser("quarantine", help="the quarantine ledger")
    where = argparse.ArgumentParser(add_help=False)
    for parser, default in ((q, None), (where, argparse.SUPPRESS)):
        # Accepted before and after the action: `quarantine --inventory X list` and
        # `quarantine list --inventory X` (SUPPRESS: after, it does not reset before).
        parser.add_argument("--ledger", default=default,
                            help="ledger: a file, sqlite:///path or postgresql://user@host/db "
                                 "(default: the inventory's, or reports/quarantine.db)")
        parser.add_argument("--inventory", default=default,
                            help="take the ledger path (and for add, the actions) from it")
    where.add_argument("--json", action="store_true", help="machine-readable output")
    q_sub = q.add_subparsers(dest="action", required=True)
    q_sub.add_parser("list", parents=[where], help="nodes in quarantine")
    show = q_sub.add_parser("show", parents=[where], help="nodes' entries and history")
    show.add_argument("nodes", metavar="NODES", help="a node or a hostlist")
    add = q_sub.add_parser("add", parents=[where],
                           help="quarantine nodes by hand (released only by hand); with "
                                "--inventory, its quarantine.actions too (Slurm drain)")
    release = q_sub.add_parser("release", parents=[where],
                               help="take nodes out of quarantine by hand")
    release.add_argument("nodes", metavar="NODES", help="a node or a hostlist: gpu[001-004]")
    add.add_argument("nodes", metavar="NODES", nargs="?",
                     help="a node or a hostlist: gpu[001-004] (with --run: of the incident's)")
    add.add_argument("--run", help="with --check: the nodes of that run's shared-cause "
                                   "incident of that check (a person judged them node faults)")
    add.add_argument("--check", help="the incident's check (with --run)")
    reconcile = q_sub.add_parser(
        "reconcile", parents=[where],
        help="drain in Slurm every node of --inventory the ledger holds that Slurm has in "
             "service, with its ledger reason (an administrator's drain stays); for a "
             "timer: exit 0 done or nothing to do, 1 some could not be drained, 2 bad input")
    for a in (add, release):
        a.add_argument("--reason", required=True)
    for a in (add, release, reconcile):
        a.add_argument("--who", help="who does it (default: the current user)")
    q.set_defaults(func=run)
    history = sub.add_parser("history", parents=[where],
                             help="nodes over time: quarantined, failed again, clean, released, "
                                  "every run's verdict and speed; and whether each is a "
                                  "repeat offender")
    history.add_argument("nodes", metavar="NODES", nargs="?",
                         help="a node or a hostlist (with --watch: optional)")
    history.add_argument("--watch", action="store_true",
                         help="the replace-soon list: nodes whose wear counters or speed "
                              "reach their limit soon, with reason and projected date; exit "
                              "1 when some node is on it (docs/operator/replace-soon.md)")
    # not ledger/inventory: set_defaults would change the actions `where` shares with
    # every quarantine action (argparse's parents share them), and their SUPPRESS
    history.set_defaults(func=history_command, action="show")


def run(args) -> int:
    """The `quarantine` command."""
    try:
        return _run(args)
    except LedgerError as e:  # a database lost half-way: what was done is in its history
        print(f"the quarantine ledger failed: {e}", file=sys.stderr)
        return 2


def _run(args) -> int:
    try:
        given = getattr(args, "inventory", None)  # `burnin history` may have neither
        inventory = load_inventory(given) if given else None
        # never created here: a missing ledger is said, not made (burnin/ledger/open.py)
        ledger = open_configured(inventory.quarantine if inventory else None, Path("reports"),
                                 given=getattr(args, "ledger", None))
    except InventoryError as e:
        print(f"invalid inventory:\n{e}", file=sys.stderr)
        return 2
    except (OSError, LedgerError) as e:
        print(f"cannot open the quarantine ledger: {e}", file=sys.stderr)
        return 2
    if args.action == "list":
        return _list(ledger, args.json)
    if args.action == "reconcile":
        if inventory is None:
            print("burnin quarantine reconcile: --inventory FILE expected: its nodes, and "
                  "whether its quarantine.actions drain in Slurm", file=sys.stderr)
            return 2
        return _reconcile(ledger, reconcile(inventory, ledger, None,
                                            who=args.who or getpass.getuser()), args.json)
    if args.action == "add" and (getattr(args, "run", None) or getattr(args, "check", None)):
        return _add_incident(ledger, inventory, args)
    if not args.nodes:
        print(f"burnin quarantine {args.action}: NODES, or --run and --check, expected",
              file=sys.stderr)
        return 2
    try:
        nodes = list(NodeSet(args.nodes))
    except NodeSetException as e:
        print(f"burnin quarantine {args.action}: {args.nodes!r} is not a hostlist: {e}",
              file=sys.stderr)
        return 2
    if args.action == "show":
        q = inventory.quarantine if inventory else QuarantineSettings()
        return _show(ledger, nodes, args.json, (q.repeat_times, q.repeat_days))
    who = args.who or getpass.getuser()
    if args.action == "add":
        return _add(ledger, inventory, nodes, args.reason, who, args.json)
    return _release(ledger, nodes, args.reason, who, args.json)


def entry_dict(e: Entry) -> dict:
    return {"node": e.node, "cluster": e.cluster, "checks": list(e.checks),
            "reasons": list(e.reasons), "run_id": e.run_id or None, "since": _iso(e.since),
            "updated": _iso(e.updated), "set_by": e.set_by, "clean_runs": e.clean_runs,
            "drained_by_burnin": e.drained_by_burnin, "by_hand": e.by_hand}


def _list(ledger: Ledger, as_json: bool) -> int:
    entries = ledger.entries()
    if as_json:
        print(json.dumps({"ledger": ledger.where,
                          "nodes": [entry_dict(e) for e in entries]}, indent=2))
        return 0
    for e in entries:
        origin = f"by hand by {e.set_by}" if e.by_hand and not e.run_id else f"run {e.run_id}"
        print(f"{e.node}  since {_when(e.since)}  checks {','.join(e.checks) or '-'}  "
              f"clean runs {e.clean_runs}  {origin}"
              + ("  (released only by hand)" if e.by_hand else "")
              + ("  (drained in Slurm by burnin)" if e.drained_by_burnin else ""))
    print(f"{len(entries)} node(s) in quarantine ({ledger.where})")
    return 0


def _show(ledger: Ledger, nodes: list[str], as_json: bool,
          repeat: tuple[int, float] = (3, 30.0)) -> int:
    shown, unknown = [], 0
    offenders = ledger.repeat_offenders(*repeat)
    for node in nodes:
        entry, history, runs = ledger.get(node), ledger.history(node), ledger.runs(node)
        kept = ledger.incidents(node=node)
        unknown += not entry and not history and not runs and not kept
        shown.append({"node": node, "in_quarantine": entry is not None,
                      "repeat_offender": node in offenders,
                      "quarantined_in_window": offenders.get(node, 0),
                      "entry": entry_dict(entry) if entry else None,
                      "history": [{**h, "time": _iso(h["time"])} for h in history],
                      "runs": [{**r.as_dict(), "time": _iso(r.time)} for r in runs],
                      "incidents": [{"run_id": k.run_id, "time": _iso(k.time),
                                     "message": k.incident.message, **k.incident.as_dict()}
                                    for k in kept]})
        if as_json:
            continue
        if node in offenders:
            print(f"{node}: a repeat offender: quarantined {offenders[node]} times in "
                  f"{repeat[1]:g} days; clean re-validation runs do not release it, a person "
                  "does (burnin quarantine release)")
        if entry:
            print(f"{node}: in quarantine since {_when(entry.since)} "
                  f"({'by hand' if entry.by_hand and not entry.run_id else 'run ' + entry.run_id}"
                  f", set by {entry.set_by}), clean re-validation runs {entry.clean_runs}"
                  + (", released only by hand" if entry.by_hand else ""))
            for reason in entry.reasons:
                print(f"  {reason}")
        else:
            print(f"{node}: not in quarantine")
        for h in history:
            print(f"  {_when(h['time'])}  {h['event']:<14} by {h['who']}: {h['why']}")
        for k in kept:
            print(f"  {_when(k.time)}  {'incident':<14} run {k.run_id}: {k.incident.message} "
                  f"({len(k.incident.nodes)} nodes; not quarantined for it)")
        if runs:
            print(f"{node}: {len(runs)} run(s) kept")
        for r in runs:
            speed = f"speed {r.speed:.3f}" if r.speed is not None else "speed -    "
            print(f"  {_when(r.time)}  {r.outcome:<7} {speed}  run {r.run_id}"
                  + (f": {'; '.join(r.reasons)[:200]}" if r.reasons else ""))
    if as_json:
        print(json.dumps({"ledger": ledger.where, "nodes": shown}, indent=2))
    return 1 if unknown else 0


def _add(ledger: Ledger, inventory, nodes: list[str], reason: str, who: str,
         as_json: bool) -> int:
    """Quarantine by hand: the ledger entry and history, then, with --inventory, its
    quarantine.actions (a Slurm drain, the command hook) for nodes new to quarantine."""
    cluster = inventory.cluster if inventory else ""
    done: list[dict[str, Any]] = []
    for node in nodes:
        new = ledger.quarantine_by_hand(node, cluster, reason, who)
        results = []
        if new and inventory is not None:
            results = quarantine_actions(ledger, inventory.quarantine, node, [],
                                         [f"by hand ({who}): {reason}"], None, who=who)
        done.append({"node": node, "new": new, "actions": [
            {"action": r.action, "ok": r.ok, "message": r.message} for r in results]})
        if not as_json:
            print(f"{node} quarantined by hand: {reason}" if new else
                  f"{node} was in quarantine already; now released only by hand: {reason}")
            for r in results:
                print(f"  {r.action}: {r.message}")
    if as_json:
        print(json.dumps({"ledger": ledger.where, "nodes": done}, indent=2))
    return 1 if any(not a["ok"] for d in done for a in d["actions"]) else 0


def _add_incident(ledger: Ledger, inventory, args) -> int:
    """`quarantine add --run RUN --check CHECK [NODES]`: a person judged a shared-cause
    incident to be node faults after all; its nodes (those of NODES, when given) are
    quarantined by hand, as `quarantine add` does, the incident named in the reason."""
    if not (args.run and args.check):
        print("burnin quarantine add: --run and --check go together", file=sys.stderr)
        return 2
    found = [k for k in ledger.incidents(run_id=args.run) if k.incident.check == args.check]
    if not found:
        print(f"burnin quarantine add: the ledger keeps no incident of {args.check} in run "
              f"{args.run} (burnin history NODE lists a node's incidents)", file=sys.stderr)
        return 2
    nodes = sorted({n for k in found for n in k.incident.nodes})
    if args.nodes:
        try:
            wanted = set(NodeSet(args.nodes))
        except NodeSetException as e:
            print(f"burnin quarantine add: {args.nodes!r} is not a hostlist: {e}",
                  file=sys.stderr)
            return 2
        strangers = wanted - set(nodes)
        if strangers:
            print(f"burnin quarantine add: not in the incident: {NodeSet.fromlist(strangers)}",
                  file=sys.stderr)
            return 2
        nodes = [n for n in nodes if n in wanted]
    what = "; ".join(k.incident.message for k in found)
    return _add(ledger, inventory, nodes,
                f"{args.reason} (incident of run {args.run}: {what})"[:1000],
                args.who or getpass.getuser(), args.json)


def _release(ledger: Ledger, nodes: list[str], reason: str, who: str, as_json: bool) -> int:
    done: list[dict[str, Any]] = []
    missing: list[str] = []
    for node in nodes:
        entry = ledger.release(node, reason, who)
        if entry is None:
            missing.append(node)
            continue
        item: dict[str, Any] = {"node": node, "actions": []}
        if entry.drained_by_burnin:  # an administrator's drain is never resumed
            r = actions.slurm_resume(node)
            ledger.note(node, "action", f"{r.action}: {r.message}", who=who)
            item["actions"].append({"action": r.action, "ok": r.ok, "message": r.message})
        done.append(item)
        if not as_json:
            print(f"{node} released from quarantine: {reason}")
            for a in item["actions"]:
                print(f"  {a['action']}: {a['message']}")
    if as_json:
        print(json.dumps({"ledger": ledger.where, "released": done,
                          "not_in_quarantine": missing}, indent=2))
    elif missing:
        print(f"not in quarantine, nothing to release: {NodeSet.fromlist(missing)}",
              file=sys.stderr)
    return 1 if missing else 0


def _reconcile(ledger: Ledger, done: Reconciled, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"ledger": ledger.where, "slurm": done.checked,
                          "reconciled": [{"node": r.node, "message": r.message}
                                         for r in done.drained],
                          "not_reconciled": [{"node": r.node, "message": r.message}
                                             for r in done.failed],
                          "left_to_administrator": done.left,
                          "not_recorded": done.unrecorded}, indent=2))
    elif not done.checked:
        print("quarantine.actions has no slurm: burnin does not drain in Slurm; nothing to "
              "reconcile")
    else:
        for line, _ in done.lines():
            print(line, file=sys.stderr if line.startswith(("NOT", "not")) else sys.stdout)
        for node, reason in sorted(done.left.items()):
            print(f"{node}: held, drained by someone else ({reason}): left as it is")
        print(f"reconciled with the ledger: {len(done.drained)} held node(s) drained, "
              f"{len(done.failed)} could not be")
    return 1 if done.failed else 0


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
