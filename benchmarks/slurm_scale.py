"""burnin over Slurm at scale: a health run on N Slurm test hosts, side by side with a bare
`srun -N<N> python probes/health.py`, and optionally with an older burnin (one
`srun -w NODE -N1` job per node and check, the srun transport before one-step-per-check).

Builds N hosts with a real Slurm cluster (tests/support/slurmcluster.py), then alternates:
- burnin: `pytest suites/ -k health --inventory` with `transport: srun` (one allocation,
  one step), probes shipped on the step's stdin, judging and reports;
- bare: `srun -N<N> --ntasks-per-node=1 --exclusive python3 probes/health.py` reading the
  probe from the shared file system, no judging;
- old (with --baseline-repo DIR, a checkout of an older burnin, e.g.
  `git archive a349dad | tar -x -C DIR`): the same pytest command run from DIR.
For each run: wall seconds, the most srun processes the controller had at once (its own
process tree, sampled every 20 ms) and the peak of the tree's summed resident memory.
Medians of --repeat runs; the ratio burnin / bare is printed last (goal: 1.1 or less).

    python benchmarks/slurm_scale.py [--hosts 48] [--repeat 3] [--baseline-repo DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))

from support.slurmcluster import SlurmCluster  # noqa: E402
from support.testhosts import TestHosts  # noqa: E402

PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def tree(root: int) -> list[tuple[int, str, int]]:
    """(pid, comm, rss KiB) of root and every descendant, from /proc."""
    parent, info = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            rss = int(Path(f"/proc/{entry}/statm").read_text().split()[1]) * PAGE_KIB
        except (OSError, IndexError, ValueError):
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        parent[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
        info[int(entry)] = (comm, rss)
    keep, frontier = {root}, [root]
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in keep:
                keep.add(child)
                frontier.append(child)
    return [(pid, *info[pid]) for pid in keep if pid in info]


def measured(argv: list[str], env: dict, cwd: Path) -> tuple[float, int, float, str]:
    """(wall s, most srun processes at once, peak tree RSS MiB, stdout) of one command."""
    peak = {"srun": 0, "rss": 0}
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            procs = tree(proc.pid)
            peak["srun"] = max(peak["srun"], sum(c == "srun" for _, c, _ in procs))
            peak["rss"] = max(peak["rss"], sum(r for _, _, r in procs))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate(timeout=1800)
    wall = time.monotonic() - start
    stop.set()
    sampler.join()
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:4]} exited {proc.returncode}:\n{text[-3000:]}")
    return wall, peak["srun"], peak["rss"] / 1024, text


def inventory(hosts: TestHosts, path: Path) -> Path:
    doc = hosts.inventory(transport="srun", workdir=str(hosts.workdir / "remote"))
    doc["defaults"]["srun"] = {"partition": "test"}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--hosts", type=int, default=48)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--baseline-repo", type=Path,
                   help="an older burnin checkout to run as the 'old' mode")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d, TestHosts(args.hosts, Path(d) / "hosts") as hosts, \
            SlurmCluster(hosts) as cluster:
        inv = inventory(hosts, Path(d) / "inv.yaml")
        env = {**cluster.env(), "PYTHONPATH": str(REPO)}

        def suite(repo: Path) -> list[str]:
            return [sys.executable, "-m", "pytest", str(repo / "suites"), "--inventory",
                    str(inv), "--reports", str(Path(d) / "reports"), "-q", "-k", "health",
                    "-p", "no:cacheprovider", "--fanout", str(args.hosts)]
        modes = {"burnin": (suite(REPO), env, REPO)}
        if args.baseline_repo:
            old = args.baseline_repo.resolve()
            modes["old"] = (suite(old), {**env, "PYTHONPATH": str(old)}, old)
        modes["bare"] = (["srun", f"-N{args.hosts}", "--ntasks-per-node=1", "--exclusive",
                          "--partition=test", "--input=none", sys.executable,
                          str(REPO / "probes" / "health.py")], cluster.env(), REPO)
        runs: dict[str, list[tuple[float, int, float]]] = {m: [] for m in modes}
        for _ in range(args.repeat):
            for mode, (argv, menv, cwd) in modes.items():
                wall, sruns, rss, out = measured(argv, menv, cwd)
                if mode == "bare":
                    docs = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
                    assert len(docs) == args.hosts, f"bare srun returned {len(docs)} documents"
                else:
                    assert f"{args.hosts} passed" in out, out[-2000:]
                runs[mode].append((wall, sruns, rss))
        med = {m: [statistics.median(r[i] for r in v) for i in range(3)]
               for m, v in runs.items()}
        print(f"{args.hosts} Slurm test hosts, health, median of {args.repeat}:")
        for mode, (wall, sruns, rss) in med.items():
            walls = ", ".join(f"{r[0]:.2f}" for r in runs[mode])
            print(f"  {mode:6s} wall {wall:7.2f} s (runs {walls}); srun processes at once "
                  f"{sruns:g}; controller peak RSS {rss:.0f} MiB")
        if "old" in med:
            print(f"old / bare = {med['old'][0] / med['bare'][0]:.2f}")
        print(f"burnin / bare = {med['burnin'][0] / med['bare'][0]:.2f}")


if __name__ == "__main__":
    main()
