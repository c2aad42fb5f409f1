"""One run of the suite: which nodes, which settings, and each check's outcomes.

The first test of a check that asks for its outcomes runs the probe on every selected
node at once (bounded by the fan-out), so the run's wall time is one probe's duration,
not the sum over nodes. Outcomes are kept in the run's directory under a file lock, so
pytest-xdist workers share one execution per check instead of racing the same GPUs,
and every worker judges against the same fleet.
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from burnin.checks import CHECKS, resolve_settings
from burnin.inventory import Inventory, Node
from burnin.probe import ProbeOutcome, run_probe
from burnin.progress import Progress
from burnin.transports import NodeUnreachable, Transport, transport_for

PROBES_DIR = Path(__file__).resolve().parent.parent / "probes"
DEFAULT_FANOUT = 256


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


def new_run_id() -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{os.urandom(3).hex()}"


def fan_out(items: Iterable, fn: Callable, limit: int) -> list:
    """fn(item) for every item, at most `limit` at once; results in item order.

    fn must not raise: one item's failure belongs in its own result, never in another's.
    """
    items = list(items)
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(limit, len(items))),
                            thread_name_prefix="burnin-fanout") as pool:
        return list(pool.map(fn, items))


@dataclass
class Run:
    inventory: Inventory
    nodes: list[Node]
    profile: str
    reports_dir: Path
    run_id: str
    fanout: int = DEFAULT_FANOUT
    probes_dir: Path = PROBES_DIR
    _outcomes: dict[str, dict[str, ProbeOutcome]] = field(default_factory=dict)
    _transports: dict[str, Transport] = field(default_factory=dict)
    _summaries: dict = field(default_factory=dict)
    progress: Progress | None = None  # live lines for probes that report progress
    # Re-entrant: the inter-node all-reduce asks for the single-node checks' outcomes
    # while its own are being made.
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _flock_depth: int = 0

    def __post_init__(self):
        raise_open_files_limit(sum(n.transport == "ssh" for n in self.nodes))

    @property
    def run_dir(self) -> Path:
        return self.reports_dir / self.run_id

    def settings(self, check: str) -> dict:
        return resolve_settings(check, self.profile, self.inventory.checks.get(check, {}))

    def outcomes(self, check: str) -> dict[str, ProbeOutcome]:
        """Every selected node's outcome of `check`, running the probe once per run."""
        if check not in CHECKS:
            raise KeyError(f"unknown check {check!r}")
        with self._lock:
            if check not in self._outcomes:
                self._outcomes[check] = self._shared(check)
            return self._outcomes[check]

    def summary(self, check: str, summarize: Callable[[dict], object]):
        """summarize(outcomes of check), computed once per run: fleet-wide figures such
        as majorities and medians, so judging n nodes stays O(n)."""
        key = (check, summarize)
        if key not in self._summaries:
            self._summaries[key] = summarize(self.outcomes(check))
        return self._summaries[key]

    def _shared(self, check: str) -> dict[str, ProbeOutcome]:
        state = self.run_dir / ".probes"
        state.mkdir(parents=True, exist_ok=True)
        done = state / f"{check}.jsonl"
        with self._held_flock(state / "lock"):
            if done.exists():
                return _read_outcomes(done)
            outcomes = self.execute(check)
            lines = "".join(json.dumps(o.to_record(self.run_id)) + "\n"
                            for o in outcomes.values())
            _append_durably(self.run_dir / "results.jsonl", lines)
            _write_atomically(done, lines)
            return outcomes

    def has_outcomes(self, check: str) -> bool:
        """Whether `check` has run in this run (here or in another xdist worker)."""
        return check in self._outcomes or (self.run_dir / ".probes" / f"{check}.jsonl").exists()

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

    def execute(self, check: str) -> dict[str, ProbeOutcome]:
        """Run `check`'s probe on every selected node now, at most `fanout` at once."""
        if check == "allreduce_internode":  # one coordinated group, not a fan-out
            from burnin.fabric import internode
            return internode(self)
        settings = self.settings(check)

        def one(node: Node) -> ProbeOutcome:
            payload = {"check": check, "node": node.name, "run_id": self.run_id,
                       "profile": self.profile, "gpus": node.gpus,
                       "gpu_model": node.gpu_model, "storage": {"path": node.storage.path},
                       "settings": settings}
            try:
                transport = self.transport(node)
            except NodeUnreachable as e:
                return ProbeOutcome(node.name, check, False, str(e))
            on_progress = None
            if self.progress:
                def on_progress(info, name=node.name):
                    self.progress.update(name, info)
            try:
                return run_probe(transport, check, payload, float(settings["timeout_s"]),
                                 on_progress=on_progress)
            except Exception as e:  # a controller bug must fail this node, not the run
                return ProbeOutcome(node.name, check, False,
                                    f"controller error running {check}: {type(e).__name__}: {e}")

        if self.progress:
            self.progress.begin(check)
        try:
            outcomes = fan_out(self.nodes, one, self.fanout)
        finally:
            if self.progress:
                self.progress.end()
        return dict(zip((n.name for n in self.nodes), outcomes, strict=True))

    def transport(self, node: Node) -> Transport:
        """The node's transport for this run, made on first use and kept (one connection)."""
        # Called from fan-out threads, each for its own node: no two touch one key.
        t = self._transports.get(node.name)
        if t is None:
            t = self._transports[node.name] = transport_for(node, self.probes_dir)
        return t

    def close(self) -> None:
        transports, self._transports = list(self._transports.values()), {}
        fan_out(transports, lambda t: t.close(), self.fanout)


@contextmanager
def _flock(path: Path):
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _read_outcomes(path: Path) -> dict[str, ProbeOutcome]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        o = ProbeOutcome.from_record(json.loads(line))
        out[o.node] = o
    return out


def _append_durably(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
