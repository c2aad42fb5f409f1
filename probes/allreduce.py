#!/usr/bin/env python3
"""burnin allreduce probe: all-reduce bus bandwidth, measured as nccl-tests measures it.

Runs ON a node. Starts one rank process per GPU (NCCL), or `ranks` processes on a CPU
node (gloo), and joins a group: the node's own (intra-node, by default) or, when the
controller says so, a group across nodes (`group`: world size, this node's first rank,
master address and port). Under a launcher that starts one task per GPU itself (a Slurm
step, `group.per_task`), this process is one rank: the node's first rank plus
SLURM_LOCALID, on the node's device of that index, and it reports that rank alone.

For each size: the result is checked exactly (integer-valued fp32 inputs whose sums are
exact), then back-to-back iterations after a warm-up are timed; the time is the mean
across ranks, as nccl-tests reports it by default (the slowest rank's is recorded beside
it); algbw = bytes / time, busbw = algbw x 2(n-1)/n, decimal GB/s. Every node reports
the sweep (in a group across nodes too: the controller takes the lowest).

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

import probelib

PROBE = "allreduce"
# Each rank contributes base + (rank mod VALUE_MOD) per element, base = index mod BASE_MOD:
# every partial sum of any reduction order is an integer below EXACT (2**24), so fp32
# holds it exactly, for any world up to MAX_WORLD ranks (see max_sum()).
VALUE_MOD, BASE_MOD, EXACT, MAX_WORLD = 64, 61, 1 << 24, 100_000


def log(msg: str) -> None:
    probelib.log(PROBE, msg)


def offsets_sum(world: int) -> int:
    """sum(rank % VALUE_MOD for rank in range(world)), in closed form."""
    q, r = divmod(world, VALUE_MOD)
    return q * (VALUE_MOD * (VALUE_MOD - 1) // 2) + r * (r - 1) // 2


def max_sum(world: int) -> int:
    """The largest element of a world's exact result (every partial sum is below it)."""
    return world * (BASE_MOD - 1) + offsets_sum(world)


def sizes(settings: dict, gpu: bool) -> list[int]:
    lo = int(settings.get("min_bytes") or (1 << 20 if gpu else 64 << 10))
    hi = int(settings.get("max_bytes") or (1 << 30 if gpu else 16 << 20))
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 2
    return out


def worker() -> int:
    """One rank process: join the group, sweep the sizes, print one JSON line."""
    ordinal = os.environ.get("BURNIN_CUDA_ORDINAL")
    record = measure(json.loads(os.environ["BURNIN_SETTINGS"]), int(os.environ["RANK"]),
                     int(os.environ["WORLD_SIZE"]), None if ordinal is None else int(ordinal),
                     os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
    print(json.dumps(record), flush=True)
    return 0


def join_group(settings: dict, rank: int, world: int, ordinal: int | None,
               master_addr: str, master_port):
    """Join the process group (NCCL on the GPU `ordinal`, gloo on the CPU), bounded by
    `rendezvous_timeout_s`; (the device, its synchronize). Callers import torch and
    torch.distributed themselves, where test_api_drift reads what they call of them."""
    import torch
    import torch.distributed as dist
    gpu = ordinal is not None
    dev = torch.device("cuda", ordinal) if gpu else torch.device("cpu")
    timeout = datetime.timedelta(seconds=float(settings.get("rendezvous_timeout_s", 60)))
    init = f"tcp://{master_addr}:{master_port}"
    if gpu:
        torch.cuda.set_device(dev)
        # device_id makes NCCL's communicator eager: a hang in NCCL's own start-up is
        # then bounded by `timeout`, not only the first collective.
        dist.init_process_group("nccl", rank=rank, world_size=world, timeout=timeout,
                                init_method=init, device_id=dev)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout,
                                init_method=init)
    return dev, (torch.cuda.synchronize if gpu else (lambda: None))


def timed_collective(op, torch, dist, dev, sync, warmup: int, seconds: float,
                     pause: float = 0.0) -> tuple[int, float]:
    """Time one collective as nccl-tests does: `warmup` calls, one timed to size the count
    (the same on every rank: the slowest rank's guess), a barrier, then that many in a row;
    (the count, this rank's seconds per call). `pause` sleeps after each timed call (a
    test's slowed rank)."""
    for _ in range(warmup):
        op()
    sync()
    t = time.perf_counter()
    op()
    sync()
    guess = torch.tensor([time.perf_counter() - t], device=dev, dtype=torch.float64)
    dist.all_reduce(guess, op=dist.ReduceOp.MAX)  # every rank runs the same count
    iters = max(3, min(1000, math.ceil(seconds / max(guess.item(), 1e-6))))
    dist.barrier()
    sync()
    t = time.perf_counter()
    for _ in range(iters):
        op()
        if pause:
            time.sleep(pause)
    sync()
    return iters, (time.perf_counter() - t) / iters


def measure(settings: dict, rank: int, world: int, ordinal: int | None, master_addr: str,
            master_port) -> dict:
    """One rank: join the group, sweep the sizes; its record carries the sweep."""
    import torch
    import torch.distributed as dist
    dev, sync = join_group(settings, rank, world, ordinal, master_addr, master_port)
    gpu = ordinal is not None
    results, wrong_total = [], 0
    for nbytes in sizes(settings, gpu):
        n = nbytes // 4
        base = (torch.arange(n, device=dev) % BASE_MOD).float()
        buf = base + (rank % VALUE_MOD)
        dist.all_reduce(buf)
        expected = base * world + offsets_sum(world)
        wrong = int((buf != expected).sum())
        wrong_total += wrong
        iters, mine = timed_collective(lambda b=buf: dist.all_reduce(b), torch, dist, dev,
                                       sync, int(settings.get("warmup", 5)),
                                       float(settings.get("seconds_per_size", 0.3)))
        mean = torch.tensor([mine], device=dev, dtype=torch.float64)
        slowest = mean.clone()
        dist.all_reduce(mean)  # nccl-tests' default: the time averaged over ranks
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        seconds = mean.item() / world
        algbw = nbytes / seconds / 1e9
        results.append({"bytes": nbytes, "iters": iters, "time_us": round(seconds * 1e6, 2),
                        "time_max_us": round(slowest.item() * 1e6, 2),
                        "algbw_gbps": round(algbw, 4),
                        "busbw_gbps": round(algbw * 2 * (world - 1) / world, 4),
                        "wrong_elements": wrong})
    dist.destroy_process_group()
    # Every rank's record carries the sweep (its times are reduced over every rank): each
    # node of an inter-node group reports it, and the controller takes the lowest, never
    # one node's word for the group's.
    record = {"rank": rank, "host": socket.gethostname(), "device": str(dev),
              "wrong_elements": wrong_total, "sweep": results,
              "backend": "nccl" if gpu else "gloo"}
    if rank == 0:
        record["world"] = world
    return record


def rank_devices(payload: dict, devs: list[probelib.Device]) -> list[probelib.Device | None]:
    """The device of each rank this node starts: one per GPU; on a CPU node one per CPU
    device when it has several, else `ranks` (intra-node) or one (in a group) CPU ranks.
    In a group the controller says how many ranks each node starts (ranks_here)."""
    group = payload.get("group") or {}
    if devs and devs[0].gpu:
        return list(devs[:group.get("ranks_here", len(devs))])
    count = len(devs) if len(devs) > 1 else int(payload.get("settings", {}).get("ranks", 2))
    return [None] * int(group.get("ranks_here", count))


def hello(group: dict, me: str, timeout_s: float, ready: bool = True,
          master: bool | None = None) -> list[str]:
    """Meet the other nodes before torch does, so that the group ends at once when one
    node cannot take part, rather than at torch's timeout.

    The master listens on master_port + 1 until every node has said its name (and
    whether it is ready), or the timeout; it answers each 'go', or 'abort' when a node is
    missing or not ready. Returns the problems seen ([] = go). What one node says about
    another is only logged and reported as its own view: the controller names culprits
    from what it observes itself. With one task per rank (`per_task`), every task says
    hello and the master waits for each node's `ranks` of them.
    """
    addr, port = group["master_addr"], int(group["master_port"]) + 1
    names = group.get("nodes", [])
    counts = group.get("ranks") if group.get("per_task") else None
    expected = dict(zip(names, counts or [1] * len(names), strict=True))
    expected[me] = expected.get(me, 1) - 1  # the master does not greet itself
    deadline = time.monotonic() + timeout_s
    if master if master is not None else group.get("rank_offset", 0) == 0:
        return greet_as_master(port, expected, deadline, ready)
    return greet_master(addr, port, me, ready, deadline)


def greet_as_master(port: int, expected: dict[str, int], deadline: float,
                    ready: bool) -> list[str]:
    """The master's side of hello: wait for every node's greetings (`expected`: how many
    of each), then answer each 'go', or 'abort' when one is missing or not ready."""
    seen, conns, unready = dict.fromkeys(expected, 0), [], set()
    with socket.socket() as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("", port))
        srv.listen(256)
        while any(seen[n] < want for n, want in expected.items()) and \
                time.monotonic() < deadline:
            srv.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                conn, _ = srv.accept()
            except OSError:
                break
            conn.settimeout(5)
            try:
                name, _, state = conn.makefile().readline().strip().partition(" ")
            except OSError:
                conn.close()
                continue
            seen[name] = seen.get(name, 0) + 1
            conns.append(conn)
            if state == "abort" or not ready:
                unready.add(name)
                break  # no group this time: tell everyone now
        missing = sorted(n for n, want in expected.items() if seen.get(n, 0) < want)
        go = ready and not missing and not unready
        for conn in conns:
            try:
                conn.sendall(b"go\n" if go else b"abort\n")
            finally:
                conn.close()
    if go:
        return []
    if not ready:
        return ["this node could not take part, so the group was aborted"]
    if unready:
        return [f"the group was aborted: {', '.join(sorted(unready))} said it could "
                "not take part"]
    return [f"did not join the rendezvous: {', '.join(missing)}"]


def greet_master(addr: str, port: int, me: str, ready: bool, deadline: float) -> list[str]:
    """A node's side of hello: say its name (and whether it is ready) to the master until
    it answers or the rendezvous ends."""
    while True:
        try:
            # A connection that hangs (its SYN dropped) ends with the rendezvous, not up to
            # 5 s after it: the group lasts as long as its slowest member's hello.
            wait = max(0.1, min(5.0, deadline - time.monotonic()))
            with socket.create_connection((addr, port), timeout=wait) as conn:
                conn.sendall(f"{me}{'' if ready else ' abort'}\n".encode())
                conn.settimeout(max(1.0, deadline - time.monotonic() + 5))
                answer = conn.makefile().readline().strip()
            if answer == "go":
                return []
            return ["this node could not take part"] if not ready else [
                "the rendezvous master aborted: another node did not join or was not ready"]
        except OSError:
            if time.monotonic() > deadline:
                return [f"cannot reach the rendezvous master at {addr}:{port}"]
            time.sleep(0.2)


def one_rank(payload: dict, settings: dict, group: dict, node: dict) -> int:
    """This task is one rank of an inter-node group whose tasks a launcher started (a
    Slurm step, one task per GPU): rank = the node's first rank + SLURM_LOCALID."""
    local = int(os.environ.get("SLURM_LOCALID", "0"))
    world, first = int(group["world"]), int(group.get("rank_offset", 0))
    rank = first + local
    devs, problem = probelib.node_devices(payload)
    ranks = rank_devices(payload, devs)
    figures = {"world": world, "ranks_here": 1, "first_rank": rank, "mode": "inter-node"}
    if not problem and len(ranks) != group.get("ranks_here", len(ranks)):
        problem = (f"the group gives this node {group['ranks_here']} ranks, one per GPU, but "
                   f"it has {len(devs)} GPUs")
    if not problem and local >= len(ranks):
        problem = f"task {local} of this node has no device of its own ({len(ranks)} ranks)"
    if not problem and world > MAX_WORLD:
        problem = f"a world of {world} ranks is beyond the {MAX_WORLD} whose sums stay exact"
    me, timeout_s = payload.get("node", ""), float(settings.get("rendezvous_timeout_s", 60))
    problems = [problem] if problem else []
    problems += hello(group, me, timeout_s, ready=not problem, master=rank == 0)
    if problems:
        log("; ".join(problems))
        probelib.emit(PROBE, node, [], {**figures, "joined": False}, problems)
        return 0
    d = ranks[local]
    log(f"rank {rank} of {world} (task {local} here), master "
        f"{group['master_addr']}:{group['master_port']}")
    try:
        record = measure(settings, rank, world, d.ordinal if d is not None and d.kind == "cuda"
                         else None, group["master_addr"], group["master_port"])
    except Exception as e:  # the group broke under this rank: its own report says so
        log(f"rank {rank}: {type(e).__name__}: {e}")
        probelib.emit(PROBE, node, [], figures, [f"rank {rank} failed: {type(e).__name__}: "
                                                 f"{str(e)[:500]}"])
        return 0
    for key in ("sweep", "backend"):
        if key in record:
            figures[key] = record.pop(key)
    record.pop("world", None)
    probelib.emit(PROBE, node, [record], figures, [])
    return 0


def run_ranks(script: str, ranks: list, env_common: dict, first: int, hint: str
              ) -> tuple[list[dict], list[str]]:
    """Start `script --worker` once per rank (global ranks from `first`), each on its device,
    and wait for them: each rank's last JSON line, and an error for a rank that exited
    without one (`hint` says where to look)."""
    procs = []
    for i, d in enumerate(ranks):
        env = {**os.environ, **env_common, "RANK": str(first + i), "LOCAL_RANK": str(i)}
        if d is not None and d.kind == "cuda":
            env["BURNIN_CUDA_ORDINAL"] = str(d.ordinal)
        procs.append(subprocess.Popen([sys.executable, script, "--worker"],
                                      stdout=subprocess.PIPE, env=env,
                                      preexec_fn=probelib.die_with_parent))
    records, errors = [], []
    for i, p in enumerate(procs):
        out, _ = p.communicate()
        lines = [ln for ln in out.decode(errors="replace").splitlines() if ln.startswith("{")]
        if p.returncode != 0 or not lines:
            errors.append(f"rank {first + i} exited with status {p.returncode} without a "
                          f"result ({hint})")
            continue
        records.append(json.loads(lines[-1]))
    return records, errors


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    if "--worker" in sys.argv:
        return worker()
    payload = probelib.start(__doc__, PROBE)
    if payload is None:
        return 0
    settings = {**payload.get("settings", {}), "gpus": payload.get("gpus")}
    group = payload.get("group") or {}
    node = {"hostname": socket.gethostname()}
    if group.get("per_task"):
        return one_rank(payload, settings, group, node)
    return node_ranks(PROBE, __file__, payload, settings, node, MAX_WORLD, "sweep")


def node_ranks(probe: str, script: str, payload: dict, settings: dict, node: dict,
               max_world: int, result: str) -> int:
    """This node's ranks of `script` (probes/<probe>.py), in its own group or in the
    controller's `group` across nodes: its rank layout, the hello with the other nodes,
    the rank processes; its document carries the first rank's `result` figure (every
    rank's times are reduced over the group: any rank's is the node's) and backend."""
    group = payload.get("group") or {}
    devs, problem = probelib.node_devices(payload)
    ranks = rank_devices(payload, devs)
    world = group.get("world", len(ranks))
    first = group.get("rank_offset", 0)
    figures = {"world": world, "ranks_here": len(ranks), "first_rank": first,
               "mode": "inter-node" if group else "intra-node"}
    if not problem and group and len(ranks) != group.get("ranks_here", len(ranks)):
        problem = (f"the group gives this node {group['ranks_here']} ranks, one per GPU, but "
                   f"it has {len(devs)} GPUs")
    if not problem and world > max_world:
        problem = f"a world of {world} ranks is beyond the {max_world} whose sums stay exact"
    if problem:
        # Still say hello (and that we cannot go on), so that the master ends the group
        # at once rather than at its rendezvous timeout.
        if group:
            hello(group, payload.get("node", ""),
                  float(settings.get("rendezvous_timeout_s", 60)), ready=False)
        probelib.log(probe, problem)
        probelib.emit(probe, node, [], {**figures, "joined": False, "unable": True},
                      [problem])
        return 0
    env_common = {"WORLD_SIZE": str(world), "BURNIN_SETTINGS": json.dumps(settings),
                  "MASTER_ADDR": group.get("master_addr", "127.0.0.1"),
                  "MASTER_PORT": str(group.get("master_port") or free_port())}
    probelib.log(probe, f"ranks {first}..{first + len(ranks) - 1} of {world}, master "
                        f"{env_common['MASTER_ADDR']}:{env_common['MASTER_PORT']}")
    if group:
        problems = hello(group, payload.get("node", ""),
                         float(settings.get("rendezvous_timeout_s", 60)))
        if problems:
            probelib.emit(probe, node, [], {**figures, "joined": False}, problems)
            return 0
    records, errors = run_ranks(script, ranks, env_common, first,
                                "see stderr: did every node join the rendezvous?")
    for r in records:  # every rank's figure: the node's first rank's in its figures
        found, backend = r.pop(result, None), r.pop("backend", None)
        if found is not None and result not in figures:
            figures.update({result: found, "backend": backend})
    probelib.emit(probe, node, records, figures, errors)
    return 0


if __name__ == "__main__":
    probelib.finish(main())
