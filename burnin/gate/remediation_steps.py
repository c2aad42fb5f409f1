"""The remediation ladder's steps, each one command and its bounded output: whether a node
is busy (Slurm's squeue, or the site's busy hook), a GPU reset over the node's transport,
a reboot (Slurm's own `scontrol reboot ASAP nextstate=DRAIN`, or the site's command), and
the RMA bundle with its ticket hook. Nothing here decides what comes next:
burnin/gate/remediation.py does."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from burnin.core.rootfiles import refusal, running_as_root, untrusted
from burnin.core.safefiles import write_atomically
from burnin.model.nodes import Inventory, Node
from burnin.model.remediation import RemediationSettings
from burnin.model.verdict import clean
from burnin.transports import LAUNCHERS, NodeUnreachable, transport_for

# Slurm's answers are quick; a controller that does not answer within this is "unknown".
SLURM_TIMEOUT_S = 30.0
REBOOT_REASON = "burnin: remediation reboot"


@dataclass(frozen=True)
class Done:
    """What one command did: whether it worked, its exit status and bounded output."""

    ok: bool
    said: str  # "exit 0", "timed out after 600 s", "not found: ..."
    output: str = ""
    pending: bool = False  # asked for (a Slurm reboot) and not done yet: wait, not escalate


def bounded(text: str | bytes, limit: int) -> str:
    """`text` made safe to store, its last `limit` characters (where a command's verdict
    usually is), with how much was left out."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = clean(text.strip())
    if len(text) <= limit:
        return text
    return f"[{len(text) - limit} characters left out] " + text[len(text) - limit:]


def filled(argv: tuple[str, ...], **values: str) -> list[str]:
    """`argv` with {node}, {address}, {bundle} replaced: each word stays one argument."""
    out = []
    for word in argv:
        for key, value in values.items():
            word = word.replace("{" + key + "}", value)
        out.append(word)
    return out


KILL_WAIT_S = 2.0  # after a time-out, how long what is left of its output is waited for


def local(argv: list[str], timeout_s: float, limit: int) -> Done:
    """`argv` on the controller, bounded in time and in what is kept of its output. It runs
    in a process group of its own, killed whole at the time-out: a shell's child (a
    `sleep`, an ssh) that outlived its shell held the output pipes, and the wait with it."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        return Done(False, f"could not run {argv[0]}: {e.strerror or e}")
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:  # a child that left the group may still hold a pipe: not waited on for long
            out, err = proc.communicate(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = b"", b""
        return Done(False, f"timed out after {timeout_s:g} s", bounded(out + err, limit))
    return Done(proc.returncode == 0, f"exit {proc.returncode}", bounded(out + err, limit))


def untrusted_by_root(settings: RemediationSettings) -> list[str]:
    """Run as root: why a command it would run on the controller, or a directory it would
    write, is not root's alone (another user could swap what root runs or where it
    writes); [] when all are, or when not root."""
    if not running_as_root():
        return []
    problems = []
    for key in ("reboot_command", "busy_command", "ticket_command"):
        argv = getattr(settings, key)
        found = shutil.which(argv[0]) if argv else None
        if argv and found is None:
            problems.append(f"remediation.{key}: {argv[0]} not found")
        elif found:
            problem = untrusted(found) or untrusted(os.path.realpath(found))
            if problem:
                problems.append(refusal(f"remediation.{key}", found, problem))
    for key in ("rma_dir", "reports"):
        where = getattr(settings, key)
        problem = untrusted(where)
        if problem:
            problems.append(refusal(f"remediation.{key}", where, problem))
    return problems


def on_slurm(inv: Inventory, node: Node) -> bool:
    return "slurm" in inv.quarantine.actions or node.transport in LAUNCHERS


def busy(inv: Inventory, node: Node) -> str:
    """Why `node` may not be touched now ('' when it is idle). A node whose state cannot
    be read is busy: nothing runs on a node that might have jobs."""
    r = inv.remediation
    if on_slurm(inv, node):
        done = local(["squeue", "-h", "-w", node.name, "-o", "%i"], SLURM_TIMEOUT_S,
                     r.output_bytes)
        if not done.ok:
            return f"squeue could not say whether it has jobs ({done.said}: {done.output})"
        return f"jobs running: {' '.join(done.output.split())}" if done.output else ""
    if not r.busy_command:
        return ("not on Slurm and no remediation.busy_command: whether it has jobs cannot "
                "be told")
    argv = filled(r.busy_command, node=node.name, address=node.address)
    done = local(argv, r.command_timeout_s, r.output_bytes)
    if done.said == "exit 1":
        return ""
    return f"busy_command says busy ({done.said}{': ' + done.output if done.output else ''})"


def reset(node: Node, settings: RemediationSettings, probes_dir: Path, run_id: str) -> Done:
    """The GPU reset command on the node, over its transport."""
    if node.transport in LAUNCHERS:
        return Done(False, f"a {node.transport} node has no transport of its own to reset "
                           "its GPUs over")
    argv = filled(settings.reset_command, node=node.name, address=node.address)
    try:
        transport = transport_for(node, probes_dir, run_id)
    except NodeUnreachable as e:
        return Done(False, f"unreachable: {e}")
    try:
        res = transport.run(argv, b"", settings.command_timeout_s,
                            max_stdout=max(settings.output_bytes, 1) * 4)
    except NodeUnreachable as e:
        return Done(False, f"unreachable: {e}")
    finally:
        transport.close()
    said = (f"timed out after {settings.command_timeout_s:g} s" if res.timed_out
            else f"exit {res.exit_code}")
    return Done(res.exit_code == 0, said,
                bounded(res.stdout + res.stderr_tail, settings.output_bytes))


def can_reboot(inv: Inventory, node: Node) -> bool:
    way = inv.remediation.reboot
    if way == "auto":
        way = "slurm" if on_slurm(inv, node) else "command"
    return way == "slurm" or bool(inv.remediation.reboot_command)


def reboot(inv: Inventory, node: Node) -> Done:
    """Reboot `node`: through Slurm, which drains it first and brings it back drained
    (held for re-validation, never resumed), waiting until it is back; or the site's
    command on the controller."""
    r = inv.remediation
    way = r.reboot if r.reboot != "auto" else ("slurm" if on_slurm(inv, node) else "command")
    if way == "command":
        return local(filled(r.reboot_command, node=node.name, address=node.address),
                     r.command_timeout_s, r.output_bytes)
    asked = local(["scontrol", "reboot", "ASAP", "nextstate=DRAIN",
                   f"reason={REBOOT_REASON}", node.name], SLURM_TIMEOUT_S, r.output_bytes)
    if not asked.ok and "Invalid state: DRAIN" in asked.output:
        # A Slurm whose reboot takes only nextstate=RESUME|DOWN (22.05) clears an ASAP
        # reboot's DRAIN once the node is back (scontrol(1)): DOWN keeps the node out of
        # service for its re-validation, as DRAIN would.
        asked = local(["scontrol", "reboot", "ASAP", "nextstate=DOWN",
                       f"reason={REBOOT_REASON}", node.name], SLURM_TIMEOUT_S,
                      r.output_bytes)
    if not asked.ok:
        return asked
    deadline = time.monotonic() + r.command_timeout_s
    state = ""
    while time.monotonic() < deadline:
        shown = local(["scontrol", "show", "node", node.name, "--oneliner"], SLURM_TIMEOUT_S,
                      4000)
        state = next((w.split("=", 1)[1] for w in shown.output.split()
                      if w.startswith("State=")), "")
        # back: no reboot flag left (DOWN or DRAIN as asked; never resumed by us)
        if shown.ok and state and "REBOOT" not in state:
            return Done(True, f"back as {state}", asked.output)
        time.sleep(2)
    return Done(False, f"not back from reboot after {r.command_timeout_s:g} s (state "
                       f"{state or 'unknown'})", asked.output, pending=True)


def rebooting(inv: Inventory, node: Node) -> str:
    """The node's Slurm state while a reboot is still under way ('' when none is, or the
    node is not on Slurm): a node not back is not re-validated yet."""
    if not on_slurm(inv, node):
        return ""
    shown = local(["scontrol", "show", "node", node.name, "--oneliner"], SLURM_TIMEOUT_S,
                  4000)
    state = next((w.split("=", 1)[1] for w in shown.output.split()
                  if w.startswith("State=")), "")
    if not shown.ok or not state:
        return f"unknown ({shown.said})"
    return state if "REBOOT" in state else ""


def rma_bundle(inv: Inventory, node: Node, entry, history: list[dict], kind: str,
               facts: dict) -> Path:
    """nodes/<node>/ under remediation.rma_dir: what a vendor's RMA asks for, each a JSON
    file: the node's ledger history, its failing checks and figures, its parts as the
    health probe saw them (serials and part numbers where the probe reports them)."""
    bundle = Path(inv.remediation.rma_dir) / "nodes" / node.name
    bundle.mkdir(parents=True, exist_ok=True)
    files = {
        "history.json": history,
        "failure.json": {"node": node.name, "cluster": inv.cluster, "kind": kind,
                         "checks": list(entry.checks), "reasons": list(entry.reasons),
                         "figures": entry.figures, "run_id": entry.run_id,
                         "since": entry.since},
        "parts.json": facts or {"note": "the health probe's facts were not kept for this "
                                        "node: serials and part numbers not recorded"},
    }
    for name, doc in files.items():
        write_atomically(bundle / name, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return bundle
