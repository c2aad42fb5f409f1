"""The storage probe against fio, side by side on one file system.

Same block size, streams (fio numjobs), requests in flight per stream (fio iodepth with
libaio), direct I/O and size per stream, alternating in one run, write then read. fio's
figure is its group bandwidth (bytes over the longest job's time), the probe's is the
same definition. The probe runs with verify=after (its block checks outside the timed
window, as fio runs without verify) and, separately, with its default verify=inline.
Goal: probe / fio 0.95 or better.

    python benchmarks/storage_vs_fio.py --dir /mnt/data [--size-gb 1] [--streams 4]
                                        [--iodepth 4] [--block-mb 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def fio(directory: Path, rw: str, args) -> float:
    res = subprocess.run(
        ["fio", "--name=bench", f"--directory={directory}", f"--rw={rw}",
         f"--bs={args.block_mb}M", f"--size={int(args.size_gb * 1000)}M",
         f"--numjobs={args.streams}", f"--iodepth={args.iodepth}", "--ioengine=libaio",
         "--direct=1", "--group_reporting", "--output-format=json"],
        capture_output=True, text=True, check=True)
    job = json.loads(res.stdout)["jobs"][0]
    return job["write" if rw == "write" else "read"]["bw_bytes"] / 1e9


def probe(directory: Path, args, verify: str) -> tuple[float, float]:
    payload = {"gpus": 0, "storage": {"path": str(directory)},
               "settings": {"size_gb": args.size_gb, "streams": args.streams,
                            "iodepth": args.iodepth, "block_mb": args.block_mb,
                            "verify": verify}}
    res = subprocess.run([sys.executable, str(REPO / "probes" / "storage.py")],
                         input=json.dumps(payload), capture_output=True, text=True, check=True)
    fig = json.loads(res.stdout)["figures"]
    assert fig["direct"] and fig["integrity_errors"] == 0
    return fig["write"]["gbps"], fig["read"]["gbps"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dir", required=True)
    p.add_argument("--size-gb", type=float, default=1.0)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--iodepth", type=int, default=4)
    p.add_argument("--block-mb", type=int, default=4)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    rows = {k: [] for k in ("fio_w", "fio_r", "after_w", "after_r", "inline_w", "inline_r")}
    for _ in range(args.repeat):
        work = Path(tempfile.mkdtemp(dir=args.dir))
        try:
            rows["fio_w"].append(fio(work, "write", args))
            rows["fio_r"].append(fio(work, "read", args))
        finally:
            shutil.rmtree(work)
        w, r = probe(Path(args.dir), args, "after")
        rows["after_w"].append(w)
        rows["after_r"].append(r)
        w, r = probe(Path(args.dir), args, "inline")
        rows["inline_w"].append(w)
        rows["inline_r"].append(r)
    med = {k: statistics.median(v) for k, v in rows.items()}
    for k, v in rows.items():
        print(f"{k:9s} median {med[k]:.3f} GB/s (runs {', '.join(f'{x:.3f}' for x in v)})")
    print(f"write: probe/fio = {med['after_w'] / med['fio_w']:.3f}; "
          f"read: probe/fio = {med['after_r'] / med['fio_r']:.3f} (verify after); "
          f"inline verify read/fio = {med['inline_r'] / med['fio_r']:.3f}")


if __name__ == "__main__":
    main()
