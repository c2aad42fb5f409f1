"""What an idle node costs the controller over SSH: descriptors, threads and CPU, on N real
SSH test hosts (tests/support/testhosts.py: network namespaces, one sshd each; 200 to a
/24, so N over that is several sets of hosts), through burnin's launch layer
(burnin.engine.run.Run, as the suite does, without pytest).

For each --fanout given: the health check's probe on every host (a recorded document
replayed: tests/support/replay.py), then --idle-s with no probe running (what a node
costs while the others run a check, or between checks), then the health check again
(what taking the nodes again costs). A fan-out of at least N keeps every node's
connection for the run (burnin/engine/held.py); a smaller one keeps that many.

    python benchmarks/ssh_idle_nodes.py [--hosts 200] [--fanouts 200,32] [--idle-s 20]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support.replay import replay_python  # noqa: E402
from support.testhosts import TestHosts  # noqa: E402

from burnin.engine.run import Run  # noqa: E402
from burnin.inventory.schema import load_inventory  # noqa: E402

PER_SUBNET = 200  # a set numbers its hosts past .9 of its /24


def process_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def inventory(sets: list[TestHosts], path: Path, python: str) -> Path:
    """One inventory over every set of hosts, each node with its set's key and known_hosts."""
    doc = sets[0].inventory(python=python)
    # Each set names its hosts h1, h2, ...: the set's number keeps the names apart.
    doc["nodes"] = [{"name": f"s{i}{h.name}", "address": h.address,
                     "ssh": {"identity_file": str(s.client_key),
                             "known_hosts": str(s.known_hosts)}}
                    for i, s in enumerate(sets) for h in s.hosts]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def check(run: Run) -> float:
    """Run health on every node; the controller's CPU seconds it took."""
    cpu = process_cpu()
    outcomes = run.execute("health")
    bad = [f"{n}: {o.reason}" for n, o in outcomes.items() if not o.ok]
    if bad:
        raise SystemExit(f"{len(bad)} probes failed: {bad[:3]}")
    return process_cpu() - cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", type=int, default=200)
    p.add_argument("--fanouts", default="", help="comma-separated; default: the host count, 32")
    p.add_argument("--idle-s", type=float, default=20.0)
    args = p.parse_args()
    fanouts = [int(f) for f in args.fanouts.split(",")] if args.fanouts else [args.hosts, 32]
    with tempfile.TemporaryDirectory() as d, ExitStack() as stack:
        t0 = time.monotonic()
        sets, left = [], args.hosts
        while left > 0:
            n = min(PER_SUBNET, left)
            sets.append(stack.enter_context(TestHosts(n, Path(d) / f"hosts{len(sets)}")))
            left -= n
        print(f"{args.hosts} hosts built in {time.monotonic() - t0:.0f} s", flush=True)
        inv = load_inventory(inventory(sets, Path(d) / "inv.yaml",
                                       replay_python(Path(d) / "replay")))
        base_fds, base_threads = fds(), threading.active_count()
        print("| --fanout | first check CPU s | idle: open files | idle: threads | idle: "
              "CPU s/s | per idle node: files, threads, CPU us/s | second check CPU s |")
        print("|---|---|---|---|---|---|---|")
        for fanout in fanouts:
            run = Run(inv, list(inv.nodes), "quick", Path(d) / "reports", f"idle{fanout}",
                      fanout=fanout)
            try:
                first = check(run)
                time.sleep(1.0)  # the probes' lifeline thread ends after its next beat
                cpu0, t = process_cpu(), time.monotonic()
                most_fds = most_threads = 0
                while time.monotonic() - t < args.idle_s:
                    most_fds = max(most_fds, fds() - base_fds)
                    most_threads = max(most_threads, threading.active_count() - base_threads)
                    time.sleep(0.5)
                rate = (process_cpu() - cpu0) / (time.monotonic() - t)
                second = check(run)
            finally:
                run.close()
            n = args.hosts
            print(f"| {fanout} | {first:.2f} | {most_fds} | {most_threads} | {rate:.4f} | "
                  f"{most_fds / n:.2f}, {most_threads / n:.2f}, {rate / n * 1e6:.1f} | "
                  f"{second:.2f} |", flush=True)


if __name__ == "__main__":
    main()
