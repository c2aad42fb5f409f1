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
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from burnin.checks import CHECKS, FACTS, SINGLE_NODE, Check, Fleet, Judging
from burnin.files import append_durably, private_dirs, write_atomically
from burnin.nodes import Inventory, Node
from burnin.probe import ProbeOutcome, run_probe, run_probes, unreachable
from burnin.progress import Progress
from burnin.schema import MAX_DEVICES
from burnin.shipped import shipped
from burnin.transports import Launcher, Launchers, NodeUnreachable, Transport, transport_for
from burnin.verdict import Verdict

PROBES_DIR = shipped("probes")  # inside the package from a wheel, beside it in a checkout
DEFAULT_FANOUT = 256
CANCEL_WAIT_S = 20.0  # an interrupted run waits this long for its probes to be killed


class ControllerFault(Exception):
    """The controller itself failed (its reports or ledger cannot be written, the disk is
    full, a bug outside any one node's document): the run ends incomplete, no report of
    it is admissible, and no node is blamed."""


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


def fan_out(items: Iterable, fn: Callable, limit: int,
            cancel: threading.Event | None = None) -> list:
    """fn(item) for every item, at most `limit` at once; results in item order.

    fn must not raise: one item's failure belongs in its own result, never in another's.
    Interrupted (Ctrl-C, or SIGTERM turned into one), it sets `cancel`, which every
    transport honours by killing its command, starts nothing new, waits a bounded time
    for the running ones to end, and re-raises: the run stops within seconds.
    """
    items = list(items)
    if not items:
        return []
    pool = ThreadPoolExecutor(max_workers=max(1, min(limit, len(items))),
                              thread_name_prefix="burnin-fanout")
    futures = [pool.submit(fn, item) for item in items]
    try:
        results = [f.result() for f in futures]
    except BaseException:
        if cancel is not None:
            cancel.set()
        pool.shutdown(wait=False, cancel_futures=True)
        wait(futures, timeout=CANCEL_WAIT_S)
        raise
    pool.shutdown(wait=True)
    return results


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
    # {check: {node: why}}: nodes whose document broke their check's fleet figures when
    # summarised alone; left out of the fleet, and failed with the reason.
    _unjudged: dict[str, dict[str, str]] = field(default_factory=dict)
    _verdicts: dict[str, dict[str, Verdict]] = field(default_factory=dict)
    progress: Progress | None = None  # live lines for probes that report progress
    # Re-entrant: the inter-node all-reduce asks for the single-node checks' outcomes
    # while its own are being made.
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _flock_depth: int = 0
    # Set when the run is interrupted: every probe's command is killed, nothing new starts.
    cancel: threading.Event = field(default_factory=threading.Event)
    # The launchers of transports that run a check's nodes as one (srun: one job step).
    launchers: Launchers | None = None

    def __post_init__(self):
        raise_open_files_limit(sum(n.transport == "ssh" for n in self.nodes))
        self.launchers = Launchers(self.nodes, self.probes_dir, self.run_id, self.cancel)

    @property
    def run_dir(self) -> Path:
        return self.reports_dir / self.run_id

    def make_run_dir(self) -> Path:
        """reports/<run-id>/, owner-only: reports hold node facts, failure evidence and
        figures of the fleet that other local users have no business reading."""
        private_dirs(self.run_dir)
        return self.run_dir

    def settings(self, check: str, node: Node | None = None) -> dict:
        """The check's settings: profile defaults, the inventory's `checks:`, then the
        node group's own `checks:` when a node is given."""
        return CHECKS[check].resolve(self.profile, self.inventory.checks.get(check),
                                     node.checks.get(check) if node else None)

    def outcomes(self, check: str) -> dict[str, ProbeOutcome]:
        """Every selected node's outcome of `check`, running the probe once per run."""
        if check not in CHECKS:
            raise KeyError(f"unknown check {check!r}")
        with self._lock:
            if check not in self._outcomes:
                self._outcomes[check] = self._shared(check)
            return self._outcomes[check]

    def summary(self, check: str):
        """The check's fleet summary over this run's outcomes, computed once per run:
        fleet-wide figures such as majorities and medians, so judging n nodes is O(n)."""
        spec = CHECKS[check]
        if spec.summarize is None:
            return None
        with self._lock:
            if check not in self._summaries:
                self._summaries[check] = self._summarize(spec)
            return self._summaries[check]

    def _summarize(self, spec: Check):
        """spec.summarize over the fleet, with the blast radius of one node: when a node's
        document makes the fleet figure raise, each node is summarised alone, those that
        raise alone are left out (and failed: Run.verdict), and the rest make the figure.
        What still raises then is no one node's doing: a fault of the controller."""
        outcomes = self.outcomes(spec.name)
        devices = {n.name: n.gpus if spec.facts else self._devices_or_none(n)
                   for n in self.nodes}
        models = {n.name: self.inventory.model(n) for n in self.nodes}

        def over(names) -> object:
            return spec.summarize(Fleet({k: outcomes[k] for k in names}, devices, models))
        try:
            return over(outcomes)
        except Exception:  # whose document it was is found next
            pass
        unjudged = {}
        for name in outcomes:
            try:
                over([name])
            except Exception as e:  # this node's document: its failure
                unjudged[name] = (f"its {spec.name} document could not be summarised with "
                                  f"the fleet's: {type(e).__name__}: {e}")
        try:
            if len(unjudged) == len(outcomes):  # no node's doing when it fails every node
                raise RuntimeError(next(iter(unjudged.values()), "no node"))
            summary = over([k for k in outcomes if k not in unjudged])
        except Exception as e:
            raise ControllerFault(f"the {spec.name} fleet figures could not be computed: "
                                  f"{type(e).__name__}: {e}") from e
        self._unjudged[spec.name] = unjudged
        return summary

    def _devices_or_none(self, node: Node) -> int | None:
        try:
            return self.devices(node)
        except (KeyError, TypeError, AttributeError, ValueError):  # its own health facts
            return None

    def verdict(self, check: str, node: Node) -> Verdict:
        """The verdict on `node` for `check`, running the check's probe if it has not run."""
        with self._lock:
            if check not in self._verdicts:
                self._verdicts[check] = self._judge_all(check)
            return self._verdicts[check][node.name]

    def judged(self, check: str, node: str) -> Verdict | None:
        """The verdict already reached on `node` for `check`, or None: judges nothing."""
        with self._lock:
            return self._verdicts.get(check, {}).get(node)

    def _judge_all(self, check: str) -> dict[str, Verdict]:
        """Every node's verdict on `check`, once per run. Whatever one node's document does
        to the judge is that node's failure alone; a judge that raises for every node it
        judges is no node's doing but ours (ControllerFault), and blames none of them."""
        outcomes = self.outcomes(check)
        spec = CHECKS[check]
        fleet = self.summary(check)
        unjudged = self._unjudged.get(check, {})
        out: dict[str, Verdict] = {}
        raised: dict[str, str] = {}
        for node in self.nodes:
            outcome = outcomes[node.name]
            if outcome.fault:
                raise ControllerFault(f"{node.name}: {outcome.reason}")
            if outcome.busy:
                out[node.name] = Verdict(node.name, check, skipped=outcome.reason)
            elif node.name in unjudged:
                out[node.name] = Verdict(node.name, check, (unjudged[node.name],))
            else:
                try:
                    out[node.name] = spec.judge(node, outcome, self._judging(spec, node, fleet))
                except Exception as e:  # a document its judge cannot read
                    raised[node.name] = f"{type(e).__name__}: {e}"
                    out[node.name] = Verdict(node.name, check, (
                        f"its {check} document could not be judged: {raised[node.name]}",))
        judged = sum(outcomes[n.name].ok for n in self.nodes if n.name not in unjudged)
        if raised and len(raised) >= judged:
            raise ControllerFault(f"the {check} judge failed on every node it judged, which "
                                  f"is no node's doing: {next(iter(raised.values()))}")
        return out

    def _judging(self, spec: Check, node: Node, fleet) -> Judging:
        known = not spec.facts
        return Judging(settings=self.settings(spec.name, node), fleet=fleet,
                       model=self.inventory.model(node),
                       devices=self.devices(node) if known else node.gpus,
                       gpus=self.gpus(node) if known else node.gpus)

    def gpus(self, node: Node) -> int | None:
        """The GPUs `node` must have: the inventory's count, or for `gpus: auto` what its
        health facts show (NVML's count, else torch's); None while unknown (its health
        probe failed: then nothing is assumed)."""
        if node.gpus is not None:
            return node.gpus
        o = self.outcomes(FACTS)[node.name]
        if not o.ok:
            return None
        gpu = o.data["figures"].get("gpu") or {}
        if gpu.get("nvml") == "present":
            return len(o.data["devices"])
        return (o.data["figures"].get("torch") or {}).get("device_count") or 0

    def known_gpus(self, node: Node) -> int | None:
        """gpus(), but only from what is known already: never runs a probe (reports)."""
        if node.gpus is not None or self.has_outcomes(FACTS):
            return self.gpus(node)
        return None

    def equipped(self, node: Node) -> frozenset[str] | None:
        """The checks needing a tool whose tool the node's health facts found (dcgm where
        dcgmi is installed); None while unknown (its health probe failed, or a node held
        in quarantine did not run it)."""
        o = self.outcomes(FACTS).get(node.name)
        if o is None or not o.ok:
            return None
        tools = o.data["figures"].get("tools") or {}
        return frozenset(check for check, t in tools.items() if t.get("path"))

    def known_equipped(self, node: Node) -> frozenset[str] | None:
        """equipped(), but only from what is known already: never runs a probe."""
        return self.equipped(node) if self.has_outcomes(FACTS) else None

    def baseline(self, check: str, node: Node) -> dict | None:
        """What the node's facts probe read before the load for `check` (Check.baseline),
        when it ran in this run; never runs it."""
        if not self.has_outcomes(FACTS):
            return None
        o = self.outcomes(FACTS).get(node.name)
        if o is None or not o.ok:
            return None
        return (o.data["figures"].get("baselines") or {}).get(check)

    def devices(self, node: Node) -> int | None:
        """The devices every probe must report for `node`: its GPUs, or on a CPU-only node
        its `cpu_devices`; None while unknown."""
        gpus = self.gpus(node)
        if gpus is None:
            return None
        return gpus or node.cpu_devices

    def failed_single_node_checks(self) -> dict[str, list[str]]:
        """{node: failed checks} over the single-node checks that ran in this run (a node
        another run holds counts too: it is no partner to test others with)."""
        out: dict[str, list[str]] = {}
        for check in SINGLE_NODE:
            if not self.has_outcomes(check):
                continue
            for node in self.nodes:
                # A check that does not apply to the node (pcie on a CPU node of a mixed
                # fleet, whose probe ran there with the rest) is not one it failed.
                if not CHECKS[check].applies(self.gpus(node), len(self.nodes),
                                             self.equipped(node)):
                    continue
                v = self.verdict(check, node)
                if not v.passed:
                    out.setdefault(node.name, []).append(f"{check} (busy)" if v.skipped
                                                         else check)
        return out

    def _shared(self, check: str) -> dict[str, ProbeOutcome]:
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
            outcomes = self.execute(check)
            lines = "".join(self._record(outcomes, name) for name in outcomes)
            try:
                append_durably(self.run_dir / "results.jsonl", lines)
                write_atomically(done, lines, durable=True)
            except OSError as e:  # a full disk, a reports dir gone: nobody's node
                raise ControllerFault(f"cannot record the {check} results in "
                                      f"{self.run_dir}: {e}") from e
            return outcomes

    def _record(self, outcomes: dict[str, ProbeOutcome], name: str) -> str:
        """The results.jsonl line of one node's outcome. A document that cannot be encoded
        (none should: burnin/text.py made it safe where it was parsed) fails its node
        alone, here, rather than the line of every node."""
        o = outcomes[name]
        try:
            return json.dumps(o.to_record(self.run_id), allow_nan=False) + "\n"
        except (ValueError, TypeError, RecursionError) as e:
            o = outcomes[name] = ProbeOutcome(
                o.node, o.probe, False, f"its {o.probe} document could not be recorded: "
                f"{type(e).__name__}: {e}", {}, o.duration_s, o.exit_code, o.stderr_tail)
            return json.dumps(o.to_record(self.run_id)) + "\n"

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
        spec = CHECKS[check]
        if spec.group:  # one coordinated group, not a fan-out
            return spec.execute(self)

        # Learned here, in this thread: it holds the run's lock the fan-out threads lack.
        gpus = {n.name: n.gpus if spec.facts else self.gpus(n) for n in self.nodes}
        settings = {n.name: self.settings(check, n) for n in self.nodes}  # resolved once
        baselines = {n.name: self.baseline(check, n) for n in self.nodes} \
            if spec.baseline is not None else {}

        def payload(node: Node) -> dict:
            out = {"check": check, "node": node.name, "run_id": self.run_id,
                   "profile": self.profile, "gpus": gpus[node.name],
                   "cpu_devices": node.cpu_devices, "gpu_model": node.gpu_model,
                   "storage": {"path": node.storage.path, "mount": node.storage.mount},
                   "settings": settings[node.name]}
            if node.env:  # the probe sets these before torch, NCCL or gloo start
                out["env"] = dict(node.env)
            if spec.facts:  # the commands checks need, for the facts probe to look for
                out["tools"] = {c.name: c.tool(self.settings(c.name, node))
                                for c in CHECKS.values() if c.tool is not None}
                out["baselines"] = {c.name: c.baseline(self.settings(c.name, node))
                                    for c in CHECKS.values() if c.baseline is not None}
            if baselines.get(node.name) is not None:
                out["baseline"] = baselines[node.name]
            return out

        def devices(node: Node) -> int | None:
            known = gpus[node.name]
            return None if known is None else known or node.cpu_devices

        def limit(node: Node) -> int:  # the bytes its probe may print
            return spec.output_limit(settings[node.name], devices(node))

        def shape(nodes: list[Node]):  # the widest document shape of these nodes' probes
            widest = max(nodes, key=limit)
            return spec.schema_for(settings[widest.name], devices(widest))

        def timeout(node: Node) -> float:
            return float(settings[node.name]["timeout_s"])

        def on_progress(node: Node):
            if not self.progress:
                return None
            most = devices(node) or MAX_DEVICES
            return lambda info, name=node.name: self.progress.update(name, info, most)

        def one(item: tuple[Launcher | None, list[Node]]) -> dict[str, ProbeOutcome]:
            launcher, nodes = item
            if launcher is not None:  # the nodes run as one (srun: one job step)
                return self.probe_together(launcher, nodes, spec,
                                           {n.name: payload(n) for n in nodes},
                                           {n.name: timeout(n) for n in nodes},
                                           {n.name: on_progress(n) for n in nodes},
                                           max(limit(n) for n in nodes), shape(nodes))
            node = nodes[0]
            return {node.name: self.probe(node, spec, payload(node), timeout(node),
                                          on_progress(node), limit(node), shape(nodes))}

        together, apart = self.launchers.split(self.nodes)
        if self.progress:
            self.progress.begin(check)
        try:
            done = fan_out(together + [(None, [n]) for n in apart], one, self.fanout,
                           self.cancel)
        finally:
            if self.progress:
                self.progress.end()
        outcomes = {name: o for part in done for name, o in part.items()}
        return {n.name: outcomes[n.name] for n in self.nodes}

    def probe(self, node: Node, check: Check, payload: dict, timeout_s: float,
              on_progress=None, max_output: int | None = None,
              schema=None) -> ProbeOutcome:
        """Run the check's probe on one node; whatever happens is this node's outcome.
        It may print `max_output` bytes of a document of shape `schema` (defaults: the
        check's own)."""
        launcher = self.launcher(node)
        if launcher is not None:
            return self.probe_together(launcher, [node], check, {node.name: payload},
                                       {node.name: timeout_s}, {node.name: on_progress},
                                       max_output, schema)[node.name]
        try:
            transport = self.transport(node)
            if self.cancel.is_set():
                return ProbeOutcome(node.name, check.probe_name, False,
                                    "not started: the run was interrupted")
            return run_probe(transport, check.probe_name, payload, timeout_s,
                             max_output=max_output or check.max_output,
                             on_progress=on_progress,
                             schema=schema or check.schema, lifeline=True,
                             cancel=self.cancel)
        except NodeUnreachable as e:
            return unreachable(node.name, check.probe_name, e)
        except Exception as e:  # a bug of ours, never the node's: Run.verdict ends the run
            return ProbeOutcome(node.name, check.probe_name, False, f"controller error "
                                f"running {check.name}: {type(e).__name__}: {e}", fault=True)

    # --- transports that run a check's nodes as one (srun: one job step per check) ------

    def launcher(self, node: Node) -> Launcher | None:
        """The launcher that runs `node` together with the run's other nodes of its
        transport (srun: one job step), or None: its transport runs node by node."""
        return self.launchers.of(node)

    def probe_together(self, launcher: Launcher, nodes: list[Node], check: Check,
                       payloads: dict[str, dict], timeouts: dict[str, float],
                       on_progress: dict | None = None,
                       max_output: int | None = None,
                       schema=None) -> dict[str, ProbeOutcome]:
        """Run the check's probe on `nodes` as one; whatever happens is each node's own
        outcome, judged as run_probe judges one. Each may print `max_output` bytes of a
        document of shape `schema` (defaults: the check's own)."""
        if self.cancel.is_set():
            return {n.name: ProbeOutcome(n.name, check.probe_name, False,
                                         "not started: the run was interrupted") for n in nodes}
        try:
            done = run_probes(launcher, nodes, check.probe_name, payloads, timeouts,
                              max_output=max_output or check.max_output,
                              on_progress={k: v for k, v in (on_progress or {}).items() if v},
                              schema=schema or check.schema, lifeline=True,
                             cancel=self.cancel)
            return {name: tasks[0] for name, tasks in done.items()}
        except Exception as e:  # a bug of ours, never the nodes': Run.verdict ends the run
            return {n.name: ProbeOutcome(n.name, check.probe_name, False, f"controller error "
                                         f"running {check.name}: {type(e).__name__}: {e}",
                                         fault=True)
                    for n in nodes}

    def at_once(self, items: list, fn: Callable) -> list:
        """fn(item) for every item, all at once (a group that must start together), and
        cancellable like any fan-out."""
        return fan_out(items, fn, len(items), self.cancel)

    def transport(self, node: Node) -> Transport:
        """The node's transport for this run, made on first use and kept (one connection)."""
        # Called from fan-out threads, each for its own node: no two touch one key.
        t = self._transports.get(node.name)
        if t is None:
            t = self._transports[node.name] = transport_for(node, self.probes_dir, self.run_id)
        return t

    def close(self) -> None:
        transports, self._transports = list(self._transports.values()), {}
        fan_out(transports, lambda t: t.close(), self.fanout)
        self.launchers.close()


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
