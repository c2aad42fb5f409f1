"""The srun transport: Slurm is the distributed launcher.

The run's srun nodes are held in one exclusive allocation holding every GPU as GRES
(burnin/transports/slurm.py), or the job burnin runs inside. Each check is then one job
step over all its nodes, one task per node (burnin/transports/srun_step.py): one srun on
the controller per check, whatever the fleet's size, with probes and payloads travelling
on the step's stdin (no shared file system needed) and each node's output, status and
time limit kept apart. The inter-node all-reduce is one step with one task per GPU.

A node Slurm cannot give fails with Slurm's reason; a node whose task dies or hangs fails
alone (--kill-on-bad-exit=0; each task's timeout is the controller's).
"""

from __future__ import annotations

import threading
from pathlib import Path

from burnin.model.nodes import Node
from burnin.transports import BUSY, CommandResult, Launcher, is_busy
from burnin.transports.fanout import fan_out
from burnin.transports.slurm import Allocation, Allocations, slurm_env
from burnin.transports.srun_step import Refused, command, envelope, run_step


class SrunLauncher(Launcher):
    """`transport: srun` (burnin/transports/__init__.py: LAUNCHERS): the run's srun nodes
    run as job steps of the run's allocations, never node by node."""

    def __init__(self, nodes: list[Node], probes_dir: Path, run_id: str,
                 cancel: threading.Event | None = None):
        self.probes_dir = probes_dir
        self.slurm = Allocations(nodes, run_id, cancel)
        self._files: dict[str, str] | None = None

    def prepare(self) -> None:
        self.slurm.prepare()

    def run(self, nodes, probe, stdins, timeouts, max_stdout, on_stderr=None, lifeline=False,
            cancel=None, tasks=None):
        self.prepare()
        # Steps of different allocations run at once; Ctrl-C sets `cancel`, which every
        # step honours (a caller without one still gets its steps killed).
        cancel = cancel if cancel is not None else threading.Event()
        out: dict[str, list[CommandResult] | str] = {}
        steps: dict[int, tuple[Allocation, list[Node]]] = {}
        for n in nodes:
            a = self.slurm.where.get(n.name)
            if a is None:
                why = self.slurm.unavailable.get(n.name, "not in the run's Slurm allocation")
                # A busy reason (other jobs on it, node-check's drain) stays one, prefix
                # first: the node is skipped, neither judged nor quarantined.
                busy = BUSY if is_busy(why) else ""
                out[n.name] = f"{busy}Slurm cannot give node {n.name}: {why[len(busy):]}"
            else:
                steps.setdefault(id(a), (a, []))[1].append(n)

        def one(step: tuple[Allocation, list[Node]]) -> None:
            a, members = step
            try:
                out.update(self._step(a, members, probe, stdins, timeouts, max_stdout,
                                      on_stderr, lifeline, cancel, tasks or {}))
            except Exception as e:  # a controller bug fails these nodes, not the run
                out.update({n.name: f"controller error running a step: {type(e).__name__}: "
                                    f"{e}" for n in members})

        fan_out(list(steps.values()), one, len(steps), cancel)
        return {n.name: out[n.name] for n in nodes}

    def _step(self, a: Allocation, nodes: list[Node], probe: str, stdins, timeouts,
              max_stdout, on_stderr, lifeline, cancel, tasks) -> dict:
        """One job step over `nodes` of allocation `a`: task i on layout[i]."""
        layout = [n.name for n in nodes for _ in range(tasks.get(n.name, 1))]
        argv = ["srun", f"--jobid={a.job_id}", f"--nodelist={','.join(layout)}",
                f"--ntasks={len(layout)}", "--distribution=arbitrary", "--label",
                "--input=all", "--kill-on-bad-exit=0", "--mpi=none",
                f"--job-name=burnin-{probe}"]
        per_node = {tasks.get(n.name, 1) for n in nodes}
        if len(per_node) == 1:
            argv.append(f"--ntasks-per-node={per_node.pop()}")
        if a.gpus:
            argv.append(f"--gres=gpu:{a.gpus}")  # the step holds every GPU of its nodes
        # `--`: what follows is the remote command, never an option of srun's.
        argv += ["--", *command({n.name: n.python or "python3" for n in nodes}, probe)]
        payloads = {n.name: {"stdin": stdins[n.name].decode(), "workdir": n.workdir}
                    for n in nodes}
        results, said = run_step(argv, slurm_env(), envelope(self.files(), payloads, lifeline),
                                 layout, [timeouts[name] for name in layout], max_stdout,
                                 on_stderr, cancel)
        last = [ln for ln in said.splitlines() if ln.strip()][-2:]
        mine: dict[str, list[CommandResult] | str] = {}
        for name, r in zip(layout, results, strict=True):
            have = mine.setdefault(name, [])
            if isinstance(have, str):
                continue
            if isinstance(r, Refused):
                mine[name] = str(r)  # the node's own workdir is unsafe: not srun's doing
            elif isinstance(r, str):
                mine[name] = f"srun lost the task on {name}: {r}" + \
                    (f" ({'; '.join(last)})" if last else "")
            else:
                have.append(r)
        return mine

    def shared(self) -> dict:
        return self.slurm.shared()

    def attach(self, shared: dict) -> None:
        self.slurm.attach(shared)

    def files(self) -> dict[str, str]:
        if self._files is None:
            self._files = {p.name: p.read_text() for p in sorted(self.probes_dir.glob("*.py"))}
        return self._files

    def close(self) -> None:
        self.slurm.close()

