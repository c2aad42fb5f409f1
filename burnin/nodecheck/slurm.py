"""Where node-check runs and what it may do there.

Modes: `health` (Slurm's HealthCheckProgram: node-check drains its own node, and resumes it
only from a drain of its own, recognised by NODE_CHECK_PREFIX); `prolog` and `epilog`
(never scontrol, which Slurm advises against there: the reason goes to stderr and the exit
status is non-zero, so that Slurm drains the node and requeues the job); `check` (by hand:
report only). Slurm sets SLURM_SCRIPT_CONTEXT for its prolog and epilog; a
HealthCheckProgram gets no such word, so its wrapper says `--mode health`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from burnin.errors import NodeCheckUsage as UsageError
from burnin.errors import SlurmError
from burnin.gate.actions import NODE_CHECK_PREFIX, REASON_MAX, _one_line

MODES = ("check", "health", "prolog", "epilog")
CONTEXTS = {"prolog_slurmd": "prolog", "epilog_slurmd": "epilog"}
# Slurm runs prologs and health checks without a search path.
FALLBACK_PATH = "/usr/bin:/bin:/usr/sbin:/sbin:/usr/local/bin"


def mode_from(given: str | None, env: dict) -> str:
    if given:
        return given
    context = env.get("SLURM_SCRIPT_CONTEXT", "")
    if context in CONTEXTS:
        return CONTEXTS[context]
    if context.endswith("_slurmctld"):
        raise UsageError(f"started as {context} (SLURM_SCRIPT_CONTEXT): node-check runs on "
                         "the node it checks, as Prolog, Epilog or HealthCheckProgram")
    return "check"


def drain_reason(lines: list[str]) -> str:
    """`burnin: node-check: storage: ...; gpu: ...`: one line Slurm and a shell can carry,
    at most REASON_MAX characters."""
    text = " ".join([NODE_CHECK_PREFIX, _one_line("; ".join(lines))])
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 3].rstrip() + "..."


def checks_named(reason: str) -> set[str]:
    """The checks a node-check drain reason names (`...: storage: ...; gpu: ...`)."""
    return set(re.findall(r"(?:^burnin: node-check: |; )([a-z]+): ", reason))


def ours(reason: str) -> bool:
    """A drain node-check set, and so may lift. A run's reason never starts with the
    prefix (burnin/gate/actions.py), and a run that quarantines a node node-check drained
    replaces the reason with its own: node-check never resumes a node the ledger holds."""
    return reason.startswith(NODE_CHECK_PREFIX)


@dataclass(frozen=True)
class SlurmState:
    state: str    # scontrol's State=, e.g. IDLE+DRAIN
    reason: str   # '' when none

    @property
    def drained(self) -> bool:
        return bool({"DRAIN", "DRAINED", "DRAINING"} & set(self.state.split("+")))


class Scontrol:
    """scontrol for one node, every call bounded by the caller's timeout."""

    def __init__(self, command: str, node: str):
        path = shutil.which(command) or shutil.which(command, path=FALLBACK_PATH)
        self.node = node
        if path is None:
            raise SlurmError(f"scontrol not found ({command!r} on PATH or {FALLBACK_PATH}; "
                             "set node_check.scontrol)")
        self.path: str = path

    def _run(self, args: list[str], timeout: float) -> str:
        # A job's SLURM_* variables would be read as options; SLURM_CONF says which cluster.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("SLURM_") or k == "SLURM_CONF"}
        env.setdefault("PATH", FALLBACK_PATH)
        try:
            done = subprocess.run([self.path, *args], stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, errors="replace",
                                  timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            raise SlurmError(f"scontrol {args[0]} did not answer within {timeout:.1f} s") \
                from None
        except OSError as e:
            raise SlurmError(f"scontrol cannot be run: {e}") from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise SlurmError(f"scontrol {args[0]} exited {done.returncode}: {said[0][:200]}")
        return done.stdout

    def show(self, timeout: float) -> SlurmState:
        out = self._run(["show", "node", self.node, "--oneliner"], timeout)
        state = re.search(r"(?:^| )State=(\S*)", out)
        if state is None:
            raise SlurmError(f"scontrol show node {self.node}: no State= in its answer")
        reason = out.split(" Reason=", 1)[1].rsplit(" [", 1)[0].strip() \
            if " Reason=" in out else ""
        return SlurmState(state.group(1), reason)

    def drain(self, reason: str, timeout: float) -> None:
        self._run(["update", f"nodename={self.node}", "state=drain", f"reason={reason}"],
                  timeout)

    def resume(self, timeout: float) -> None:
        self._run(["update", f"nodename={self.node}", "state=resume"], timeout)
