"""The `burnin` command: inventory check, admit, quarantine, report, compare."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sqlite3
import sys
import time
from pathlib import Path

from burnin import actions
from burnin.admit import ReportError, decide, read_junit, write_admitted
from burnin.checks import CHECKS
from burnin.inventory import InventoryError, load_inventory
from burnin.ledger import Ledger, ledger_path
from burnin.reports import publish


def _inventory_check(args) -> int:
    try:
        inv = load_inventory(args.file)
    except InventoryError as e:
        print(f"invalid inventory:\n{e}", file=sys.stderr)
        return 2
    rows = [("NODE", "ADDRESS", "TRANSPORT", "GPUS", "GPU_MODEL", "LABELS")]
    for n in inv.nodes:
        port = f":{n.ssh.port}" if n.transport == "ssh" and n.ssh.port != 22 else ""
        rows.append((n.name, n.address + port, n.transport,
                     "auto" if n.gpus is None else str(n.gpus), n.gpu_model or "-",
                     ",".join(f"{k}={v}" for k, v in sorted(n.labels.items())) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print(f"{inv.path}: cluster {inv.cluster}, {len(inv.nodes)} nodes, valid")
    return 0


def _admit(args) -> int:
    path = Path(args.junit)
    required = [c.strip() for c in args.require.split(",") if c.strip()] if args.require \
        else None
    unknown = [c for c in required or () if c not in CHECKS]
    if unknown:
        print(f"burnin admit: --require names unknown checks: {', '.join(unknown)}; "
              f"expected some of: {', '.join(CHECKS)}; no node is admitted", file=sys.stderr)
        return 2
    try:
        report = read_junit(path)
        inventory_nodes = inventory_require = None
        if args.inventory:
            inv = load_inventory(args.inventory)
            inventory_nodes = [n.name for n in inv.nodes]
            inventory_require = list(inv.require) if inv.require else None
    except ReportError as e:
        print(f"burnin admit: {e}; no node is admitted", file=sys.stderr)
        return 2
    except InventoryError as e:
        print(f"burnin admit: invalid inventory:\n{e}", file=sys.stderr)
        return 2
    decisions = decide(report, required, inventory_nodes, inventory_require)
    admitted = [d.node for d in decisions if d.admitted]
    rejected = {d.node: list(d.reasons) for d in decisions if not d.admitted}
    out_file = Path(args.admitted_file) if args.admitted_file else path.parent / "admitted.txt"
    try:
        write_admitted(out_file, decisions)
    except OSError as e:
        print(f"burnin admit: cannot write {out_file}: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"report": str(path), "admitted": admitted, "rejected": rejected,
                          "admitted_file": str(out_file)}, indent=2))
    else:
        print(f"admitted ({len(admitted)}): {', '.join(admitted) or '-'}")
        if rejected:
            print(f"rejected ({len(rejected)}):")
            for node, reasons in rejected.items():
                print(f"  {node}: {'; '.join(reasons)}")
        print(f"admitted list written to {out_file}")
    return 1 if rejected else 0


def _ledger_for(args) -> Ledger:
    if args.ledger:
        return Ledger(args.ledger)
    configured = None
    if args.inventory:
        configured = load_inventory(args.inventory).quarantine.ledger
    return Ledger(ledger_path(configured, Path("reports")))


def _quarantine(args) -> int:
    try:
        ledger = _ledger_for(args)
    except InventoryError as e:
        print(f"invalid inventory:\n{e}", file=sys.stderr)
        return 2
    except (OSError, sqlite3.Error) as e:
        print(f"cannot open the quarantine ledger: {e}", file=sys.stderr)
        return 2
    if args.action == "list":
        entries = ledger.entries()
        for e in entries:
            print(f"{e.node}  since {_when(e.since)}  checks {','.join(e.checks)}  "
                  f"clean runs {e.clean_runs}  run {e.run_id}"
                  + ("  (drained in Slurm by burnin)" if e.drained_by_burnin else ""))
        print(f"{len(entries)} node(s) in quarantine ({ledger.path})")
        return 0
    entry = ledger.get(args.node)
    if args.action == "show":
        if entry:
            print(f"{entry.node}: in quarantine since {_when(entry.since)} (run {entry.run_id},"
                  f" set by {entry.set_by}), clean re-validation runs {entry.clean_runs}")
            for reason in entry.reasons:
                print(f"  {reason}")
        else:
            print(f"{args.node}: not in quarantine")
        for h in ledger.history(args.node):
            print(f"  {_when(h['time'])}  {h['event']:<14} by {h['who']}: {h['why']}")
        return 0 if entry or ledger.history(args.node) else 1
    if entry is None:
        print(f"{args.node} is not in quarantine", file=sys.stderr)
        return 1
    ledger.release(args.node, args.reason, args.who or getpass.getuser())
    print(f"{args.node} released from quarantine: {args.reason}")
    if entry.drained_by_burnin:
        result = actions.slurm_resume(args.node)
        ledger.note(args.node, "action", f"{result.action}: {result.message}",
                    who=args.who or getpass.getuser())
        print(f"slurm: {result.message}")
    return 0


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _report(args) -> int:
    run_dir = Path(args.dir)
    try:
        report = read_junit(run_dir / "junit.xml", strict=False)
    except ReportError as e:
        print(f"burnin report: {e}", file=sys.stderr)
        return 2
    cluster = _junit_property(run_dir / "junit.xml", "cluster") or "?"
    verdicts = {n: {c: (o, m) for c, o, m in cases} for n, cases in report.cases.items()}
    publish(run_dir, cluster, run_dir.resolve().name, verdicts)
    print(f"wrote {run_dir / 'summary.html'}, {run_dir / 'metrics.prom'}")
    return 0


def _junit_property(path: Path, name: str) -> str | None:
    import xml.etree.ElementTree as ET
    for prop in ET.parse(path).getroot().iter("property"):
        if prop.get("name") == name:
            return prop.get("value")
    return None


def _compare(args) -> int:
    from burnin.figures import key_figures, read_records

    def figures(run: str) -> dict[tuple, float]:
        path = Path(run) / "results.jsonl"
        if not path.exists():
            raise ReportError(f"{path}: no such file")
        return {(r["node"], f.metric, f.labels): f.value
                for r in read_records(path) for f in key_figures(r)}
    try:
        a, b = figures(args.run_a), figures(args.run_b)
    except ReportError as e:
        print(f"burnin compare: {e}", file=sys.stderr)
        return 2
    moved = 0
    for key in sorted(set(a) & set(b)):
        old, new = a[key], b[key]
        change = (new - old) / old if old else (0.0 if new == old else float("inf"))
        if abs(change) > args.threshold:
            node, metric, labels = key
            where = ",".join(f"{k}={v}" for k, v in labels)
            print(f"{node} {metric}{{{where}}}: {old:g} -> {new:g} ({change:+.1%})")
            moved += 1
    for key in sorted(set(a) ^ set(b)):
        print(f"{key[0]} {key[1]}: only in {'A' if key in a else 'B'}")
    print(f"{moved} figure(s) moved by more than {args.threshold:.0%}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="burnin", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    inv = sub.add_parser("inventory", help="work with inventories")
    inv_sub = inv.add_subparsers(dest="action", required=True)
    check = inv_sub.add_parser("check", help="validate FILE and print its expanded nodes")
    check.add_argument("file")
    check.set_defaults(func=_inventory_check)

    admit = sub.add_parser("admit", help="which nodes a junit.xml lets into production")
    admit.add_argument("junit")
    admit.add_argument("--inventory", help="also reject inventory nodes the report lacks")
    admit.add_argument("--require", metavar="CHECK,...",
                       help="checks every node must pass (default: every check of the suite "
                            "that applies to the node, or the inventory's admission.require)")
    admit.add_argument("--json", action="store_true", help="machine-readable output")
    admit.add_argument("--admitted-file", metavar="PATH",
                       help="where to write the admitted nodes (default: beside the report)")
    admit.set_defaults(func=_admit)

    q = sub.add_parser("quarantine", help="the quarantine ledger")
    q.add_argument("--ledger", help="ledger file (default: the inventory's, or "
                                    "reports/quarantine.db)")
    q.add_argument("--inventory", help="take the ledger path from this inventory")
    q_sub = q.add_subparsers(dest="action", required=True)
    q_sub.add_parser("list", help="nodes in quarantine")
    show = q_sub.add_parser("show", help="one node's entry and history")
    show.add_argument("node")
    release = q_sub.add_parser("release", help="take a node out of quarantine by hand")
    release.add_argument("node")
    release.add_argument("--reason", required=True)
    release.add_argument("--who", help="who releases it (default: the current user)")
    q.set_defaults(func=_quarantine)

    report = sub.add_parser("report", help="render summary.html and metrics.prom again from "
                                           "a run directory (junit.xml, results.jsonl)")
    report.add_argument("dir")
    report.set_defaults(func=_report)
    compare = sub.add_parser("compare", help="per node, the figures that moved between runs")
    compare.add_argument("run_a")
    compare.add_argument("run_b")
    compare.add_argument("--threshold", type=float, default=0.1,
                         help="relative change worth reporting (default 0.1 = 10%%)")
    compare.set_defaults(func=_compare)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # `burnin ... | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
