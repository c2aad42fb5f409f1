"""`burnin run --rolling [--inventory FILE] [--nodes HOSTLIST] [--reports DIR] [pytest
args]`: re-validate a fleet in production, in waves, without touching a job
(docs/operator/rolling.md).

Each wave (burnin/gate/rolling.py plans it under `rolling:`'s budget) drains its nodes in
Slurm with ROLLING_REASON, waits until squeue shows no job on them (at most
`drain_timeout_s`; a node still busy is given back, its own drain only, and tried in a
later wave: no job is ever killed), runs the chosen checks on them as one ordinary `burnin
run --nodes WAVE` (the run re-tests burnin-drained nodes inside a reservation of its own),
resumes the nodes it passed whose reason is still ROLLING_REASON, and leaves the others
to the run's quarantine. Every step is an event in the ledger (burnin/ledger/rolling.py):
a node drained by a loop that was killed is taken up by the next one, and a node
validated within `every` is not due. Progress (waves, nodes done and left, an ETA) goes to
the terminal and to DIR/rolling.prom.

Slurm only: nodes of another transport are refused with a message (a command hook for
SSH-only fleets is not built)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ClusterShell.NodeSet import NodeSet

from burnin.core.safefiles import write_atomically
from burnin.errors import SlurmUnreachable
from burnin.gate.admit import ReportError, read_junit
from burnin.gate.rolling import due, plan_wave
from burnin.inventory.schema import InventoryError, load_inventory, select_nodes
from burnin.ledger import rolling as events
from burnin.ledger.api import Ledger, LedgerError, LedgerLost, LedgerUrlError
from burnin.ledger.open import open_configured
from burnin.model.outcome import Outcome
from burnin.model.rolling import FAILED_REASON, ROLLING_REASON
from burnin.transports.slurmctl import read_nodes, refusal, scontrol, slurm_env

OURS = ("--inventory", "--nodes", "--reports")
# A run stops within seconds of Ctrl-C (it kills its probes, gives back what it holds); one
# that has not after this long is killed, so that the loop's own Ctrl-C stays bounded.
INTERRUPT_GRACE_S = 60


def split_args(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """(--inventory/--nodes/--reports values, the rest for each wave's run)."""
    own: dict[str, str] = {}
    rest: list[str] = []
    it = iter(argv)
    for a in it:
        name, eq, value = a.partition("=")
        if a == "--rolling":
            continue
        if name in OURS:
            own[name[2:]] = value if eq else next(it, "")
        else:
            rest.append(a)
    return own, rest


def main(argv: list[str]) -> int:
    own, passthrough = split_args(argv)
    try:
        inv = load_inventory(own.get("inventory") or "inventory.yaml")
        nodes = select_nodes(inv, own.get("nodes"))
    except InventoryError as e:
        print(f"burnin run --rolling: invalid inventory:\n{e}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as e:
        print(f"burnin run --rolling: {e}", file=sys.stderr)
        return 2
    other = [n.name for n in nodes if n.transport != "srun"]
    if other:
        print(f"burnin run --rolling: {NodeSet.fromlist(other)} not on Slurm (transport "
              "srun): a rolling run drains and resumes nodes through Slurm; SSH-only fleets "
              "are not supported yet", file=sys.stderr)
        return 2
    reports = Path(own.get("reports") or "reports")
    try:
        ledger = open_configured(inv.quarantine, reports, first_run=True)
    except (LedgerError, LedgerLost, LedgerUrlError, OSError) as e:
        print(f"burnin run --rolling: cannot open the quarantine ledger: {e}", file=sys.stderr)
        return 2
    loop = Loop(inv, [n.name for n in nodes], ledger, reports, passthrough,
                own.get("inventory") or "inventory.yaml")
    try:
        return loop.run()
    except SlurmUnreachable as e:
        print(f"burnin run --rolling: {e}; stopped (run it again to go on)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        loop.give_back(loop.out, "the rolling run was interrupted")
        print("burnin run --rolling: interrupted; nodes out of service given back",
              file=sys.stderr)
        return 130


def busy(names: list[str]) -> set[str]:
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


class Loop:
    def __init__(self, inv, names: list[str], ledger: Ledger, reports: Path,
                 passthrough: list[str], inventory_path: str):
        self.inv, self.names, self.ledger = inv, names, ledger
        self.settings = inv.rolling
        self.reports, self.passthrough, self.inventory_path = reports, passthrough, \
            inventory_path
        self.by_name = {n.name: n for n in inv.nodes}
        self.out: list[str] = []
        self.tries: dict[str, int] = {}
        self.wave = 0
        self.done: list[str] = []
        self.started = time.monotonic()

    def slurm(self) -> dict:
        known, why = read_nodes(list(self.by_name))
        if why:
            raise SlurmUnreachable(why)
        return known

    def run(self) -> int:
        """Waves until no node is due; 0 when every due node was validated, 1 when some
        failed or stayed busy, 2 when Slurm cannot be asked."""
        failed: list[str] = []
        stuck: list[str] = []
        while True:
            known = self.slurm()
            held = self.ledger.quarantined()
            # A node a killed loop drained and never gave back: this loop's now.
            self.out = [n for n in self.names if own(known, n) and n not in held]
            validated = self.ledger.rolling_validated()
            late = [n for n in due(self.names, validated, time.time(), self.settings.every)
                    if n not in held]
            left = [n for n in late if self.tries.get(n, 0) < self.settings.retries]
            candidates = [n for n in left if n not in self.out]
            unavailable = {n: f"Slurm gives it no job: {s.state}"
                           + (f", reason: {s.reason}" if s.reason else "")
                           for n, s in known.items() if n not in self.out
                           and (s.drained or refusal(s).startswith("Slurm state"))}
            wave = plan_wave(candidates, self.out, unavailable, self.by_name,
                             len(self.names), self.settings)
            members = self.out + list(wave.nodes)
            self.progress(len(set(left) | set(self.out)), known)
            if not members:
                stuck = [n for n in late if n not in self.done]
                for n in stuck:
                    why = "still busy after its tries" if n not in left else \
                        unavailable.get(n, "the capacity budget leaves no room for it")
                    print(f"burnin run --rolling: {n}: not validated: {why}", file=sys.stderr)
                break
            self.wave += 1
            for n in wave.nodes:
                ok, msg = scontrol("update", f"nodename={n}", "state=drain",
                                   f"reason={ROLLING_REASON}")
                if not ok:
                    print(f"burnin run --rolling: {n}: cannot drain: {msg}", file=sys.stderr)
                    self.tries[n] = self.settings.retries
                    continue
                self.ledger.note(n, events.OUT, f"drained for rolling wave {self.wave}")
                self.out.append(n)
            ready = self.wait_idle(self.out)
            still = [n for n in self.out if n not in ready]
            for n in still:
                self.tries[n] = self.tries.get(n, 0) + 1
            self.give_back(still, f"jobs still running after {self.settings.drain_timeout_s:g}"
                                  " s: tried again in a later wave")
            if ready:
                passed, not_passed = self.validate(ready)
                self.done += passed
                failed += not_passed
            self.out = []
        self.progress(0, self.slurm())
        return 1 if failed or stuck or any(n in self.tries for n in self.names
                                           if n not in self.done) else 0

    def wait_idle(self, names: list[str]) -> list[str]:
        deadline = time.monotonic() + self.settings.drain_timeout_s
        while True:
            known = self.slurm()
            jobs = busy(names)
            idle = [n for n in names if n not in jobs and known.get(n) is not None
                    and not known[n].flags & {"ALLOCATED", "MIXED", "COMPLETING"}]
            if len(idle) == len(names) or time.monotonic() >= deadline:
                return idle
            time.sleep(self.settings.poll_s)

    def give_back(self, names: list[str], why: str) -> None:
        """Resume the nodes whose drain is still this loop's own (an administrator's or a
        quarantine's drain set meanwhile stays)."""
        known = self.slurm() if names else {}
        for n in names:
            if not own(known, n):
                continue
            ok, msg = scontrol("update", f"nodename={n}", "state=resume")
            self.ledger.note(n, events.RELEASED, why if ok else f"{why}; resume failed: {msg}")
            print(f"burnin run --rolling: {n}: back in service: {why}", file=sys.stderr)

    def validate(self, names: list[str]) -> tuple[list[str], list[str]]:
        """One ordinary run of the chosen checks over `names`; (passed, not passed)."""
        hostlist = str(NodeSet.fromlist(names))
        print(f"burnin run --rolling: wave {self.wave}: validating {hostlist}", flush=True)
        argv = [sys.executable, "-m", "burnin", "run", "--inventory", self.inventory_path,
                "--nodes", hostlist, "--reports", str(self.reports), *self.passthrough]
        # The run in its own process group: Ctrl-C on the terminal reaches it once, from us.
        proc = subprocess.Popen(argv, start_new_session=True)
        try:
            proc.wait()
        except KeyboardInterrupt:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=INTERRUPT_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            raise
        cases: dict = {}
        run_id = ""
        try:
            latest = self.reports / "latest"
            run_id = latest.resolve().name
            cases = read_junit(latest / "junit.xml", strict=False).cases
        except (ReportError, OSError) as e:
            print(f"burnin run --rolling: wave {self.wave}: no report: {e}", file=sys.stderr)
        held = self.ledger.quarantined()
        passed: list[str] = []
        failed: list[str] = []
        for n in names:
            outcomes = {o for _, o, _ in cases.get(n, [])}
            good = Outcome.PASSED in outcomes and not outcomes & {Outcome.FAILED,
                                                                 Outcome.ERROR}
            (passed if good and n not in held else failed).append(n)
        known = self.slurm()
        for n in passed:
            self.ledger.note(n, events.VALIDATED, f"passed rolling wave {self.wave}", run_id)
            if own(known, n):
                scontrol("update", f"nodename={n}", "state=resume")
        for n in failed:
            self.ledger.note(n, events.FAILED, f"not passed in rolling wave {self.wave}",
                             run_id)
            if own(known, n):
                # No quarantine drain took over: it stays out, under a reason no loop
                # takes up again, until a person or a --revalidate run clears it.
                scontrol("update", f"nodename={n}", "state=drain",
                         f"reason={FAILED_REASON} (run {run_id})")
        print(f"burnin run --rolling: wave {self.wave}: passed {len(passed)}"
              + (f", not passed: {NodeSet.fromlist(failed)}" if failed else ""), flush=True)
        return passed, failed

    def progress(self, left: int, known: dict) -> None:
        elapsed = time.monotonic() - self.started
        per_node = elapsed / len(self.done) if self.done else 0.0
        eta = per_node * left if self.done else float("nan")
        out = sum(1 for s in known.values() if s.reason == ROLLING_REASON)
        print(f"burnin run --rolling: wave {self.wave}: done {len(self.done)}, left {left}, "
              f"out {out}" + (f", ETA {eta:.0f} s" if self.done else ""), flush=True)
        self.reports.mkdir(parents=True, exist_ok=True)
        lines = ["# TYPE burnin_rolling_wave gauge", f"burnin_rolling_wave {self.wave}",
                 "# TYPE burnin_rolling_nodes gauge",
                 f'burnin_rolling_nodes{{state="done"}} {len(self.done)}',
                 f'burnin_rolling_nodes{{state="left"}} {left}',
                 f'burnin_rolling_nodes{{state="out"}} {out}',
                 "# TYPE burnin_rolling_eta_seconds gauge",
                 f"burnin_rolling_eta_seconds {eta if self.done else 'NaN'}"]
        write_atomically(self.reports / "rolling.prom", "\n".join(lines) + "\n")
