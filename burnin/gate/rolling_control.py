"""How `burnin run --rolling` (burnin/cli/rolling.py) takes nodes out of service, tells
whether their work has ended, and puts them back: through Slurm (drain with ROLLING_REASON,
squeue, resume only its own drain), or, on a fleet without Slurm, through the site's
`rolling.hooks` (docs/operator/rolling.md). The loop decides; a control only acts and
answers, and fails closed: a node it cannot tell about is busy, a node it could not put
back is still out."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from ClusterShell.NodeSet import NodeSet

from burnin.core.rootfiles import refusal as file_refusal
from burnin.core.rootfiles import running_as_root, untrusted
from burnin.errors import SlurmUnreachable
from burnin.gate.remediation_steps import filled, local
from burnin.ledger import rolling as events
from burnin.ledger.api import Ledger
from burnin.model.nodes import Node
from burnin.model.rolling import FAILED_REASON, ROLLING_REASON, RollingHooks
from burnin.transports.slurmctl import read_nodes, refusal, scontrol, slurm_env

# Hooks of many nodes run side by side, at most this many at once.
HOOK_FANOUT = 32


class Control:
    """The loop's hands. Each method takes many nodes, so that a control can ask once."""

    def look(self, names: list[str], held: set[str]) -> tuple[list[str], dict[str, str]]:
        """(the nodes a rolling loop, this one or a killed one, has out of service and not
        given back; {node: why} for the nodes out of service for anything else)."""
        raise NotImplementedError

    def take_out(self, names: list[str]) -> dict[str, str]:
        """{node: '' taken out of service, or why not}."""
        raise NotImplementedError

    def idle(self, names: list[str]) -> list[str]:
        """The nodes whose work has ended; a node that cannot be told about is busy."""
        raise NotImplementedError

    def give_back(self, names: list[str]) -> dict[str, str]:
        """{node: '' back in service, or why not}, for the nodes still this loop's to give
        back (one whose drain someone else took over is left out)."""
        raise NotImplementedError

    def keep_out(self, names: list[str], run_id: str) -> None:
        """The nodes a wave's run did not pass: left out of service, beyond any loop."""
        raise NotImplementedError

    def count_out(self, names: list[str]) -> int:
        """How many of `names` a rolling loop has out of service now."""
        raise NotImplementedError


def squeue_busy(names: list[str]) -> set[str]:
    """The nodes squeue shows a job on (running, pending on them, or completing)."""
    res = subprocess.run(["squeue", "-h", "-o", "%N", "-w", ",".join(names)],
                         capture_output=True, text=True, timeout=60, env=slurm_env())
    if res.returncode != 0:  # cannot tell: every node counts as busy (no job is touched)
        return set(names)
    out: set[str] = set()
    for line in res.stdout.split():
        out |= set(NodeSet(line))
    return out & set(names)


def own(known: dict, node: str) -> bool:
    """Drained by a rolling loop, and by nobody since: the only drain a loop lifts or
    rewrites (an administrator's stays, a quarantine's stays)."""
    s = known.get(node)
    return s is not None and s.drained and s.reason == ROLLING_REASON


class SlurmControl(Control):
    def __init__(self, every_node: list[str]):
        self.every_node = every_node

    def known(self) -> dict:
        known, why = read_nodes(self.every_node)
        if why:
            raise SlurmUnreachable(why)
        return known

    def look(self, names, held):
        known = self.known()
        out = [n for n in names if own(known, n) and n not in held]
        unavailable = {n: f"Slurm gives it no job: {s.state}"
                       + (f", reason: {s.reason}" if s.reason else "")
                       for n, s in known.items() if n not in out
                       and (s.drained or refusal(s).startswith("Slurm state"))}
        return out, unavailable

    def take_out(self, names):
        said = {}
        for n in names:
            ok, msg = scontrol("update", f"nodename={n}", "state=drain",
                               f"reason={ROLLING_REASON}")
            said[n] = "" if ok else f"cannot drain: {msg}"
        return said

    def idle(self, names):
        known = self.known()
        jobs = squeue_busy(names)
        return [n for n in names if n not in jobs and known.get(n) is not None
                and not known[n].flags & {"ALLOCATED", "MIXED", "COMPLETING"}]

    def give_back(self, names):
        known = self.known() if names else {}
        said = {}
        for n in names:
            if own(known, n):
                ok, msg = scontrol("update", f"nodename={n}", "state=resume")
                said[n] = "" if ok else f"resume failed: {msg}"
        return said

    def keep_out(self, names, run_id):
        known = self.known() if names else {}
        for n in names:
            if own(known, n):
                # No quarantine drain took over: it stays out, under a reason no loop
                # takes up again, until a person or a --revalidate run clears it.
                scontrol("update", f"nodename={n}", "state=drain",
                         f"reason={FAILED_REASON} (run {run_id})")

    def count_out(self, names):
        known = self.known()
        return sum(1 for n in names if n in known and known[n].reason == ROLLING_REASON)


def untrusted_hooks(hooks: RollingHooks) -> list[str]:
    """Run as root: why a hook's program is not root's alone (another user could swap what
    root runs); [] when every one is, or when not root."""
    if not running_as_root():
        return []
    problems = []
    for name in ("busy", "out", "back"):
        argv = getattr(hooks, name)
        found = shutil.which(argv[0])
        if found is None:
            problems.append(f"rolling.hooks.{name}: {argv[0]} not found")
            continue
        problem = untrusted(found) or untrusted(os.path.realpath(found))
        if problem:
            problems.append(file_refusal(f"rolling.hooks.{name}", found, problem))
    return problems


class HookControl(Control):
    """The site's commands, run on the controller with the node's name and address. The
    ledger is the memory of which node a loop has out: its last rolling event is
    `rolling-out` until the back hook said it is back. Each call's result and the end of its
    output are a `rolling-hook` event of the node's history."""

    def __init__(self, hooks: RollingHooks, nodes: dict[str, Node], ledger: Ledger):
        self.hooks, self.nodes, self.ledger = hooks, nodes, ledger
        self.last_busy: dict[str, str] = {}

    def call(self, hook: str, node: str) -> tuple[str, str]:
        """(what the hook said: "exit 0", "timed out after 60 s", ...; its bounded output)."""
        n = self.nodes[node]
        argv = filled(getattr(self.hooks, hook), node=n.name, address=n.address)
        done = local(argv, self.hooks.timeout_s, self.hooks.output_bytes)
        return done.said, done.output

    def each(self, hook: str, names: Iterable[str]) -> dict[str, tuple[str, str]]:
        names = list(names)
        if len(names) <= 1:
            return {n: self.call(hook, n) for n in names}
        with ThreadPoolExecutor(min(HOOK_FANOUT, len(names))) as pool:
            return dict(zip(names, pool.map(lambda n: self.call(hook, n), names), strict=True))

    @staticmethod
    def noted(node: str, hook: str, said: str, output: str) -> tuple[str, str, str, None]:
        """The history event of one call (the ledger takes a wave's calls at once)."""
        return node, events.HOOK, f"{hook} hook: {said}" + (f": {output}" if output else ""), \
            None

    def look(self, names, held):
        last = self.ledger.rolling_last()
        out = [n for n in names if last.get(n) == events.OUT and n not in held]
        return out, {n: "held in quarantine" for n in held if n in self.nodes}

    def take_out(self, names):
        return self.act("out", names)

    def idle(self, names):
        idle, notes = [], []
        for n, (result, output) in self.each("busy", names).items():
            if result != self.last_busy.get(n):  # each change of answer, not every poll
                notes.append(self.noted(n, "busy", result, output))
                self.last_busy[n] = result
            if result == "exit 1":
                idle.append(n)
        self.ledger.note_all(notes)
        return idle

    def give_back(self, names):
        return self.act("back", names)

    def act(self, hook: str, names: list[str]) -> dict[str, str]:
        """`hook` (out or back) for each node, noted: {node: '' done, or why not}."""
        said, notes = {}, []
        for n, (result, output) in self.each(hook, names).items():
            notes.append(self.noted(n, hook, result, output))
            said[n] = "" if result == "exit 0" else f"{hook} hook failed ({result})"
        self.ledger.note_all(notes)
        return said

    def keep_out(self, names, run_id):
        """Nothing to do: the node was taken out by the out hook, and its back hook is not
        run; the run's quarantine holds it."""

    def count_out(self, names):
        last = self.ledger.rolling_last()
        return sum(1 for n in names if last.get(n) == events.OUT)
