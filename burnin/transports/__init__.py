"""Transports: how a probe reaches a node. One small base class, one file per transport,
looked up by name in TRANSPORTS and imported only when an inventory uses it.

A transport returns what happened (exit code, bounded output, timeout); it raises
NodeUnreachable only when the node cannot be reached at all.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from pathlib import Path

from burnin.nodes import Node

TRANSPORTS = {
    "local": "burnin.transports.local:LocalTransport",
    "ssh": "burnin.transports.ssh:SshTransport",
    "srun": "burnin.transports.srun:SrunTransport",
}

STDERR_TAIL_BYTES = 64 * 1024
# The probe's lifeline: with `lifeline`, a transport writes the settings line, keeps the
# probe's stdin open and writes a heartbeat byte every HEARTBEAT_S. A probe whose stdin
# closes (the controller or its connection died) or that hears nothing for WATCHDOG_S
# (a silent network) stops itself (probes/probelib.py: watch_controller).
HEARTBEAT_S = 5.0
WATCHDOG_S = 30.0


class NodeUnreachable(Exception):
    """The node could not be reached; the message says why, for the node's testcases."""


@dataclass(frozen=True)
class CommandResult:
    exit_code: int | None  # negative: killed by that signal; None: killed by us at timeout
    stdout: bytes
    stderr_tail: bytes
    duration_s: float
    timed_out: bool = False
    overflow: bool = False  # stdout passed its bound and the command was killed
    cancelled: bool = False  # the run was interrupted and the command killed
    unkilled: str = ""  # killed at a timeout, overflow or cancel failed: why


class Transport:
    """Runs commands on one node. One instance per node per run, closed at the end."""

    def __init__(self, node: Node, probes_dir: Path, run_id: str = "unnamed"):
        self.node = node
        self.probes_dir = probes_dir
        self.run_id = run_id

    @property
    def python(self) -> str:
        return self.node.python or "python3"

    def probe_command(self, probe: str) -> list[str]:
        """The argv that runs probe `probe` on the node, staging it first if needed."""
        raise NotImplementedError

    def run(self, argv: list[str], stdin: bytes, timeout_s: float, max_stdout: int,
            on_stderr=None, lifeline: bool = False,
            cancel: threading.Event | None = None) -> CommandResult:
        """Run argv on the node; on_stderr(chunk) sees stderr as it arrives. With
        `lifeline`, stdin stays open after `stdin` with a heartbeat (see HEARTBEAT_S);
        without, it closes after `stdin`. When `cancel` is set (the run was interrupted),
        the command's whole process group is killed within seconds and the result says
        cancelled."""
        raise NotImplementedError

    def close(self) -> None:
        """Release connections and remove what was staged; never raises."""


def transport_for(node: Node, probes_dir: Path, run_id: str = "unnamed") -> Transport:
    """The transport `node.transport` names, for that node, in run `run_id`."""
    target = TRANSPORTS.get(node.transport)
    if target is None:
        raise NodeUnreachable(f"transport {node.transport!r} is not available in this burnin")
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)(node, probes_dir, run_id)
