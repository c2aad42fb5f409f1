#!/usr/bin/env python3
"""burnin allreduce probe: all-reduce bus bandwidth, measured as nccl-tests measures it.

Runs ON a node. Starts one rank process per GPU (NCCL), or `ranks` processes on a CPU
node (gloo), and joins a group: the node's own (intra-node, by default) or, when the
controller says so, a group across nodes (`group`: world size, this node's first rank,
master address and port). For each size: the result is checked exactly (integer-valued
fp32 inputs whose sums are exact), then back-to-back iterations after a warm-up are
timed; the time is the maximum across ranks; algbw = bytes / time, busbw = algbw x
2(n-1)/n, decimal GB/s. The rank 0 process reports the sweep.

    echo '{"settings": {"max_bytes": 16777216}}' | python3 probes/allreduce.py

Settings: min_bytes, max_bytes (defaults 1 MiB to 1 GiB on GPUs, 64 KiB to 16 MiB on
CPUs), warmup (5), seconds_per_size (0.3, sets the iterations, at least 3),
ranks (CPU intra-node, 2), rendezvous_timeout_s (60).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import socket
import subprocess
import sys
import time

PROBE = "allreduce"
SCHEMA = 1


def log(msg: str) -> None:
    print(f"[{PROBE}] {msg}", file=sys.stderr, flush=True)


def sizes(settings: dict, gpu: bool) -> list[int]:
    lo = int(settings.get("min_bytes") or (1 << 20 if gpu else 64 << 10))
    hi = int(settings.get("max_bytes") or (1 << 30 if gpu else 16 << 20))
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 2
    return out


def worker() -> int:
    """One rank: join the group, sweep the sizes, print one JSON line."""
    import torch
    import torch.distributed as dist
    settings = json.loads(os.environ["BURNIN_SETTINGS"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    gpu = torch.cuda.is_available() and settings.get("gpus") != 0
    dev = torch.device("cuda", local) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(dev)
    timeout = datetime.timedelta(seconds=float(settings.get("rendezvous_timeout_s", 60)))
    dist.init_process_group("nccl" if gpu else "gloo", rank=rank, world_size=world,
                            timeout=timeout, init_method=
                            f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    results, wrong_total = [], 0
    for nbytes in sizes(settings, gpu):
        n = nbytes // 4
        base = (torch.arange(n, device=dev) % 251).float()
        buf = base + rank
        dist.all_reduce(buf)
        expected = base * world + world * (world - 1) / 2
        wrong = int((buf != expected).sum())
        wrong_total += wrong
        for _ in range(int(settings.get("warmup", 5))):
            dist.all_reduce(buf)
        sync()
        t = time.perf_counter()
        dist.all_reduce(buf)
        sync()
        guess = torch.tensor([time.perf_counter() - t], device=dev, dtype=torch.float64)
        dist.all_reduce(guess, op=dist.ReduceOp.MAX)  # every rank runs the same count
        iters = max(3, min(1000, math.ceil(float(settings.get("seconds_per_size", 0.3))
                                           / max(guess.item(), 1e-6))))
        dist.barrier()
        sync()
        t = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        sync()
        took = torch.tensor([(time.perf_counter() - t) / iters], device=dev,
                            dtype=torch.float64)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        seconds = took.item()
        algbw = nbytes / seconds / 1e9
        results.append({"bytes": nbytes, "iters": iters, "time_us": round(seconds * 1e6, 2),
                        "algbw_gbps": round(algbw, 4),
                        "busbw_gbps": round(algbw * 2 * (world - 1) / world, 4),
                        "wrong_elements": wrong})
    dist.destroy_process_group()
    record = {"rank": rank, "host": socket.gethostname(), "device": str(dev),
              "wrong_elements": wrong_total}
    if rank == 0:
        record["sweep"] = results
        record["backend"] = "nccl" if gpu else "gloo"
        record["world"] = world
    print(json.dumps(record), flush=True)
    return 0


def local_ranks(payload: dict) -> int:
    settings = payload.get("settings", {})
    try:
        import torch
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        count = 0
    if payload.get("gpus") == 0 or count == 0:
        return 1 if payload.get("group") else int(settings.get("ranks", 2))
    return count if payload.get("gpus") is None else min(count, payload["gpus"])


def hello(group: dict, me: str, timeout_s: float) -> list[str]:
    """Meet the other nodes before torch does, so that one that never comes is named.

    The master node listens on master_port + 1 until every node has said its name, or
    the timeout; it answers each 'go' or 'abort'. Returns the problems seen ([] = go).
    """
    addr, port = group["master_addr"], int(group["master_port"]) + 1
    expected = set(group.get("nodes", [])) - {me}
    deadline = time.monotonic() + timeout_s
    if group.get("rank_offset", 0) == 0:
        seen, conns = set(), []
        with socket.socket() as srv:
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind(("", port))
            srv.listen(256)
            while seen < expected and time.monotonic() < deadline:
                srv.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    conn, _ = srv.accept()
                except OSError:
                    break
                conn.settimeout(5)
                try:
                    seen.add(conn.makefile().readline().strip())
                    conns.append(conn)
                except OSError:
                    conn.close()
            missing = sorted(expected - seen)
            for conn in conns:
                try:
                    conn.sendall(b"abort\n" if missing else b"go\n")
                finally:
                    conn.close()
        return [f"did not join the rendezvous: {', '.join(missing)}"] if missing else []
    while True:
        try:
            with socket.create_connection((addr, port), timeout=5) as conn:
                conn.sendall(f"{me}\n".encode())
                conn.settimeout(max(1.0, deadline - time.monotonic() + 5))
                answer = conn.makefile().readline().strip()
            return [] if answer == "go" else ["the rendezvous master aborted: another node "
                                              "did not join"]
        except OSError:
            if time.monotonic() > deadline:
                return [f"cannot reach the rendezvous master at {addr}:{port}"]
            time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    if "--worker" in sys.argv:
        return worker()
    if "-h" in sys.argv or "--help" in sys.argv:
        print(__doc__)
        return 0
    text = "" if sys.stdin.isatty() else sys.stdin.read()
    payload = json.loads(text) if text.strip() else {}
    settings = {**payload.get("settings", {}), "gpus": payload.get("gpus")}
    group = payload.get("group") or {}
    count = local_ranks(payload)
    world = group.get("world", count)
    first = group.get("rank_offset", 0)
    env_common = {"WORLD_SIZE": str(world), "BURNIN_SETTINGS": json.dumps(settings),
                  "MASTER_ADDR": group.get("master_addr", "127.0.0.1"),
                  "MASTER_PORT": str(group.get("master_port") or free_port())}
    log(f"ranks {first}..{first + count - 1} of {world}, master "
        f"{env_common['MASTER_ADDR']}:{env_common['MASTER_PORT']}")
    figures = {"world": world, "ranks_here": count, "first_rank": first,
               "mode": "inter-node" if group else "intra-node"}
    if group:
        problems = hello(group, payload.get("node", ""),
                         float(settings.get("rendezvous_timeout_s", 60)))
        if problems:
            print(json.dumps({"probe": PROBE, "schema": SCHEMA,
                              "node": {"hostname": socket.gethostname()}, "devices": [],
                              "figures": {**figures, "joined": False}, "errors": problems}))
            return 0
    procs = [subprocess.Popen([sys.executable, __file__, "--worker"], stdout=subprocess.PIPE,
                              env={**os.environ, **env_common, "RANK": str(first + i),
                                   "LOCAL_RANK": str(i)})
             for i in range(count)]
    records, errors = [], []
    for i, p in enumerate(procs):
        out, _ = p.communicate()
        lines = [ln for ln in out.decode(errors="replace").splitlines() if ln.startswith("{")]
        if p.returncode != 0 or not lines:
            errors.append(f"rank {first + i} exited with status {p.returncode} without a "
                          "result (see stderr: did every node join the rendezvous?)")
            continue
        records.append(json.loads(lines[-1]))
    for r in records:
        if "sweep" in r:
            figures.update(sweep=r.pop("sweep"), backend=r.pop("backend"))
    print(json.dumps({"probe": PROBE, "schema": SCHEMA, "node": {"hostname": socket.gethostname()},
                      "devices": records, "figures": figures, "errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
