"""How often a healthy node fails a rule that compares it with its peers, and which
slowdown each such rule catches (issue 26).

    python benchmarks/verdict_calibration.py capture --runs 20 --out cal.json
    python benchmarks/verdict_calibration.py replay cal.json [--node-runs 100000]
    python benchmarks/verdict_calibration.py --runs 2 --node-runs 300   # both, small
    python benchmarks/verdict_calibration.py --settings '{"burn": {"duration_s": 1}}'

capture: repeated real runs of a healthy fleet (`--nodes` local nodes, each with `--gpus`
GPUs emulated below NVML by tests/nvmlemu, whose work the real probes do on this
machine's CPU), keeping every figure a relative rule judges: burn TFLOPS per device, PCIe
GB/s per GPU and direction, storage GB/s per stream and phase, intra-node busbw per node.
The checks run with SETTINGS below; `--settings JSON` ({check: {key: value}}) overrides
keys of them check by check (a shorter burn for a smoke run, say); the capture records
the settings it ran with.

replay: the measured spread fed through the real judges (burnin.checks' summarize and
judge, the settings' defaults, no model floors: the peer rules alone). A fleet of n nodes
is drawn node by node from the captured ones, each node's figures divided by its run's
median (what moves between runs is the machine, not the node), so a node keeps its own
devices' spread. Healthy fleets give the false failures per 1,000 node-runs; a fleet whose
first node's first device (or the node, for busbw) is slowed by 3, 5, 10 or 20% gives the
share of trials in which that node fails.

The figures are this machine's: its CPU does the emulated GPUs' work, shared by every
node of the fleet, so the spread is far wider than a real GPU node's. A GPU's own spread
comes from benchmarks/gpu_first_run.py's captured figures, replayed the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from burnin.checks import CHECKS, Fleet, Judging  # noqa: E402
from burnin.model.nodes import Node  # noqa: E402
from burnin.probe.protocol import ProbeOutcome  # noqa: E402

CORPUS = REPO / "tests" / "corpus"
SIZES = (3, 10, 100, 1000)
SLOWDOWNS = (0.03, 0.05, 0.10, 0.20)
SETTINGS = {"burn": {"duration_s": 4, "n": 256, "sample_s": 0.5},
            "pcie": {"seconds": 0.5, "block_mb": 8},
            "storage": {"size_gb": 0.05},
            "allreduce": {"max_bytes": 1 << 20, "seconds_per_size": 0.05}}


def _set(d: dict, path: tuple, value: float) -> dict:
    """A copy of d with d[path[0]][path[1]]... = value (copies only along the path)."""
    out = dict(d)
    if len(path) == 1:
        out[path[0]] = value
    else:
        out[path[0]] = _set(d[path[0]], path[1:], value)
    return out


@dataclass(frozen=True)
class Rule:
    """A figure a relative rule judges: where a record holds it (per device, or one per
    node at `path` under figures when `per_node`), and the check that judges it."""

    name: str
    check: str
    path: tuple
    per_node: bool = False

    def values(self, data: dict) -> list[float]:
        if self.per_node:  # no sweep: the probe measured nothing (its errors say why)
            sweep = data["figures"].get("sweep")
            return [max(s["busbw_gbps"] for s in sweep)] if sweep else []
        out = []
        for dev in data["devices"]:
            v = dev
            for key in self.path:
                v = v[key]
            out.append(float(v))
        return out

    def document(self, template: dict, values: list[float]) -> dict:
        if self.per_node:
            sweep = [{**s, "busbw_gbps": values[0], "algbw_gbps": values[0]}
                     for s in template["figures"]["sweep"]]
            return {**template, "figures": {**template["figures"], "sweep": sweep}}
        # the template's first devices, as many as the captured node had (its figures'
        # count: replay() refuses a capture of more GPUs than the corpus's document holds)
        devices = [_set(dev, self.path, v)
                   for dev, v in zip(template["devices"][:len(values)], values, strict=True)]
        return {**template, "devices": devices}


RULES = (Rule("burn TFLOPS per device", "burn", ("tflops",)),
         Rule("PCIe host-to-device GB/s per GPU", "pcie", ("h2d", "gbps")),
         Rule("PCIe device-to-host GB/s per GPU", "pcie", ("d2h", "gbps")),
         Rule("storage read GB/s per stream", "storage", ("read", "gbps")),
         Rule("storage write GB/s per stream", "storage", ("write", "gbps")),
         Rule("intra-node all-reduce busbw per node", "allreduce", (), per_node=True))


# -- capture ----------------------------------------------------------------------------

def merged(overrides: dict) -> dict:
    """SETTINGS with `overrides` ({check: {key: value}}) laid over it check by check."""
    if not isinstance(overrides, dict) or not all(isinstance(v, dict)
                                                  for v in overrides.values()):
        raise SystemExit("--settings: a JSON object of checks, each an object of settings")
    unknown = sorted(set(overrides) - set(SETTINGS))
    if unknown:
        raise SystemExit(f"--settings: no such check captured: {', '.join(unknown)} "
                         f"(captured: {', '.join(SETTINGS)})")
    return {check: {**keys, **overrides.get(check, {})} for check, keys in SETTINGS.items()}


def capture(runs: int, nodes: int, gpus: int, settings: dict = SETTINGS) -> dict:
    """Figures of `runs` real runs of a healthy fleet: {rule: [[[value per device] per
    node] per run]}, the checks run with `settings`."""
    import nvmlemu
    out: dict[str, list] = {r.name: [] for r in RULES}
    with tempfile.TemporaryDirectory(prefix="burnin-calibration-") as tmp:
        t = Path(tmp)
        scenario = nvmlemu.write_scenario(t / "gpus.json", {"devices": [
            {"uuid": f"GPU-cal{i}", "pci_bus_id": f"0000:{0x18 + i:02x}:00.0"}
            for i in range(gpus)]})
        wrapper = nvmlemu.python_wrapper(t / "gpu-python", scenario)
        members = []
        for i in range(1, nodes + 1):
            (t / f"storage{i}").mkdir()
            members.append({"name": f"n{i}", "storage": {"path": str(t / f"storage{i}")}})
        (t / "inv.yaml").write_text(json.dumps({
            "version": 1, "cluster": "calibration", "checks": settings,
            "defaults": {"transport": "local", "gpus": gpus, "python": wrapper},
            "quarantine": {"ledger": str(t / "ledger.db")}, "nodes": members}))
        # made on purpose, as an operator does: a run never creates a configured ledger
        subprocess.run([sys.executable, "-m", "burnin", "ledger", "init",
                        str(t / "ledger.db")], check=True, capture_output=True)
        for i in range(runs):
            started = time.monotonic()
            reports = t / "reports" / str(i)  # each run its own: no stale `latest`
            res = subprocess.run([sys.executable, "-m", "pytest", str(REPO / "suites"),
                                  "--inventory", str(t / "inv.yaml"), "--reports",
                                  str(reports), "--profile", "quick", "--no-quarantine",
                                  "-k", "(burn or pcie or storage or allreduce) and not "
                                  "internode", "-p", "no:cacheprovider", "-q"],
                                 cwd=t, check=False, capture_output=True, text=True,
                                 env={**os.environ, "HOME": str(t)})  # node locks: ours
            if res.returncode not in (0, 1):  # 1: some node failed a floor, as expected
                raise SystemExit(f"run {i + 1} did not complete (exit {res.returncode}):\n"
                                 f"{res.stdout[-2000:]}{res.stderr[-2000:]}")
            records = [json.loads(ln) for ln in (reports / "latest" / "results.jsonl").open()]
            for rule in RULES:
                per_node = [v for r in records if r["check"] == rule.check and r["ok"]
                            if (v := rule.values(r["data"]))]
                if len(per_node) == nodes:  # a node that did not measure is not noise
                    out[rule.name].append(per_node)
            print(f"run {i + 1}/{runs}: {time.monotonic() - started:.0f} s", file=sys.stderr)
    return {"runs": out, "nodes": nodes, "gpus": gpus, "settings": settings}


# -- replay -----------------------------------------------------------------------------

def relative(runs: list) -> list[list[float]]:
    """Every captured node's figures divided by its run's median over all devices."""
    out = []
    for run in runs:
        m = statistics.median(v for node in run for v in node)
        if m > 0:
            out += [[v / m for v in node] for node in run]
    return out


def spread(nodes: list[list[float]]) -> dict:
    """The measured noise: robust spread (1.4826 x MAD) and the lowest value, in %."""
    flat = [v for node in nodes for v in node]
    med = statistics.median(flat)
    mad = statistics.median(abs(v - med) for v in flat)
    return {"values": len(flat), "robust_sd_pct": 100 * 1.4826 * mad / med,
            "lowest_pct": 100 * (min(flat) / med - 1)}


def _template(rule: Rule) -> dict:
    return json.loads((CORPUS / f"{rule.check}.gpu.json").read_text())


def _fleet(rule: Rule, pool: list, n: int, rng: random.Random, slow: float,
           template: dict) -> dict[str, ProbeOutcome]:
    base = statistics.median(rule.values(template))  # one scale: no device is set apart
    out = {}
    for i in range(n):
        values = [base * r for r in rng.choice(pool)]
        if i == 0 and slow:
            values[0] *= 1 - slow
        out[f"n{i}"] = ProbeOutcome(f"n{i}", rule.check, True,
                                    data=rule.document(template, values))
    return out


def _judge(rule: Rule, outcomes: dict[str, ProbeOutcome], names: list[str],
           settings: dict, devices: int) -> int:
    """How many of `names` fail the rule's check, judged as a run judges them."""
    spec = CHECKS[rule.check]
    fleet = spec.summarize(Fleet(outcomes, {}, {})) if spec.summarize else None
    failed = 0
    for name in names:
        j = Judging(settings=settings, fleet=fleet, model=None, devices=devices, gpus=devices)
        failed += not spec.judge(Node(name, name), outcomes[name], j).passed
    return failed


def replay(capture: dict, node_runs: int, trials: int, sizes=SIZES, slowdowns=SLOWDOWNS,
           seed: int = 26, on_rule: Callable[[str], None] | None = None,
           spreads: float | None = None) -> dict:
    """{rule: {"noise": spread, "sizes": {n: {"false_per_1000", "node_runs",
    "detected": {slowdown: share}}}}} for every rule the capture holds; `spreads` sets
    peer_spreads where a rule's check has it (None: its default)."""
    results = {}
    for rule in RULES:
        pool = relative(capture["runs"].get(rule.name, []))
        if not pool:
            continue
        if on_rule:
            on_rule(rule.name)
        rng = random.Random(f"{seed}-{rule.name}")
        template = _template(rule)
        # a node's devices as captured (one figure each), or, for a figure per node, the
        # corpus document's
        devices = len(template["devices"]) if rule.per_node else len(pool[0])
        if devices > len(template["devices"]):
            raise SystemExit(f"{rule.name}: the capture has {devices} devices a node, the "
                             f"corpus's {rule.check} document {len(template['devices'])}: "
                             f"capture with --gpus {len(template['devices'])} or fewer")
        settings = CHECKS[rule.check].resolve("quick")
        if spreads is not None and "peer_spreads" in settings:
            settings["peer_spreads"] = spreads
        per_size = {}
        for n in sizes:
            fleets = max(1, node_runs // n)
            false = sum(_judge(rule, _fleet(rule, pool, n, rng, 0.0, template),
                               [f"n{i}" for i in range(n)], settings, devices)
                        for _ in range(fleets))
            detected = {}
            for s in slowdowns:
                hits = sum(_judge(rule, _fleet(rule, pool, n, rng, s, template), ["n0"],
                                  settings, devices) for _ in range(trials))
                detected[s] = hits / trials
            per_size[n] = {"node_runs": fleets * n, "false_per_1000": 1000 * false / (fleets * n),
                           "detected": detected}
        results[rule.name] = {"noise": spread(pool), "sizes": per_size,
                              "peer_spreads": settings.get("peer_spreads")}
    return results


def table(results: dict) -> str:
    """The markdown table of RESULTS.md: a row per rule and fleet size."""
    head = ("| rule | noise (robust sd, lowest) | peer_spreads | fleet | node-runs | false "
            "failures per 1,000 | " + " | ".join(f"caught at {int(100 * s)}% slow"
                                                for s in SLOWDOWNS) + " |")
    rows = [head, "|" + "---|" * (6 + len(SLOWDOWNS))]
    for name, r in results.items():
        noise, k = r["noise"], r.get("peer_spreads")
        for n, s in r["sizes"].items():
            caught = " | ".join(f"{100 * s['detected'].get(x, float('nan')):.1f}%"
                                for x in SLOWDOWNS)
            rows.append(f"| {name} | {noise['robust_sd_pct']:.1f}%, {noise['lowest_pct']:+.1f}% "
                        f"| {'-' if k is None else f'{k:g}'} | {n} | {s['node_runs']:,} "
                        f"| {s['false_per_1000']:.2f} | {caught} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", nargs="?", choices=("capture", "replay", "both"), default="both")
    p.add_argument("capture_file", nargs="?", help="replay: the capture to replay")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--out", help="capture: write the capture here")
    p.add_argument("--settings", type=json.loads, default={},
                   help="capture: JSON {check: {key: value}} laid over SETTINGS")
    p.add_argument("--node-runs", type=int, default=100_000,
                   help="healthy node-runs per rule and fleet size")
    p.add_argument("--trials", type=int, default=1000, help="slowed fleets per slowdown")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)))
    p.add_argument("--spreads", type=float, help="peer_spreads for the rules that have it "
                                                 "(default: the checks' default)")
    args = p.parse_args(argv)
    if args.mode == "replay":
        if not args.capture_file:
            p.error("replay needs the capture file")
        cap = json.loads(Path(args.capture_file).read_text())
    else:
        cap = capture(args.runs, args.nodes, args.gpus, merged(args.settings))
        if args.out:
            Path(args.out).write_text(json.dumps(cap) + "\n")
        if args.mode == "capture":
            return 0
    sizes = tuple(int(x) for x in args.sizes.split(","))
    started = time.monotonic()
    results = replay(cap, args.node_runs, args.trials, sizes,
                     on_rule=lambda r: print(f"replaying {r}", file=sys.stderr),
                     spreads=args.spreads)
    print(table(results))
    print(f"replayed in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
