"""The controller's peak memory when every node prints the most a probe may print.

N nodes (8 GPUs each, inventory counts) run burn through burnin's real fan-out
(Run.outcomes: the path the plugin takes) with a transport that answers at once: every
node's command holds its own copy of the output, and all N copies are held together
before any is judged (a barrier), as when a fleet's probes finish together. Each case is
measured in a fresh process (peak RSS is a high-water mark, VmHWM):

    baseline  every node prints a normal health document (run as health)
    numbers   the maximum output, valid JSON of small numbers (999,999,...)
    nested    the maximum output, valid JSON nested 500 deep, over and over
    arrays    the maximum output, a well-shaped burn document with huge series

"The maximum output" is the bound the run applies to burn on such a node (--bytes to
choose another). Address space is capped (--limit-gib) so that a controller which would
need more fails its nodes with MemoryError instead of starving the machine; such nodes are
counted. The last line is each case's peak as a ratio to the baseline's.

    python benchmarks/hostile_output.py [--nodes 256] [--bytes B] [--limit-gib 10]
                                        [--cases numbers,nested,arrays]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

CASES = ("baseline", "numbers", "nested", "arrays")
GPUS = 8


def vm_hwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def envelope(devices: list, figures: dict) -> dict:
    return {"probe": "burn", "schema": 1, "node": {"hostname": "n"}, "devices": devices,
            "figures": figures, "errors": []}


def hostile(case: str, size: int) -> bytes:
    """A document of exactly `size` bytes (trailing spaces pad it: valid JSON)."""
    if case == "numbers":
        head, tail = b'{"x": [', b"1]}"  # 999 is no cached int: 36 bytes parsed, 4 read
        body = b"999," * ((size - len(head) - len(tail)) // 4)
    elif case == "nested":
        chunk = b"[" * 500 + b"]" * 500 + b","
        head, tail = b"[", b"[]]"
        body = chunk * ((size - len(head) - len(tail)) // len(chunk))
    else:  # arrays: passes the burn schema of the day when every series fits its length
        per = (size - 4096) // GPUS // 4  # "1.5," is 4 bytes
        devices = [{"device": f"cuda:{i}", "name": "NVIDIA H100", "tflops": 700.0,
                    "telemetry": {"series": {"t": ["@"]}}} for i in range(GPUS)]
        text = json.dumps(envelope(devices, {"duration_s": 600, "sample_s": 1.0}))
        series = ",".join(["1.5"] * per)
        head, tail, body = text.replace('"@"', series).encode(), b"", b""
    doc = head + body + tail
    if len(doc) > size:
        raise SystemExit(f"{case}: cannot make a document of {size} bytes")
    return doc + b" " * (size - len(doc))


# The baseline: a normal health document, as a GPU-less node prints it.
DOC = {"probe": "health", "schema": 1, "devices": [], "errors": [],
       "figures": {"torch": {"present": True, "version": "2.13.0"},
                   "gpu": {"nvml": "absent", "reason": "benchmark"}}}


def output_bound(check, settings: dict, devices: int) -> int:
    """The bytes the run lets this check's probe print on such a node."""
    bound = getattr(check, "output_bound", None)
    return bound(settings, devices) if bound else check.max_output


def child(case: str, nodes: int, size: int | None, limit_gib: float) -> None:
    from burnin.checks import CHECKS
    from burnin.engine.run import Run
    from burnin.inventory.schema import load_inventory
    from burnin.transports import CommandResult
    from burnin.transports.local import LocalTransport

    resource.setrlimit(resource.RLIMIT_AS, (int(limit_gib * 2**30),) * 2)
    check = "health" if case == "baseline" else "burn"
    with tempfile.TemporaryDirectory() as d:
        inv = Path(d) / "fleet.yaml"
        inv.write_text(json.dumps({"version": 1, "cluster": "hostile",
                                   "defaults": {"transport": "local", "gpus": GPUS},
                                   "nodes": [{"name": f"n[{1:04d}-{nodes:04d}]"}]}))
        inventory = load_inventory(inv)
        run = Run(inventory, list(inventory.nodes), "standard", Path(d) / "reports", "bench")
        if size is None:
            size = output_bound(CHECKS["burn"], run.settings("burn"), GPUS)
        if case == "baseline":
            doc = json.dumps({**DOC, "node": {"hostname": "n"}}).encode()
        else:
            doc = hostile(case, size)
        together = threading.Barrier(min(nodes, run.fanout))

        def answer(self, argv, stdin, timeout_s, max_stdout, **kw):
            out = bytes(bytearray(doc))  # each node's transport holds its own copy
            together.wait(timeout=600)
            return CommandResult(0, out, b"", 0.0)

        LocalTransport.run = answer
        before = vm_hwm_mib()
        outcomes = run.outcomes(check)
        peak = vm_hwm_mib()
    reasons = Counter("ok" if o.ok else o.reason.split(";")[0][:90] for o in outcomes.values())
    print(json.dumps({"case": case, "nodes": nodes, "bytes": len(doc), "start_mib": before,
                      "peak_mib": peak, "outcomes": reasons}))


def measure(case: str, args) -> dict:
    argv = [sys.executable, __file__, "--child", case, "--nodes", str(args.nodes),
            "--limit-gib", str(args.limit_gib)]
    if args.bytes:
        argv += ["--bytes", str(args.bytes)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    if done.returncode != 0:
        raise SystemExit(f"{case} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=256)
    p.add_argument("--bytes", type=int, default=None, help="default: burn's bound")
    p.add_argument("--limit-gib", type=float, default=10.0)
    p.add_argument("--cases", default=",".join(CASES), help="a comma-separated subset")
    p.add_argument("--child", choices=CASES)
    args = p.parse_args()
    if args.child:
        child(args.child, args.nodes, args.bytes, args.limit_gib)
        return
    results, cases = {}, ["baseline"] + [c for c in args.cases.split(",") if c != "baseline"]
    for case in cases:
        r = results[case] = measure(case, args)
        outcomes = ", ".join(f"{n} {why}" for why, n in r["outcomes"].items())
        print(f"{case}: {r['nodes']} nodes x {r['bytes']} bytes: peak RSS "
              f"{r['peak_mib']:.0f} MiB (at start {r['start_mib']:.0f} MiB); {outcomes}",
              flush=True)
    base = results["baseline"]["peak_mib"]
    print("peak RSS / baseline: " + ", ".join(
        f"{c} {results[c]['peak_mib'] / base:.1f}x" for c in cases[1:]))


if __name__ == "__main__":
    main()
