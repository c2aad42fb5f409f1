"""The `burnin` command's parser and its commands; `main` is its one error boundary: a
BurninError that reaches it is printed as its message and ends the command with its
exit_code (burnin/errors.py), never a traceback. What --help says to the user is in
burnin/cli/usage.py; the commands with more to them each have a module here (ledger,
quarantine, incident, compare, rejudge).

Layer 13: may import every layer; nothing of burnin imports it but `python -m burnin`."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import fields
from pathlib import Path

from burnin import __version__, extensions
from burnin.checks import CHECKS
from burnin.cli import incident as cli_incident
from burnin.cli import ledger as cli_ledger
from burnin.cli import quarantine as cli_quarantine
from burnin.cli import remediate as cli_remediate
from burnin.cli import usage
from burnin.core.shipped_files import inventory as shipped_inventory
from burnin.core.shipped_files import shipped
from burnin.errors import BurninError, NotShipped
from burnin.gate.admit import ReportError, decide, read_junit, write_admitted
from burnin.inventory.schema import InventoryError, load_inventory
from burnin.ledger.api import LedgerError
from burnin.ledger.open import open_configured
from burnin.model.verdict import clean
from burnin.nodecheck import run as nodecheck_run
from burnin.report.publish import publish
from burnin.transports import TABLE, settings_of

# `burnin run` pins pytest's configuration to this file, so that no pytest.ini, tox.ini
# or pyproject.toml around the install or the working directory changes the suites' run.
RUN_INI = "pytest-run.ini"


def run_suites(pytest_args: list[str]) -> int:
    """`burnin run [--inventory FILE] [pytest args]`: the shipped suites under pytest, from
    any directory. Reports land in ./reports (pytest's rootdir is the working directory)
    unless --reports says otherwise; with no --inventory, the shipped localhost.yaml
    validates this machine. Returns pytest's exit code."""
    import pytest

    if "-h" in pytest_args or "--help" in pytest_args:  # pytest's help, after burnin's
        from burnin.cli import usage
        print(f"usage: burnin run [--inventory FILE] [pytest args]\n\n"
              f"{usage.COMMANDS['run'][0]}\n\n{usage.epilog('run')}\n\n"
              "pytest's help follows; burnin's own options are under 'burnin':\n")
    try:
        suites = shipped("suites")
    except NotShipped as e:
        print(f"burnin run: {e}", file=sys.stderr)
        return int(pytest.ExitCode.USAGE_ERROR)
    ini = Path(__file__).resolve().parent.parent / "data" / RUN_INI
    args = [str(suites), "-c", str(ini), "--rootdir", os.getcwd(), "--confcutdir", str(suites)]
    if not any(a == "--inventory" or a.startswith("--inventory=") for a in pytest_args):
        args += ["--inventory", str(shipped_inventory())]
    return int(pytest.main(args + pytest_args))


def _inventory_check(args) -> int:
    try:
        inv = load_inventory(args.file)
    except InventoryError as e:
        if args.json:
            print(json.dumps({"path": str(args.file), "valid": False,
                              "errors": str(e).splitlines()}, indent=2))
        else:
            print(f"invalid inventory:\n{e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"path": str(inv.path), "valid": True, "cluster": inv.cluster,
                          "nodes": [_node_dict(n) for n in inv.nodes]}, indent=2))
        return 0
    rows = [("NODE", "ADDRESS", "TRANSPORT", "GPUS", "GPU_MODEL", "LABELS", "ENV")]
    for n in inv.nodes:
        port = f":{n.ssh.port}" if n.transport == "ssh" and n.ssh.port != 22 else ""
        rows.append((n.name, n.address + port, n.transport,
                     "auto" if n.gpus is None else str(n.gpus), n.gpu_model or "-",
                     ",".join(f"{k}={v}" for k, v in sorted(n.labels.items())) or "-",
                     # quoted for reading only: no shell ever sees these values
                     " ".join(f"{k}={shlex.quote(v)}" for k, v in n.env.items()) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print(f"{inv.path}: cluster {inv.cluster}, {len(inv.nodes)} nodes, valid")
    return 0


def _node_dict(n) -> dict:
    out = {"name": n.name, "address": n.address, "transport": n.transport,
           "gpus": "auto" if n.gpus is None else n.gpus, "gpu_model": n.gpu_model,
           "cpu_devices": n.cpu_devices, "python": n.python, "workdir": n.workdir,
           "labels": dict(n.labels), "checks": n.checks, "env": dict(n.env)}
    # The node's transport's settings, those its row marks shown (burnin/transports).
    row = TABLE.get(n.transport)
    if row is not None and row.settings is not None:
        own = settings_of(n, n.transport)
        out[n.transport] = {f.name: list(v) if isinstance(v := getattr(own, f.name), tuple)
                            else v for f in fields(row.settings) if f.metadata.get("shown")}
    return out


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
        inventory_nodes = inventory_require = inv = None
        if args.inventory:
            inv = load_inventory(args.inventory)
            inventory_nodes = [n.name for n in inv.nodes]
            inventory_require = list(inv.require) if inv.require else None
        quarantined, held = _held(args, path, inv)
    except ReportError as e:
        print(f"burnin admit: {e}; no node is admitted", file=sys.stderr)
        return 2
    except InventoryError as e:
        print(f"burnin admit: invalid inventory:\n{e}", file=sys.stderr)
        return 2
    except (OSError, LedgerError) as e:
        print(f"burnin admit: cannot read the quarantine ledger: {e}; no node is admitted",
              file=sys.stderr)
        return 2
    decisions = decide(report, required, inventory_nodes, inventory_require, quarantined,
                       args.min_speed, held)
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


def _held(args, junit: Path, inv) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """({node: why} in the quarantine ledger, {node: why} held by an open incident), with
    --ledger or --inventory (its quarantine.ledger, or the run's default: quarantine.db
    beside the run directories), from one opening of the ledger; (None, None) with
    neither. A ledger that is not there is an error: a node we cannot look up is not
    vouched for."""
    if not args.ledger and inv is None:
        return None, None
    ledger = open_configured(inv.quarantine if inv else None, junit.resolve().parent.parent,
                             given=args.ledger)
    return ({e.node: (f"since run {e.run_id}: " if e.run_id else "") + "; ".join(e.reasons)
             for e in ledger.entries()}, ledger.incident_holds())


def _report(args) -> int:
    run_dir = Path(args.dir)
    report = read_junit(run_dir / "junit.xml", strict=False)  # ReportError: main says it
    cluster = _junit_property(run_dir / "junit.xml", "cluster") or "?"
    verdicts: dict[str, dict[str, tuple[str, str]]] = {
        n: {c: (o, m) for c, o, m in cases} for n, cases in report.cases.items()}
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
    from burnin.cli.compare import compare, run_figures
    # a RunError (no results.jsonl) is said by main
    result = compare(run_figures(Path(args.run_a)), run_figures(Path(args.run_b)),
                     args.threshold)
    regressed = result.regressions
    if args.json:
        print(json.dumps({"run_a": args.run_a, "run_b": args.run_b,
                          "threshold": args.threshold,
                          "moved": [m.to_dict() for m in result.moves],
                          "regressed": len(regressed),
                          "only_in_a": [dict(zip(("node", "metric", "labels"), k, strict=True))
                                        for k in result.only_a],
                          "only_in_b": [dict(zip(("node", "metric", "labels"), k, strict=True))
                                        for k in result.only_b]}, indent=2))
    else:
        # Node names, devices and ports come from the runs' results.jsonl: node text,
        # made safe for the terminal (ESC, C1, bidi) here as everywhere it is shown.
        for m in result.moves:
            where = ",".join(f"{k}={v}" for k, v in m.labels.items())
            print(clean(f"{m.node} {m.metric}{{{where}}}: {m.old:g} -> {m.new:g} "
                        f"({m.change:+.1%})" + ("  REGRESSED" if m.regressed else "")))
        for which, keys in (("A", result.only_a), ("B", result.only_b)):
            for node, metric, _ in keys:
                print(clean(f"{node} {metric}: only in {which}"))
        print(f"{len(result.moves)} figure(s) moved by more than {args.threshold:.0%}, "
              f"{len(regressed)} of them the wrong way")
    return 1 if regressed else 0


def _rejudge(args) -> int:
    from burnin.cli.rejudge import rejudge
    # a RejudgeError (no trusted report, no inventory) is said by main
    total, changes = rejudge(Path(args.dir), Path(args.inventory) if args.inventory else None)
    if args.json:
        print(json.dumps({"run_dir": args.dir, "inventory": args.inventory, "judged": total,
                          "changed": [{"node": c.node, "check": c.check,
                                       "was": c.was.outcome, "was_message": c.was.message,
                                       "now": c.now.outcome, "now_message": c.now.message}
                                      for c in changes]}, indent=2))
        return 1 if changes else 0
    for c in changes:  # node text, made safe for the terminal
        # Same outcome, another reason (a failure for another cause): say so.
        same = " (another reason)" if c.was.outcome == c.now.outcome else ""
        print(clean(f"{c.node} {c.check}: {c.was.outcome} -> {c.now.outcome}{same}"
                    + (f": {c.now.message}" if c.now.message else "")))
        if c.was.message:
            print(clean(f"    was: {c.was.message}"))
    if not total:
        print("burnin rejudge: the run has no testcase with a probe record behind it",
              file=sys.stderr)
        return 2
    print(f"{total} verdict(s) judged again, {len(changes)} would change"
          if changes else f"{total} verdict(s) judged again, every one as the run's")
    return 1 if changes else 0


def _speed(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a relative speed above 0, at most 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="burnin")
    p.add_argument("--version", action="version", version=f"burnin {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    _add_admission(sub)
    cli_quarantine.add_parser(sub, cli_ledger.history)
    cli_ledger.add_parser(sub)
    cli_incident.add_parser(sub)
    cli_remediate.add_parser(sub)
    _add_node_check(sub)
    _add_run_records(sub)
    usage.apply(p)  # every command's --help: what it does, its exit codes, an example
    return p


def _add_admission(sub) -> None:
    """run (listed for --help), inventory check, admit."""
    # Parsed by pytest, not here (see main): listed for --help.
    sub.add_parser("run", help="run the acceptance suites: burnin run [--inventory FILE] "
                               "[pytest args] (see burnin run --help); with --rolling, "
                               "re-validate a fleet in production in waves "
                               "(docs/operator/rolling.md)")
    inv = sub.add_parser("inventory", help="work with inventories")
    inv_sub = inv.add_subparsers(dest="action", required=True)
    check = inv_sub.add_parser("check", help="validate FILE and print its expanded nodes")
    check.add_argument("file")
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.set_defaults(func=_inventory_check)

    admit = sub.add_parser("admit", help="which nodes a junit.xml lets into production")
    admit.add_argument("junit")
    admit.add_argument("--inventory", help="also reject inventory nodes the report lacks, "
                                           "and nodes in its quarantine ledger")
    admit.add_argument("--ledger", help="reject nodes in this quarantine ledger (default "
                                        "with --inventory: the inventory's ledger)")
    admit.add_argument("--require", metavar="CHECK,...",
                       help="checks every node must pass (default: every check of the suite "
                            "that applies to the node, or the inventory's admission.require)")
    admit.add_argument("--json", action="store_true", help="machine-readable output")
    admit.add_argument("--min-speed", type=_speed, metavar="S",
                       help="also reject nodes slower than S (0 to 1) against their fleet "
                            "(junit.xml's relative_speed; off by default)")
    admit.add_argument("--admitted-file", metavar="PATH",
                       help="where to write the admitted nodes (default: beside the report)")
    admit.set_defaults(func=_admit)


def _add_node_check(sub) -> None:
    node_check = sub.add_parser(
        "node-check", help="on a node, between runs: the fast checks (NVML, XIDs since the "
                           "last check, fabric ports, storage mount, host, DCGM health) as "
                           "Slurm's HealthCheckProgram, Prolog or Epilog; exit 0 fit, 1 "
                           "found something, 2 usage, 3 could not drain "
                           "(docs/operator/node-check.md)")
    nodecheck_run.add_arguments(node_check)
    node_check.set_defaults(func=nodecheck_run.main)


def _add_run_records(sub) -> None:
    """A run's records again: report, compare, rejudge."""
    report = sub.add_parser("report", help="render summary.html and metrics.prom again from "
                                           "a run directory (junit.xml, results.jsonl)")
    report.add_argument("dir")
    report.set_defaults(func=_report)
    compare = sub.add_parser("compare", help="per node, the figures that moved between runs; "
                                             "exit 1 when one regressed")
    compare.add_argument("run_a")
    compare.add_argument("run_b")
    compare.add_argument("--threshold", type=float, default=0.1,
                         help="relative change worth reporting (default 0.1 = 10%%)")
    compare.add_argument("--json", action="store_true", help="machine-readable output")
    compare.set_defaults(func=_compare)
    rejudge = sub.add_parser("rejudge", help="judge a run again from its results.jsonl: with "
                                             "its own settings, or what-if with --inventory; "
                                             "exit 1 when a verdict would change")
    rejudge.add_argument("dir", help="the run's directory (reports/<run-id>)")
    rejudge.add_argument("--inventory", help="judge with this inventory's settings instead "
                                             "of the copy the run kept")
    rejudge.add_argument("--json", action="store_true", help="machine-readable output")
    rejudge.set_defaults(func=_rejudge)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:  # every command sees the installed distributions' checks, transports, ...
        extensions.load()
    except BurninError as e:
        print(clean(f"burnin: {e}"), file=sys.stderr)
        return e.exit_code
    if argv[:1] == ["run"] and "--rolling" in argv[1:]:  # waves of runs (cli/rolling.py)
        from burnin.cli import rolling
        return rolling.main(argv[1:])
    if argv[:1] == ["run"]:  # everything after `run` is pytest's (and burnin's plugin's)
        return run_suites(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # `burnin ... | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except BurninError as e:  # the one boundary: a message and its exit code
        words = " ".join(w for w in (args.command, getattr(args, "action", None)) if w)
        print(clean(f"burnin {words}: {e}"), file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
