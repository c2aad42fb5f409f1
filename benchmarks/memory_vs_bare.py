"""The memory probe's verified GB/s against a bare torch fill-and-compare loop.

Same device, same bytes, same number of patterns, alternating in one run: the probe as a
node runs it (every pattern written, read back and compared on the device, mismatches
counted per slice, one synchronisation per pattern; no retention pause, which is idle
time by design), and a bare loop over one tensor: `buf.fill_(v)` then
`torch.count_nonzero(buf != v)`, one synchronisation at the end. Figures are bytes x
patterns over the time spent writing and comparing, decimal GB/s; medians over the
repeats. The last line is the ratio (goal: 0.9 or better).

    python benchmarks/memory_vs_bare.py [--device cpu|cuda] [--mib 256] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

BARE = r"""
import sys, time, torch
device, nbytes, patterns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dev = torch.device(device)
sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
buf = torch.empty(nbytes // 8, dtype=torch.int64, device=dev)
values = [(1 << (k % 63)) for k in range(patterns)]
buf.fill_(0); int(torch.count_nonzero(buf != 0))  # warm-up: pages, allocator, kernels
sync(); t = time.perf_counter()
bad = torch.zeros((), dtype=torch.int64, device=dev)
for v in values:
    buf.fill_(v)
    bad += torch.count_nonzero(buf != v)
assert int(bad) == 0  # synchronises
print(buf.numel() * 8 * patterns / (time.perf_counter() - t) / 1e9)
"""


def probe(args) -> tuple[float, int, int]:
    """(verified GB/s, bytes tested, patterns) of one probe run."""
    settings = {"retention_s": 0, "seed": 1}
    if args.device == "cpu":
        payload = {"gpus": 0, "settings": {**settings, "host_bytes": args.mib << 20}}
    else:
        payload = {"gpus": 1, "settings": {**settings, "memory_fraction": args.fraction}}
    res = subprocess.run([sys.executable, str(REPO / "probes" / "memory.py")],
                         input=json.dumps(payload) + "\n", capture_output=True, text=True,
                         timeout=3600, check=True)
    (dev,) = json.loads(res.stdout)["devices"]
    assert "error" not in dev and dev["bad_words"] == 0, dev
    return dev["verified_gbps"], dev["bytes"], dev["patterns"]


def bare(device: str, nbytes: int, patterns: int) -> float:
    res = subprocess.run([sys.executable, "-c", BARE, device, str(nbytes), str(patterns)],
                         capture_output=True, text=True, timeout=3600, check=True)
    return float(res.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--mib", type=int, default=256, help="host memory tested (CPU)")
    ap.add_argument("--fraction", type=float, default=0.5,
                    help="share of free GPU memory the probe tests (cuda)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    probe_gbps, bare_gbps = [], []
    for i in range(args.repeat):
        gbps, nbytes, patterns = probe(args)
        probe_gbps.append(gbps)
        bare_gbps.append(bare(args.device if args.device == "cpu" else "cuda:0", nbytes,
                              patterns))
        print(f"run {i + 1}: {nbytes / 2**20:.0f} MiB x {patterns} patterns: probe "
              f"{probe_gbps[-1]:.3f} GB/s, bare {bare_gbps[-1]:.3f} GB/s", flush=True)
    p, b = statistics.median(probe_gbps), statistics.median(bare_gbps)
    print(f"median: probe {p:.3f} GB/s, bare fill-and-compare {b:.3f} GB/s")
    print(f"ratio probe/bare: {p / b:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
