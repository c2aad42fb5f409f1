"""A run's outcome store: each check's outcomes, made once per run and shared by every
pytest-xdist worker of it.

The first worker to ask for a check's outcomes executes it under a file lock in the
run's directory and writes them there (and their lines to results.jsonl); every other
worker waits on the lock and reads them back, so the GPUs are never raced by two
workers, and every worker judges against the same fleet.
"""

from __future__ import annotations

import fcntl
import json
import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from burnin.core.safefiles import append_durably, private_dirs, write_atomically
from burnin.errors import ControllerFault  # noqa: F401  (raised here, caught by callers)
from burnin.figures.record_figures import KEPT, kept_line
from burnin.probe.protocol import ProbeOutcome


@dataclass
class OutcomeStore:
    run_dir: Path
    run_id: str
    # Re-entrant: a group check asks for the single-node checks' outcomes while its own
    # are being made. The run judges under the same lock (one lock, no order to keep).
    lock: threading.RLock = field(default_factory=threading.RLock)
    _outcomes: dict[str, dict[str, ProbeOutcome]] = field(default_factory=dict)
    _flock_depth: int = 0
    _ran: set[str] = field(default_factory=set)  # checks whose outcomes were let go

    def make_run_dir(self) -> Path:
        """reports/<run-id>/, owner-only: reports hold node facts, failure evidence and
        figures of the fleet that other local users have no business reading."""
        private_dirs(self.run_dir)
        return self.run_dir

    def get(self, check: str, execute: Callable[[str], dict[str, ProbeOutcome]]
            ) -> dict[str, ProbeOutcome]:
        """`check`'s outcomes, from execute(check) in whichever process comes first."""
        with self.lock:
            if check not in self._outcomes:
                self._outcomes[check] = self._shared(check, execute)
            return self._outcomes[check]

    def adopt(self, check: str, outcomes: dict[str, ProbeOutcome]) -> None:
        """Take `check`'s outcomes as recorded (burnin rejudge): its probe is not run."""
        with self.lock:
            self._outcomes[check] = outcomes

    def release(self, check: str) -> None:
        """Let go of `check`'s documents (judged: Run.release), keeping each outcome's
        scalar figures and errors (kept()); results.jsonl has them whole."""
        with self.lock:
            if check in self._outcomes:
                self._outcomes[check] = {n: kept(o) for n, o in self._outcomes[check].items()}

    def let_go(self) -> None:
        """Forget every check's outcomes (Run.let_go): has() still knows what ran."""
        with self.lock:
            self._ran.update(self._outcomes)
            self._outcomes.clear()

    def has(self, check: str) -> bool:
        """Whether `check` has run in this run (here or in another xdist worker)."""
        return check in self._outcomes or check in self._ran or \
            (self.run_dir / ".probes" / f"{check}.jsonl").exists()

    def _shared(self, check: str, execute) -> dict[str, ProbeOutcome]:
        try:
            state = self.make_run_dir() / ".probes"
            state.mkdir(mode=0o700, exist_ok=True)
        except OSError as e:
            raise ControllerFault(f"cannot write the run's directory {self.run_dir}: "
                                  f"{e}") from e
        done = state / f"{check}.jsonl"
        with self._held_flock(state / "lock"):
            if done.exists():
                return _read_outcomes(done)
            outcomes = execute(check)
            lines = "".join(self._record(check, outcomes, name) for name in outcomes)
            try:
                append_durably(self.run_dir / "results.jsonl", lines)
                # Figures, not documents: what publish reads instead of the series.
                append_durably(self.run_dir / KEPT, "".join(
                    kept_line(outcomes[n].to_record(self.run_id, check)) for n in outcomes))
                write_atomically(done, lines, durable=True)
            except OSError as e:  # a full disk, a reports dir gone: nobody's node
                raise ControllerFault(f"cannot record the {check} results in "
                                      f"{self.run_dir}: {e}") from e
            return outcomes

    def _record(self, check: str, outcomes: dict[str, ProbeOutcome], name: str) -> str:
        """The results.jsonl line of one node's outcome of `check`. A document that cannot
        be encoded (none should: burnin/core/safetext.py made it safe where it was parsed) fails
        its node alone, here, rather than the line of every node."""
        o = outcomes[name]
        try:
            return json.dumps(o.to_record(self.run_id, check), allow_nan=False) + "\n"
        except (ValueError, TypeError, RecursionError) as e:
            o = outcomes[name] = ProbeOutcome(
                o.node, o.probe, False, f"its {check} document could not be recorded: "
                f"{type(e).__name__}: {e}", {}, o.duration_s, o.exit_code, o.stderr_tail)
            return json.dumps(o.to_record(self.run_id, check)) + "\n"

    @contextmanager
    def _held_flock(self, path: Path):
        """The cross-process lock: one check at a time on the fleet, whichever worker runs
        it. A process already holding it (a check asking for another) goes straight in."""
        if self._flock_depth:
            self._flock_depth += 1
            try:
                yield
            finally:
                self._flock_depth -= 1
            return
        with _flock(path):
            self._flock_depth = 1
            try:
                yield
            finally:
                self._flock_depth = 0


@contextmanager
def _flock(path: Path):
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def kept(outcome: ProbeOutcome) -> ProbeOutcome:
    """A judged outcome as the run keeps it: its document's scalar figures (a group
    member's `excluded`, a count) and its errors; no device list, series or nested
    figures, which only the judge and results.jsonl needed."""
    data = outcome.data
    if not data:
        return outcome
    figures = {k: v for k, v in (data.get("figures") or {}).items()
               if not isinstance(v, (dict, list))}
    return replace(outcome, data={"figures": figures, "errors": list(data.get("errors", ()))})


def _read_outcomes(path: Path) -> dict[str, ProbeOutcome]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        o = ProbeOutcome.from_record(json.loads(line))
        out[o.node] = o
    return out
