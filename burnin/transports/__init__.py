"""Transports: how a probe reaches a node. One small base class, one file per transport,
and one row per transport in TABLE: its class, imported only when an inventory uses it,
and the record of its own inventory settings (`ssh:` under defaults or a node), from which
the inventory derives the keys it accepts, their kinds and defaults. A new transport is
its file and its row (tests/test_new_transport.py adds one in a test); one from outside
the repository, an installed distribution's entry point (burnin/extensions.py).

A transport returns what happened (exit code, bounded output, timeout); it raises
NodeUnreachable only when the node cannot be reached at all.

Where the scheduler is itself a distributed launcher (srun), `transport: srun` names a
Launcher instead (LAUNCHERS): the run hands it a check's whole node set, which it runs as
one (one job step) rather than one command per node. A name is in one table or the other.

Layer 3: may import burnin.errors, burnin.core, burnin.model; never the ledger (its peer).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burnin.model.nodes import Node
from burnin.model.settings import setting  # noqa: F401  (a transport's settings use it)


@dataclass(frozen=True)
class SshSettings:
    """`ssh:` under defaults or a node."""

    user: str | None = setting("str", None, shown=True)
    port: int = setting("port", 22, shown=True)
    identity_file: str | None = setting("str", None)
    known_hosts: str = setting("str", "~/.ssh/known_hosts")
    connect_timeout_s: float = setting("positive", 10.0)
    proxy_jump: str | None = setting("str", None, shown=True)  # [user@]host[:port] of a bastion


@dataclass(frozen=True)
class SrunSettings:
    """`srun:` under defaults or a node."""

    partition: str | None = setting("str", None, shown=True)
    extra_args: tuple[str, ...] = setting("str_list", (), shown=True)


@dataclass(frozen=True)
class TransportRow:
    """A transport's row: its class as 'module:Class' (imported on first use: a fleet
    without Slurm never imports it) or the class itself; whether it is a Launcher (its
    nodes run as one) rather than a Transport; the frozen dataclass of its settings, the
    inventory's `<name>:` section (each field made with setting()), or None."""

    target: str | type
    launcher: bool = False
    settings: type | None = None


# In the order an inventory's error message lists them.
TABLE: dict[str, TransportRow] = {
    "ssh": TransportRow("burnin.transports.ssh:SshTransport", settings=SshSettings),
    "srun": TransportRow("burnin.transports.srun:SrunLauncher", launcher=True,
                         settings=SrunSettings),
    "local": TransportRow("burnin.transports.local:LocalTransport"),
}


class _Targets(Mapping[str, "str | type"]):
    """TABLE's transports (or its launchers), by name: a view, so that a row added to
    TABLE is found here too."""

    def __init__(self, launchers: bool):
        self.launchers = launchers

    def __getitem__(self, name: str) -> str | type:
        row = TABLE[name]
        if row.launcher != self.launchers:
            raise KeyError(name)
        return row.target

    def __iter__(self) -> Iterator[str]:
        return (n for n, row in TABLE.items() if row.launcher == self.launchers)

    def __len__(self) -> int:
        return sum(1 for _ in self)


TRANSPORTS: Mapping[str, str | type] = _Targets(launchers=False)
LAUNCHERS: Mapping[str, str | type] = _Targets(launchers=True)


def settings_of(node: Node, name: str) -> Any:
    """The node's settings record of transport `name`: the inventory's, or the record's
    defaults (a node made in code, not from an inventory)."""
    own = node.transport_settings.get(name)
    if own is not None:
        return own
    row = TABLE.get(name)
    if row is None or row.settings is None:
        raise KeyError(f"transport {name!r} has no settings")
    return row.settings()

STDERR_TAIL_BYTES = 64 * 1024
# The probe's lifeline: with `lifeline`, a transport writes the settings line, keeps the
# probe's stdin open and writes a heartbeat byte every HEARTBEAT_S. A probe whose stdin
# closes (the controller or its connection died) or that hears nothing for WATCHDOG_S
# (a silent network) stops itself (probes/probelib.py: watch_controller).
HEARTBEAT_S = 5.0
WATCHDOG_S = 30.0


class NodeUnreachable(Exception):
    """The node could not be reached; the message says why, for the node's testcases."""


# How a reason says that another run holds the node: not the node's fault, so it is
# neither judged nor quarantined. Launchers (srun) return reasons as text across
# processes (pytest-xdist workers), hence a prefix rather than a type alone.
BUSY = "busy: "


class NodeBusy(NodeUnreachable):
    """Another run holds the node (its lock, or a Slurm job): the message starts with BUSY."""

    def __init__(self, why: str):
        super().__init__(why if why.startswith(BUSY) else BUSY + why)


def is_busy(reason: str) -> bool:
    """Whether a launcher's reason for not running a node says another run holds it."""
    return reason.startswith(BUSY)


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

    # Whether run() starts the command, then waits at the fan-out's start gate before it
    # writes stdin (fanout.py: StartGate), so that a fan-out's probes start together.
    starts_together = False
    # Whether it holds a connection to its node between commands (ssh). The run keeps at
    # most --fanout of them; another is closed (close()) and its next command connects
    # and claims the node again (burnin/engine/held.py).
    connection_held = False

    def __init__(self, node: Node, probes_dir: Path, run_id: str = "unnamed"):
        self.node = node
        self.probes_dir = probes_dir
        self.run_id = run_id

    @property
    def python(self) -> str:
        return self.node.python or "python3"

    @classmethod
    def rendezvous_address(cls, node: Node) -> str:
        """Where the other nodes of an inter-node group reach this node's ranks when it
        hosts the group's rank 0: its address."""
        return node.address

    def prepare(self) -> None:
        """Get the node ready for probes ahead of the first (ssh: connect, hold the node,
        stage the probes), so that a run's first probes start together; raises
        NodeUnreachable. Nothing to do for most transports."""

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


class Launcher:
    """Runs a probe on many nodes as one (srun: one job step over all of them). One per
    run and transport, made with (the run's nodes of its transport, probes_dir, run_id,
    the run's cancel), closed at the end of the run, also when it was interrupted."""

    def prepare(self) -> None:
        """Get hold of the nodes (Slurm: the allocation). Called from the run's main
        thread before anything runs, so that Ctrl-C finds it there."""

    def run(self, nodes: list[Node], probe: str, stdins: dict[str, bytes],
            timeouts: dict[str, float], max_stdout: int, on_stderr: dict | None = None,
            lifeline: bool = False, cancel: threading.Event | None = None,
            tasks: dict[str, int] | None = None) -> dict[str, list[CommandResult] | str]:
        """Run `probe` on every node at once: `tasks[node]` tasks on a node (default one),
        each given the node's stdin, each bounded by the node's timeout and max_stdout;
        on_stderr[node](chunk) sees the node's stderr. Returns, per node, its tasks'
        results in task order, or why the node could not be reached."""
        raise NotImplementedError

    def shared(self) -> dict:
        """What prepare() got, JSON-able, for another process of the same run (a
        pytest-xdist worker) to launch through without getting or releasing it again."""
        return {}

    def attach(self, shared: dict) -> None:
        """Launch through what another process of the run got (its shared())."""

    def close(self) -> None:
        """Release what prepare() got; never raises; safe to call twice."""


class Launchers:
    """A run's launchers, one per transport that has one, each over every node of the run
    with that transport, made on first use and closed with the run."""

    def __init__(self, nodes: list[Node], probes_dir: Path, run_id: str,
                 cancel: threading.Event):
        self.nodes, self.probes_dir, self.run_id, self.cancel = nodes, probes_dir, run_id, cancel
        self._made: dict[str, Launcher | None] = {}
        self._lock = threading.Lock()

    def of(self, node: Node) -> Launcher | None:
        with self._lock:
            if node.transport not in self._made:
                # Not a launcher's name: its nodes run one by one, through their transport
                # (a name in neither table fails them one by one, with the reason).
                target = LAUNCHERS.get(node.transport)
                self._made[node.transport] = None if target is None else _load(target)(
                    [n for n in self.nodes if n.transport == node.transport], self.probes_dir,
                    self.run_id, self.cancel)
            return self._made[node.transport]

    def split(self, nodes: list[Node]) -> tuple[list[tuple[Launcher, list[Node]]], list[Node]]:
        """([(launcher, its nodes)], the nodes that run one by one). Each launcher gets
        hold of its nodes here, in the calling thread (the run's main one, where Ctrl-C
        lands)."""
        groups: dict[str, list[Node]] = {}
        apart = []
        for n in nodes:
            if self.of(n) is None:
                apart.append(n)
            else:
                groups.setdefault(n.transport, []).append(n)
        made = {t: self._made[t] for t in groups}
        together = [(launcher, groups[t]) for t, launcher in made.items() if launcher is not None]
        for launcher, _ in together:
            launcher.prepare()
        return together, apart

    def shared(self) -> dict[str, dict]:
        """Every launcher's hold on its nodes, got now, for pytest-xdist workers (which
        attach to it rather than each allocate the same nodes)."""
        together, _ = self.split(self.nodes)
        return {nodes[0].transport: launcher.shared() for launcher, nodes in together}

    def attach(self, shared: dict[str, dict]) -> None:
        for transport, state in shared.items():
            node = next((n for n in self.nodes if n.transport == transport), None)
            launcher = self.of(node) if node else None
            if launcher is not None:
                launcher.attach(state)

    def close(self) -> None:
        with self._lock:
            made, self._made = list(self._made.values()), {}
        for launcher in made:
            if launcher is not None:
                launcher.close()


def transport_class(name: str) -> type[Transport]:
    target = TRANSPORTS.get(name)
    if target is None:
        if name in LAUNCHERS:  # its nodes run together, through the run's Launchers
            raise NodeUnreachable(f"{name} nodes run through the run's {name} launcher")
        raise NodeUnreachable(f"transport {name!r} is not available in this burnin")
    return _load(target)


def _load(target: str | type) -> Any:
    """'module:attr', imported on first use: a fleet without Slurm never imports it."""
    if isinstance(target, type):
        return target
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def rendezvous_address(node: Node) -> str:
    """The address an inter-node group's members meet `node` at, as its transport says
    (a launcher's nodes, and a transport this burnin lacks: the node's address)."""
    row = TABLE.get(node.transport)
    target = _load(row.target) if row is not None and not row.launcher else None
    where = getattr(target, "rendezvous_address", None)
    return where(node) if where is not None else node.address


def transport_for(node: Node, probes_dir: Path, run_id: str = "unnamed") -> Transport:
    """The transport `node.transport` names, for that node, in run `run_id`."""
    return transport_class(node.transport)(node, probes_dir, run_id)
