"""The launch layer: how a run starts probes on its nodes, below the checks.

It holds each node's transport (made on first use; a connection kept between uses for
at most --fanout nodes, held.py), the run's launchers (srun: a check's nodes as one job
step), the fan-out bound and the run's cancel. Whatever happens to a node comes back as
that node's ProbeOutcome; a bug of ours comes back as a fault (the run ends incomplete,
and blames no node).

It knows nothing of checks: a probe is named by a ProbeSpec (a Check is one).
"""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from burnin.engine.held import Held
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome, run_probe, run_probes, unreachable
from burnin.probe.shapes import Obj
from burnin.transports import Launcher, Launchers, NodeUnreachable, Transport, transport_for
from burnin.transports.fanout import CANCEL_WAIT_S, GATE_POLL_S, Cancel, fan_out

DEFAULT_FANOUT = 256
NOT_STARTED = "not started: the run was interrupted"


class ProbeSpec(Protocol):
    """What the launch layer needs to know of a check to run its probe."""

    # Read-only, as a Check's (a frozen dataclass) are.
    @property
    def name(self) -> str: ...        # the check's, for a controller error's message

    @property
    def probe_name(self) -> str: ...  # probes/<probe_name>.py

    @property
    def max_output(self) -> int: ...  # the bytes its probe may print, unless told otherwise

    @property
    def schema(self) -> Obj: ...      # its document's shape, unless told otherwise


def raise_open_files_limit(connections: int) -> None:
    """Connections stay open for the run: a fleet needs more than the usual 1024 files.
    Lift the soft limit towards the hard one; never fails the run."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4 * connections + 256  # socket and channel pipes per node, and headroom
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        except (ValueError, OSError):
            pass


@dataclass
class Launch:
    nodes: list[Node]
    probes_dir: Path
    run_id: str
    fanout: int = DEFAULT_FANOUT
    # Set when the run is interrupted: every probe's command is killed, nothing new starts.
    cancel: threading.Event = field(default_factory=Cancel)
    launchers: Launchers = field(init=False)
    _transports: dict[str, Transport] = field(default_factory=dict)
    # The run's first probe gets every node ready first (prepared); why a node was not,
    # for that node's first probe to report (a later one tries again, as it would have).
    _prepared: bool = False
    _unprepared: dict[str, Exception] = field(default_factory=dict)
    _preparing: threading.Lock = field(default_factory=threading.Lock)
    _held: Held = field(init=False)

    def __post_init__(self):
        self._held = Held(self.fanout)
        raise_open_files_limit(sum(n.transport == "ssh" for n in self.nodes))
        self.launchers = Launchers(self.nodes, self.probes_dir, self.run_id, self.cancel)

    def fan_out(self, items: list, fn: Callable) -> list:
        """fn(item) for every item, at most `fanout` at once, cancellable; results in item
        order. Each of `fanout` lanes (threads) takes the next item when it is done with
        one: 10,000 nodes cost 256 threads and futures, not 10,000 (a future, its
        condition and its hand-over cost more than reading an instant probe's document)."""
        items = list(items)
        if len(items) <= self.fanout:
            return fan_out(items, fn, self.fanout, self.cancel)
        results: list = [None] * len(items)
        todo = iter(enumerate(items))
        taking = threading.Lock()

        def lane(_) -> None:
            # Every item is run, also after a cancel: fn starts nothing then (Launch.probe
            # answers NOT_STARTED), and each node still gets its own result.
            while True:
                with taking:
                    i, item = next(todo, (None, None))
                if i is None:
                    return
                results[i] = fn(item)
        fan_out(range(self.fanout), lane, self.fanout, self.cancel)
        return results

    def at_once(self, items: list, fn: Callable) -> list:
        """fn(item) for every item, cancellable like any fan-out; results in item order.

        Items that are nodes are one group's members, which must run together: all at
        once, a thread each while the group runs, whatever the fan-out. Items that are
        groups (a pair, a list of names: a round of the localisation or the group search)
        share the fan-out: a group starts once its members fit among the probes running,
        so that a round of 12,500 pairs holds `fanout` probes and about as many threads,
        not a thread per node (a group wider than the fan-out waits to run alone)."""
        items = list(items)
        if items and isinstance(items[0], (list, tuple)):
            return self._round(items, fn)
        if threading.current_thread() is threading.main_thread() or len(items) < 2:
            # Ctrl-C lands in the main thread: it waits, and fan_out cancels the rest.
            return fan_out(items, fn, len(items), self.cancel)
        # A group inside a round (each group in a thread of its own): plain threads, and
        # the last item in this one.
        results: list = [None] * len(items)
        raised: list[BaseException | None] = [None] * len(items)

        def one(i: int) -> None:
            try:
                results[i] = fn(items[i])
            except BaseException as e:  # fn must not raise: a bug, re-raised below
                raised[i] = e
        threads = [threading.Thread(target=one, args=(i,), name="burnin-at-once", daemon=True)
                   for i in range(len(items) - 1)]
        for t in threads:
            t.start()
        one(len(items) - 1)
        for t in threads:
            t.join()
        first = next((e for e in raised if e is not None), None)
        if first is not None:
            raise first
        return results

    def _round(self, groups: list, fn: Callable) -> list:
        """fn(group) for every group, in order, each started once its members fit among
        the fan-out's probes; results in item order."""
        results: list = [None] * len(groups)
        raised: list[BaseException | None] = [None] * len(groups)
        room = threading.Condition()
        free = [self.fanout]

        def one(i: int, width: int) -> None:
            try:
                results[i] = fn(groups[i])
            except BaseException as e:  # fn must not raise: a bug, re-raised below
                raised[i] = e
            finally:
                with room:
                    free[0] += width
                    room.notify_all()
        threads = []
        try:
            for i, group in enumerate(groups):
                width = min(max(1, len(group)), self.fanout)
                with room:
                    # A bound on each wait keeps a Ctrl-C in the main thread prompt.
                    while free[0] < width:
                        room.wait(GATE_POLL_S)
                    free[0] -= width
                t = threading.Thread(target=one, args=(i, width), name="burnin-round",
                                     daemon=True)
                t.start()
                threads.append(t)
            for t in threads:
                while t.is_alive():
                    t.join(GATE_POLL_S)
        except BaseException:
            # Interrupted: nothing new starts, and the running groups' probes are killed.
            self.cancel.set()
            deadline = time.monotonic() + CANCEL_WAIT_S
            for t in threads:
                t.join(max(0.0, deadline - time.monotonic()))
            raise
        first = next((e for e in raised if e is not None), None)
        if first is not None:
            raise first
        return results

    def launcher(self, node: Node) -> Launcher | None:
        """The launcher that runs `node` together with the run's other nodes of its
        transport (srun: one job step), or None: its transport runs node by node."""
        return self.launchers.of(node)

    def transport(self, node: Node) -> Transport:
        """The node's transport for this run, made on first use and kept (its connection,
        if it holds one, only while the run holds no more than --fanout: held.py)."""
        # Called from fan-out threads, each for its own node: no two touch one key.
        t = self._transports.get(node.name)
        if t is None:
            t = self._transports[node.name] = transport_for(node, self.probes_dir, self.run_id)
        return t

    def probe(self, node: Node, spec: ProbeSpec, payload: dict, timeout_s: float,
              on_progress=None, max_output: int | None = None,
              schema: Obj | None = None) -> ProbeOutcome:
        """Run the probe on one node; whatever happens is this node's outcome. It may
        print `max_output` bytes of a document of shape `schema` (defaults: the spec's)."""
        launcher = self.launcher(node)
        if launcher is not None:
            return self.probe_together(launcher, [node], spec, {node.name: payload},
                                       {node.name: timeout_s}, {node.name: on_progress},
                                       max_output, schema)[node.name]
        try:
            self.prepare()
            transport = self.transport(node)
            if self.cancel.is_set():
                return ProbeOutcome(node.name, spec.probe_name, False, NOT_STARTED)
            failed = self._unprepared.pop(node.name, None)
            if failed is not None:
                raise failed
            with self._using(node, transport):
                return run_probe(transport, spec.probe_name, payload, timeout_s,
                                 max_output=max_output or spec.max_output,
                                 on_progress=on_progress, schema=schema or spec.schema,
                                 lifeline=True, cancel=self.cancel)
        except NodeUnreachable as e:
            return unreachable(node.name, spec.probe_name, e)
        except Exception as e:  # a bug of ours, never the node's: the run ends incomplete
            return _fault(node, spec, e)

    @contextmanager
    def _using(self, node: Node, transport: Transport) -> Iterator[None]:
        """The node's connection, if its transport holds one, is not closed while in use,
        and counts among the --fanout the run keeps between uses (held.py)."""
        if not transport.connection_held:
            yield
            return
        self._held.take(node.name)
        try:
            yield
        finally:
            self._held.give_back(node.name, transport)

    def prepare(self) -> None:
        """Once per run, before its first probe: connect to every node that runs one by one
        (ssh), hold it and stage the probes, `fanout` at once. Then the first check's
        probes start together, each only its own start apart, rather than node by node
        as their connections come up (benchmarks/ssh_start_skew.py: the start skew). A
        fleet wider than the fan-out starts in waves anyway, and keeps no connection for
        every node: each is made at the node's probe."""
        with self._preparing:  # the other fan-out threads wait here, then start together
            if self._prepared:
                return
            self._prepared = True
            apart = [n for n in self.nodes if self.launcher(n) is None]
            if len(apart) > self.fanout:
                return

            def ready(node: Node) -> None:
                if self.cancel.is_set():
                    return
                try:
                    transport = self.transport(node)
                    with self._using(node, transport):
                        transport.prepare()
                except Exception as e:  # NodeUnreachable, or a bug: its probe reports it
                    self._unprepared[node.name] = e
            self.fan_out(apart, ready)

    def probe_together(self, launcher: Launcher, nodes: list[Node], spec: ProbeSpec,
                       payloads: dict[str, dict], timeouts: dict[str, float],
                       on_progress: dict | None = None, max_output: int | None = None,
                       schema: Obj | None = None) -> dict[str, ProbeOutcome]:
        """Run the probe on `nodes` as one, one task each; whatever happens is each node's
        own outcome, judged as run_probe judges one."""
        done = self.probe_tasks(launcher, nodes, spec, payloads, timeouts, on_progress,
                                max_output, schema)
        return {name: tasks[0] for name, tasks in done.items()}

    def probe_tasks(self, launcher: Launcher, nodes: list[Node], spec: ProbeSpec,
                    payloads: dict[str, dict], timeouts: dict[str, float],
                    on_progress: dict | None = None, max_output: int | None = None,
                    schema: Obj | None = None, tasks: dict[str, int] | None = None
                    ) -> dict[str, list[ProbeOutcome]]:
        """probe_together() with `tasks[node]` tasks on a node (default one): each task's
        outcome, in task order; a node that did not run has one failed outcome."""
        if self.cancel.is_set():
            return {n.name: [ProbeOutcome(n.name, spec.probe_name, False, NOT_STARTED)]
                    for n in nodes}
        try:
            return run_probes(launcher, nodes, spec.probe_name, payloads, timeouts,
                              max_output=max_output or spec.max_output,
                              on_progress={k: v for k, v in (on_progress or {}).items() if v},
                              schema=schema or spec.schema, lifeline=True,
                              cancel=self.cancel, tasks=tasks)
        except Exception as e:  # a bug of ours, never the nodes': the run ends incomplete
            return {n.name: [_fault(n, spec, e)] for n in nodes}

    def close(self) -> None:
        transports, self._transports = list(self._transports.values()), {}
        self.fan_out(transports, lambda t: t.close())
        self.launchers.close()


def _fault(node: Node, spec: ProbeSpec, e: Exception) -> ProbeOutcome:
    return ProbeOutcome(node.name, spec.probe_name, False, f"controller error running "
                        f"{spec.name}: {type(e).__name__}: {e}", fault=True)
