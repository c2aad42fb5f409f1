"""A rolling re-validation at fleet scale: `burnin run --rolling`'s loop (the real Loop of
burnin/cli/rolling.py, its real planner and a real SQLite ledger) over N simulated nodes
(default 10,000), with `max_out` 10% and `min_available` 90% of each partition and rack.

The scheduler is simulated in-process and answers at once (`SimFleet`, a Control as
SlurmControl is one): a few nodes are down, some busy for a poll of the wave's wait, some
through a whole try (given back, validated in a later wave), a few busy through every try
(not validated), a few whose way back fails (validated, left out and counted in the
budget). A few nodes fail their checks (their inventory entry asks for more CPUs than they
have), so each wave has failures to settle.

Each wave runs as the loop runs it: `--waves real`, the real `python -m burnin run --nodes
WAVE -k health` subprocess over nodes whose probes answer instantly
(benchmarks/instant_transport.py, the documents of tests/corpus/); `--waves instant`, the
wave's run replaced by its verdicts in-process, so that the loop alone is measured.

Measured, in the loop's process: waves, the loop's wall and CPU with the waves' runs left
out (planning, the scheduler's answers, tracking, the ledger), its peak RSS, its ledger
write transactions; of the waves' runs: wall, CPU and the largest one's peak RSS. Checked:
never more than max_out out at once, no group taken below min_available, every node
validated exactly once (or not, for the reason planted), the ledger's progress complete.
Then the resume: a fresh ledger, Ctrl-C as the middle wave's run starts, the loop's own
handling of it (burnin/cli/rolling.py: stop), and a second loop that validates only the
rest.

    python benchmarks/rolling_scale.py [--nodes 10000] [--waves instant,real]
    python benchmarks/rolling_scale.py --nodes 1000 --one run --waves instant   # one JSON line

Each phase runs in a fresh process, so that its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from burnin.cli import rolling as cli  # noqa: E402
from burnin.gate.rolling_control import Control  # noqa: E402
from burnin.inventory.schema import load_inventory  # noqa: E402
from burnin.ledger import rolling as events  # noqa: E402
from burnin.ledger.api import Ledger  # noqa: E402
from burnin.model.outcome import Outcome  # noqa: E402
from burnin.model.rolling import amount  # noqa: E402


@dataclass(frozen=True)
class Shape:
    nodes: int = 10000
    rack: int = 40              # nodes per rack: min_available 0.9 lets 4 of a rack out
    max_out: float = 0.1
    min_available: float = 0.9  # of the partition and of each rack

    def rack_of(self, name: str) -> str:
        return f"r{(int(name[1:]) - 1) // self.rack + 1:04d}"

# Planted, one node in every: down (out of service for something else), busy for one poll
# of the wait, busy through its first try, busy through every try, a way back that fails,
# failing its checks.
EVERY = {"down": 211, "busy_poll": 19, "busy_try": 97, "busy_always": 997,
         "no_back": 1999, "fails": 503}
BUSY_ALWAYS = 1 << 30


def planted(names: list[str]) -> dict[str, set[str]]:
    """{what: nodes}: each node at most one thing, spread through the racks, and at least
    one of each in a fleet smaller than its spacing (a smoke test's)."""
    out: dict[str, set[str]] = {k: set() for k in EVERY}
    taken: set[str] = set()
    for what, every in EVERY.items():
        for i in range(every // 2 % len(names), len(names), every):
            while names[i] in taken:
                i = (i + 1) % len(names)
            taken.add(names[i])
            out[what].add(names[i])
    return out


class SimFleet(Control):
    """A scheduler answering at once, which outlives a loop as Slurm does: the nodes a
    rolling loop has out, the ones down, the ones kept out after a failed wave. It checks
    the budget at each take-out (a broken one is recorded, not raised)."""

    def __init__(self, shape: Shape, names: list[str], plant: dict[str, set[str]],
                 max_out: int):
        self.names, self.rack_of = names, shape.rack_of
        self.out: set[str] = set()
        self.kept: set[str] = set()
        self.down = plant["down"]
        self.no_back = plant["no_back"]
        self.busy = {n: 1 for n in plant["busy_poll"]} | {
            n: BUSY_ALWAYS for n in plant["busy_always"]}
        self.busy_tries = dict.fromkeys(plant["busy_try"], 1)
        self.this_try: set[str] = set()   # busy through this try: its job outlasts the wait
        self.max_out = max_out
        self.racks = Counter(self.rack_of(n) for n in names)
        self.floor = {r: amount(shape.min_available, size) for r, size in self.racks.items()}
        self.min_partition = amount(shape.min_available, len(names))
        self.gone = Counter(self.rack_of(n) for n in self.down)
        self.peak_out = 0
        self.broken: list[str] = []
        self.calls: Counter[str] = Counter()

    def look(self, names, held):
        self.calls["look"] += 1
        out = [n for n in names if n in self.out and n not in held]
        unavailable = {n: "Slurm state DOWN" for n in self.down}
        unavailable.update((n, "drained: burnin: rolling: not validated") for n in self.kept)
        return out, unavailable

    def take_out(self, names):
        self.calls["take_out"] += 1
        for n in names:
            self.out.add(n)
            self.gone[self.rack_of(n)] += 1
            if self.busy_tries.get(n, 0) > 0:
                self.busy_tries[n] -= 1
                self.this_try.add(n)
            else:
                self.this_try.discard(n)
        self.peak_out = max(self.peak_out, len(self.out))
        if len(self.out) > self.max_out:
            self.broken.append(f"{len(self.out)} out, max_out {self.max_out}")
        for rack in {self.rack_of(n) for n in names}:
            if self.racks[rack] - self.gone[rack] < self.floor[rack]:
                self.broken.append(f"{rack}: {self.racks[rack] - self.gone[rack]} in service")
        if len(self.names) - len(self.out) - len(self.down) - len(self.kept) \
                < self.min_partition:
            self.broken.append("the partition below min_available")
        return dict.fromkeys(names, "")

    def idle(self, names):
        self.calls["idle"] += 1
        idle = []
        for n in names:
            if self.busy.get(n, 0) > 0:
                self.busy[n] -= 1
            elif n not in self.this_try:
                idle.append(n)
        return idle

    def give_back(self, names):
        self.calls["give_back"] += 1
        said = {}
        for n in names:
            if n in self.out:
                if n in self.no_back:
                    said[n] = "resume failed: simulated"
                    continue
                self.out.discard(n)
                self.gone[self.rack_of(n)] -= 1
                said[n] = ""
        return said

    def keep_out(self, names, run_id):
        self.calls["keep_out"] += 1
        for n in names:
            if n in self.out:
                self.out.discard(n)
                self.kept.add(n)

    def count_out(self, names):
        self.calls["count_out"] += 1
        return len(self.out)


def write_inventory(path: Path, shape: Shape, workdir: Path, fails: set[str]) -> Path:
    """CPU nodes on the local transport (the instant one in a wave's run), a rack label
    per `shape.rack` nodes, the failing nodes an entry of their own asking for more CPUs."""
    entries = []
    for first in range(1, shape.nodes + 1, shape.rack):
        last = min(first + shape.rack - 1, shape.nodes)
        rack = {"rack": shape.rack_of(f"n{first:05d}")}
        start = first
        for i in range(first, last + 1):
            if f"n{i:05d}" in fails:
                if start < i:
                    entries.append({"name": f"n[{start:05d}-{i - 1:05d}]", "labels": rack})
                entries.append({"name": f"n{i:05d}", "labels": rack,
                                "checks": {"health": {"cpus": 4096}}})
                start = i + 1
        if start <= last:
            entries.append({"name": f"n[{start:05d}-{last:05d}]", "labels": rack})
    path.write_text(json.dumps({
        "version": 1, "cluster": "rolling",
        "defaults": {"transport": "local", "gpus": 0,
                     "storage": {"path": str(workdir)}, "workdir": str(workdir / "claims")},
        "nodes": entries,
        "quarantine": {"ledger": str(workdir / "ledger.db"), "actions": []},
        "rolling": {"max_out": shape.max_out, "min_available": shape.min_available,
                    "group_by": ["partition", "rack"], "drain_timeout_s": 0.05,
                    "poll_s": 0.01, "retries": 3, "every": "7d"}}))
    return path


class MeasuredLoop(cli.Loop):
    """The real loop; its waves' runs timed (real) or replaced by their verdicts (instant),
    and Ctrl-C as the wave `stop_at`'s run starts."""

    instant = True
    stop_at = 0
    fails: set[str] = set()
    wave_wall = 0.0
    validated: Counter[str]

    def run_wave(self, names):
        if self.wave == self.stop_at:
            raise KeyboardInterrupt
        self.validated.update(names)
        if self.instant:
            return f"wave-{self.wave}", {n: [("health", Outcome.FAILED if n in self.fails
                                                else Outcome.PASSED, "")] for n in names}
        t = time.monotonic()
        try:
            return super().run_wave(names)
        finally:
            self.wave_wall += time.monotonic() - t


def counting_transactions(ledger: Ledger) -> Counter[str]:
    """Count the ledger's write transactions from this process."""
    count: Counter[str] = Counter()
    backend = ledger._backend
    real = backend.transaction

    def transaction(begin=None):
        count["transactions"] += 1
        return real(begin)

    backend.transaction = transaction  # type: ignore[method-assign]
    return count


def one(phase: str, shape: Shape, waves: str, workdir: Path) -> dict:
    """One phase in this process: `run` (a whole re-validation) or `resume` (stopped at
    the middle wave, then run again); its figures and checks as a dict."""
    nodes = shape.nodes
    names = [f"n{i:05d}" for i in range(1, nodes + 1)]
    plant = planted(names)
    inv_path = write_inventory(workdir / "fleet.json", shape, workdir, plant["fails"])
    os.environ.update(PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]),
                      BURNIN_INSTANT_DOCS=str(documents(workdir)), BURNIN_INSTANT_MODE="pass")
    inv = load_inventory(str(inv_path))
    ledger = Ledger(workdir / "ledger.db")
    writes = counting_transactions(ledger)
    s = inv.rolling
    max_out = amount(s.max_out, nodes)
    fleet = SimFleet(shape, names, plant, max_out)
    passthrough = ["-p", "instant_transport", "-k", "health", "-q", "-p", "no:cacheprovider"]
    rss_before = maxrss_mib()
    expected_waves = -(-nodes // max_out)
    stops = [expected_waves // 2, 0] if phase == "resume" else [0]
    loops, rcs = [], []
    wall = cpu = 0.0
    for stop in stops:
        loop = MeasuredLoop(inv, names, ledger, workdir / "reports", passthrough,
                            str(inv_path), fleet)
        loop.instant, loop.stop_at, loop.fails = waves == "instant", stop, plant["fails"]
        loop.validated = Counter()
        t, c = time.monotonic(), time.process_time()
        try:
            rcs.append(loop.run())
        except KeyboardInterrupt:
            rcs.append(cli.stop(loop, fleet, ledger))
        wall += time.monotonic() - t - loop.wave_wall
        cpu += time.process_time() - c
        loops.append(loop)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = {"phase": phase, "nodes": nodes, "waves_mode": waves,
              "waves": sum(lp.wave for lp in loops), "rc": rcs,
              "loop_wall_s": round(wall, 3), "loop_cpu_s": round(cpu, 3),
              "rss_before_mib": round(rss_before, 1), "loop_peak_rss_mib": round(maxrss_mib(), 1),
              "ledger_transactions": writes["transactions"],
              "waves_wall_s": round(sum(lp.wave_wall for lp in loops), 2),
              "waves_cpu_s": round(children.ru_utime + children.ru_stime, 2),
              "wave_peak_rss_mib": round(children.ru_maxrss / 1024, 1),
              "peak_out": fleet.peak_out, "max_out": max_out,
              "validated_first": sum(loops[0].validated.values()),
              "scheduler_calls": dict(fleet.calls)}
    result["problems"] = check(ledger, fleet, plant, names, loops, waves)
    return result


def check(ledger: Ledger, fleet: SimFleet, plant: dict[str, set[str]], names: list[str],
          loops: list[MeasuredLoop], waves: str) -> list[str]:
    """What went wrong: the budget broken, a node validated twice or not as planted, the
    ledger's progress incomplete, a resumed loop that validated again what was done."""
    problems = list(dict.fromkeys(fleet.broken))[:5]
    counts = Counter(n for n, e in ledger._read(lambda db: db.execute(
        "SELECT node, event FROM history WHERE event = ?", (events.VALIDATED,)).fetchall()))
    never = plant["down"] | plant["busy_always"] | plant["fails"]
    want = [n for n in names if n not in never]
    twice = [n for n, c in counts.items() if c > 1]
    if twice:
        problems.append(f"{len(twice)} nodes validated more than once: {twice[:5]}")
    if set(counts) != set(want):
        problems.append(f"validated {len(counts)} nodes, want {len(want)}: missing "
                        f"{sorted(set(want) - set(counts))[:5]}, extra "
                        f"{sorted(set(counts) - set(want))[:5]}")
    if set(ledger.rolling_validated()) != set(want):
        problems.append("rolling_validated() is not every validated node")
    last = ledger.rolling_last()
    for n in want:
        expect = events.OUT if n in plant["no_back"] else events.VALIDATED
        if last.get(n) != expect:
            problems.append(f"{n}: last rolling event {last.get(n)}, want {expect}")
            break
    for n in plant["busy_always"]:
        if last.get(n) != events.RELEASED:
            problems.append(f"{n} (always busy): last rolling event {last.get(n)}")
            break
    for n in plant["fails"]:
        if last.get(n) != events.FAILED or (waves == "real" and n not in
                                             ledger.quarantined()):
            problems.append(f"{n} (failing): {last.get(n)}, not quarantined")
            break
    if len(fleet.out) != len(plant["no_back"]):
        problems.append(f"{len(fleet.out)} nodes left out, want {len(plant['no_back'])}")
    if len(loops) == 2:
        again = set(loops[0].validated) & set(loops[1].validated)
        passed_first = {n for n in loops[0].validated if counts.get(n)}
        if passed_first & again:
            problems.append(f"the resumed loop validated again {len(passed_first & again)} "
                            "nodes the first had validated")
    if [lp.wave for lp in loops][-1] == 0:
        problems.append("no wave ran")
    return problems


def maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def documents(workdir: Path) -> Path:
    """tests/corpus/'s recorded CPU documents as {probe: document}, for the instant
    transport (as controller_scale.py --documents tests/corpus reads them)."""
    path = workdir / "documents.json"
    if not path.exists():
        docs = {f.name.split(".")[0]: json.loads(f.read_text())
                for f in sorted((REPO / "tests" / "corpus").glob("*.cpu.json"))}
        path.write_text(json.dumps(docs))
    return path


def measure(phase: str, shape: Shape, waves: str) -> dict:
    """One phase in a fresh process (its peak RSS its own); its dict."""
    with tempfile.TemporaryDirectory() as d:
        res = subprocess.run([sys.executable, __file__, "--one", phase, "--waves", waves,
                              "--workdir", d, *shape_args(shape)], capture_output=True,
                             text=True, cwd=REPO, timeout=7200)
    if res.returncode != 0:
        raise SystemExit(f"{phase} of {shape.nodes} nodes ({waves}) failed:\n"
                         f"{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def shape_args(shape: Shape) -> list[str]:
    return ["--nodes", str(shape.nodes), "--rack", str(shape.rack), "--max-out",
            str(shape.max_out), "--min-available", str(shape.min_available)]


def row(r: dict) -> str:
    per_node = (r["loop_peak_rss_mib"] - r["rss_before_mib"]) * 1024 / r["nodes"]
    return (f"{r['phase']}, {r['nodes']} nodes, waves {r['waves_mode']}: {r['waves']} waves, "
            f"exit {r['rc']}, loop wall {r['loop_wall_s']:.2f} s, loop CPU "
            f"{r['loop_cpu_s']:.2f} s ({r['loop_cpu_s'] * 1e6 / r['nodes']:.0f} us/node), "
            f"loop peak RSS {r['loop_peak_rss_mib']:.0f} MiB ({r['rss_before_mib']:.0f} before "
            f"it; {per_node:.1f} KiB/node), ledger transactions {r['ledger_transactions']} "
            f"({r['ledger_transactions'] / r['nodes']:.2f}/node), waves' runs: wall "
            f"{r['waves_wall_s']:.1f} s, CPU {r['waves_cpu_s']:.1f} s, largest peak RSS "
            f"{r['wave_peak_rss_mib']:.0f} MiB; most out at once {r['peak_out']} (max_out "
            f"{r['max_out']}); first loop validated {r['validated_first']}; problems: "
            f"{r['problems'] or 'none'}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=Shape.nodes)
    p.add_argument("--rack", type=int, default=Shape.rack, help="nodes per rack")
    p.add_argument("--max-out", type=float, default=Shape.max_out)
    p.add_argument("--min-available", type=float, default=Shape.min_available)
    p.add_argument("--waves", default="instant,real", help="instant and/or real")
    p.add_argument("--phases", default="run,resume", help="run and/or resume")
    p.add_argument("--one", choices=("run", "resume"), help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    shape = Shape(args.nodes, args.rack, args.max_out, args.min_available)
    if args.one:
        print(json.dumps(one(args.one, shape, args.waves, args.workdir)))
        return
    bad = False
    for waves in args.waves.split(","):
        for phase in args.phases.split(","):
            r = measure(phase, shape, waves)
            bad = bad or bool(r["problems"])
            print(row(r), f"load {os.getloadavg()[0]:.1f}", flush=True)
    if bad:
        raise SystemExit("some invariant did not hold (problems above)")


if __name__ == "__main__":
    main()
