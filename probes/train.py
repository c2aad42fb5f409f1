#!/usr/bin/env python3
"""burnin train probe: a real training job on every device of the node, data parallel,
whose replicas must agree bit for bit after every step.

Runs ON a node. Starts one rank process per GPU (NCCL, bf16 autocast), or one per CPU
device on a CPU node of several, or `ranks` on a CPU node of one (gloo; fp32 unless
`dtype: bf16`), and trains a small decoder-only transformer (traincore.py: built from
torch alone, synthetic tokens from a fixed seed, determinism pinned) for warmup_steps
plus steps timed steps. In a group across nodes (`group`, from the controller: world
size, this node's first rank, the rendezvous master's address and port) this node starts
one rank per device (`ranks_here`), as ranks rank_offset.., after meeting the other nodes
(allreduce.py's hello), and its ranks train one job with every other node's. Each rank
reports its step time (median and spread), the step's compute (forward and backward) and
communication (the gradients' all-reduce) time, its tokens/s, its model TFLOPS
(PaLM's 6N + 12 L H Q T FLOPs per token) and its own dense GEMM rate; every rank the
SHA-256 of its final parameters. The node figures: tokens/s, MFU over the measured GEMM
rate (the controller divides by a GPU model's datasheet peak as well), the loss curve,
and each step at which the replicas' parameters differed.

    echo '{"gpus": 0, "settings": {"steps": 10}}' | python3 probes/train.py

Settings (optional): steps (20), warmup_steps (3), dtype (bf16|fp32; bf16 on GPUs, fp32
on CPUs), ranks (CPU node of one device, 2), d_model, layers, heads, seq_len, vocab,
batch (per rank; default sized from the device), lr (3e-3), gemm_n, gemm_s (0.5),
rendezvous_timeout_s (60).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time

import probelib

PROBE = "train"
# A rank that fails leaves the others blocked in a collective: they are stopped this long
# after it, rather than at the process group's timeout.
PEER_GRACE_S = 10.0


def log(msg: str) -> None:
    probelib.log(PROBE, msg)


def worker() -> int:
    """One rank process: pin determinism, join the group, train, print one JSON line."""
    settings = json.loads(os.environ["BURNIN_SETTINGS"])
    threads = int(os.environ["BURNIN_THREADS"])
    import gemmcore  # torch, with what CUDA reads at its start set first (probelib)
    import torch
    import torch.distributed as dist
    import traincore

    torch.set_num_threads(threads)
    gemmcore.pin_determinism()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    ordinal = os.environ.get("BURNIN_CUDA_ORDINAL")
    dev = torch.device("cuda", int(ordinal)) if ordinal is not None else torch.device("cpu")
    timeout = datetime.timedelta(seconds=float(settings.get("rendezvous_timeout_s", 60)))
    init = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", rank=rank, world_size=world, timeout=timeout,
                                init_method=init, device_id=dev)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout,
                                init_method=init)
    record = traincore.train(settings, rank, world, dev, threads, os.environ["BURNIN_DTYPE"])
    record["torch"] = torch.__version__
    record["cuda"] = torch.version.cuda if dev.type == "cuda" else None
    dist.destroy_process_group()
    print(json.dumps(probelib.finite(record)), flush=True)
    return 0


def rank_devices(payload: dict, devs: list[probelib.Device]) -> list[probelib.Device]:
    """The device of each rank: one per GPU, one per CPU device where the node has several,
    `ranks` (2) sharing the CPU of a node of one."""
    if devs and devs[0].gpu or len(devs) > 1:
        return list(devs)
    return devs * int(payload.get("settings", {}).get("ranks", 2))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_all(procs: list[subprocess.Popen]) -> list[tuple[int, str]]:
    """(exit status, stdout) of every rank. Once one has failed, the rest get PEER_GRACE_S
    to finish before they are killed: they would wait in a collective for a dead peer.
    Each rank's stdout is read as it comes (a thread each), so that a rank whose result
    outgrows the pipe's buffer never blocks on it."""
    outs = [b""] * len(procs)

    def drain(i: int) -> None:
        outs[i] = procs[i].stdout.read()

    readers = [threading.Thread(target=drain, args=(i,), daemon=True)
               for i in range(len(procs))]
    for r in readers:
        r.start()
    failed_at = None
    # Every rank polled each turn: any() over a generator stopped at the first one still
    # running, so a later rank's failure went unseen until the earlier ranks ended (rank 0
    # blocked in a collective for a dead rank 1: the rendezvous timeout, not PEER_GRACE_S).
    while any([p.poll() is None for p in procs]):
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > PEER_GRACE_S:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.05)
    for r in readers:
        r.join(timeout=PEER_GRACE_S)  # the pipe closes with its process
    return [(p.returncode, out.decode(errors="replace")) for p, out in zip(procs, outs,
                                                                           strict=True)]


def node_figures(records: list[dict], ranks: list[probelib.Device], world: int) -> dict:
    """What the node's ranks say together: tokens/s over the timed steps' wall, model
    TFLOPS and MFU over their measured GEMM rate, and the job's identity (what must be
    the same for two nodes' final parameters to be the same bits)."""
    shared = records[0]["shared"]
    wall = max(r["wall_s"] for r in records)
    model = sum(r["model_tflops"] for r in records)
    gemm = sum(r["gemm_tflops"] for r in records)
    job = {"shape": shared["shape"], "steps": shared["steps"], "lr": shared["lr"],
           "warmup_steps": shared["warmup_steps"], "dtype": shared["dtype"], "world": world,
           "device": ranks[0].name, "threads": records[0]["threads"],
           "torch": records[0]["torch"], "cuda": records[0]["cuda"]}
    return {**{k: shared[k] for k in ("losses", "diverged", "checked_steps", "shape",
                                      "flops_per_token", "warmup_steps", "steps", "dtype")},
            "tokens_per_s": probelib.sig(sum(r["tokens"] for r in records) / wall)
            if wall else 0.0,
            "model_tflops": probelib.sig(model), "gemm_tflops": probelib.sig(gemm),
            "mfu": probelib.sig(model / gemm) if gemm else None,
            "mfu_basis": "measured GEMM", "wall_s": wall,
            "job": hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest(),
            "job_spec": job, "digest": records[0]["digest"]}


def launch_rank_workers(ranks: list, group: dict, settings: dict, dtype: str, world: int,
                        first: int) -> list[subprocess.Popen]:
    """One worker process per rank here, all told the same world and master."""
    on_cpu = sum(1 for d in ranks if d.kind != "cuda")
    cores = int(os.environ.get("OMP_NUM_THREADS") or 0) or os.cpu_count() or 1
    env_common = {"WORLD_SIZE": str(world), "BURNIN_SETTINGS": json.dumps(settings),
                  "BURNIN_DTYPE": dtype,
                  "MASTER_ADDR": str(group.get("master_addr", "127.0.0.1")),
                  "MASTER_PORT": str(group.get("master_port") or free_port()),
                  "BURNIN_THREADS": str(max(1, cores // on_cpu) if on_cpu else 1)}
    log(f"ranks {first}..{first + len(ranks) - 1} of {world}, {dtype}, master "
        f"{env_common['MASTER_ADDR']}:{env_common['MASTER_PORT']}")
    procs = []
    for i, d in enumerate(ranks):
        env = {**os.environ, **env_common, "RANK": str(first + i), "LOCAL_RANK": str(i)}
        if d.kind == "cuda":
            env["BURNIN_CUDA_ORDINAL"] = str(d.ordinal)
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker"],
                                      stdout=subprocess.PIPE, env=env,
                                      preexec_fn=probelib.die_with_parent))
    return procs


def collect_rank_records(procs: list[subprocess.Popen], ranks: list,
                         first: int) -> tuple[list[dict], list[str]]:
    """Each rank's record (its last JSON line), or why it gave none."""
    records, errors = [], []
    for i, (code, out) in enumerate(wait_all(procs)):
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if code != 0 or not lines:
            errors.append(f"rank {first + i} ({ranks[i].label}) exited with status {code} "
                          "without a result (see stderr)")
            continue
        record = json.loads(lines[-1])
        records.append({**ranks[i].describe(), **record})
    return records, errors


def main() -> int:
    if "--worker" in sys.argv:
        return worker()
    payload = probelib.start(__doc__, PROBE)
    if payload is None:
        return 0
    settings = dict(payload.get("settings", {}))
    node = {"hostname": socket.gethostname()}
    devs, problem = probelib.node_devices(payload)
    group = payload.get("group") or {}
    if problem and not group:
        log(problem)
        probelib.emit(PROBE, node, [], {}, [problem])
        return 0
    ranks = list(devs) if group else rank_devices(payload, devs)
    world, first = int(group.get("world", len(ranks))), int(group.get("rank_offset", 0))
    if group and not problem and len(ranks) != group.get("ranks_here"):
        problem = (f"the group gives this node {group.get('ranks_here')} ranks, one per "
                   f"device, but it has {len(ranks)} devices")
    if group:
        # Meet the other nodes first (saying so when this one cannot take part), so that
        # a group missing a node ends at once rather than at torch's timeout.
        from allreduce import hello
        problems = [problem] if problem else []
        problems += hello(group, payload.get("node", ""),
                          float(settings.get("rendezvous_timeout_s", 60)), ready=not problem)
        if problems:
            log("; ".join(problems))
            probelib.emit(PROBE, node, [], {"world": world, "ranks_here": len(ranks),
                                            "first_rank": first, "mode": "inter-node",
                                            "joined": False, "unable": bool(problem)},
                          problems)
            return 0
    dtype = settings.get("dtype") or ("bf16" if ranks[0].gpu else "fp32")
    procs = launch_rank_workers(ranks, group, settings, dtype, world, first)
    records, errors = collect_rank_records(procs, ranks, first)
    figures = {"world": world, "ranks_here": len(ranks), "backend": "nccl" if ranks[0].kind ==
               "cuda" else "gloo"}
    if group:
        figures.update(first_rank=first, mode="inter-node")
    if records and not errors:
        figures.update(node_figures(records, ranks, world))
    for r in records:
        r.pop("shared", None)
    probelib.emit(PROBE, node, records, figures, errors)
    return 0


if __name__ == "__main__":
    probelib.finish(main())
