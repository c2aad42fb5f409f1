#!/usr/bin/env python3
"""burnin sdc probe: silent data corruption, caught exactly.

Runs ON a node, one worker per device (each GPU, or the CPU on a CPU-only node).
Known-answer mode: GEMMs whose exact result is known (see gemmcore.py), issued back to
back into output buffers rotated through a large share of memory, verified on the
device with zero tolerance (float64 row, column and weighted checksums, integrality),
the first result's SHA-256 reported for fleet consensus. Random mode: random inputs from
a fixed seed with determinism pinned; every repeat must be bitwise identical.

    echo '{"settings": {"duration_s": 10}}' | python3 probes/sdc.py
    python3 probes/sdc.py --selftest      # the exactness claim, against integer maths

Settings (all optional): n, dtype (bf16|fp16|fp32; auto: bf16 on GPU, fp32 on CPU),
duration_s, max_products (stop sooner), random_repeats, verify_every (auto keeps
verification near 3% of the time), memory_fraction (GPU share given to output
buffers), buffers (CPU).

FOR THE PROJECT'S TESTS ONLY: test_hooks.inject (probelib.test_hooks: never sent by the
controller), a list of faults planted in the probe's own results, e.g. {"device": 0,
"product": 3, "element": [i, j], "bit": 7} (or "value": "nan"|"inf"|x, or "add": x;
"input": "A" corrupts an input after its checksums were taken; "mode": "random" with
"repeat": r corrupts a random-mode repeat). It makes a healthy device look faulty.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time

import gemmcore as core  # imports probelib first, which sets what CUDA reads at start
import probelib
import torch

PROBE = "sdc"
VERIFY_BUDGET = 0.03
MAX_EVENTS = 16


def log(msg: str) -> None:
    probelib.log(PROBE, msg)


def flip(t: torch.Tensor, index: tuple, bit: int) -> None:
    """Flip one bit of one element in place (tests' fault injection)."""
    ints = {4: torch.int32, 2: torch.int16}[t.element_size()]
    width = 8 * t.element_size()
    mask = (1 << bit) if bit < width - 1 else -(1 << (width - 1))
    view = t.view(ints)
    view[index] = view[index] ^ mask


def plant(t: torch.Tensor, fault: dict) -> None:
    index = tuple(fault["element"])
    if "bit" in fault:
        flip(t, index, fault["bit"])
    elif "value" in fault:
        t[index] = float(fault["value"])
    elif "add" in fault:
        t[index] += fault["add"]


def run_known(d, ka, duration_s, max_products, verify_every, nbuf, faults) -> dict:
    dev, n, dtype = ka.dev, ka.n, ka.dtype
    outs = [torch.empty(n, n, dtype=torch.float32, device=dev) for _ in range(nbuf)]
    ka.product(outs[0])  # warm-up: kernel selection, allocator
    core.sync(dev)
    t = time.perf_counter()
    ka.product(outs[0])
    core.sync(dev)
    gemm_s = time.perf_counter() - t
    t = time.perf_counter()
    ka.verify(outs[0]).cpu()
    verify_s = time.perf_counter() - t
    if verify_every == "auto":
        verify_every = max(1, math.ceil(verify_s * (1 - VERIFY_BUDGET) /
                                        (VERIFY_BUDGET * gemm_s)))
    inputs = [f for f in faults if f.get("input") == "A"]
    faults = [f for f in faults if f.get("input") != "A"]
    counts = torch.zeros(nbuf, len(core.CHECKS), dtype=torch.int64, device=dev)
    slot_product = [0] * nbuf
    totals = dict.fromkeys(core.CHECKS, 0)
    events: list[dict] = []
    digest = None
    vtimer = core.Timer(d)
    products = verified = bad_products = 0
    start = time.perf_counter()
    deadline = start + duration_s
    while True:
        for slot in range(nbuf):
            products += 1
            for f in inputs:
                if f["product"] == products:
                    flip(ka.A, tuple(f["element"]), f["bit"])
            ka.product(outs[slot])
            for f in faults:
                if f["product"] == products:
                    plant(outs[slot], f)
            if products == 1 or products % verify_every == 0:
                began = vtimer.start()
                counts[slot] += ka.verify(outs[slot])
                vtimer.stop(began)
                verified += 1
                slot_product[slot] = products
            if products == 1:
                digest = core.digest(outs[0])
        # One synchronisation per round of buffers, read as Python ints: a clean round
        # then costs no tensor operation on the host between the GEMMs.
        for slot, row in enumerate(counts.tolist()):
            if not any(row):
                continue
            bad_products += 1
            found = dict(zip(core.CHECKS, row, strict=True))
            for k, v in found.items():
                totals[k] += v
            if len(events) < MAX_EVENTS:
                events.append({"product": slot_product[slot], "counts": found,
                               **ka.localise(outs[slot])})
            counts[slot].zero_()
        if time.perf_counter() >= deadline or (max_products and products >= max_products):
            break
    wall = time.perf_counter() - start
    verify_total = vtimer.total()
    return {"dtype": dtype, "n": n, "products": products, "verified": verified,
            "verify_every": verify_every, "buffers": nbuf, "wall_s": round(wall, 4),
            "tflops": probelib.sig(products * 2 * n ** 3 / wall / 1e12),
            "verify_share": round(verify_total / wall, 4), "errors": totals,
            "bad_products": bad_products,
            "events": events, "digest": digest, "inputs_digest": ka.inputs_digest}


def run_random(dev, n, dtype, repeats, faults) -> dict:
    g = torch.Generator().manual_seed(20221)
    A = torch.randn(n, n, generator=g).to(core.DTYPES[dtype]).to(dev)
    B = torch.randn(n, n, generator=g).to(core.DTYPES[dtype]).to(dev)
    first = torch.mm(A, B)
    differ = []
    for r in range(1, repeats):
        C = torch.mm(A, B)
        for f in faults:
            if f.get("repeat") == r:
                plant(C, f)
        if not torch.equal(C, first):
            differ.append(r)
    nonfinite = int((~torch.isfinite(first)).sum())
    return {"dtype": dtype, "n": n, "repeats": repeats, "differing_repeats": differ,
            "nonfinite": nonfinite, "digest": core.digest(first)}


class Inputs:
    """Known-answer inputs, built once per probe for each (n, dtype) its devices use."""

    def __init__(self):
        self.lock, self.built = threading.Lock(), {}

    def get(self, n: int, dtype: str) -> core.KnownInputs:
        with self.lock:
            if (n, dtype) not in self.built:
                t = time.perf_counter()
                self.built[(n, dtype)] = core.KnownInputs(n, dtype)
                log(f"known-answer inputs n={n} {dtype} built in "
                    f"{time.perf_counter() - t:.1f} s")
            return self.built[(n, dtype)]


def worker(d, settings, inputs: Inputs, out, planted: list) -> None:
    dev = core.bind(d)  # first, before anything touches the device
    record = core.describe(d)
    try:
        gpu = dev.type == "cuda"
        n = settings.get("n") or (8192 if gpu else 1024)
        dtype = settings.get("dtype") or ("bf16" if gpu else "fp32")
        if gpu:
            free = torch.cuda.mem_get_info(dev)[0]
            nbuf = int(free * settings.get("memory_fraction", 0.5) // (4 * n * n))
            nbuf = max(2, min(nbuf, 256))
        else:
            nbuf = settings.get("buffers", 4)
        faults = [f for f in planted if f.get("device", 0) == d.index]
        record["selftest"] = selftest_device(dev, dtype)
        ka = core.KnownAnswer(inputs.get(n, dtype), dev)
        record["known"] = run_known(d, ka, settings.get("duration_s", 30),
                                    settings.get("max_products"),
                                    settings.get("verify_every", "auto"), nbuf,
                                    [f for f in faults if f.get("mode", "known") == "known"])
        record["random"] = run_random(dev, min(n, 4096), dtype,
                                      settings.get("random_repeats", 8),
                                      [f for f in faults if f.get("mode") == "random"])
    except Exception as e:  # one device's failure is that device's result
        record["error"] = f"{type(e).__name__}: {e}"
        log(f"{d.label}: {record['error']}")
    out[d.index] = record


def selftest_device(dev, dtype: str, n: int = 96) -> bool:
    """The exactness claim, checked: the device's C against integer arithmetic."""
    ka = core.KnownAnswer(core.KnownInputs(n, dtype, seed=7), dev)
    C = ka.product(torch.empty(n, n, dtype=torch.float32, device=dev))
    return bool(torch.equal(C.double().cpu(), core.integer_reference(n, seed=7)))


def main() -> int:
    if "-h" in sys.argv or "--help" in sys.argv:
        print(__doc__)
        return 0
    core.pin_determinism()
    if "--selftest" in sys.argv:
        results = {}
        devs, problem = probelib.node_devices({})
        for d in devs:
            dev = core.bind(d)
            for dtype in ("bf16", "fp16", "fp32"):
                results[f"{d.label}:{dtype}"] = selftest_device(dev, dtype)
        print(json.dumps({"probe": PROBE, "selftest": results, "problem": problem}))
        return 0 if results and all(results.values()) else 1
    payload = probelib.read_payload()
    probelib.watch_controller(payload, PROBE)
    settings = payload.get("settings", {})
    devs, problem = probelib.node_devices(payload)
    problem = problem or core.gemm_problem(devs)
    if problem:
        log(problem)
        probelib.emit(PROBE, {"torch": torch.__version__}, [], {}, [problem])
        return 0
    core.share_cpu(devs)
    log(f"{len(devs)} device(s): {', '.join(d.label for d in devs)}; settings {settings}")
    started = time.time()
    out: list = [None] * len(devs)
    inputs = Inputs()
    planted = probelib.test_hooks(payload).get("inject", [])
    threads = [threading.Thread(target=worker, args=(d, settings, inputs, out, planted))
               for d in devs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [f"{d['device']}: {d['error']}" for d in out if "error" in d]
    probelib.emit(PROBE, {"torch": torch.__version__}, out,
                  {"elapsed_s": round(time.time() - started, 3)}, errors)
    return 0


if __name__ == "__main__":
    probelib.finish(main())
