#!/usr/bin/env python3
"""burnin pcie probe: can every GPU be fed from the host?

Runs ON a node. One worker process per GPU (`pcie.py --worker <index>`, its own CUDA
context and interpreter: no GIL shared between GPUs, and a worker is a process one can
see in `ps`). Each copies `block_mb` blocks between pinned host memory and the GPU,
host-to-device, device-to-host, then both at once (bidirectional: a second pinned
buffer and a second device buffer, each direction on its own CUDA stream, the pair timed
on the host clock from issue to both done: a link or root port that holds one direction
at full rate but not both shows only here); single directions timed with CUDA events.
First one GPU at a time, `seconds` per GPU and direction split over `rounds` taken in
turn, each GPU's best round reported (a transient hiccup of the host is not the link; a slow link is
slow in every round); then all GPUs at once for `seconds` per direction, which exposes a
shared PCIe switch or a NUMA misplacement one GPU alone does not. The all-at-once aggregate is
the bytes of all GPUs over the span from the first start to the last end (host clock,
CLOCK_MONOTONIC, shared by the processes). The link's width and generation are read from
NVML (paired with the GPU by UUID) while all GPUs copy: an idle link trains down.

Each worker is bound to its GPU's local CPUs (locality.py: NVML, else sysfs) before it
imports torch or allocates its pinned buffers, which then sit in the GPU's NUMA node; its
record says where it ran (`affinity`: the NUMA node, the CPUs), or why it ran unbound
(not a failure: the figures stand, the reader knows).

    echo '{"settings": {"seconds": 1}}' | python3 probes/pcie.py

Settings (optional): block_mb (256), seconds (per GPU and direction alone, and per
direction all at once, bidirectional counting as one; 1), rounds (3), min_copies (3, per
measurement), sysfs_root (/sys: where a GPU's local CPUs are read when NVML cannot say).
A CPU-only node has no PCIe path to test: the probe says so and measures nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import locality
import probelib
import telemetry

PROBE = "pcie"
DIRECTIONS = ("h2d", "d2h", "bidir")  # bidir's bytes are both directions' summed


def log(msg: str) -> None:
    probelib.log(PROBE, msg)


# --- a worker: one GPU, in its own process --------------------------------------------

def worker(index: int) -> int:
    request = json.loads(sys.stdin.readline())
    # First, while this process has one thread and no buffer: its threads inherit the CPUs,
    # and the kernel places the pages it touches on the NUMA node it runs on.
    affinity = locality.bind(request.get("place"))
    import gemmcore as core
    import torch
    devs, problem = probelib.node_devices(request["payload"])
    if problem or index >= len(devs) or devs[index].uuid != request["uuid"]:
        return _reply({"error": problem or f"device {index} is not {request['uuid']} here"})
    d = devs[index]
    dev = core.bind(d)
    settings = request["settings"]
    block = int(settings.get("block_mb", 256)) << 20
    pinned = dev.type == "cuda"
    host = torch.empty(block, dtype=torch.uint8, pin_memory=pinned)
    host.fill_(0x5A)  # pages touched before the clock starts
    device = torch.empty(block, dtype=torch.uint8, device=dev)
    # The bidirectional round's other half: its own buffers, so that neither direction
    # waits on the other's, and a stream per direction.
    back = Back(torch.empty(block, dtype=torch.uint8, pin_memory=pinned),
                torch.empty(block, dtype=torch.uint8, device=dev),
                (torch.cuda.Stream(dev), torch.cuda.Stream(dev)) if pinned else None)
    back.host.fill_(0xA5)
    for direction in DIRECTIONS * 2:  # warm-up: allocations, DMA mappings, clocks
        if direction == "bidir":
            both(dev, host, device, back)
        else:
            copy(direction, host, device)
    core.sync(dev)
    _reply({"ready": True, "pinned": pinned, "block_bytes": block, "affinity": affinity})
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("do") != "measure":
            break
        if command["direction"] == "bidir":
            _reply(measure_both(dev, host, device, back, float(command["seconds"]),
                                int(settings.get("min_copies", 3))))
        else:
            _reply(measure(d, dev, host, device, command["direction"],
                           float(command["seconds"]), int(settings.get("min_copies", 3))))
    return 0


class Back:
    """The second pair of buffers, and the two streams, of the bidirectional round."""

    def __init__(self, host, device, streams):
        self.host, self.device, self.streams = host, device, streams


def both(dev, host, device, back: Back) -> None:
    """One host-to-device and one device-to-host copy at once, each on its own stream
    (on the CPU, where tests emulate a GPU, one after the other); returns when both are
    done."""
    import gemmcore as core
    import torch
    if back.streams is None:
        device.copy_(host)
        back.host.copy_(back.device)
        return
    up, down = back.streams
    up.wait_stream(torch.cuda.current_stream(dev))
    down.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(up):
        device.copy_(host, non_blocking=True)
    with torch.cuda.stream(down):
        back.host.copy_(back.device, non_blocking=True)
    core.sync(dev)


def measure_both(dev, host, device, back: Back, seconds: float, min_copies: int) -> dict:
    """Pairs of copies, one each way at once, for `seconds` (at least `min_copies` pairs):
    both directions' bytes over the host-clock time from the first issue to the last
    pair done (a synchronisation per pair, small beside a pair of 256 MiB copies)."""
    pairs = 0
    start = time.monotonic()
    while pairs < min_copies or time.monotonic() - start < seconds:
        both(dev, host, device, back)
        pairs += 1
    end = time.monotonic()
    busy = end - start
    moved = 2 * pairs * host.numel()
    # gbps sums both directions; stream_gbps is one direction's bytes over the same time,
    # the figure nvbandwidth's CE bidirectional tests report ("CE bidir. bandwidth = (size
    # of data on measured stream) / (time on measured stream)", its README.md): a floor
    # taken from nvbandwidth is doubled to hold gbps.
    return {"bytes": moved, "copies": pairs, "seconds": round(busy, 6),
            "gbps": round(moved / busy / 1e9, 4) if busy > 0 else 0.0,
            "stream_gbps": round(moved / 2 / busy / 1e9, 4) if busy > 0 else 0.0,
            "start": start, "end": end}


def copy(direction: str, host, device) -> None:
    if direction == "h2d":
        device.copy_(host, non_blocking=True)
    else:
        host.copy_(device, non_blocking=True)


def measure(d, dev, host, device, direction: str, seconds: float, min_copies: int) -> dict:
    """Copies for `seconds` (at least `min_copies`), each timed on the device's stream."""
    import gemmcore as core
    timer = core.Timer(d)
    copies = 0
    start = time.monotonic()
    while copies < min_copies or time.monotonic() - start < seconds:
        began = timer.start()
        copy(direction, host, device)
        timer.stop(began)
        core.sync(dev)
        copies += 1
    end = time.monotonic()
    busy = timer.total()
    moved = copies * host.numel()
    return {"bytes": moved, "copies": copies, "seconds": round(busy, 6),
            "gbps": round(moved / busy / 1e9, 4) if busy > 0 else 0.0,
            "start": start, "end": end}


def _reply(doc: dict) -> int:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()
    return 0


# --- the probe: workers driven one at a time, then all at once ------------------------

class Worker:
    def __init__(self, d, payload: dict, settings: dict, place: dict):
        self.d = d
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(d.index)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, preexec_fn=probelib.die_with_parent)
        node = {"gpus": payload.get("gpus"), "cpu_devices": payload.get("cpu_devices")}
        self.error = ""
        self.send({"payload": node, "settings": settings, "uuid": d.uuid, "place": place})

    def send(self, doc: dict) -> None:
        if self.error:
            return
        try:
            self.proc.stdin.write(json.dumps(doc) + "\n")
            self.proc.stdin.flush()
        except OSError as e:
            self.error = f"worker for {self.d.label} is gone: {e}"

    def recv(self) -> dict | None:
        if self.error:
            return None
        line = self.proc.stdout.readline()
        doc = json.loads(line) if line.strip() else None
        if doc is None:
            self.error = (f"worker for {self.d.label} exited with status {self.proc.wait()} "
                          "(its stderr is in the probe's)")
        elif doc.get("error"):
            self.error, doc = f"{self.d.label}: {doc['error']}", None
        return doc

    def stop(self) -> None:
        """Tells the worker to leave, without waiting for it (close waits)."""
        if self.proc.stdin.closed:
            return
        self.send({"do": "exit"})
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def close(self) -> None:
        self.stop()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def nvml_links(devs) -> tuple:
    """NVML for the GPUs' links, paired by UUID, or None where it cannot start."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception as e:
        log(f"NVML unavailable, no link width or generation: {e}")
        return None
    return telemetry.GpuTelemetry(pynvml, [d.uuid or f"no UUID for {d.label}" for d in devs])


def run(devs, payload: dict, settings: dict, records: list[dict], errors: list[str]) -> dict:
    seconds = float(settings.get("seconds", 1.0))
    placed = locality.places(devs, str(settings.get("sysfs_root") or "/sys"))
    workers = [Worker(d, payload, settings, p) for d, p in zip(devs, placed, strict=True)]
    try:
        for w, rec in zip(workers, records, strict=True):
            ready = w.recv()
            if ready:
                rec.update(pinned=ready["pinned"], block_bytes=ready["block_bytes"],
                           affinity=ready["affinity"])
                if not ready["affinity"]["bound"]:
                    log(f"{rec['device']}: worker not bound: {ready['affinity']['why']}")
        links = nvml_links(devs)
        rounds = max(1, int(settings.get("rounds", 3)))
        for _ in range(rounds):  # one GPU at a time, round robin; each GPU's best round
            for w, rec in zip(workers, records, strict=True):
                for direction in DIRECTIONS:
                    w.send({"do": "measure", "direction": direction,
                            "seconds": seconds / rounds})
                    res = _public(w.recv())
                    if res is None:
                        continue
                    rec.setdefault("rounds", {}).setdefault(direction, []).append(res["gbps"])
                    if rec.get(direction) is None or res["gbps"] > rec[direction]["gbps"]:
                        rec[direction] = res
        aggregate = {}
        for direction in DIRECTIONS:  # all at once
            for w in workers:
                w.send({"do": "measure", "direction": direction, "seconds": seconds})
            if links is not None and direction == "h2d":
                time.sleep(seconds / 2)
                links.pcie_under_load()
            results = [w.recv() for w in workers]
            for rec, res in zip(records, results, strict=True):
                rec.setdefault("concurrent", {})[direction] = _public(res)
            aggregate[direction] = _aggregate([r for r in results if r])
        if links is not None:
            for rec, tel in zip(records, links.devices, strict=True):
                s = tel["static"]
                rec["link"] = {k: s.get(f"pcie_{k}") for k in ("gen", "width", "max_gen",
                                                                "max_width")}
                errors += [f"{rec['device']}: NVML {e}" for e in tel["errors"]]
        return aggregate
    finally:
        for w in workers:  # all leave at once: one slow to exit delays only itself
            w.stop()
        for w, rec in zip(workers, records, strict=True):
            w.close()
            if w.error:
                rec["error"] = w.error


def _public(result: dict | None) -> dict | None:
    return None if result is None else {k: result[k] for k in (
        "bytes", "copies", "seconds", "gbps", "stream_gbps") if k in result}


def _aggregate(results: list[dict]) -> dict | None:
    if not results:
        return None
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    moved = sum(r["bytes"] for r in results)
    return {"bytes": moved, "seconds": round(span, 6), "gpus": len(results),
            "gbps": round(moved / span / 1e9, 4) if span > 0 else 0.0}


def main() -> int:
    if "-h" in sys.argv or "--help" in sys.argv:
        print(__doc__)
        return 0
    if "--worker" in sys.argv:
        return worker(int(sys.argv[sys.argv.index("--worker") + 1]))  # probelib.finish
    payload = probelib.read_payload()
    probelib.watch_controller(payload, PROBE)
    settings = payload.get("settings", {})
    devs, problem = probelib.node_devices(payload)
    node = {"hostname": os.uname()[1]}
    if problem:
        log(problem)
        probelib.emit(PROBE, node, [], {}, [problem])
        return 0
    if not devs[0].gpu:
        why = "no GPU on this node: there is no host-to-GPU path to measure"
        log(why)
        probelib.emit(PROBE, node, [], {"applies": False}, [why])
        return 0
    log(f"{len(devs)} GPU(s): {', '.join(d.label for d in devs)}; settings {settings}")
    started = time.time()
    records = [d.describe() for d in devs]
    errors: list[str] = []
    aggregate = run(devs, payload, settings, records, errors)
    errors += [r["error"] for r in records if "error" in r]
    probelib.emit(PROBE, node, records, {"aggregate": aggregate, "gpus": len(devs),
                                         "directions": list(DIRECTIONS),
                                         "seconds": float(settings.get("seconds", 1.0)),
                                         "elapsed_s": round(time.time() - started, 3)},
                  errors)
    return 0


if __name__ == "__main__":
    probelib.finish(main())
