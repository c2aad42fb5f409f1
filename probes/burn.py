#!/usr/bin/env python3
"""burnin burn probe: every device under sustained GEMM load for duration_s, watched.

Runs ON a node, one worker per device (each GPU, or the CPU on a CPU-only node), on the
GEMM engine it shares with the sdc probe (gemmcore.py). Random data (which draws more
power than small integers), determinism pinned, so every product must equal the first
bit for bit: every k-th product is compared on the device (k keeps it near 3% of the
time), and a mismatch is reported. Throughput is sampled per device over time; NVML
telemetry at sample_s on each GPU, what the CPU offers on a CPU node (telemetry.py).
Progress goes to stderr as 'BURNIN_PROGRESS {json}' lines.

    echo '{"settings": {"duration_s": 10}}' | python3 probes/burn.py

Settings (optional): duration_s, n, dtype (bf16|fp16|fp32; auto: bf16 on GPU, fp32 on
CPU), sample_s (1.0), verify_every (auto), memory_fraction (GPU), buffers (CPU).
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time

import gemmcore as core  # imports probelib first, which sets what CUDA reads at start
import probelib
import telemetry
import torch

PROBE = "burn"
VERIFY_BUDGET = 0.03


def log(msg: str) -> None:
    probelib.log(PROBE, msg)


class Load:
    """Sustained GEMMs on one device, sampled; results compared with the first product.
    Made and run in the device's own worker thread, bound to it (gemmcore.bind)."""

    def __init__(self, d: probelib.Device, settings: dict):
        self.d, self.index = d, d.index
        self.dev = core.bind(d)
        gpu = self.dev.type == "cuda"
        self.n = settings.get("n") or (8192 if gpu else 1024)
        self.dtype = settings.get("dtype") or ("bf16" if gpu else "fp32")
        dt = core.DTYPES[self.dtype]
        # Made where it is used: no host-side copy per device, no host memory per GPU.
        g = torch.Generator(device=self.dev).manual_seed(1234 + d.index)
        self.A = torch.randn(self.n, self.n, generator=g, device=self.dev).to(dt)
        self.B = torch.randn(self.n, self.n, generator=g, device=self.dev).to(dt)
        if gpu:
            free = torch.cuda.mem_get_info(self.dev)[0]
            size = self.n * self.n * self.A.element_size()
            nbuf = max(2, min(256, int(free * settings.get("memory_fraction", 0.5) // size)))
        else:
            nbuf = settings.get("buffers", 4)
        self.outs = [torch.empty_like(self.A) for _ in range(nbuf)]
        self.verify_every = settings.get("verify_every", "auto")
        self.products = self.verified = 0
        self.samples: list[tuple[float, int]] = []
        self.record = core.describe(d)

    def run(self, deadline: float, sample_s: float, progress) -> None:
        torch.mm(self.A, self.B, out=self.outs[0])  # warm-up: kernel selection, allocator
        core.sync(self.dev)
        t = time.perf_counter()
        ref = torch.mm(self.A, self.B)
        core.sync(self.dev)
        gemm_s = time.perf_counter() - t
        t = time.perf_counter()
        # The warm-up product is the first comparison, and it counts like any other.
        warm_bad = int(torch.count_nonzero(self.outs[0] != ref))
        eq_s = time.perf_counter() - t
        if self.verify_every == "auto":
            self.verify_every = max(1, math.ceil(eq_s * (1 - VERIFY_BUDGET) /
                                                 (VERIFY_BUDGET * gemm_s)))
        wrong_elements = torch.full((), warm_bad, dtype=torch.int64, device=self.dev)
        wrong_products = torch.full((), int(warm_bad > 0), dtype=torch.int64, device=self.dev)
        self.verified = 1
        start = time.perf_counter()
        self.samples.append((0.0, 0))
        next_sample = start + sample_s
        while True:
            for out in self.outs:
                torch.mm(self.A, self.B, out=out)
                self.products += 1
                if self.products % self.verify_every == 0:
                    bad = torch.count_nonzero(out != ref)
                    wrong_elements += bad
                    wrong_products += (bad > 0).long()
                    self.verified += 1
            now = time.perf_counter()
            if now >= next_sample or now >= deadline:
                core.sync(self.dev)  # one synchronisation per sample, for exact rates
                now = time.perf_counter()
                self.samples.append((now - start, self.products))
                progress(self)
                next_sample = now + sample_s
                if now >= deadline:
                    break
        flops = 2 * self.n ** 3
        series = [[round(t1, 3), probelib.sig((p1 - p0) * flops / (t1 - t0) / 1e12)]
                  for (t0, p0), (t1, p1) in zip(self.samples, self.samples[1:], strict=False)
                  if t1 > t0]
        wall = self.samples[-1][0]
        self.record.update({
            "dtype": self.dtype, "n": self.n, "buffers": len(self.outs),
            "products": self.products, "verified": self.verified,
            "verify_every": self.verify_every, "wall_s": round(wall, 3),
            "tflops": probelib.sig(self.products * flops / wall / 1e12) if wall else 0.0,
            "tflops_series": series, "mismatched_products": int(wrong_products),
            "mismatched_elements": int(wrong_elements)})

    def current_tflops(self) -> float:
        if len(self.samples) < 2:
            return 0.0
        (t0, p0), (t1, p1) = self.samples[-2], self.samples[-1]
        return (p1 - p0) * 2 * self.n ** 3 / max(t1 - t0, 1e-9) / 1e12


def start_telemetry(devs: list[probelib.Device], sample_s: float, errors: list[str]):
    """NVML telemetry for GPUs, paired by UUID; what the CPU offers on a CPU node."""
    if not devs[0].gpu:
        cpu = telemetry.CpuTelemetry(sample_s)
        cpu.start()
        return cpu
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception as e:
        errors.append(f"NVML unavailable, no GPU telemetry: {e}")
        return None
    gpu = telemetry.GpuTelemetry(pynvml, [d.uuid or f"no UUID for {d.label}" for d in devs],
                                 sample_s)
    gpu.start()
    return gpu


def main() -> int:
    payload = probelib.start(__doc__, PROBE)
    if payload is None:
        return 0
    core.pin_determinism()
    settings = payload.get("settings", {})
    duration_s = float(settings.get("duration_s", 60))
    sample_s = float(settings.get("sample_s", 1.0))
    devs, problem = probelib.node_devices(payload)
    problem = problem or core.gemm_problem(devs)
    if problem:
        log(problem)
        probelib.emit(PROBE, {"torch": torch.__version__}, [], {}, [problem])
        return 0
    core.share_cpu(devs)
    errors: list[str] = []
    watcher = start_telemetry(devs, sample_s, errors)
    lock = threading.Lock()
    loads: dict[int, Load] = {}
    records: list[dict] = [core.describe(d) for d in devs]

    def progress(load: Load) -> None:
        info = {"device": load.d.label, "elapsed_s": round(load.samples[-1][0], 1),
                "tflops": probelib.sig(load.current_tflops(), 4)}
        if isinstance(watcher, telemetry.GpuTelemetry):
            info["temp_c"] = watcher.latest(load.index, "temp_c")
        with lock:
            print("BURNIN_PROGRESS " + json.dumps(info), file=sys.stderr, flush=True)

    deadline = time.perf_counter() + duration_s

    def drive(d: probelib.Device) -> None:
        try:
            load = loads[d.index] = Load(d, settings)
        except Exception as e:
            records[d.index]["error"] = f"cannot start load: {type(e).__name__}: {e}"
            return
        try:
            load.run(deadline, sample_s, progress)
        except Exception as e:  # this device's failure, reported with it
            load.record["error"] = f"{type(e).__name__}: {e}"
        records[d.index] = load.record

    threads = [threading.Thread(target=drive, args=(d,)) for d in devs]
    for t in threads:
        t.start()
    if isinstance(watcher, telemetry.GpuTelemetry):
        time.sleep(min(5.0, duration_s / 2))
        watcher.pcie_under_load()
    for t in threads:
        t.join()
    errors += [f"{r['device']}: {r['error']}" for r in records if "error" in r]
    figures = {"duration_s": duration_s, "sample_s": sample_s}
    if isinstance(watcher, telemetry.GpuTelemetry):
        for record, tel in zip(records, watcher.stop(), strict=True):
            record["telemetry"] = tel
    elif watcher is not None:
        figures["cpu_telemetry"] = watcher.stop()
    probelib.emit(PROBE, {"torch": torch.__version__}, records, figures, errors)
    return 0


if __name__ == "__main__":
    probelib.finish(main())
