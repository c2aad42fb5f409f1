"""A GEMM probe's sustained rate (sdc or burn) against a bare torch.mm loop, side by side.

Same device, size and dtype, alternating in one run: the probe as a node runs it
(subprocess, settings on stdin; sdc in known-answer mode with verification, burn with
its bitwise comparisons and telemetry), and a bare loop `torch.mm(A, B, out=C)` for the
same duration. Reports TFLOPS of each, their ratio (goals: sdc 0.97 or better, burn
within 10%) and the probe's share of time spent verifying (sdc goal: under 3%).

    python benchmarks/probe_vs_mm.py [--probe sdc|burn] [--n 1024] [--dtype fp32]
                                      [--seconds 10] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

BARE = """
import sys, time, torch
n, dtype, seconds = int(sys.argv[1]), getattr(torch, sys.argv[2]), float(sys.argv[3])
dev = "cuda" if torch.cuda.is_available() else "cpu"
a = torch.randn(n, n).to(dtype).to(dev); b = torch.randn(n, n).to(dtype).to(dev)
c = torch.empty(n, n, dtype=torch.float32, device=dev)
kw = {} if dtype == torch.float32 or sys.argv[4] == "native" else {"out_dtype": torch.float32}
if sys.argv[4] == "native":
    c = torch.empty(n, n, dtype=dtype, device=dev)
torch.mm(a, b, out=c, **kw)
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
sync(); t = time.perf_counter(); k = 0
while time.perf_counter() - t < seconds:
    for _ in range(8):
        torch.mm(a, b, out=c, **kw)
    k += 8
    sync()
print(k * 2 * n ** 3 / (time.perf_counter() - t) / 1e12)
"""

TORCH_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def probe(name: str, n: int, dtype: str, seconds: float, gpus) -> dict:
    settings = {"n": n, "dtype": dtype, "duration_s": seconds}
    if name == "sdc":
        settings["random_repeats"] = 2
    res = subprocess.run([sys.executable, str(REPO / "probes" / f"{name}.py")],
                         input=json.dumps({"gpus": gpus, "settings": settings}),
                         capture_output=True, text=True, check=True)
    dev = json.loads(res.stdout)["devices"][0]
    if name == "sdc":
        return dev["known"]
    return {**dev, "verify_share": None}


def bare(n: int, dtype: str, seconds: float, output: str) -> float:
    # sdc's known answer needs an fp32 output; burn writes the inputs' own dtype.
    res = subprocess.run([sys.executable, "-c", BARE, str(n), TORCH_NAMES[dtype],
                          str(seconds), output], capture_output=True, text=True, check=True)
    return float(res.stdout.split()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--probe", default="sdc", choices=("sdc", "burn"))
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--dtype", default="fp32", choices=list(TORCH_NAMES))
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--gpus", type=int, default=None, help="0 forces the CPU")
    args = p.parse_args()
    rows = []
    output = "fp32" if args.probe == "sdc" else "native"
    for _ in range(args.repeat):
        got = probe(args.probe, args.n, args.dtype, args.seconds, args.gpus)
        rows.append((got["tflops"], bare(args.n, args.dtype, args.seconds, output),
                     got["verify_share"], got["verified"], got["products"]))
    probe_t = statistics.median(r[0] for r in rows)
    bare_t = statistics.median(r[1] for r in rows)
    for r in rows:
        share = f", verify share {r[2]:.1%}" if r[2] is not None else ""
        print(f"{args.probe} {r[0]:.4f} TFLOPS (verified {r[3]} of {r[4]}{share}), "
              f"bare torch.mm {r[1]:.4f} TFLOPS")
    print(f"{args.probe} n={args.n} {args.dtype}: probe/bare = {probe_t / bare_t:.3f} "
          f"(medians {probe_t:.4f} / {bare_t:.4f} TFLOPS)")


if __name__ == "__main__":
    main()
