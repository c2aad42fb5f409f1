"""The controller's own overhead at fleet scale: `pytest suites/` over N nodes whose
probes answer instantly (benchmarks/instant_transport.py). Measures the whole user-
facing run (inventory, collection, fan-out, judging, junit.xml and results.jsonl) in
wall seconds and peak resident memory of the pytest process.

    python benchmarks/controller_scale.py [--nodes 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def one_run(nodes: int, workdir: Path, extra: list[str]) -> tuple[float, float]:
    inv = workdir / "fleet.yaml"
    inv.write_text(f"version: 1\ncluster: scale\ndefaults: {{transport: local, gpus: 0}}\n"
                   f"nodes:\n  - name: n[{1:05d}-{nodes:05d}]\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get(
        "PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "pytest", str(REPO / "suites"), "--inventory", str(inv),
            "--reports", str(workdir / "reports"), "-q", "-p", "instant_transport",
            "-p", "no:cacheprovider", *extra]
    # Peak RSS of children is a high-water mark: run each measurement in a fresh helper.
    code = ("import resource, subprocess, sys, time; t = time.monotonic(); "
            "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, env=None); "
            "w = time.monotonic() - t; "
            "m = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss; "
            "print(r.returncode, w, m)")
    out = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    rc, wall, maxrss_kib = int(out[0]), float(out[1]), int(out[2])
    if rc != 0:
        raise SystemExit(f"pytest exited {rc}")
    junit = (workdir / "reports" / "latest" / "junit.xml").read_text()
    assert junit.count("<testsuite ") == nodes, "every node must have its testsuite"
    return wall, maxrss_kib / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--nodes", type=int, default=10000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    for label, extra in (("serial", []), ("-n 2", ["-n", "2"])):
        walls, mems = [], []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as d:
                wall, mem = one_run(args.nodes, Path(d), extra)
            walls.append(wall)
            mems.append(mem)
        print(f"{args.nodes} nodes, {label}: wall median {statistics.median(walls):.1f} s "
              f"(runs {', '.join(f'{w:.1f}' for w in walls)}), "
              f"peak RSS max {max(mems):.0f} MiB", flush=True)


if __name__ == "__main__":
    t = time.monotonic()
    main()
    print(f"benchmark took {time.monotonic() - t:.0f} s", file=sys.stderr)
