"""burnin against pdsh: the health probe on N real SSH test hosts, side by side.

Builds N hosts (tests/support/testhosts.py: network namespaces, one sshd each), then alternates
`pytest suites/ -k health --inventory` (paramiko, probes staged, judging, reports: the
health check alone, as pdsh runs only the health probe) with
`pdsh -R ssh -f N` running the same probe on the same hosts (OpenSSH client, no staging:
the probe is read from the shared file system). Reports wall-time medians, each tool's own
CPU time per node on the controller (burnin's pytest process; pdsh and its ssh clients:
the probes run under the hosts' sshd, not as their children), and last the ratio
burnin / pdsh (goal: 1.0 or less). Needs root, openssh-server and pdsh.

    python benchmarks/ssh_fanout_vs_pdsh.py [--hosts 32] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))

from support.testhosts import TestHosts  # noqa: E402


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(argv: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """(wall s, the command's own CPU s with its children's, stdout)."""
    cpu, start = children_cpu(), time.monotonic()
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    wall = time.monotonic() - start
    if res.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({res.returncode}): {res.stderr[-2000:]}")
    return wall, children_cpu() - cpu, res.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--hosts", type=int, default=32)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d, TestHosts(args.hosts, Path(d) / "hosts") as hosts:
        inv = hosts.write_inventory(Path(d) / "inv.yaml")
        burnin = [sys.executable, "-m", "pytest", str(REPO / "suites"), "--inventory", str(inv),
                  "--reports", str(Path(d) / "reports"), "-q", "-p", "no:cacheprovider",
                  "-k", "health", "--fanout", str(args.hosts)]
        ssh_args = (f"-2 -a -x -i {hosts.client_key} -o BatchMode=yes "
                    f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={hosts.known_hosts} "
                    f"-o ConnectTimeout=10 -l%u %h")
        pdsh = ["pdsh", "-R", "ssh", "-f", str(args.hosts), "-l", "root",
                "-w", ",".join(h.address for h in hosts.hosts),
                f"{sys.executable} {REPO / 'probes' / 'health.py'} </dev/null"]
        pdsh_env = {**os.environ, "PDSH_SSH_ARGS": ssh_args}
        times: dict[str, list[float]] = {"burnin": [], "pdsh": []}
        cpus: dict[str, list[float]] = {"burnin": [], "pdsh": []}
        for _ in range(args.repeat):
            wall, cpu, _ = timed(burnin)
            times["burnin"].append(wall)
            cpus["burnin"].append(cpu)
            wall, cpu, out = timed(pdsh, pdsh_env)
            cpus["pdsh"].append(cpu)
            docs = [json.loads(line.split(": ", 1)[1]) for line in out.splitlines()
                    if ": {" in line]
            assert len(docs) == args.hosts, f"pdsh returned {len(docs)} documents"
            times["pdsh"].append(wall)
        med = {k: statistics.median(v) for k, v in times.items()}
        for k, v in times.items():
            print(f"{k:6s} median {med[k]:.2f} s (runs {', '.join(f'{x:.2f}' for x in v)}); "
                  f"controller CPU {statistics.median(cpus[k]) / args.hosts * 1000:.0f} ms "
                  f"per node")
        print(f"{args.hosts} hosts: burnin / pdsh = {med['burnin'] / med['pdsh']:.3f}")


if __name__ == "__main__":
    main()
