#!/usr/bin/env python3
"""burnin gpupairs probe: the copy bandwidth between every pair of GPUs in a node, both
directions, on the copy engines.

Runs ON a node. For every ordered pair (src, dst) of the node's GPUs, one at a time:
`block_mb` bytes copied from src's memory into dst's, back to back, for `seconds` (in
`rounds`, the best one reported) after a warm-up, issued on a stream of the source GPU;
torch turns peer access on where CUDA allows it, and its device-to-device copy is then CUDA's
cudaMemcpyPeerAsync, which the copy engines carry, as nvbandwidth's
device_to_device_memcpy_write_ce test measures it (nvbandwidth's testcases: the
`*_memcpy_*_ce` family uses the copy engines, the `*_memcpy_*_sm` family kernels). Timed
with CUDA events on that stream; GB/s decimal, one direction at a time (src to dst and
dst to src are two figures). An all-reduce over eight GPUs hides one bad NVLink between
two of them; this names it.

The link each pair crosses is read from NVML where it says: the NVLinks of src whose
remote end is dst's PCI bus id ("NVLink x18"), else the PCIe topology level of their
common ancestor ("PCIe, same switch"), else "unknown".

    echo '{"settings": {"block_mb": 64}}' | python3 probes/gpupairs.py

Settings: block_mb (256), seconds (per pair and direction, 0.2, split over `rounds`: 3,
each round taken over every pair in turn, each pair's best round reported: a hiccup of
the host spans a moment, not a pair's every round), min_copies (3, per round). A node of one GPU has
no pair: the probe says so. A CPU-only node has none either (the check is not run there).

FOR THE PROJECT'S TESTS ONLY, in the payload's test_hooks (probelib.test_hooks: never sent
by the controller): slow_pair = {"src": i, "dst": j, "delay_s": s}: the copy from GPU i to
GPU j waits s seconds more each time (a degraded link, in one direction); corrupt_pair =
[i, j]: the first byte GPU j received from GPU i is overwritten (a copy that arrives wrong).
"""

from __future__ import annotations

import math
import socket
import time

import probelib

PROBE = "gpupairs"
# nvml.h's nvmlGpuTopologyLevel_t: the closest common ancestor of two GPUs.
LEVELS = {0: "PCIe, same board", 10: "PCIe, same switch", 20: "PCIe, through switches",
          30: "PCIe, same host bridge", 40: "PCIe, same NUMA node", 50: "across sockets"}


def log(msg: str) -> None:
    probelib.log(PROBE, msg)


def links(devs: list[probelib.Device]) -> dict[tuple[int, int], str]:
    """{(i, j): the link between GPUs i and j as NVML tells it}; {} where NVML cannot."""
    try:
        import pynvml as nv
        nv.nvmlInit()
    except Exception:
        return {}
    out: dict[tuple[int, int], str] = {}
    try:
        handles = {d.index: nv.nvmlDeviceGetHandleByUUID(d.uuid) for d in devs if d.uuid}
        bus = {i: probelib._text(nv.nvmlDeviceGetPciInfo(h).busId).upper()
               for i, h in handles.items()}
        for i, h in handles.items():
            peers: dict[int, int] = {}
            for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
                try:
                    if nv.nvmlDeviceGetNvLinkState(h, link) != nv.NVML_FEATURE_ENABLED:
                        continue
                    remote = probelib._text(
                        nv.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId).upper()
                except Exception:
                    continue
                for j, b in bus.items():
                    if b == remote and j != i:
                        peers[j] = peers.get(j, 0) + 1
            for j, hj in handles.items():
                if j == i:
                    continue
                if peers.get(j):
                    out[(i, j)] = f"NVLink x{peers[j]}"
                    continue
                try:
                    level = nv.nvmlDeviceGetTopologyCommonAncestor(h, hj)
                    out[(i, j)] = LEVELS.get(int(level), f"PCIe, topology level {level}")
                except Exception:
                    pass
    except Exception as e:  # the figures stand without the link's name
        log(f"NVML could not name the links: {type(e).__name__}: {e}")
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass
    return out


class Pair:
    """One direction of one pair: src's buffer copied into dst's, back to back."""

    def __init__(self, torch, src, dst, d_src, d_dst, delay: float):
        self.torch, self.src, self.dst, self.d_src, self.d_dst = torch, src, dst, d_src, d_dst
        self.delay, self.count, self.best = delay, 0, math.inf
        self.cuda = src.device.type == "cuda"
        self.stream = torch.cuda.Stream(src.device) if self.cuda else None

    def copies(self, count: int) -> float:
        """Seconds for `count` copies: CUDA events on the source's stream, or the host
        clock where an emulated GPU copies on the CPU."""
        torch = self.torch
        if self.cuda:
            with torch.cuda.stream(self.stream):
                begin = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                begin.record(self.stream)
                for _ in range(count):
                    self.dst.copy_(self.src, non_blocking=True)
                end.record(self.stream)
            end.synchronize()
            return begin.elapsed_time(end) / 1e3 + self.delay * count
        start = time.perf_counter()
        for _ in range(count):
            self.dst.copy_(self.src)
            if self.delay:
                time.sleep(self.delay)
        return time.perf_counter() - start

    def prepare(self, settings: dict, rounds: int) -> None:
        """Warm up (peer mappings, clocks) and size a round."""
        self.copies(2)
        one = max(self.copies(1), 1e-6)
        self.count = min(10_000, max(int(settings.get("min_copies", 3)),
                                     int(float(settings.get("seconds", 0.2)) / rounds / one)))

    def round(self) -> None:
        self.best = min(self.best, self.copies(self.count))

    def record(self, rounds: int) -> dict:
        nbytes = self.src.numel() * self.src.element_size()
        return {"src": self.d_src.label, "dst": self.d_dst.label, "bytes": nbytes,
                "copies": self.count, "rounds": rounds,
                "gbps": probelib.sig(nbytes * self.count / self.best / 1e9)}


def copy_every_pair(torch, devs: list, bufs: dict, settings: dict, rounds: int,
                    hooks: dict) -> tuple[dict, set, list[str]]:
    """Round 0 sizes each ordered pair's copy; then every pair copies in each round and
    what arrives is checked. A pair that fails is said and left out; the others go on."""
    slow = hooks.get("slow_pair") or {}
    corrupt = tuple(hooks.get("corrupt_pair") or ())
    pairs: dict[tuple[int, int], Pair] = {}
    errors: list[str] = []
    failed: set[tuple[int, int]] = set()
    for r in range(rounds + 1):  # round 0 sizes each pair; then every pair in each round
        for a in devs:
            for b in devs:
                key = (a.index, b.index)
                if a.index == b.index or key in failed:
                    continue
                try:
                    if r == 0:
                        delay = float(slow.get("delay_s", 0)) \
                            if (slow.get("src"), slow.get("dst")) == key else 0.0
                        pairs[key] = Pair(torch, bufs[a.index], bufs[b.index], a, b, delay)
                        pairs[key].prepare(settings, rounds)
                    else:
                        bufs[a.index].fill_(a.index)  # what b must hold after the copies
                        bufs[b.index].fill_(b.index)
                        pairs[key].round()
                        if key == corrupt:
                            bufs[b.index][0] = 255
                        if not bool((bufs[b.index][:4096] == a.index).all()):
                            raise RuntimeError("the copy arrived wrong")
                except Exception as e:  # this pair could not copy: said, the others go on
                    errors.append(f"{a.label} -> {b.label}: {type(e).__name__}: "
                                  f"{str(e)[:300]}")
                    failed.add(key)
    return pairs, failed, errors


def main() -> int:
    payload = probelib.start(__doc__, PROBE)
    if payload is None:
        return 0
    settings = payload.get("settings", {})
    node = {"hostname": socket.gethostname()}
    devs, problem = probelib.node_devices(payload)
    if problem:
        probelib.emit(PROBE, node, [], {}, [problem])
        return 0
    if not devs or not devs[0].gpu:
        probelib.emit(PROBE, node, [], {"pairs": [], "why": "a CPU-only node has no GPU "
                                        "pair"}, [])
        return 0
    import torch
    described = [d.describe() for d in devs]
    named = links(devs)
    block = int(settings.get("block_mb", 256)) << 20
    bufs = {}
    for d in devs:
        dev = torch.device("cuda", d.ordinal) if d.kind == "cuda" else torch.device("cpu")
        # torch turns peer access on at the first copy between two GPUs that allow it
        # (ATen's get_p2p_access): the copy is then peer to peer, on the copy engines.
        bufs[d.index] = torch.empty(block, dtype=torch.uint8, device=dev).fill_(d.index)
    rounds = max(1, int(settings.get("rounds", 3)))
    pairs, failed, errors = copy_every_pair(torch, devs, bufs, settings, rounds,
                                            probelib.test_hooks(payload))
    out = []
    for key, pair in pairs.items():
        if key in failed:
            continue
        figures = {**pair.record(rounds), "link": named.get(key, "unknown")}
        out.append(figures)
        log(f"{figures['src']} -> {figures['dst']}: {figures['gbps']} GB/s ({figures['link']})")
    probelib.emit(PROBE, node, described, {"pairs": out, "block_bytes": block}, errors)
    return 0


if __name__ == "__main__":
    probelib.finish(main())
