"""`burnin run --rolling [--inventory FILE] [--nodes HOSTLIST] [--reports DIR] [pytest
args]`: re-validate a fleet in production, in waves, without touching a job
(docs/operator/rolling.md).

Each wave (burnin/gate/rolling.py plans it under `rolling:`'s budget) takes its nodes out
of service (in Slurm, a drain with ROLLING_REASON; without Slurm, the site's out hook:
burnin/gate/rolling_control.py), waits until their work has ended (squeue, or the busy
hook; at most `drain_timeout_s`; a node still busy is given back, its own drain only, and
tried in a later wave: no job is ever killed), runs the chosen checks on them as one
ordinary `burnin run --nodes WAVE` (the run re-tests burnin-drained nodes inside a
reservation of its own), puts back the nodes it passed (resume of its own drain, or the
back hook), and leaves the others to the run's quarantine. Every step is an event in the
ledger (burnin/ledger/rolling.py): a node a killed loop took out is taken up by the next
one, and a node validated within `every` is not due. Progress (waves, nodes done and left,
an ETA) goes to the terminal and to DIR/rolling.prom.

Nodes not on Slurm need `rolling.hooks`; without them they are refused with a message."""

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
from burnin.gate.rolling_control import Control, HookControl, SlurmControl, untrusted_hooks
from burnin.inventory.schema import InventoryError, load_inventory, select_nodes
from burnin.ledger import rolling as events
from burnin.ledger.api import Ledger, LedgerError, LedgerLost, LedgerUrlError
from burnin.ledger.open import open_configured
from burnin.model.outcome import Outcome

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
    hooks = inv.rolling.hooks
    other = [n.name for n in nodes if n.transport != "srun"]
    if other and hooks is None:
        print(f"burnin run --rolling: {NodeSet.fromlist(other)} not on Slurm (transport "
              "srun): a rolling run drains and resumes nodes through Slurm, or through the "
              "site's rolling.hooks (busy, out, back) where there is no Slurm",
              file=sys.stderr)
        return 2
    problems = untrusted_hooks(hooks) if hooks else []
    if problems:
        print("burnin run --rolling: " + "; ".join(problems), file=sys.stderr)
        return 2
    reports = Path(own.get("reports") or "reports")
    try:
        ledger = open_configured(inv.quarantine, reports, first_run=True)
    except (LedgerError, LedgerLost, LedgerUrlError, OSError) as e:
        print(f"burnin run --rolling: cannot open the quarantine ledger: {e}", file=sys.stderr)
        return 2
    by_name = {n.name: n for n in inv.nodes}
    control = HookControl(hooks, by_name, ledger) if hooks else SlurmControl(list(by_name))
    loop = Loop(inv, [n.name for n in nodes], ledger, reports, passthrough,
                own.get("inventory") or "inventory.yaml", control)
    try:
        return loop.run()
    except SlurmUnreachable as e:
        print(f"burnin run --rolling: {e}; stopped (run it again to go on)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return stop(loop, control, ledger)


def stop(loop: Loop, control: Control, ledger: Ledger) -> int:
    """After Ctrl-C: give back what the loop knows it has out, and what Slurm (or the
    ledger) says a loop has out, since Ctrl-C can land between a drain and the loop's note
    of it; 130."""
    try:
        seen, _ = control.look(loop.names, ledger.quarantined())
    except (SlurmUnreachable, LedgerError, LedgerLost, OSError):
        seen = []
    loop.give_back(list(dict.fromkeys(loop.out + seen)), "the rolling run was interrupted")
    print("burnin run --rolling: interrupted; nodes out of service given back",
          file=sys.stderr)
    return 130


class Loop:
    """One invocation's waves. Its scans of the fleet are sets and each wave's step is
    one ledger transaction, so that a wave costs the loop O(nodes), not O(nodes^2) nor an
    fsync per node (benchmarks/rolling_scale.py measures it at 10,000 nodes)."""

    def __init__(self, inv, names: list[str], ledger: Ledger, reports: Path,
                 passthrough: list[str], inventory_path: str, control: Control):
        self.inv, self.names, self.ledger, self.control = inv, names, ledger, control
        self.settings = inv.rolling
        self.reports, self.passthrough, self.inventory_path = reports, passthrough, \
            inventory_path
        self.by_name = {n.name: n for n in inv.nodes}
        self.out: list[str] = []
        self.tries: dict[str, int] = {}
        self.wave = 0
        self.done: set[str] = set()
        self.started = time.monotonic()

    def run(self) -> int:
        """Waves until no node is due; 0 when every due node was validated, 1 when some
        failed, stayed busy or could not be taken out or back, 2 when Slurm cannot be
        asked."""
        failed: list[str] = []
        retries = self.settings.retries
        while True:
            held = self.ledger.quarantined()
            # A node a killed loop took out and never gave back: this loop's now.
            out, unavailable = self.control.look(self.names, held)
            validated = self.ledger.rolling_validated()
            late = [n for n in due(self.names, validated, time.time(), self.settings.every)
                    if n not in held]
            late_set = set(late)
            # Out, but validated within `every` (its way back failed): only back it goes.
            returning = [n for n in out if n not in late_set
                         and self.tries.get(n, 0) < retries]
            if returning:
                self.give_back(returning, "validated; given back")
                continue
            # Out, and this invocation gave up on it: it still fills a place of the budget.
            stranded = [n for n in out if self.tries.get(n, 0) >= retries]
            self.out = [n for n in out if self.tries.get(n, 0) < retries]
            left = [n for n in late if self.tries.get(n, 0) < retries]
            out_set = set(out)
            wave = plan_wave([n for n in left if n not in out_set], out, unavailable,
                             self.by_name, len(self.names), self.settings)
            self.progress(len(set(left) | set(self.out)))
            if not self.out and not wave.nodes:
                stuck = self.not_validated(late, set(left), stranded, unavailable)
                break
            failed += self.one_wave(wave.nodes)
        self.progress(0)
        return 1 if failed or stuck or any(n in self.tries for n in self.names
                                           if n not in self.done) else 0

    def not_validated(self, late: list[str], left: set[str], stranded: list[str],
                      unavailable: dict[str, str]) -> list[str]:
        """At the end: the due nodes not validated and the validated ones still out, each
        said with why."""
        stuck = [n for n in late if n not in self.done]
        for n in stuck:
            why = "still busy, or not taken out or back, after its tries" \
                if n not in left else \
                unavailable.get(n, "the capacity budget leaves no room for it")
            print(f"burnin run --rolling: {n}: not validated: {why}", file=sys.stderr)
        late_set = set(late)
        for n in stranded:
            if n not in late_set:
                stuck.append(n)
                print(f"burnin run --rolling: {n}: validated, but still out of "
                      "service: it could not be put back", file=sys.stderr)
        return stuck

    def one_wave(self, nodes: tuple[str, ...]) -> list[str]:
        """Take `nodes` out, wait for their work to end, validate the idle ones and give
        back the ones still busy; the nodes the wave's run did not pass."""
        self.wave += 1
        taken = []
        for n, why in self.control.take_out(list(nodes)).items():
            if why:
                print(f"burnin run --rolling: {n}: {why}", file=sys.stderr)
                self.tries[n] = self.settings.retries
            else:
                taken.append(n)
        # This loop's before the note: Ctrl-C during it still gives them back.
        self.out += taken
        self.ledger.note_all((n, events.OUT, f"taken out for rolling wave {self.wave}", None)
                             for n in taken)
        ready = self.wait_idle(self.out)
        idle = set(ready)
        still = [n for n in self.out if n not in idle]
        for n in still:
            self.tries[n] = self.tries.get(n, 0) + 1
        self.give_back(still, f"still busy after {self.settings.drain_timeout_s:g} s: "
                              "tried again in a later wave")
        not_passed: list[str] = []
        if ready:
            passed, not_passed = self.validate(ready)
            self.done.update(passed)
        self.out = []
        return not_passed

    def wait_idle(self, names: list[str]) -> list[str]:
        deadline = time.monotonic() + self.settings.drain_timeout_s
        while True:
            idle = self.control.idle(names)
            if len(idle) == len(names) or time.monotonic() >= deadline:
                return idle
            time.sleep(self.settings.poll_s)

    def give_back(self, names: list[str], why: str) -> None:
        """Put back the nodes still this loop's own (an administrator's or a quarantine's
        drain set meanwhile stays). One that does not go back stays out, counted in the
        budget, and this loop tries it no more."""
        notes = []
        for n, failure in self.control.give_back(names).items():
            if failure:
                notes.append((n, events.OUT, f"{why}; {failure}: still out of service", None))
                self.tries[n] = self.settings.retries
                print(f"burnin run --rolling: {n}: {failure}: still out of service",
                      file=sys.stderr)
            else:
                notes.append((n, events.RELEASED, why, None))
                print(f"burnin run --rolling: {n}: back in service: {why}", file=sys.stderr)
        self.ledger.note_all(notes)

    def validate(self, names: list[str]) -> tuple[list[str], list[str]]:
        """One ordinary run of the chosen checks over `names`, then each node put back or
        kept out; (passed, not passed)."""
        run_id, cases = self.run_wave(names)
        return self.settle(names, run_id, cases, self.ledger.quarantined())

    def run_wave(self, names: list[str]) -> tuple[str, dict]:
        """`burnin run --nodes WAVE` in a process of its own: (its run id, its junit.xml's
        {node: [(check, outcome, message)]}); nothing when it left no report."""
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
        return run_id, cases

    def settle(self, names: list[str], run_id: str, cases: dict,
               held: set[str]) -> tuple[list[str], list[str]]:
        """A wave's verdicts into each node's fate: passed (every case passed, not held)
        put back, the others kept out; (passed, not passed)."""
        passed: list[str] = []
        failed: list[str] = []
        for n in names:
            outcomes = {o for _, o, _ in cases.get(n, [])}
            good = Outcome.PASSED in outcomes and not outcomes & {Outcome.FAILED,
                                                                 Outcome.ERROR}
            (passed if good and n not in held else failed).append(n)
        self.ledger.note_all((n, events.VALIDATED, f"passed rolling wave {self.wave}", run_id)
                             for n in passed)
        notes: list[tuple[str, str, str, str | None]] = []
        for n, failure in self.control.give_back(passed).items():
            if failure:  # validated, but still out: the next pass tries its way back
                notes.append((n, events.OUT, f"{failure}: still out of service", None))
                print(f"burnin run --rolling: {n}: {failure}: still out of service",
                      file=sys.stderr)
        notes += [(n, events.FAILED, f"not passed in rolling wave {self.wave}", run_id)
                  for n in failed]
        self.ledger.note_all(notes)
        self.control.keep_out(failed, run_id)
        print(f"burnin run --rolling: wave {self.wave}: passed {len(passed)}"
              + (f", not passed: {NodeSet.fromlist(failed)}" if failed else ""), flush=True)
        return passed, failed

    def progress(self, left: int) -> None:
        elapsed = time.monotonic() - self.started
        per_node = elapsed / len(self.done) if self.done else 0.0
        eta = per_node * left if self.done else float("nan")
        out = self.control.count_out(self.names)
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
