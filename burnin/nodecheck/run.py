"""`burnin node-check`: find this node in the inventory, run its checks within the time
budget, keep the cursor, and act as the mode says (burnin/nodecheck/slurm.py).

Exit status: 0 the node is fit (or, as HealthCheckProgram, what was found is now Slurm's
drain reason); 1 something was found (check, prolog, epilog: Slurm drains the node and
requeues the job); 2 usage: a bad or untrusted inventory or executable, a node not in it,
a wrong place to run; 3 as HealthCheckProgram, the node could not be drained or resumed
(scontrol failed); 4 an internal error. Every status but 0 and 1 is one line on stderr
(slurmd's log) and, with a textfile directory, `burnin_node_check_up 0` (up.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

from burnin.checks import CHECKS
from burnin.core.rootfiles import refusal, running_as_root, untrusted
from burnin.core.safetext import safe_text
from burnin.inventory import yamlsource
from burnin.inventory.schema import InventoryError, load_inventory
from burnin.model.nodes import Inventory, Node
from burnin.nodecheck import budget, cursor, dcgm, fabric, gpu, host, keep, record, storage, up
from burnin.nodecheck.model import NODE_CHECKS, CheckResult, Finding
from burnin.nodecheck.slurm import (
    FALLBACK_PATH,
    MODES,
    Scontrol,
    SlurmError,
    UsageError,
    checks_named,
    drain_reason,
    mode_from,
    ours,
)

OK, FOUND, USAGE, ACTION_FAILED, INTERNAL = 0, 1, 2, 3, 4
# The node is not drained by node-check (any more): someone resumed it after the events
# that held it, and they hold it no longer.
RELEASED = "not drained by node-check"
PROFILE = "quick"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inventory", required=True, help="the inventory the controller uses")
    p.add_argument("--node", help="this node's name in the inventory (default: "
                                  "SLURMD_NODENAME, else the hostname)")
    p.add_argument("--mode", choices=MODES, help="health: drain this node on a finding and "
                   "resume only node-check's own drain (HealthCheckProgram); prolog, epilog: "
                   "report and exit 1, never scontrol; check: report only (default by hand; "
                   "Slurm's prolog and epilog are told apart by SLURM_SCRIPT_CONTEXT)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--textfile", help="node_exporter's textfile directory, for "
                   "burnin_node_check_up even when the inventory cannot be read (default: "
                   "node_check.textfile)")


def find_node(inventory: Inventory, given: str | None, env: dict) -> Node:
    names = [given] if given else [env.get("SLURMD_NODENAME"), socket.gethostname(),
                                   socket.gethostname().split(".")[0]]
    for name in filter(None, names):
        try:
            return inventory.node(name)
        except KeyError:
            continue
    raise UsageError(f"node {' or '.join(dict.fromkeys(filter(None, names)))} is not in "
                     f"{inventory.path}; name it with --node")


def plan(inventory: Inventory, node: Node, workdir: Path, last: dict,
         checks_deadline: float) -> dict:
    """The checks to run on this node, each a callable, in NODE_CHECKS order."""
    settings = inventory.node_check
    health = CHECKS["health"].resolve(PROFILE, inventory.checks.get("health") or {},
                                      node.checks.get("health") or {})
    fab = CHECKS["fabric"].resolve(PROFILE, inventory.checks.get("fabric") or {},
                                   node.checks.get("fabric") or {})
    dcgmi = CHECKS["dcgm"].resolve(PROFILE, inventory.checks.get("dcgm") or {},
                                   node.checks.get("dcgm") or {}).get("dcgmi") or "dcgmi"
    good = last.get("last_good") or {}
    gpu_node = node.gpus != 0
    out = {
        "gpu": (lambda: gpu.check(node, inventory.model(node), health, good, checks_deadline))
        if gpu_node
        else None,
        "xid": lambda: cursor.check(health.get("kernel_log"), bool(node.gpus) or bool(
            good.get("gpus")) or bool(node.gpu_model), last.get("cursor")),
        "fabric": lambda: fabric.check(str(fab.get("sysfs_root") or "/sys/class/infiniband"),
                                       node.hcas, fab.get("rate_gbps")),
        "storage": lambda: storage.check(node.storage.path, node.storage.mount, node.name,
                                         checks_deadline),
        "host": lambda: host.check(node, health, str(workdir), good, settings.min_free_gib),
        "dcgm": (lambda: dcgm.check(dcgmi, checks_deadline))
        if settings.dcgm == "auto" and dcgm.installed(dcgmi) else None,
    }
    return {name: out[name] for name in NODE_CHECKS
            if out[name] is not None and name not in settings.skip}


class _Seen:
    """What main() learnt before it failed: where to say it could not run."""

    def __init__(self, textfile: str | None):
        self.textfile = textfile


def main(args: argparse.Namespace) -> int:
    seen = _Seen(getattr(args, "textfile", None))
    try:
        return _main(args, seen)
    except Exception as e:  # never silent: one line for slurmd's log, and the textfile's 0
        budget.kill_children()
        return _cannot(seen, INTERNAL, "internal", f"internal error: {type(e).__name__}: {e}")


def _cannot(seen: _Seen, code: int, reason: str, message: str) -> int:
    """node-check could not judge the node: say so in one line and in the textfile."""
    print(f"burnin node-check: {safe_text(message, multiline=False)}", file=sys.stderr)
    why = up.write(seen.textfile, False, reason)
    if why:
        print(f"burnin node-check: {why}", file=sys.stderr)
    sys.stderr.flush()
    return code


def _textfile_of(path: str) -> str | None:
    """node_check.textfile of an inventory the schema refused: read from its YAML where
    that parses (and, as root, is root's: an untrusted file names no place root writes)."""
    try:
        doc = yamlsource.load(Path(path))
        value = doc.get("node_check", {}).get("textfile")
    except (yamlsource.SourceErrors, AttributeError):
        return None
    return value if isinstance(value, str) and value.startswith("/") else None


def _untrusted_executables(inventory: Inventory, node: Node, mode: str) -> str:
    """As root: the first executable node-check would run that root must not trust."""
    if not running_as_root():
        return ""
    names = []
    if mode == "health":
        names.append(("node_check.scontrol", inventory.node_check.scontrol))
    if inventory.node_check.dcgm == "auto" and "dcgm" not in inventory.node_check.skip:
        names.append(("checks.dcgm.dcgmi", _dcgmi(inventory, node)))
    for what, name in names:
        path = shutil.which(name) or shutil.which(name, path=FALLBACK_PATH)
        if path is None:
            continue  # not found: the check that runs it says so
        problem = untrusted(path) or untrusted(os.path.realpath(path))
        if problem:
            return refusal(what, path, problem)
    return ""


def _dcgmi(inventory: Inventory, node: Node) -> str:
    return CHECKS["dcgm"].resolve(PROFILE, inventory.checks.get("dcgm") or {},
                                  node.checks.get("dcgm") or {}).get("dcgmi") or "dcgmi"


def _main(args: argparse.Namespace, seen: _Seen) -> int:
    started = time.monotonic()
    env = dict(os.environ)
    try:
        mode = mode_from(args.mode, env)
        inventory = load_inventory(args.inventory)
        seen.textfile = seen.textfile or inventory.node_check.textfile
        node = find_node(inventory, args.node, env)
    except InventoryError as e:
        seen.textfile = seen.textfile or _textfile_of(args.inventory)
        return _cannot(seen, USAGE, "inventory",
                       "invalid inventory: " + "; ".join(str(e).splitlines())[:2000])
    except (UsageError, OSError) as e:
        return _cannot(seen, USAGE, "usage", str(e))
    refused = _untrusted_executables(inventory, node, mode)
    if refused:
        return _cannot(seen, USAGE, "untrusted executable", refused)
    settings = inventory.node_check
    deadline = started + settings.budget_s
    # Room kept inside the budget to read and change the drain (HealthCheckProgram) and to
    # write to a shared ledger.
    acts = mode == "health" or record.shared_ledger(inventory.quarantine.ledger)
    reserve = min(1.5, settings.budget_s / 3) if acts else 0.1
    checks_deadline = deadline - reserve
    workdir = Path(os.path.expanduser(node.workdir))
    # {node}: several node-checks on one host (a test cluster, as Slurm's %n) keep apart
    state_dir = Path(settings.state_dir.replace("{node}", node.name))
    last, findings = keep.load(state_dir, checks_deadline)
    results = budget.run_checks(plan(inventory, node, workdir, last or {}, checks_deadline),
                                checks_deadline, settings.budget_s)
    for r in results:
        findings += r.findings
    failures = [f for f in findings if not f.warn]
    held = keep.save(state_dir, last, results, failures, checks_deadline + reserve / 3,
                     findings)
    failures = [f for f in findings if not f.warn]
    code, acted = OK, ""
    if mode == "health":
        code, acted = _health(inventory, node, failures, held, deadline)
        if held and not failures and acted == RELEASED:
            keep.let_go(state_dir, held, deadline, findings)
    elif failures:
        code = FOUND
    _write_down(inventory, node, mode, failures, acted, deadline)
    _report(args, node, mode, results, findings, acted, time.monotonic() - started)
    if mode in ("prolog", "epilog") and failures:
        # What Slurm keeps of a failed prolog: one line, in slurmd's log.
        print(drain_reason([f.line() for f in failures]), file=sys.stderr)
    why = up.write(seen.textfile, True, failures=len(failures))
    if why:
        print(f"burnin node-check: {why}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    budget.kill_children()
    if any(t.name.startswith("node-check-") and t.is_alive() for t in threading.enumerate()):
        os._exit(code)  # a hung check's thread is left behind, never waited for
    return code


def _write_down(inventory: Inventory, node: Node, mode: str, failures: list[Finding],
                acted: str, deadline: float) -> None:
    """Ledger events, where the ledger is shared (record.py): a drain or a failed prolog or
    epilog, and a drain lifted; nothing for a finding already the node's drain reason."""
    if mode == "health" and acted.startswith("drained: "):
        lines, event = [f.line() for f in failures], record.FOUND
    elif mode == "health" and acted.startswith("resumed"):
        lines, event = [acted], record.RESUMED
    elif mode in ("prolog", "epilog") and failures:
        lines, event = [f"{mode}: {f.line()}" for f in failures], record.FOUND
    else:
        return
    why = record.record(inventory.quarantine.ledger, node.name, event, lines, deadline,
                        inventory.quarantine.ledger_insecure)
    if why:
        print(f"burnin node-check: not written to the ledger: {why}", file=sys.stderr)


def _health(inventory: Inventory, node: Node, failures: list[Finding], held: list[str],
            deadline: float) -> tuple[int, str]:
    """Drain this node with node-check's reason, or lift node-check's own drain; never
    touch a drain someone else set. (exit status, what was done)"""
    try:
        slurm = Scontrol(inventory.node_check.scontrol, node.name)
        now = slurm.show(budget.remaining(deadline))
        if failures:
            reason = drain_reason([f.line() for f in failures])
            if now.drained and not ours(now.reason):
                return OK, f"left drained by someone else ({now.reason!r})"
            if now.drained and checks_named(now.reason) == {f.check for f in failures}:
                # the same checks still fail: the reason stands (a figure in it may move)
                return OK, "already drained by node-check for this"
            slurm.drain(reason, budget.remaining(deadline))
            return OK, f"drained: {reason}"
        if now.drained and ours(now.reason):
            if held:
                return OK, (f"left drained: {len(held)} event(s) this boot need a person or "
                            f"a reboot: {held[-1]}")
            slurm.resume(budget.remaining(deadline))
            return OK, f"resumed (was: {now.reason})"
        return OK, RELEASED
    except SlurmError as e:
        print(f"burnin node-check: {e}", file=sys.stderr)
        return ACTION_FAILED, f"could not act: {e}"


def _report(args, node: Node, mode: str, results: list[CheckResult], findings: list[Finding],
            acted: str, elapsed: float) -> None:
    failures = [f for f in findings if not f.warn]
    if args.json:
        print(json.dumps({
            "node": node.name, "mode": mode, "ok": not failures,
            "elapsed_s": round(elapsed, 3), "action": "" if acted == RELEASED else acted,
            "checks": [{"check": r.check, "finished": r.finished, "elapsed_s": r.elapsed_s,
                        "findings": [{"check": f.check, "text": f.text, "warn": f.warn,
                                      "event": f.event}
                                     for f in r.findings]} for r in results],
            "other": [{"check": f.check, "text": f.text, "warn": f.warn, "event": f.event}
                      for f in findings if f.check == "state"
                      and not any(f is g for r in results for g in r.findings)]}, indent=1))
        return
    ran = ", ".join(r.check for r in results)
    head = "ok" if not failures else f"{len(failures)} finding(s)"
    print(f"burnin node-check {node.name} ({mode}): {head} in {elapsed:.2f} s [{ran}]")
    for f in findings:
        print(f"  {'warning' if f.warn else 'FAIL'} {f.line()}")
    if acted and acted != RELEASED:
        print(f"  slurm: {acted}")
