"""The train check's judge: the node trains a real model (probes/train.py: a small
decoder-only transformer, data parallel over every device) at its peers' speed, and its
replicas agree bit for bit.

Fails a node when: its replicas' parameters differed after any step, or their final
digests differ (a silent corruption or a broken all-reduce, named by rank and device);
the loss is not finite or does not fall; MFU is below a floor (`min_mfu`: none is set by
default until a real GPU run measures one, so peers only); tokens/s is below a floor or
clearly below the median of the run's nodes running the same job (burn's peer rule, each
node one vote); one rank's forward and backward time stands out from the node's other
ranks' (a straggler device: in a synchronous step every rank waits for it, so its own
compute time is where it shows); its final digest differs from the one most of the
run's nodes running the same deterministic job (model, steps, device model, world size,
threads, torch and CUDA) produced: the odd one out, as in sdc's consensus; its document's
job is not the one the controller sent, or names no job or digest, or it is alone in its
job while at least PEERS nodes were sent the same one (burnin/checks/train_job.py).

MFU: model FLOPs per token (PaLM's appendix B: 6N + 12 L H Q T, probes/traincore.py)
times tokens/s, over the GPU model's dense datasheet peak per device in the dtype the job
ran (gpu_models.yaml `peak_tflops` is BF16's; with no peak for the dtype, MFU is not
judged and the verdict says so); on a CPU node, over the node's own GEMM rate the probe
measured in the training's compute type, since no datasheet peak applies there.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from typing import Any, cast

from burnin.checks.base import (
    DEVICE_COUNT,
    DIVERGED,
    PEER_SPREADS,
    PEERS,
    Check,
    Figure,
    Fleet,
    Judging,
    Kind,
    Measure,
    Setting,
    count_problem,
    peer_bound,
    robust_spread,
    timeout,
)
from burnin.checks.train_job import job_problems, mfu, peer_class, sent_job
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict, majority
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import COUNT, Bool, Int, List, Num, Obj, Scalar, Str, document

NAME = "train"
# Shares a node may fall to before it fails, where the inventory gives none: GPU nodes of
# one model run one job within a few per cent; CPU nodes (gloo, shared cores) are noisy.
PEER_FRACTION = {"gpu": 0.9, "cpu": 0.5}
STRAGGLER_FRACTION = {"gpu": 0.8, "cpu": 0.25}
MAX_STEPS = 100_000


def _cpu(j: Judging) -> str:
    return "cpu" if j.gpus == 0 else "gpu"


def _speed_key(name: str, fig: dict) -> str:
    """Nodes compared for speed: the same device model, ranks, model shape and precision."""
    return json.dumps([name, fig.get("world"), fig.get("shape"), fig.get("dtype")],
                      sort_keys=True)


def _nonfinite(x) -> bool:
    return not isinstance(x, (int, float)) or not math.isfinite(x)


def fleet_summary(fleet: Fleet) -> dict:
    """Once per run: per speed key, the median tokens/s over nodes and its spread; per
    job, the digest most nodes produced, as (digest, why, nodes); how many nodes ran each
    job, and how many were sent each (peer_class). Each node one vote; a node whose ranks
    disagree among themselves does not vote on the digest, and one whose document's job
    is not the one it was sent votes nowhere."""
    speed: dict[str, list[float]] = {}
    digests: dict[str, dict[str, str]] = {}
    jobs: dict[str, int] = {}
    sent: dict[str, int] = {}
    for name, o in fleet.outcomes.items():
        # Fleet.voters() counts a node's devices, but a CPU node of one device runs
        # `ranks` ranks: a node votes when it ran as many ranks as it says, without error
        # (each node one vote, however many ranks it claims).
        fig, devices = o.data.get("figures", {}), o.data.get("devices", [])
        if not o.ok or o.data.get("errors") or not devices or "tokens_per_s" not in fig \
                or fig.get("world") != len(devices):
            continue
        settings = fleet.settings.get(name, {})
        if job_problems(fig, devices, sent_job(settings, None, None)):
            continue
        jobs[fig["job"]] = jobs.get(fig["job"], 0) + 1
        node = fleet.nodes.get(name)
        cls = peer_class(settings, fleet.models.get(name), fleet.devices.get(name),
                         devices[0].get("name") if node is not None and node.gpus == 0
                         else None)
        sent[cls] = sent.get(cls, 0) + 1
        key = _speed_key(devices[0].get("name") or "?", fig)
        if fig["tokens_per_s"] > 0:
            speed.setdefault(key, []).append(fig["tokens_per_s"])
        if fig.get("job") and not fig.get("diverged") and \
                len({d.get("digest") for d in devices}) == 1:
            digests.setdefault(fig["job"], {})[name] = fig.get("digest")
    out: dict = {"speed": {}, "digest": {}, "jobs": jobs, "sent": sent}
    for key, v in speed.items():
        med = statistics.median(v)
        out["speed"][key] = {"median": med, "nodes": len(v),
                             "spread": robust_spread([abs(t / med - 1) for t in v])}
    for job, d in digests.items():
        out["digest"][job] = (*majority(d), len(d))
    return out


def _where(dev: dict) -> str:
    about = ", ".join(str(x) for x in (dev.get("name"), dev.get("uuid")) if x)
    return f"rank {dev.get('rank')} ({dev.get('device')}{', ' + about if about else ''})"


def located(event: dict, rank: int) -> str:
    """Where `rank`'s parameters left the reference rank's, as the probe located it at the
    first step they differed; '' where it did not (an older probe, or not this rank)."""
    where = event.get("where")
    if not where:
        return ""
    found = where["elements"].get(str(rank))
    tensors = where.get("tensors", {}).get(str(rank), [])
    if not found:  # this rank differs elsewhere than the tensor compared element by element
        verb = "differs" if len(tensors) == 1 else "differ"
        return f"; its {', '.join(tensors)} {verb} from rank {where['reference_rank']}'s" \
            if tensors else ""
    span = f"element {found['first']}" if found["count"] == 1 else \
        f"elements {found['first']} to {found['last']}"
    others = [t for t in tensors if t != where["tensor"]]
    verb = "differs" if found["count"] == 1 else "differ"
    return (f"; {found['count']} of {where['tensor']}'s {where['numel']} elements {verb} "
            f"from rank {where['reference_rank']}'s ({span})"
            + (f"; other tensors that differ: {', '.join(others)}" if others else ""))


def _replicas(devices: list[dict], fig: dict) -> list[str]:
    """The steps after which replicas differed, and final digests that differ: the ranks
    outside the majority named (of two that differ, both)."""
    out = []
    by_rank = {d.get("rank"): d for d in devices}
    events = fig.get("diverged") or []
    if events:
        ev = events[0]
        prints = ev["fingerprints"]
        common, _ = majority(dict(enumerate(prints)))
        odd = [r for r, p in enumerate(prints) if p != common] if common is not None \
            else list(range(len(prints)))
        named = ", ".join(_where(by_rank.get(r, {"rank": r, "device": "?"})) for r in odd)
        out.append(DIVERGED(f"replicas differ after step {ev['step']}: {named} "
                   f"{'holds' if len(odd) == 1 else 'hold'} parameters other than "
                   f"{'the other ranks' if common is not None else 'each other'} (fingerprints "
                   f"{prints}); expected bitwise identical after every step"
                   + "".join(located(ev, r) for r in odd)
                   + (f"; {len(events) - 1} more step(s) differed" if len(events) > 1 else "")))
    finals: dict[Any, str] = {d.get("rank"): d["digest"] for d in devices if d.get("digest")}
    if len(set(finals.values())) > 1 and not events:
        common_digest, _ = majority(finals)
        odd_finals = [r for r, v in finals.items() if v != common_digest]
        out.append(DIVERGED("final parameters differ between replicas: " + ", ".join(
            f"{_where(by_rank[r])} digest {finals[r][:12]}" for r in odd_finals)
            # one of finals' digests, Str by the schema, which majority returns as object
            + (f", the others {cast(str, common_digest)[:12]}" if common_digest else "")))
    return out


def _loss(fig: dict, settings: dict) -> list[str]:
    losses = fig.get("losses") or []
    bad = next((i for i, x in enumerate(losses) if _nonfinite(x)), None)
    if bad is not None:
        return [f"loss not finite at step {bad + 1} of {len(losses)}: {losses[bad]}"]
    if len(losses) < 2:
        return ["no loss curve was reported"]
    drop = settings.get("min_loss_drop", 0.05)
    tail = statistics.fmean(losses[-min(3, len(losses) - 1):])
    if tail > (1 - drop) * losses[0]:
        return [f"loss does not fall: {losses[0]:.4f} at step 1, {tail:.4f} over the last "
                f"steps, expected below {1 - drop:g} x the first"]
    return []


def _stragglers(devices: list[dict], fraction: float) -> list[str]:
    """A rank whose forward and backward take longer than its node's other ranks' median
    divided by `fraction`: the others wait for it in every all-reduce. Only where each
    rank has a device of its own: ranks sharing one CPU are one device, whatever the
    scheduler makes of them."""
    out: list[str] = []
    if len({d.get("device") for d in devices}) < len(devices):
        return out
    for d in devices:
        others = [o["compute_s"] for o in devices if o is not d and o.get("compute_s")]
        if not others or not fraction or not d.get("compute_s"):
            continue
        bound = statistics.median(others) / fraction
        if d["compute_s"] > bound:
            out.append(f"straggler: {_where(d)} takes {d['compute_s']:.4g} s per step for "
                       f"forward and backward, above {statistics.median(others):.4g} s / "
                       f"{fraction:g}, the median of the node's {len(others)} other rank(s)")
    return out


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    settings, summary = j.settings, j.fleet or {"speed": {}, "digest": {}}
    if not outcome.ok:
        return Verdict(node.name, NAME, (outcome.reason,))
    fig, devices = outcome.data["figures"], outcome.data["devices"]
    failures = list(outcome.data["errors"])
    if j.devices is not None:
        want = j.devices if j.gpus or j.devices > 1 else settings.get("ranks", 2)
        failures += count_problem(devices, replace(j, devices=want))
    if "tokens_per_s" not in fig or not devices:
        return Verdict(node.name, NAME, (*failures, "no training result was reported"))
    failures += _replicas(devices, fig)
    failures += _loss(fig, settings)
    # The job it was sent, and its document's word on it: peers and the fleet's digest
    # only for a document that ran exactly that.
    job_bad = job_problems(fig, devices, sent_job(settings, j.gpus, j.devices))
    failures += job_bad
    floors: dict[str, float] = {}
    speed_bad, warnings = _train_speed_problems(fig, devices, j, floors)
    peer_bad, peer_notes = _train_peer_problems(node, fig, devices, j, summary, bool(job_bad))
    failures += speed_bad + peer_bad
    warnings += peer_notes
    strag = settings.get("straggler_fraction")
    failures += _stragglers(devices, STRAGGLER_FRACTION[_cpu(j)] if strag is None else strag)
    failures += _train_digest_problems(fig, summary)
    return Verdict(node.name, NAME, tuple(failures), tuple(warnings), floors=floors)


def _train_speed_problems(fig: dict, devices: list[dict], j: Judging,
                          floors: dict[str, float]) -> tuple[list[str], list[str]]:
    """(failures, warnings) of MFU (an implausible one too) and tokens/s against their
    floors; the tokens/s floor judged goes in `floors`."""
    failures: list[str] = []
    warnings = []
    value, over = mfu(fig, devices, j)
    if value is None and over:
        warnings.append(over)
    if value is not None and j.gpus != 0 and value > 1.05:
        failures.append(f"implausible: MFU {value:.1%} {over}")
    floor = j.settings.get("min_mfu")
    if floor is not None and value is not None and value < floor:
        failures.append(f"MFU {value:.1%} {over}, below the floor of {floor:.1%}")
    tokens = fig["tokens_per_s"]
    floor_t = j.settings.get("min_tokens_per_s")
    if floor_t is not None:
        floors["train"] = floor_t
        if tokens < floor_t:
            failures.append(f"{tokens:.6g} tokens/s, below the floor of {floor_t:g}")
    return failures, warnings


def _train_peer_problems(node: Node, fig: dict, devices: list[dict], j: Judging,
                         summary: dict, job_bad: bool) -> tuple[list[str], list[str]]:
    """(failures, warnings) against the run's nodes sent the same job: alone in its job,
    or tokens/s below their median. A document of another job (`job_bad`) has no peers."""
    settings, tokens = j.settings, fig["tokens_per_s"]
    failures: list[str] = []
    warnings = []
    peers = {} if job_bad else \
        summary["speed"].get(_speed_key(devices[0].get("name") or "?", fig), {})
    fraction = settings.get("peer_fraction")
    if fraction is None:
        fraction = PEER_FRACTION[_cpu(j)]
    sent = summary.get("sent", {}).get(peer_class(
        settings, j.model, j.devices, devices[0].get("name") if node.gpus == 0 else None), 0)
    if not job_bad and sent >= PEERS and summary.get("jobs", {}).get(fig["job"], 0) <= 1:
        failures.append(f"alone in its job: {sent} nodes were sent the same one (settings, GPU "
                        f"model, device count), and none other ran what it ran ({fig['job'][:12]}"
                        f": model shape {fig.get('shape')}, device, threads, torch, CUDA): its "
                        "figures have no peers and its digest no consensus")
    if peers.get("nodes", 0) >= PEERS:
        bound, words = peer_bound(peers["median"], peers.get("spread"), fraction,
                                  settings.get("peer_spreads", PEER_SPREADS), "tokens/s")
        if tokens < bound:
            failures.append(f"straggler: {tokens:.6g} tokens/s, below {words}, the median of "
                            f"the run's {peers['nodes']} nodes running this job on this model")
    elif peers.get("nodes", 0) > 1:
        warnings.append(f"fewer than {PEERS} nodes ran this job on this model: no comparison "
                        "with peers")
    return failures, warnings


def _train_digest_problems(fig: dict, summary: dict) -> list[str]:
    """The final parameter digest against the fleet's for the same deterministic job."""
    common, why, count = summary["digest"].get(fig.get("job"), (None, "", 0))
    if not fig.get("digest") or count < 2:
        return []
    if common is None and count >= PEERS:
        return [f"final parameter digest {fig['digest'][:12]}: {why} among {count} "
                "nodes running the same deterministic job"]
    if common is not None and fig["digest"] != common:
        return [DIVERGED(f"final parameter digest {fig['digest'][:12]} differs "
                         f"from {common[:12]}, the digest of most of the run's "
                         f"{count} nodes running the same deterministic job")]
    return []


def figures(record: dict) -> list[Figure]:
    fig = record["data"]["figures"]
    out = []
    if isinstance(fig.get("tokens_per_s"), (int, float)):
        out.append(Figure("train_tokens_per_second", (), fig["tokens_per_s"],
                          "Training throughput of the node"))
    if isinstance(fig.get("mfu"), (int, float)):
        out.append(Figure("train_mfu_ratio", (("basis", "measured_gemm"),), fig["mfu"],
                          "Model FLOPs utilisation over the node's measured GEMM rate"))
    for d in record["data"]["devices"]:
        if isinstance(d.get("step_s"), (int, float)):
            out.append(Figure("train_step_seconds", (("device", f"rank{d.get('rank')}"),),
                              d["step_s"], "Median training step time per rank",
                              better="lower"))
    return out


LOSS = Num(finite=False)
RANK = Obj(required=("rank", "device", "step_s", "compute_s", "tokens_per_s", "digest"),
           rank=Int(0, 1 << 20), device=Str(64), name=Str(256, null=True),
           uuid=Str(256, null=True), pci_bus_id=Str(64, null=True), device_type=Str(16),
           threads=Int(0, 1 << 16), step_s=Num(0), step_min_s=Num(0), step_max_s=Num(0),
           step_spread=Num(0), compute_s=Num(0), comm_s=Num(0), tokens_per_s=Num(0),
           model_tflops=Num(0, 1e5), gemm_tflops=Num(0, 1e5), gemm_n=Int(1, 1 << 20),
           final_loss=Num(finite=False, null=True), digest=Str(128), wall_s=Num(0), cpu_s=Num(0),
           tokens=COUNT, torch=Str(128), cuda=Str(64, null=True))
INDEX = Int(-1, 1 << 40)
# traincore.locate: where the replicas differ, at the first step that they do
WHERE = Obj(required=("tensor", "numel", "reference_rank", "elements"), tensor=Str(256),
            numel=Int(0, 1 << 40), reference_rank=Int(0, 1 << 20),
            tensors=Obj(values=List(Str(256), max=8), max_keys=1 << 10),
            elements=Obj(values=Obj(required=("count", "first", "last"), count=INDEX,
                                    first=INDEX, last=INDEX), max_keys=1 << 10))
EVENT = Obj(required=("step", "fingerprints"), step=Int(0, MAX_STEPS),
            fingerprints=List(Int(-2**63, 2**63), max=1 << 20), where=WHERE)
SHAPE = Obj(values=Int(0, 1 << 40), max_keys=16)
FIGURES = Obj(world=Int(1, 1 << 20), ranks_here=Int(0, 1024), backend=Str(64),
              losses=List(LOSS, max=MAX_STEPS), diverged=List(EVENT, max=8),
              checked_steps=Int(0, MAX_STEPS), shape=SHAPE, flops_per_token=SHAPE,
              warmup_steps=Int(0, MAX_STEPS), steps=Int(0, MAX_STEPS), dtype=Str(16),
              tokens_per_s=Num(0, 1e12), model_tflops=Num(0, 1e7), gemm_tflops=Num(0, 1e7),
              mfu=Num(0, null=True), mfu_basis=Str(64), wall_s=Num(0), job=Str(128),
              job_spec=Obj(values=Scalar(), shape=SHAPE, max_keys=32), digest=Str(128),
              # in a group across nodes (train_internode): this node's place in it
              first_rank=Int(0, 1 << 20), mode=Str(16), joined=Bool(), unable=Bool())
SCHEMA = document(RANK, FIGURES)

DTYPE = Kind(lambda v: v in ("bf16", "fp32"), "one of: bf16, fp32")
SETTINGS = {
    "timeout_s": timeout(300, 600, 1800),
    "steps": Setting("int", {"quick": 20, "standard": 100, "extended": 500},
                     "timed steps, after the warm-up"),
    "warmup_steps": Setting("int", 3),
    "dtype": Setting(DTYPE, None, "bf16 autocast (default on GPUs) or fp32 (on CPUs)"),
    "ranks": Setting("int", 2, "ranks on a CPU-only node of one CPU device"),
    **{k: Setting("int", None, "model shape; default sized from the device")
       for k in ("d_model", "layers", "heads", "seq_len", "vocab", "batch")},
    "lr": Setting("positive", 3e-3),
    "gemm_n": Setting("int", None, "the reference GEMM's size; 8192 on GPUs, 512 on CPUs"),
    "gemm_s": Setting("positive", 0.5, "seconds of the reference GEMM"),
    "min_loss_drop": Setting("fraction", 0.05, "the loss must fall by this share"),
    "min_mfu": Setting("fraction", None, "MFU floor; none until a real GPU run measures one"),
    "peak_tflops": Setting("positive", None, "dense peak per device in the job's dtype; "
                           "default the gpu_model's for bf16 (the table has no fp32 peak)"),
    "min_tokens_per_s": Setting("positive", None, "node tokens/s floor"),
    "peer_fraction": Setting("fraction", None, "fail below this share of the median tokens/s "
                             "of the run's nodes running the same job; default 0.9 on GPU "
                             "nodes, 0.5 on CPU nodes; lower where they spread wider"),
    "peer_spreads": Setting("positive", PEER_SPREADS),
    "straggler_fraction": Setting("fraction", None, "a rank slower than the node's other "
                                  "ranks' median / this fails; default 0.8 GPU, 0.25 CPU"),
    "rendezvous_timeout_s": Setting("positive", 60),
}

TOKENS = Measure("train_tokens_per_second", "tokens/s", "train tokens/s", "train tokens/s",
                 chart="train: tokens/s per node", key="train", speed=True)
STEP = Measure("train_step_seconds", "s", "train step s, slowest rank", "train step {device}",
               worst="high", chart="train: median step time per rank")
MFU = Measure("train_mfu_ratio", "", "train MFU", "train MFU ({basis})")
CHECK = Check(name=NAME, doc="the node trains a real model at its speed, without corruption",
              judge=judge, schema=SCHEMA, summarize=fleet_summary, figures=figures,
              settings=SETTINGS, page="burnin.report.summary.train_part:train",
              page_order=70,
              measures=(TOKENS, STEP, MFU), failure_kinds=(DIVERGED, DEVICE_COUNT))
