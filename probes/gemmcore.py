"""GEMM engine shared by the sdc and burn probes: devices, known-answer inputs, exact
verification on the device, digests. Runs ON a node; imports torch and the standard
library only, never burnin.

Known-answer inputs: A[i,j] = a_ij * 2**e_i and B[j,k] = b_jk * 2**f_k, with a, b
integers in +-[1, 32] (never 0, so no -0.0 can appear) and e, f in 0..4. Then
C[i,k] = 2**(e_i+f_k) * sum_j a_ij*b_jk with |sum| <= 32*32*n <= 2**23 for n <= 8192:
every product and every partial sum is exact in an fp32 accumulator, whatever the
summation order, so the right C is one exact matrix on every kernel and every device.
In float64, C's entries are integers below 2**31, their row and column sums below 2**44
and sums weighted by w_k <= 256 below 2**52: the checks below are exact, zero tolerance.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
import time

import probelib
import torch

MAX_EXACT_N = 8192
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
CHECKS = ("nonintegral", "rows", "weighted", "cols")
CHUNK_ROWS = 512  # input generation works on row blocks: host memory O(block x n)

_bound = threading.local()


def torch_device(d: probelib.Device) -> torch.device:
    """The torch device a probe device computes on (the CPU for a CPU share or, in tests,
    for an emulated GPU)."""
    return torch.device("cuda", d.ordinal) if d.kind == "cuda" else torch.device("cpu")


def bind(d: probelib.Device) -> torch.device:
    """Make `d` this thread's device, before any work on it. CUDA events, streams and
    allocations go to the thread's current device: a worker thread that skipped this would
    time cuda:1's products with events on cuda:0's stream."""
    dev = torch_device(d)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    _bound.device = d
    return dev


def bound() -> probelib.Device | None:
    return getattr(_bound, "device", None)


def share_cpu(devices: list[probelib.Device]) -> None:
    """Several devices computing on the CPU each get an equal share of its threads, rather
    than each spinning every core against the others."""
    on_cpu = sum(1 for d in devices if torch_device(d).type == "cpu")
    if on_cpu > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // on_cpu))


def describe(d: probelib.Device) -> dict:
    out = d.describe()
    dev = torch_device(d)
    if dev.type == "cuda":
        out["memory_bytes"] = torch.cuda.get_device_properties(dev).total_memory
    else:
        out["threads"] = torch.get_num_threads()
    return out


def pin_determinism() -> None:
    """No TF32, no reduced-precision reductions, deterministic algorithms: a product of
    the same inputs is then the same bits every time (CUBLAS_WORKSPACE_CONFIG is set by
    probelib before torch starts CUDA)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    # torch.use_deterministic_algorithms(True) sets this same flag of ATen, and also
    # torch.compile's (inductor's), importing torch._dynamo to do so: about 1.2 s of CPU
    # in every probe process, for a compiler no probe uses. The public call where a torch
    # lacks the flag's own setter.
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None:
        torch.use_deterministic_algorithms(True)
    else:
        setter(True)


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _mix(x: torch.Tensor, salt: int) -> torch.Tensor:
    # A small integer hash (splitmix-like, kept below 2**31 so int64 never overflows):
    # the same inputs on every node, with no dependence on a random number generator.
    x = ((x % 2147483647) * 2654435761 + salt * 40503 + 12345) % 2147483647
    x = (x ^ (x >> 13)) * 1274126177 % 2147483647
    return x ^ (x >> 16)


def _signed_ints(rows: int, cols: int, salt: int, dev, lo: int = 0,
                 hi: int | None = None) -> torch.Tensor:
    """Rows lo..hi of a rows x cols matrix of integers in +-[1, 32]."""
    i = torch.arange(lo, rows if hi is None else hi, device=dev, dtype=torch.int64).unsqueeze(1)
    j = torch.arange(cols, device=dev, dtype=torch.int64).unsqueeze(0)
    h = _mix(i * 1000003 + j, salt)
    magnitude = (h >> 3) % 32 + 1
    return torch.where((h & 1) == 1, -magnitude, magnitude)


class KnownInputs:
    """The known-answer inputs and their exact expected checksums, built once per probe
    on the host (the device under test never computes the answers it is checked against)
    and copied to each device. Built in row blocks: a float64 copy of a whole 8192 x 8192
    input would be 512 MiB, and several such temporaries per device used to be built for
    every GPU at once."""

    def __init__(self, n: int, dtype: str, seed: int = 0):
        if n > MAX_EXACT_N:
            raise ValueError(f"known-answer GEMMs are exact up to n={MAX_EXACT_N}, not {n}")
        self.n, self.dtype = n, dtype
        dt = DTYPES[dtype]
        e = (_mix(torch.arange(n, dtype=torch.int64), seed + 1) % 5).double()
        f = (_mix(torch.arange(n, dtype=torch.int64), seed + 2) % 5).double()
        col_scale = torch.exp2(f).unsqueeze(0)
        self.W = torch.stack([torch.ones(n, dtype=torch.float64), weights(n, "cpu")], dim=1)
        self.A = torch.empty(n, n, dtype=dt)
        self.B = torch.empty(n, n, dtype=dt)
        col_sum_a = torch.zeros(n, dtype=torch.float64)
        bw = torch.empty(n, 2, dtype=torch.float64)
        for lo in range(0, n, CHUNK_ROWS):
            hi = min(n, lo + CHUNK_ROWS)
            a = _signed_ints(n, n, seed + 3, "cpu", lo, hi).double() * \
                torch.exp2(e[lo:hi]).unsqueeze(1)
            self.A[lo:hi] = a.to(dt)  # exact: small integers times powers of two
            col_sum_a += a.sum(0)
            b = _signed_ints(n, n, seed + 4, "cpu", lo, hi).double() * col_scale
            self.B[lo:hi] = b.to(dt)
            bw[lo:hi] = b @ self.W
        # Every value below is an integer under 2**52: exact in float64, in any order.
        self.exp_rows = torch.cat([self.A[lo:lo + CHUNK_ROWS].double() @ bw
                                   for lo in range(0, n, CHUNK_ROWS)])  # [C.1, C.w]
        self.exp_cols = sum(col_sum_a[lo:lo + CHUNK_ROWS] @ self.B[lo:lo + CHUNK_ROWS].double()
                            for lo in range(0, n, CHUNK_ROWS))  # 1.C
        self.inputs_digest = hashlib.sha256((digest(self.A) + digest(self.B)).encode()).hexdigest()


class KnownAnswer:
    """One known-answer product on one device, with its exact expected checksums."""

    def __init__(self, inputs: KnownInputs, dev: torch.device):
        self.n, self.dtype, self.dev = inputs.n, inputs.dtype, dev
        # copy=True: devices sharing the host (CPU shares, tests) each get their own.
        self.A = inputs.A.to(dev, copy=True)
        self.B = inputs.B.to(dev, copy=True)
        self.W = inputs.W.to(dev, copy=True)
        self.exp_rows = inputs.exp_rows.to(dev, copy=True)
        self.exp_cols = inputs.exp_cols.to(dev, copy=True)
        # verify()'s GEMVs read contiguous vectors: one column of W or exp_rows each.
        self.ones, self.w = self.W[:, 0].contiguous(), self.W[:, 1].contiguous()
        self.exp_sum = self.exp_rows[:, 0].contiguous()
        self.exp_weighted = self.exp_rows[:, 1].contiguous()
        self.inputs_digest = inputs.inputs_digest

    def product(self, out: torch.Tensor) -> torch.Tensor:
        return mm_fp32_out(self.A, self.B, out)

    def verify(self, C: torch.Tensor) -> torch.Tensor:
        """Counts of CHECKS for product C, as a device tensor: no host synchronisation.

        An element that is not an integer (a low bit flipped on a small value, or NaN
        or Inf: their frac is NaN) is counted directly; every other error changes an
        exact row, weighted-row or column sum. The sums are float64 GEMVs over C, each
        exact in any order: three matrix-vector products rather than one n x 2 GEMM,
        which BLAS runs at a third of a GEMV's bandwidth (n=1024 on a CPU: 0.63 ms
        against 2 x 0.18 ms), and fewer parallel regions for a busy core to stall.
        """
        Cd = C.double()
        return torch.stack([
            torch.count_nonzero(torch.frac(C)),
            (torch.mv(Cd, self.ones) != self.exp_sum).sum(),
            (torch.mv(Cd, self.w) != self.exp_weighted).sum(),
            (torch.mv(Cd.t(), self.ones) != self.exp_cols).sum(),
        ])

    def localise(self, C: torch.Tensor, limit: int = 8) -> dict:
        """Where a product is wrong: rows, columns, wrong elements (count and examples).

        Only on error, so its cost does not matter: the exact reference of the suspect
        rows and columns is computed in float64 from the inputs.
        """
        Cd = C.double()
        sums = Cd @ self.W
        rows = ((sums[:, 0] != self.exp_rows[:, 0]) | (sums[:, 1] != self.exp_rows[:, 1]))
        rows = rows.nonzero().flatten()
        cols = (Cd.sum(0) != self.exp_cols).nonzero().flatten()
        odd = ((~torch.isfinite(Cd)) | (Cd != torch.round(Cd))).nonzero()
        a64, b64 = self.A.double(), self.B.double()
        wrong = set(map(tuple, odd.tolist()))
        if rows.numel():
            ref = a64[rows] @ b64
            for r, c in (Cd[rows] != ref).nonzero().tolist():
                wrong.add((rows[r].item(), c))
        if cols.numel():
            ref = a64 @ b64[:, cols]
            for r, c in (Cd[:, cols] != ref).nonzero().tolist():
                wrong.add((r, cols[c].item()))
        examples = []
        for i, k in sorted(wrong)[:limit]:
            expected = (a64[i] @ b64[:, k]).item()
            examples.append({"row": i, "col": k, "got": Cd[i, k].item(), "expected": expected})
        return {"rows": rows.tolist()[:64], "cols": cols.tolist()[:64],
                "wrong_elements": len(wrong), "nonfinite": int((~torch.isfinite(C)).sum()),
                "examples": examples}


def weights(n: int, dev) -> torch.Tensor:
    """Distinct-enough weights in 1..256: errors that cancel in a plain sum do not here."""
    return (torch.arange(n, device=dev, dtype=torch.float64) % 256) + 1


# torch.mm(..., out_dtype=torch.float32): fp32 output of a bf16/fp16 GEMM on a GPU, the
# aten overloads mm.dtype and mm.dtype_out (pytorch/pytorch#150812, first in torch 2.8;
# pyproject's `node` extra pins it). Older torch has only mm.default and mm.out.
MIN_TORCH = "2.8"


def gemm_problem(devices: list[probelib.Device]) -> str:
    """'' where this torch can run the GEMMs on these devices, else why not, said once
    for the node (a CPU computes fp32 products itself and needs no out_dtype)."""
    if not any(d.gpu for d in devices) or "dtype_out" in torch.ops.aten.mm.overloads():
        return ""
    return (f"torch {torch.__version__} lacks torch.mm(..., out_dtype=torch.float32) (the "
            f"fp32-output bf16/fp16 GEMM, aten::mm.dtype_out): the GPU checks need torch >= "
            f"{MIN_TORCH}")


def mm_fp32_out(A: torch.Tensor, B: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """A @ B into `out` (fp32), bf16/fp16 inputs accumulated and stored in fp32."""
    if A.dtype == torch.float32:
        return torch.mm(A, B, out=out)
    if A.device.type != "cuda":
        # The CPU has no fp32-output bf16/fp16 GEMM. The known answer's inputs are exact in
        # every dtype (small integers times powers of two), so their fp32 product is the
        # one a GPU's fp32-accumulating bf16/fp16 GEMM must give: the same code runs here,
        # with the dtype as a parameter (a CPU fleet, and the project's tests, use it).
        return torch.mm(A.float(), B.float(), out=out)
    return torch.mm(A, B, out_dtype=torch.float32, out=out)


def digest(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's bytes (copied to the host once)."""
    host = t.detach().contiguous().cpu()
    buf = (ctypes.c_char * (host.numel() * host.element_size())).from_address(host.data_ptr())
    return hashlib.sha256(memoryview(buf)).hexdigest()


class Timer:
    """Time spans on a device without a host synchronisation per span (CUDA events on the
    device's own stream), or plainly on the CPU; total() synchronises once. It refuses to
    time a device other than its thread's bound one: such timings would be another
    device's."""

    def __init__(self, d: probelib.Device):
        if bound() != d:
            raise RuntimeError(f"timer for {d.label} in a thread bound to "
                               f"{getattr(bound(), 'label', 'no device')}")
        self.dev, self.cpu_s = torch_device(d), 0.0
        self.spans: list[tuple] = []

    def start(self):
        if self.dev.type == "cuda":
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(torch.cuda.current_stream(self.dev))
            return ev
        return time.perf_counter()

    def stop(self, started) -> None:
        if self.dev.type == "cuda":
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(torch.cuda.current_stream(self.dev))
            self.spans.append((started, ev))
        else:
            self.cpu_s += time.perf_counter() - started

    def total(self) -> float:
        sync(self.dev)
        return self.cpu_s + sum(a.elapsed_time(b) for a, b in self.spans) / 1000.0


def integer_reference(n: int, seed: int = 0) -> torch.Tensor:
    """The known-answer C computed in int64 integer arithmetic on the CPU, as float64."""
    e = _mix(torch.arange(n, dtype=torch.int64), seed + 1) % 5
    f = _mix(torch.arange(n, dtype=torch.int64), seed + 2) % 5
    a = _signed_ints(n, n, seed + 3, "cpu")
    b = _signed_ints(n, n, seed + 4, "cpu")
    exact = (a @ b) << (e.unsqueeze(1) + f.unsqueeze(0))
    return exact.double()
