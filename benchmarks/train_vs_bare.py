"""The train probe's tokens/s against a bare training loop of the same model, and the MFU
this machine reaches.

Same model (probes/traincore.py's Decoder, shaped as the probe shapes it for the device),
same data, same ranks, same steps, alternating in one run: the probe as a node runs it
(its own process per rank, the gradients' all-reduce timed apart from forward and
backward, the replicas fingerprinted and gathered after every step, a synchronisation per
step), and the loop anyone would write: torch's DistributedDataParallel (gradients reduced
in buckets while backward runs), AdamW over the parameters, `zero_grad`, no check at all.
Figures are tokens over the timed steps' wall time (after the same warm-up); medians over
the repeats. The last line is the ratio (goal: 0.97 or better).

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
        t = time.perf_counter()
    x = traincore.batch(shape, step, rank, perm, dev)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(x[:, :-1])
    loss = F.cross_entropy(logits.float().reshape(-1, shape["vocab"]), x[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
dist.barrier()
wall = time.perf_counter() - t
if rank == 0:
    print(world * shape["batch"] * shape["seq_len"] * steps / wall)
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe(settings: dict) -> dict:
    """The node figures of one probe run on this machine's CPU."""
    res = subprocess.run([sys.executable, str(REPO / "probes" / "train.py")],
                         input=json.dumps({"gpus": 0, "settings": settings}) + "\n",
                         capture_output=True, text=True, timeout=3600, check=True)
    doc = json.loads(res.stdout)
    assert not doc["errors"] and not doc["figures"]["diverged"], doc["errors"]
    return doc["figures"] | {"threads": doc["devices"][0]["threads"]}


def bare(settings: dict, ranks: int, threads: int) -> float:
    env = {**os.environ, "WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    procs = [subprocess.Popen([sys.executable, "-c", BARE, str(REPO / "probes"),
                               json.dumps(settings), str(threads)],
                              env={**env, "RANK": str(r)}, stdout=subprocess.PIPE, text=True)
             for r in range(ranks)]
    outs = [p.communicate(timeout=3600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "a bare rank failed"
    return float(outs[0].strip().splitlines()[-1])


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
    probes, bares, mfus = [], [], []
    for i in range(args.repeat):
        fig = probe(settings)
        probes.append(fig["tokens_per_s"])
        mfus.append(fig["mfu"])
        bares.append(bare(settings, args.ranks, fig["threads"]))
        print(f"run {i + 1}: probe {probes[-1]:.1f} tokens/s (MFU {mfus[-1]:.1%} of "
              f"{fig['gemm_tflops']:.4g} measured GEMM TFLOPS), bare {bares[-1]:.1f} "
              f"tokens/s; shape {fig['shape']}, {args.ranks} ranks x {fig['threads']} threads",
              flush=True)
    pm, bm = statistics.median(probes), statistics.median(bares)
    print(f"median: probe {pm:.1f} tokens/s, bare {bm:.1f} tokens/s, "
          f"MFU {statistics.median(mfus):.1%}")
    print(f"ratio probe/bare: {pm / bm:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
