#!/usr/bin/env python3
"""burnin collectives probe: the collectives beside all-reduce that a fleet's jobs use,
measured as nccl-tests measures them.

Runs ON a node. Starts one rank process per GPU (NCCL), or `ranks` processes on a CPU
node (gloo, one per CPU device where the node has several), in the node's own group or,
when the controller says so, in a group across nodes (`group`, one rank per device of
each node), as probes/allreduce.py does: its rank layout, rendezvous and rank processes
(allreduce.node_ranks). Every rank reports the sweeps (their times are reduced over the
group), so that every node of a group across nodes says what the group did. For each operation
and size: the result is checked exactly (small integers in fp32), then back-to-back
iterations after a warm-up are timed; the time is the mean across ranks (nccl-tests'
default); algbw = size / time, busbw = algbw x the operation's factor, decimal GB/s.

Sizes and factors as nccl-tests' doc/PERFORMANCE.md defines them (n ranks):
  all_gather      size = the gathered (output) buffer       busbw = algbw x (n-1)/n
  reduce_scatter  size = the (input) buffer reduced         busbw = algbw x (n-1)/n
  all_to_all      size = each rank's buffer                 busbw = algbw x (n-1)/n
  send_recv       size = what each rank sends (a ring:      busbw = algbw
                  rank r to r+1, from r-1)
FSDP and ZeRO lean on all-gather and reduce-scatter, mixture-of-experts on all-to-all,
pipeline parallelism on send/recv: a node whose all-reduce is whole may still be slow at
these.

    echo '{"gpus": 0, "settings": {"max_bytes": 1048576}}' | python3 probes/collectives.py

Settings: min_bytes, max_bytes (defaults 16 MiB to 1 GiB on GPUs, 256 KiB to 1 MiB on
CPUs), warmup (3), seconds_per_size (0.05), ranks (CPU, 2), rendezvous_timeout_s (60).

FOR THE PROJECT'S TESTS ONLY, in the payload's test_hooks (probelib.test_hooks: never sent
by the controller): slow = {"op": name, "rank": r, "delay_s": s}: this node's rank r (its r-th
rank process, whatever its place in a group across nodes) sleeps s seconds after each
timed iteration of that operation (a slow link that only one collective crosses).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import warnings

import allreduce
import probelib

PROBE = "collectives"
OPS = ("all_gather", "reduce_scatter", "all_to_all", "send_recv")
BASE_MOD = 61  # inputs are index mod 61 plus the rank (reduce-scatter: the rank mod 64)
# reduce-scatter's inputs are all-reduce's (probes/allreduce.py: max_sum), whose every sum
# stays exact in fp32 up to its MAX_WORLD; the others move values below 2**24 unchanged.
MAX_WORLD = allreduce.MAX_WORLD


def factor(op: str, world: int) -> float:
    """busbw / algbw for `op` over `world` ranks (nccl-tests' doc/PERFORMANCE.md)."""
    return 1.0 if op == "send_recv" else (world - 1) / world


def sizes(settings: dict, gpu: bool, world: int) -> list[int]:
    """The sweep: powers of two from min_bytes to max_bytes, each a whole number of fp32
    elements per rank."""
    lo = int(settings.get("min_bytes") or (16 << 20 if gpu else 256 << 10))
    hi = int(settings.get("max_bytes") or (1 << 30 if gpu else 1 << 20))
    out, s = [], lo
    while s <= hi:
        out.append(max(4 * world, s // (4 * world) * 4 * world))
        s *= 2
    return out


def worker() -> int:
    ordinal = os.environ.get("BURNIN_CUDA_ORDINAL")
    record = measure(json.loads(os.environ["BURNIN_SETTINGS"]), int(os.environ["RANK"]),
                     int(os.environ["WORLD_SIZE"]), None if ordinal is None else int(ordinal),
                     os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"],
                     int(os.environ.get("LOCAL_RANK", os.environ["RANK"])))
    print(json.dumps(record), flush=True)
    return 0


def _op(dist, op: str, rank: int, world: int, bufs: dict):
    """One call of `op` on the rank's buffers: returns nothing, leaves bufs['out'] filled."""
    if op == "all_gather":
        dist.all_gather_into_tensor(bufs["out"], bufs["in"])
    elif op == "reduce_scatter":
        dist.reduce_scatter_tensor(bufs["out"], bufs["in"])
    elif op == "all_to_all":
        dist.all_to_all_single(bufs["out"], bufs["in"])
    else:
        for req in dist.batch_isend_irecv([
                dist.P2POp(dist.isend, bufs["in"], (rank + 1) % world),
                dist.P2POp(dist.irecv, bufs["out"], (rank - 1) % world)]):
            req.wait()


def buffers(torch, op: str, nbytes: int, rank: int, world: int, dev) -> tuple[dict, object]:
    """The rank's input and output for `op` at `nbytes`, and the exact output expected."""
    n = nbytes // 4
    chunk = n // world
    if op == "all_gather":  # each rank gives one chunk; chunk k comes from rank k
        base = (torch.arange(chunk, device=dev) % BASE_MOD).float()
        want = torch.cat([base + k for k in range(world)])
        return {"in": base + rank, "out": torch.empty(n, device=dev)}, want
    base = (torch.arange(n, device=dev) % BASE_MOD).float()
    if op == "reduce_scatter":  # the sum of every rank's input, this rank's chunk of it
        total = allreduce.offsets_sum(world)
        want = base[rank * chunk:(rank + 1) * chunk] * world + total
        return {"in": base + rank % allreduce.VALUE_MOD, "out": torch.empty(chunk, device=dev)
                }, want
    if op == "all_to_all":  # chunk k of the output is rank k's chunk `rank`
        mine = base[rank * chunk:(rank + 1) * chunk]
        want = torch.cat([mine + k for k in range(world)])
        return {"in": base + rank, "out": torch.empty(n, device=dev)}, want
    return ({"in": base + rank, "out": torch.empty(n, device=dev)},
            base + (rank - 1) % world)


def measure(settings: dict, rank: int, world: int, ordinal: int | None, master_addr: str,
            master_port, local: int | None = None) -> dict:
    """One rank (`local`: its place among this node's ranks): join the group, sweep
    every operation; its record carries the sweeps."""
    warnings.filterwarnings("ignore", category=FutureWarning)  # renamed collectives
    import torch
    import torch.distributed as dist
    dev, sync = allreduce.join_group(settings, rank, world, ordinal, master_addr, master_port)
    gpu = ordinal is not None
    slow = settings.get("test_slow") or {}
    sweeps, wrong_total = {}, 0
    for op in OPS:
        results = []
        delay = float(slow.get("delay_s", 0)) if slow.get("op") == op and \
            int(slow.get("rank", -1)) == (rank if local is None else local) else 0.0
        for nbytes in sizes(settings, gpu, world):
            bufs, want = buffers(torch, op, nbytes, rank, world, dev)
            _op(dist, op, rank, world, bufs)
            wrong = int((bufs["out"] != want).sum())
            wrong_total += wrong
            iters, mine = allreduce.timed_collective(
                lambda o=op, b=bufs: _op(dist, o, rank, world, b), torch, dist, dev, sync,
                int(settings.get("warmup", 3)), float(settings.get("seconds_per_size", 0.05)),
                delay)
            mean = torch.tensor([mine], device=dev, dtype=torch.float64)
            dist.all_reduce(mean)  # nccl-tests' default: the time averaged over ranks
            seconds = mean.item() / world
            algbw = nbytes / seconds / 1e9
            results.append({"bytes": nbytes, "iters": iters,
                            "time_us": round(seconds * 1e6, 2),
                            "algbw_gbps": round(algbw, 4),
                            "busbw_gbps": round(algbw * factor(op, world), 4),
                            "wrong_elements": wrong})
        sweeps[op] = results
    dist.destroy_process_group()
    return {"rank": rank, "host": socket.gethostname(), "device": str(dev),
            "wrong_elements": wrong_total, "ops": sweeps, "backend": "nccl" if gpu else "gloo"}


def main() -> int:
    if "--worker" in sys.argv:
        return worker()
    payload = probelib.start(__doc__, PROBE)
    if payload is None:
        return 0
    settings = {**payload.get("settings", {}), "gpus": payload.get("gpus")}
    slow = probelib.test_hooks(payload).get("slow")
    if slow:
        settings["test_slow"] = slow
    node = {"hostname": socket.gethostname()}
    return allreduce.node_ranks(PROBE, __file__, payload, settings, node, MAX_WORLD, "ops")


if __name__ == "__main__":
    probelib.finish(main())
