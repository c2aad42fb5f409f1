"""The train probe's tokens/s against a bare training loop of the same model, and the MFU
this machine reaches.

Same model (probes/traincore.py's Decoder, shaped as the probe shapes it for the device),
same data, same ranks, same steps, alternating in one run: the probe as a node runs it
(its own process per rank, the gradients' all-reduce timed apart from forward and
backward, the replicas fingerprinted and gathered after every step, a synchronisation per
step), and the loop anyone would write: torch's DistributedDataParallel (gradients reduced
in buckets while backward runs), AdamW over the parameters, `zero_grad`, no check at all.
Figures are tokens over the timed steps' wall time (after the same warm-up), and tokens
per CPU second of the ranks' processes over the same steps (what the probe's own work
costs, which other work on a shared machine does not blur); medians over the repeats.
The last line is the ratios (goal: 0.97 or better).

    python benchmarks/train_vs_bare.py [--ranks 2] [--steps 30] [--repeat 3] [--dtype fp32]
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
import datetime, json, os, sys, time
sys.path.insert(0, sys.argv[1])
import torch, torch.distributed as dist, torch.nn.functional as F
import traincore
settings, threads = json.loads(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=60))
dev = torch.device("cpu")
shape = traincore.shape_for(dev, threads, settings)
torch.manual_seed(traincore.SEED)
model = torch.nn.parallel.DistributedDataParallel(traincore.Decoder(shape))
opt = torch.optim.AdamW(model.parameters(), lr=settings.get("lr", 3e-3), weight_decay=0.0)
perm = torch.randperm(shape["vocab"], generator=torch.Generator().manual_seed(traincore.SEED))
bf16 = settings.get("dtype") == "bf16"
warmup, steps = settings["warmup_steps"], settings["steps"]
for step in range(warmup + steps):
    if step == warmup:
        dist.barrier()
        t, cpu = time.perf_counter(), time.process_time()
    x = traincore.batch(shape, step, rank, perm, dev)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(x[:, :-1])
    loss = F.cross_entropy(logits.float().reshape(-1, shape["vocab"]), x[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
dist.barrier()
wall, cpu = time.perf_counter() - t, time.process_time() - cpu
print(json.dumps({"tokens_per_s": world * shape["batch"] * shape["seq_len"] * steps / wall,
                  "tokens": shape["batch"] * shape["seq_len"] * steps, "cpu_s": cpu}))
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe(settings: dict) -> dict:
    """The node figures of one probe run on this machine's CPU, with its tokens per CPU
    second over the timed steps (all ranks)."""
    res = subprocess.run([sys.executable, str(REPO / "probes" / "train.py")],
                         input=json.dumps({"gpus": 0, "settings": settings}) + "\n",
                         capture_output=True, text=True, timeout=3600, check=True)
    doc = json.loads(res.stdout)
    assert not doc["errors"] and not doc["figures"]["diverged"], doc["errors"]
    ranks = doc["devices"]
    per_cpu_s = sum(r["tokens"] for r in ranks) / sum(r["cpu_s"] for r in ranks)
    return doc["figures"] | {"threads": ranks[0]["threads"], "tokens_per_cpu_s": per_cpu_s}


def bare(settings: dict, ranks: int, threads: int) -> tuple[float, float]:
    """(tokens/s, tokens per CPU second) of one bare run."""
    env = {**os.environ, "WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    procs = [subprocess.Popen([sys.executable, "-c", BARE, str(REPO / "probes"),
                               json.dumps(settings), str(threads)],
                              env={**env, "RANK": str(r)}, stdout=subprocess.PIPE, text=True)
             for r in range(ranks)]
    outs = [p.communicate(timeout=3600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "a bare rank failed"
    runs = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    return runs[0]["tokens_per_s"], sum(r["tokens"] for r in runs) / sum(r["cpu_s"] for r in runs)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--shape", default="{}", help="model shape keys as JSON (default: the "
                   "probe's own for this CPU)")
    args = p.parse_args()
    settings = {"ranks": args.ranks, "steps": args.steps, "warmup_steps": args.warmup,
                "dtype": args.dtype, **json.loads(args.shape)}
    probes, bares, mfus, probe_cpu, bare_cpu = [], [], [], [], []
    for i in range(args.repeat):
        fig = probe(settings)
        probes.append(fig["tokens_per_s"])
        probe_cpu.append(fig["tokens_per_cpu_s"])
        mfus.append(fig["mfu"])
        rate, per_cpu = bare(settings, args.ranks, fig["threads"])
        bares.append(rate)
        bare_cpu.append(per_cpu)
        print(f"run {i + 1}: probe {probes[-1]:.1f} tokens/s, {probe_cpu[-1]:.1f} per CPU s "
              f"(MFU {mfus[-1]:.1%} of {fig['gemm_tflops']:.4g} measured GEMM TFLOPS); bare "
              f"{bares[-1]:.1f} tokens/s, {bare_cpu[-1]:.1f} per CPU s; shape {fig['shape']}, "
              f"{args.ranks} ranks x {fig['threads']} threads", flush=True)
    pm, bm = statistics.median(probes), statistics.median(bares)
    pc, bc = statistics.median(probe_cpu), statistics.median(bare_cpu)
    print(f"median: probe {pm:.1f} tokens/s ({pc:.1f} per CPU s), bare {bm:.1f} tokens/s "
          f"({bc:.1f} per CPU s), MFU {statistics.median(mfus):.1%}")
    # Wall time is what a node is judged on; CPU time is what the probe's own work costs,
    # which a machine shared with other work does not blur.
    print(f"ratio probe/bare: {pm / bm:.3f} (wall), {pc / bc:.3f} (per CPU second)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
