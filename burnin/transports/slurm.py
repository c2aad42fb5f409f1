"""Slurm allocations for the srun transport: the run's nodes, held exclusively with every
GPU as GRES, for the whole run.

One allocation per run: `salloc --exclusive --gres=gpu:N` over the selected nodes, held by
a small command of the controller's own (salloc runs it locally: salloc.py) that lives
until the controller closes its stdin, so a controller that dies, however it dies, also
releases the allocation. Burnin running inside a Slurm job (SLURM_JOB_ID set, e.g. an sbatch
re-validation job) uses that job for the nodes it holds instead.

Nodes Slurm cannot give (down, drained by someone else, busy, unknown, fewer GPUs as GRES
than the inventory says) are named with Slurm's own words and fail; the others go on. A node
burnin itself drained is resumed into a MAINT reservation of the run's own, allocated from
it, and drained again with its reason when the run ends, on every exit path.

More than one allocation only where Slurm needs it: nodes of different GPU counts (a
job asks one GRES count per node), partitions or extra arguments, and burnin-drained nodes
(a job from a reservation gets only that reservation's nodes).
"""

from __future__ import annotations

import getpass
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from ClusterShell.NodeSet import NodeSet

from burnin.model.nodes import Node
from burnin.transports import BUSY as BUSY_REASON
from burnin.transports.salloc import HOLDER, RELEASE_WAIT_S, release_holder, salloc_holder
from burnin.transports.slurmctl import (
    NODE_CHECK_PREFIX,
    OWN_RESERVATION,
    REASON_PREFIX,
    TIMEOUT_S,
    SlurmNode,
    refusal,
    scontrol,
    show_nodes,
    slurm_env,  # noqa: F401  (srun.py imports it from here)
)

RESERVATION_MINUTES = 24 * 60


@dataclass(eq=False)
class Allocation:
    """A Slurm job holding nodes for the run: every step of the run runs inside one."""

    job_id: str
    nodes: tuple[str, ...]
    gpus: int                  # per node, as GRES: each step asks for all of them
    owned: bool                # obtained by this run (released at its end)
    reservation: str = ""
    holder: subprocess.Popen | None = field(default=None, repr=False)


@dataclass
class _Reservation:
    name: str
    reasons: dict[str, str]    # node: the drain reason it goes back to


class Allocations:
    """The run's allocations over its srun nodes, made on first use, released by close()."""

    def __init__(self, nodes: list[Node], run_id: str, cancel: threading.Event | None = None):
        self.nodes = list(nodes)
        self.run_id = run_id
        self.cancel = cancel
        self.where: dict[str, Allocation] = {}
        self.unavailable: dict[str, str] = {}   # node: why Slurm cannot give it
        self.allocations: list[Allocation] = []
        self._reservations: list[_Reservation] = []
        self._prepared = False
        self._lock = threading.Lock()

    def prepare(self) -> None:
        """Allocate every node that Slurm can give, once; name the others' reasons."""
        with self._lock:
            if self._prepared:
                return
            self._prepared = True
            self._prepare()

    def _prepare(self) -> None:
        known = show_nodes([n.name for n in self.nodes])
        wanted: dict[str, int] = {}
        drained: list[Node] = []
        usable: list[Node] = []
        for n in self.nodes:
            s = known.get(n.name)
            if s is None:
                self.unavailable[n.name] = "Slurm does not know this node (scontrol show node)"
                continue
            wanted[n.name] = s.gpus if n.gpus is None else n.gpus
            if s.gpus < wanted[n.name]:
                self.unavailable[n.name] = (f"Slurm declares {s.gpus} GPU(s) as GRES on it, the "
                                            f"inventory says {wanted[n.name]}")
            elif "DRAIN" in s.flags and s.reason.startswith(NODE_CHECK_PREFIX):
                # node-check's drain is node-check's to lift: skipped, with its reason
                self.unavailable[n.name] = f"{BUSY_REASON}drained by {s.reason}"
            elif "DRAIN" in s.flags and s.reason.startswith(REASON_PREFIX):
                drained.append(n)  # ours: re-tested inside a reservation of the run's own
            else:
                usable.append(n)
        inside = self._surrounding_job(usable, known, wanted)
        for n in usable:
            if n.name in self.where or n.name in self.unavailable:
                continue
            why = refusal(known[n.name])
            if why:
                self.unavailable[n.name] = why
        # Burnin's own drained nodes too: the previous run's job may still be completing
        # on them, and a job from the reservation would wait on it past --immediate.
        self._wait_completing([n.name for n in [*usable, *drained]
                               if n.name not in self.unavailable and n.name not in self.where
                               and "COMPLETING" in known[n.name].flags])
        groups: dict[tuple, list[Node]] = {}
        for n in usable:
            if n.name not in self.unavailable and n.name not in inside:
                groups.setdefault(self._key(n, wanted[n.name], False), []).append(n)
        for n in drained:
            groups.setdefault(self._key(n, wanted[n.name], True), []).append(n)
        for (partition, extra, gpus, reserved), members in groups.items():
            if self.cancel is not None and self.cancel.is_set():
                for n in members:
                    self.unavailable[n.name] = "not allocated: the run was interrupted"
                continue
            reservation = self._reserve(members, known) if reserved else ""
            if reserved and not reservation:
                continue
            self._allocate([n.name for n in members if n.name not in self.unavailable],
                           gpus, partition, extra, reservation)

    @staticmethod
    def _key(n: Node, gpus: int, reserved: bool) -> tuple:
        return (n.srun.partition, n.srun.extra_args, gpus, reserved)

    def _surrounding_job(self, usable: list[Node], known: dict[str, SlurmNode],
                         wanted: dict[str, int]) -> set[str]:
        """The nodes of `usable` that the job burnin runs inside holds: served by it."""
        job = os.environ.get("SLURM_JOB_ID")
        if not job:
            return set()
        ok, text = scontrol("show", "job", job, "--oneliner")
        fields = dict(re.findall(r"(?:^| )(NodeList|OverSubscribe|JobState)=(\S*)", text))
        if not ok or fields.get("JobState") != "RUNNING":
            return set()
        held = set(NodeSet(fields.get("NodeList", ""))) if fields.get("NodeList") else set()
        mine = [n for n in usable if n.name in held]
        exclusive = fields.get("OverSubscribe") == "NO"
        by_gpus: dict[int, list[str]] = {}
        for n in mine:
            if not exclusive:
                self.unavailable[n.name] = (f"burnin runs inside Slurm job {job}, which does not "
                                            "hold the node exclusively (sbatch --exclusive)")
            else:
                by_gpus.setdefault(wanted[n.name], []).append(n.name)
        for gpus, names in by_gpus.items():
            a = Allocation(job, tuple(names), gpus, owned=False)
            self.allocations.append(a)
            self.where.update(dict.fromkeys(names, a))
        return {n.name for n in mine}

    @staticmethod
    def _wait_completing(names: list[str]) -> None:
        """A job that just ended (the previous run's, say) leaves its nodes COMPLETING for a
        moment: wait until Slurm says they left it rather than call them busy. A node Slurm
        did not answer for (a slow slurmctld) is still waited for."""
        deadline = time.monotonic() + RELEASE_WAIT_S
        while names and time.monotonic() < deadline:
            states = show_nodes(names)
            names = [m for m in names if m not in states or "COMPLETING" in states[m].flags]
            if names:
                time.sleep(0.5)

    def _reserve(self, members: list[Node], known: dict[str, SlurmNode]) -> str:
        """A MAINT reservation of the run's own over burnin-drained nodes, resumed into it:
        no production job can land on them while they are re-tested."""
        names = [n.name for n in members]
        name = f"burnin-{self.run_id}-r{len(self._reservations)}"
        ok, msg = scontrol("create", "reservation", f"ReservationName={name}",
                           f"Nodes={NodeSet.fromlist(names)}", f"Users={getpass.getuser()}",
                           "StartTime=now", f"Duration={RESERVATION_MINUTES}",
                           "Flags=MAINT,IGNORE_JOBS")
        if not ok:
            for n in names:
                self.unavailable[n] = f"cannot reserve it to re-test it: {msg}"
            return ""
        self._reservations.append(_Reservation(name, {n: known[n].reason for n in names}))
        ok, msg = scontrol("update", f"nodename={NodeSet.fromlist(names)}", "state=resume")
        if not ok:
            for n in names:
                self.unavailable[n] = f"cannot resume it into reservation {name}: {msg}"
            return ""
        return name

    def _allocate(self, names: list[str], gpus: int, partition: str | None,
                  extra: tuple[str, ...], reservation: str, retry: bool = True) -> None:
        if not names:
            return
        job_name = f"burnin-{self.run_id}-a{len(self.allocations)}"
        immediate = max(10, int(max(n.ssh.connect_timeout_s for n in self.nodes
                                    if n.name in names)))
        argv = ["salloc", "--exclusive", f"--nodelist={NodeSet.fromlist(names)}",
                f"--nodes={len(names)}", "--no-kill", f"--immediate={immediate}",
                f"--job-name={job_name}"]
        if gpus:
            argv.append(f"--gres=gpu:{gpus}")
        if partition:
            argv.append(f"--partition={partition}")
        if reservation:
            argv.append(f"--reservation={reservation}")
        argv += [*extra, "--", sys.executable, "-c", HOLDER]
        granted, said, holder = salloc_holder(argv, job_name, immediate + TIMEOUT_S,
                                               self.cancel)
        if granted:
            a = Allocation(granted["SLURM_JOB_ID"], tuple(names), gpus, owned=True,
                           reservation=reservation, holder=holder)
            self.allocations.append(a)
            self.where.update(dict.fromkeys(names, a))
            return
        # Refused: name the nodes Slurm cannot give now, and try once more without them.
        # In the run's own reservation its flags are ours, not the node's refusal.
        states = show_nodes(names)
        ours = OWN_RESERVATION if reservation else ()
        refused = {n: refusal(states[n], ours) if n in states
                   else "Slurm does not know this node" for n in names}
        refused = {n: why for n, why in refused.items() if why}
        if retry and reservation and not refused:
            # Nodes that fit, refused in the run's own reservation: the job that just left
            # them may have been completing still, or slurmctld slow; once more.
            self._wait_completing(names)
            self._allocate(names, gpus, partition, extra, reservation, retry=False)
            return
        if retry and refused and len(refused) < len(names):
            self.unavailable.update(refused)
            self._allocate([n for n in names if n not in refused], gpus, partition, extra,
                           reservation, retry=False)
            return
        for n in names:
            # Twice refused in its own reservation with nothing wrong shown: Slurm's doing,
            # not the node's; it is not tested (skipped, so not admitted), not blamed.
            self.unavailable[n] = refused.get(n) or (
                f"{BUSY_REASON}Slurm gave no job in the run's reservation {reservation}: "
                f"{said or 'no reason given'}" if reservation
                else f"salloc refused: {said or 'no reason given'}")

    def shared(self) -> dict:
        """The allocations, for another process of the run (see attach)."""
        self.prepare()
        return {"allocations": [{"job": a.job_id, "nodes": list(a.nodes), "gpus": a.gpus}
                                for a in self.allocations],
                "unavailable": dict(self.unavailable)}

    def attach(self, shared: dict) -> None:
        """Use the allocations another process of the run made (a pytest-xdist worker uses
        its controller's): never allocate, never release."""
        with self._lock:
            self._prepared = True
            self.unavailable = dict(shared.get("unavailable", {}))
            for a in shared.get("allocations", []):
                held = Allocation(a["job"], tuple(a["nodes"]), a["gpus"], owned=False)
                self.allocations.append(held)
                self.where.update(dict.fromkeys(held.nodes, held))

    def close(self) -> None:
        """Release every allocation this run made (waiting until Slurm has its nodes back),
        drain burnin's nodes again with their reasons and delete the run's reservations.
        Never raises; safe to call twice."""
        with self._lock:
            allocations, self.allocations = self.allocations, []
            reservations, self._reservations = self._reservations, []
            self.where = {}
        for a in allocations:
            if a.owned:
                try:
                    release_holder(a.holder, a.job_id, "")
                except Exception:
                    pass
        for r in reservations:
            by_reason: dict[str, list[str]] = {}
            for node, reason in r.reasons.items():
                by_reason.setdefault(reason, []).append(node)
            for reason, names in by_reason.items():
                scontrol("update", f"nodename={NodeSet.fromlist(names)}", "state=drain",
                         f"reason={reason}")
            scontrol("delete", f"reservation={r.name}")
