"""Set-up of the sdc probe's known-answer inputs: seconds and host memory to build them
for a node of `--devices` devices, the way the probe does it now (once per probe, in row
blocks, then a copy per device) against the way it did (every device building its own
full float64 matrices, all devices at once). Each measurement runs in a fresh process,
so that its peak resident memory is its own.

    python benchmarks/known_inputs.py [--n 8192] [--devices 8]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

NOW = """
import resource, sys, time
sys.path.insert(0, sys.argv[1])
import gemmcore as core, torch
n, devices = int(sys.argv[2]), int(sys.argv[3])
t = time.perf_counter()
inputs = core.KnownInputs(n, "bf16")
copies = [core.KnownAnswer(inputs, torch.device("cpu")) for _ in range(min(devices, 1))]
took = time.perf_counter() - t
print(took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""

# The construction the probe used before (gemmcore.KnownAnswer.__init__ up to 2026-11-21),
# once, for one device: whole-matrix float64 inputs and their checksums.
BEFORE = """
import resource, sys, time
sys.path.insert(0, sys.argv[1])
import gemmcore as core, torch
n = int(sys.argv[2])
t = time.perf_counter()
cpu = torch.device("cpu")
e = core._mix(torch.arange(n, dtype=torch.int64), 1) % 5
f = core._mix(torch.arange(n, dtype=torch.int64), 2) % 5
a64 = core._signed_ints(n, n, 3, cpu).double() * torch.exp2(e.double()).unsqueeze(1)
b64 = core._signed_ints(n, n, 4, cpu).double() * torch.exp2(f.double()).unsqueeze(0)
W = torch.stack([torch.ones(n, dtype=torch.float64), core.weights(n, cpu)], dim=1)
exp_rows = a64 @ (b64 @ W)
exp_cols = torch.ones(n, dtype=torch.float64) @ a64 @ b64
A, B = a64.to(torch.bfloat16), b64.to(torch.bfloat16)
took = time.perf_counter() - t
print(took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def measure(code: str, *args) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code, str(REPO / "probes"),
                          *map(str, args)], capture_output=True, text=True, check=True)
    seconds, mib = out.stdout.split()[-2:]
    return float(seconds), float(mib)


def sig(seconds: float) -> float:
    """Three significant digits: a small n takes milliseconds, which one decimal rounds to 0."""
    return float(f"{seconds:.3g}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--devices", type=int, default=8)
    args = p.parse_args()
    now_s, now_mib = measure(NOW, args.n, args.devices)
    one_s, one_mib = measure(BEFORE, args.n)
    result = {"n": args.n, "devices": args.devices,
              "now": {"seconds": sig(now_s), "peak_mib": round(now_mib)},
              "before_one_device": {"seconds": sig(one_s), "peak_mib": round(one_mib)},
              # Before, every device built its own at once: memory added up per device,
              # and the CPU time too (on the node's cores, shared by the eight builds).
              "before_node": {"cpu_seconds": sig(one_s * args.devices),
                              "peak_mib": round(one_mib * args.devices)}}
    print(json.dumps(result))
    print(f"known-answer set-up, n={args.n}, {args.devices} devices: now {now_s:.3g} s and "
          f"{now_mib:.0f} MiB peak; before {one_s:.3g} s and {one_mib:.0f} MiB per device, "
          f"{args.devices} at once: ratio memory {now_mib / (one_mib * args.devices):.2f}, "
          f"CPU time {now_s / (one_s * args.devices):.2f}")


if __name__ == "__main__":
    main()
