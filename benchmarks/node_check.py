"""`burnin node-check` on this machine: how long Slurm waits for it, against the floor of
any program (`true`) and of any Python program (`python3 -c pass`), in one run,
alternating, medians of --repeat runs each.

Two nodes: this machine as a CPU node (gpus: 0: storage, host, kernel log, fabric), and
this machine as an 8-GPU node whose NVML is emulated (tests/nvmlemu: the real pynvml over
an emulated C library; what the emulator cannot say is how long a real driver takes to
answer, see RESULTS.md). Each node-check's own --json figure (its checks alone, after the
interpreter and imports) is reported beside the wall time.

    PYTHONPATH=. python3 benchmarks/node_check.py --repeat 31
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SITE = REPO / "tests" / "nvmlemu" / "site"
HANG_S = 120


def inventory(d: Path, gpus: int) -> Path:
    (d / "data").mkdir(exist_ok=True)
    doc = {"version": 1, "cluster": "bench",
           "defaults": {"transport": "local", "gpus": gpus, "workdir": str(d / "work"),
                        "storage": {"path": str(d / "data")}},
           "nodes": [{"name": socket.gethostname()}]}
    path = d / f"inventory-{gpus}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def timed(argv: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=HANG_S)
    return time.perf_counter() - t0, done


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=31)
    p.add_argument("--gpus", type=int, default=8, help="GPUs of the emulated GPU node")
    args = p.parse_args()
    base = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    base.pop("BURNIN_NVML_SCENARIO", None)
    with tempfile.TemporaryDirectory(prefix="bench-node-check-") as tmp:
        d = Path(tmp)
        scenario = d / "scenario.json"
        scenario.write_text(json.dumps({"devices": [{} for _ in range(args.gpus)]}))
        gpu_env = {**base, "BURNIN_NVML_SCENARIO": str(scenario),
                   "PYTHONPATH": os.pathsep.join([str(SITE), base["PYTHONPATH"]])}
        check = [sys.executable, "-m", "burnin", "node-check", "--json", "--inventory"]
        subjects = {
            "true": (["true"], base),
            "python3 -c pass": ([sys.executable, "-c", "pass"], base),
            "node-check, CPU node": ([*check, str(inventory(d, 0))], base),
            f"node-check, {args.gpus}-GPU node (NVML emulated)":
                ([*check, str(inventory(d, args.gpus))], gpu_env),
        }
        walls: dict[str, list[float]] = {k: [] for k in subjects}
        inner: dict[str, list[float]] = {k: [] for k in subjects}
        for _ in range(args.repeat):
            for name, (argv, env) in subjects.items():
                took, done = timed(argv, env)
                if done.returncode != 0:
                    print(f"{name} exited {done.returncode}:\n{done.stdout[-2000:]}"
                          f"{done.stderr[-2000:]}", file=sys.stderr)
                    return 1
                walls[name].append(took)
                if name.startswith("node-check"):
                    doc = json.loads(done.stdout)
                    assert doc["ok"] and doc["checks"], doc
                    inner[name].append(doc["elapsed_s"])
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    print(f"{args.repeat} runs each, alternating; load average {load:.1f}")
    med = {k: statistics.median(v) for k, v in walls.items()}
    for name, value in med.items():
        spread = f"min {min(walls[name]):.3f}, max {max(walls[name]):.3f}"
        checks = f"; its checks {statistics.median(inner[name]):.3f} s" if inner[name] else ""
        print(f"  {name}: median {value:.3f} s ({spread}){checks}")
    cpu, gpu = list(med)[2], list(med)[3]
    print(f"node-check CPU median {med[cpu]:.3f} s, {args.gpus}-GPU emulated "
          f"{med[gpu]:.3f} s; node-check/python = {med[cpu] / med['python3 -c pass']:.2f}, "
          f"gpu/python = {med[gpu] / med['python3 -c pass']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
