"""Training engine of the train probe: a small decoder-only transformer, its synthetic data
and one data-parallel rank's loop. Runs ON a node, in each rank's own process; imports
torch and the standard library only (probelib, which imports nothing of burnin), never
burnin.

The model (GPT-2's shape, built from torch alone): token and learned position embeddings,
`layers` pre-LayerNorm blocks of causal self-attention (written out as two matrix
products and a softmax, so that with determinism pinned it is the same bits on every run
and node: a fused attention kernel's backward may use atomics) and a GELU MLP of 4 x
d_model, a final LayerNorm and an untied output projection.

The data: every sequence follows one fixed random permutation of the vocabulary from a
random first token (token t+1 = P[token t]), drawn from a generator seeded by (seed,
step, rank): the same tokens on every node, learnable in a few steps, so that the loss
must fall, and no download.

Data parallelism without DDP's overlap, so that compute and communication are timed
apart: every parameter is a view into one flat fp32 buffer, and every gradient a view
into another, so the gradients are reduced in one all-reduce and the optimizer (AdamW)
updates one tensor. After every step each rank's parameters are fingerprinted (the
integer sum of their bit patterns, exact in int64: any single changed bit changes it) and
the fingerprints gathered: replicas must be bitwise identical after every step. At the
end, each rank's SHA-256 of its parameters' bytes.
"""

from __future__ import annotations

import math
import statistics
import time

import gemmcore
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.optim.adamw import adamw

SEED = 1234
# torch 2.13 renamed it; older torch (the fleet's) has only the old name.
GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def shape_for(dev: torch.device, threads: int, settings: dict) -> dict:
    """The model and batch for a device: a GPU's by its memory (fp32 weights, AdamW's two
    moments, bf16 activations of the written-out attention: about 45 GB at the largest),
    a CPU's by the threads it has, small enough that a quick profile takes seconds. Any
    key the settings give wins."""
    if dev.type == "cuda":
        gib = torch.cuda.get_device_properties(dev).total_memory / (1 << 30)
        if gib >= 60:
            base = dict(d_model=2048, layers=12, heads=16, seq_len=1024, vocab=32768, batch=8)
        elif gib >= 30:
            base = dict(d_model=1536, layers=12, heads=12, seq_len=1024, vocab=32768, batch=8)
        else:
            base = dict(d_model=1024, layers=8, heads=8, seq_len=1024, vocab=32768, batch=4)
    elif threads <= 2:
        base = dict(d_model=128, layers=2, heads=4, seq_len=64, vocab=512, batch=8)
    elif threads <= 16:
        base = dict(d_model=256, layers=4, heads=4, seq_len=128, vocab=1024, batch=8)
    else:
        base = dict(d_model=512, layers=4, heads=8, seq_len=128, vocab=2048, batch=8)
    return {k: int(settings.get(k) or v) for k, v in base.items()}


def flops_per_token(shape: dict) -> dict:
    """Model FLOPs per token of one training step (forward and backward), as PaLM's
    appendix B counts them (Chowdhery et al. 2022, "PaLM: Scaling Language Modeling with
    Pathways", arXiv:2204.02311, B "Compute Usage and Environmental Impact"): 6N + 12 L H
    Q T, N the parameters of the matrix multiplies (the blocks' 12 L d^2 and the output
    projection's V d; an embedding is a lookup), L layers, H heads of Q = d / H, T the
    sequence length. Rematerialisation is not counted: model FLOPs, not hardware FLOPs."""
    d, layers, t, v = shape["d_model"], shape["layers"], shape["seq_len"], shape["vocab"]
    dense = 12 * layers * d * d + v * d
    attention = 12 * layers * d * t
    return {"dense_params": dense, "dense": 6 * dense, "attention": attention,
            "total": 6 * dense + attention}


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        att = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Decoder(nn.Module):
    def __init__(self, shape: dict):
        super().__init__()
        d = shape["d_model"]
        self.tok = nn.Embedding(shape["vocab"], d)
        self.pos = nn.Embedding(shape["seq_len"], d)
        self.blocks = nn.ModuleList(Block(d, shape["heads"]) for _ in range(shape["layers"]))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, shape["vocab"], bias=False)
        t = shape["seq_len"]
        self.register_buffer("mask", torch.ones(t, t, dtype=torch.bool).triu(1),
                             persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(pos)
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.ln(x))


def batch(shape: dict, step: int, rank: int, perm: torch.Tensor, dev) -> torch.Tensor:
    """`batch` sequences of seq_len + 1 tokens following the permutation, for this step and
    rank: the same on every node."""
    g = torch.Generator().manual_seed(SEED * 1_000_003 + step * 65_537 + rank)
    first = torch.randint(0, shape["vocab"], (shape["batch"],), generator=g)
    seq = [first]
    for _ in range(shape["seq_len"]):
        seq.append(perm[seq[-1]])
    return torch.stack(seq, dim=1).to(dev)


def flatten(model: nn.Module, dev) -> tuple[torch.Tensor, torch.Tensor]:
    """Make every parameter a view into one flat buffer, and its gradient a view into
    another: one all-reduce, one optimizer tensor, one fingerprint."""
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    flat = torch.empty(total, device=dev, dtype=torch.float32)
    grad = torch.zeros(total, device=dev, dtype=torch.float32)
    at = 0
    for p in params:
        n = p.numel()
        flat[at:at + n].copy_(p.data.reshape(-1))
        p.data = flat[at:at + n].view_as(p)
        p.grad = grad[at:at + n].view_as(p)
        at += n
    return flat, grad


def fingerprint(flat: torch.Tensor) -> torch.Tensor:
    """The exact integer sum of the parameters' bit patterns: a changed bit changes it."""
    return flat.view(torch.int32).sum(dtype=torch.int64).reshape(1)


# Elements of one parameter tensor sent at a time when locating a divergence (64 MiB of
# fp32): an embedding of a large vocabulary is not copied whole.
LOCATE_CHUNK = 1 << 24


def locate(model: nn.Module, fps: list[int], world: int, dev) -> dict:
    """Where the replicas differ, at the first step that they do (collective: every rank
    calls it at that step, as every rank sees the same fingerprints). Each parameter
    tensor's fingerprint on every rank; then the first tensor that differs, element by
    element against a reference rank (the lowest holding the most common fingerprint):
    on each rank outside it, how many elements differ and the first and last of them.
    One flipped bit, a short run of elements or a whole tensor point at different
    causes; the tensor's name says where in the model."""
    named = [(name, p.detach().reshape(-1)) for name, p in model.named_parameters()]
    table = torch.zeros(world * len(named), dtype=torch.int64, device=dev)
    GATHER(table, torch.cat([fingerprint(p) for _, p in named]))
    rows = table.view(world, len(named)).tolist()
    ref = fps.index(max(fps, key=fps.count))  # ties: the lowest rank's value
    k = next((i for i in range(len(named)) if len({row[i] for row in rows}) > 1), 0)
    name, mine = named[k]
    count, first, last = 0, -1, -1
    for at in range(0, mine.numel(), LOCATE_CHUNK):
        part = mine[at:at + LOCATE_CHUNK]
        theirs = part.clone()
        dist.broadcast(theirs, ref)
        idx = (part.view(torch.int32) != theirs.view(torch.int32)).nonzero().flatten()
        if idx.numel():
            count += idx.numel()
            first = first if first >= 0 else at + int(idx[0])
            last = at + int(idx[-1])
    found = torch.zeros(world * 3, dtype=torch.int64, device=dev)
    GATHER(found, torch.tensor([count, first, last], dtype=torch.int64, device=dev))
    return {"tensor": name, "numel": mine.numel(), "reference_rank": ref,
            "tensors": {str(r): [named[i][0] for i in range(len(named))
                                 if rows[r][i] != rows[ref][i]][:8]
                        for r in range(world) if rows[r] != rows[ref]},
            "elements": {str(r): {"count": c, "first": f, "last": la}
                         for r, (c, f, la) in enumerate(found.view(world, 3).tolist()) if c}}


class FlatAdamW:
    """torch's AdamW over the one flat tensor, through torch's own functional form: the
    kernels, arguments and state that `torch.optim.AdamW(weight_decay=0.0)` gives it (on a
    GPU fused: one kernel over the tensor, elementwise and deterministic; on a CPU one
    tensor at a time). Not `torch.optim.AdamW` itself: constructing an Optimizer imports
    torch._dynamo (its `add_param_group` is wrapped to keep the compiler out), about 1.6 s
    of CPU in every rank for a compiler the probe never uses. tests/test_train.py holds
    the two to the same bits, step after step."""

    def __init__(self, param: nn.Parameter, lr: float, fused: bool) -> None:
        self.param, self.lr, self.fused = param, lr, fused
        self.exp_avg = torch.zeros_like(param, memory_format=torch.preserve_format)
        self.exp_avg_sq = torch.zeros_like(param, memory_format=torch.preserve_format)
        # The step count as torch.optim keeps it: on the device for a fused step, on the
        # CPU otherwise; float32 (float64 only under a float64 default dtype).
        scalar = torch.float32 if fused or torch.get_default_dtype() != torch.float64 \
            else torch.float64
        self.count = torch.zeros((), dtype=scalar, device=param.device if fused else "cpu")

    @torch.no_grad()
    def step(self) -> None:
        assert self.param.grad is not None
        adamw([self.param], [self.param.grad], [self.exp_avg], [self.exp_avg_sq], [],
              [self.count], foreach=False, fused=self.fused, amsgrad=False, beta1=0.9,
              beta2=0.999, lr=self.lr, weight_decay=0.0, eps=1e-8, maximize=False)


def gemm_tflops(dev, dtype, n: int, seconds: float, sync) -> float:
    """This device's own dense GEMM rate in the training's compute type, best of a few
    timed runs: the yardstick of a CPU's MFU, where no datasheet peak applies."""
    a = torch.randn(n, n, device=dev).to(dtype)
    b = torch.randn(n, n, device=dev).to(dtype)
    torch.mm(a, b)
    sync()
    best, reps, spent = 0.0, 1, 0.0
    while spent < seconds:
        t = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b)
        sync()
        dt = time.perf_counter() - t
        spent += dt
        best = max(best, reps * 2 * n ** 3 / dt / 1e12)
        reps = min(reps * 2, 64) if dt < seconds / 8 else reps
    return best


def train(settings: dict, rank: int, world: int, dev: torch.device, threads: int,
          autocast: str) -> dict:
    """One rank's run in an initialised process group: warm-up plus timed steps. Returns
    its record: its own figures, and what every rank shares (the loss curve, the replicas
    that differed at any step, the model)."""
    gpu = dev.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(dev)) if gpu else (lambda: None)
    shape = agreed_shape(settings, dev, threads, world)
    torch.manual_seed(SEED)  # the same initial weights on every rank and node
    model = Decoder(shape).to(dev)
    flat, grad = flatten(model, dev)
    master = nn.Parameter(flat)
    master.grad = grad
    opt = FlatAdamW(master, float(settings.get("lr", 3e-3)), fused=gpu)
    perm = torch.randperm(shape["vocab"], generator=torch.Generator().manual_seed(SEED))
    compute_type = torch.bfloat16 if autocast == "bf16" else torch.float32
    ref_n = int(settings.get("gemm_n") or (8192 if gpu else 512))
    dist.barrier()  # every rank measures its GEMM at once, sharing what training shares
    gemm = gemm_tflops(dev, compute_type, ref_n, float(settings.get("gemm_s", 0.5)), sync)
    warmup, steps = int(settings.get("warmup_steps", 3)), int(settings.get("steps", 20))
    losses, diverged = [], []
    times: list[tuple[float, float, float]] = []
    gathered = torch.zeros(2 * world, dtype=torch.int64, device=dev)
    dist.barrier()
    sync()
    wall_start = cpu_start = 0.0
    for step in range(warmup + steps):
        if step == warmup:
            dist.barrier()
            sync()
            wall_start, cpu_start = time.perf_counter(), time.process_time()
        x = batch(shape, step, rank, perm, dev)
        t0 = time.perf_counter()
        grad.zero_()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast == "bf16"):
            logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, shape["vocab"]), x[:, 1:].reshape(-1))
        loss.backward()
        sync()
        t1 = time.perf_counter()
        if world > 1:
            dist.all_reduce(grad)
            grad.div_(world)
        sync()
        t2 = time.perf_counter()
        opt.step()
        # One gather per step: the fingerprint and the loss's float64 bits side by side.
        GATHER(gathered, torch.cat([fingerprint(flat),
                                    loss.detach().double().reshape(1).view(torch.int64)]))
        pairs = gathered.view(world, 2)
        step_fps = pairs[:, 0].tolist()  # synchronises
        step_losses = pairs[:, 1].contiguous().view(torch.float64).tolist()
        t3 = time.perf_counter()
        if step >= warmup:
            times.append((t3 - t0, t1 - t0, t2 - t1))
        losses.append(statistics.fmean(step_losses))
        if len(set(step_fps)) > 1 and len(diverged) < 8:  # the first ones say where
            event = {"step": step + 1, "fingerprints": step_fps}
            if not diverged:
                event["where"] = locate(model, step_fps, world, dev)
            diverged.append(event)
    wall, cpu = time.perf_counter() - wall_start, time.process_time() - cpu_start
    sync()
    digest = gemmcore.digest(flat)
    return rank_record(settings, rank, dev, threads, shape, times=times, losses=losses,
                       diverged=diverged, gemm_at=(gemm, ref_n), digest=digest,
                       wall_cpu=(wall, cpu), warmup=warmup, steps=steps, autocast=autocast)


def agreed_shape(settings: dict, dev: torch.device, threads: int, world: int) -> dict:
    """The model's shape, rank 0's for every rank: across nodes, a default sized from each
    node's own threads or memory could differ, and replicas of two shapes never agree."""
    shape = shape_for(dev, threads, settings)
    if world > 1:
        keys = sorted(shape)
        sizes = torch.tensor([shape[k] for k in keys], dtype=torch.int64, device=dev)
        dist.broadcast(sizes, 0)
        shape = dict(zip(keys, sizes.tolist(), strict=True))
    if shape["d_model"] % shape["heads"]:
        raise ValueError(f"d_model {shape['d_model']} is not a multiple of heads "
                         f"{shape['heads']}")
    return shape


def rank_record(settings: dict, rank: int, dev: torch.device, threads: int, shape: dict, *,
                times: list[tuple[float, float, float]], losses: list[float],
                diverged: list[dict], gemm_at: tuple[float, int], digest: str,
                wall_cpu: tuple[float, float], warmup: int, steps: int,
                autocast: str) -> dict:
    """One rank's record from its timed steps: its own figures, and what every rank
    shares (the loss curve, the replicas that differed, the model)."""
    gemm, ref_n = gemm_at
    wall, cpu = wall_cpu
    tokens = shape["batch"] * shape["seq_len"]
    step_s = [t for t, _, _ in times]
    med = statistics.median(step_s) if step_s else 0.0
    fpt = flops_per_token(shape)
    record = {
        "rank": rank, "device_type": dev.type, "threads": threads,
        "step_s": round(med, 6),
        "step_min_s": round(min(step_s), 6) if step_s else 0.0,
        "step_max_s": round(max(step_s), 6) if step_s else 0.0,
        "step_spread": round((max(step_s) - min(step_s)) / med, 4) if med else 0.0,
        "compute_s": round(statistics.median(c for _, c, _ in times), 6) if times else 0.0,
        "comm_s": round(statistics.median(c for _, _, c in times), 6) if times else 0.0,
        "tokens_per_s": round(tokens / med, 3) if med else 0.0,
        "model_tflops": round(tokens * fpt["total"] / med / 1e12, 6) if med else 0.0,
        "gemm_tflops": round(gemm, 6), "gemm_n": ref_n,
        "final_loss": losses[-1] if losses else None,
        "digest": digest, "wall_s": round(wall, 6), "tokens": tokens * steps,
        "cpu_s": round(cpu, 6),  # this process's CPU time over the timed steps, all threads
        # the same on every rank: the parent keeps one copy
        "shared": {"losses": losses, "diverged": diverged, "checked_steps": warmup + steps,
                   "shape": shape, "flops_per_token": fpt, "warmup_steps": warmup,
                   "steps": steps, "dtype": autocast, "lr": float(settings.get("lr", 3e-3))},
    }
    return record
