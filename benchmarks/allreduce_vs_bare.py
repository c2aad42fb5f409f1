"""The allreduce probe's busbw against a bare torch.distributed all-reduce loop.

Same machine, ranks, backend and sizes, alternating in one run: the probe as a node runs
it (intra-node: a rank per GPU, or `ranks` gloo ranks on a CPU), and a bare loop (init,
warm-up, timed back-to-back all_reduce, time = max over ranks, busbw as nccl-tests
defines it). Reports busbw per size and the ratio at the judged (largest) size
(goal: 0.95 or better).

    python benchmarks/allreduce_vs_bare.py [--ranks 2] [--max-mb 16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

BARE = r"""
import json, os, sys, time, torch, torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
gpu = torch.cuda.is_available()
dev = torch.device("cuda", rank) if gpu else torch.device("cpu")
dist.init_process_group("nccl" if gpu else "gloo", rank=rank, world_size=world)
sync = torch.cuda.synchronize if gpu else (lambda: None)
out = []
plan = json.loads(sys.argv[1])  # [[bytes, iterations], ...]: the probe's, size by size
for size, iters in plan:
    buf = torch.ones(size // 4, device=dev)
    for _ in range(5):
        dist.all_reduce(buf)
    dist.barrier(); sync(); t = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    sync()
    took = torch.tensor([(time.perf_counter() - t) / iters], dtype=torch.float64, device=dev)
    dist.all_reduce(took, op=dist.ReduceOp.MAX)
    out.append([size, size / took.item() / 1e9 * 2 * (world - 1) / world])
if rank == 0:
    print(out)
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe(args) -> dict[int, float]:
    payload = {"gpus": args.gpus, "settings": {"ranks": args.ranks, "min_bytes": 1 << 20,
                                               "max_bytes": args.max_mb << 20,
                                               "seconds_per_size": args.seconds}}
    res = subprocess.run([sys.executable, str(REPO / "probes" / "allreduce.py")],
                         input=json.dumps(payload), capture_output=True, text=True, check=True)
    sweep = json.loads(res.stdout)["figures"]["sweep"]
    return {s["bytes"]: s["busbw_gbps"] for s in sweep}, {s["bytes"]: s["iters"] for s in sweep}


def bare(args, iters: dict[int, int]) -> dict[int, float]:
    port = free_port()
    plan = json.dumps(sorted(iters.items()))
    procs = [subprocess.Popen([sys.executable, "-c", BARE, plan], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "RANK": str(r), "WORLD_SIZE": str(args.ranks),
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
             for r in range(args.ranks)]
    outs = [p.communicate()[0] for p in procs]
    return {int(b): bw for b, bw in json.loads(outs[0].strip())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--max-mb", type=int, default=16)
    p.add_argument("--seconds", type=float, default=0.5)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--gpus", type=int, default=0)
    args = p.parse_args()
    runs_probe, runs_bare = [], []
    for _ in range(args.repeat):
        got, iters = probe(args)
        runs_probe.append(got)
        runs_bare.append(bare(args, iters))
    for size in sorted(runs_probe[0]):
        pm = statistics.median(r[size] for r in runs_probe)
        bm = statistics.median(r[size] for r in runs_bare)
        print(f"{size >> 20:5d} MiB: probe {pm:.3f} GB/s, bare {bm:.3f} GB/s, ratio {pm / bm:.3f}")
    top = max(runs_probe[0])
    pm = statistics.median(r[top] for r in runs_probe)
    bm = statistics.median(r[top] for r in runs_bare)
    print(f"judged size {top >> 20} MiB, {args.ranks} ranks: probe/bare = {pm / bm:.3f}")


if __name__ == "__main__":
    main()
