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
import time

import torch

MAX_EXACT_N = 8192
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
CHECKS = ("nonintegral", "rows", "weighted", "cols")


def devices(gpus) -> list[torch.device]:
    """The devices to load: every visible GPU, or the CPU on a CPU-only node (gpus 0)."""
    if gpus == 0 or not torch.cuda.is_available():
        return [torch.device("cpu")]
    count = torch.cuda.device_count()
    return [torch.device("cuda", i) for i in range(count if gpus is None else min(gpus, count))]


def describe(dev: torch.device) -> dict:
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        return {"device": str(dev), "name": p.name, "uuid": str(getattr(p, "uuid", "")),
                "memory_bytes": p.total_memory}
    return {"device": "cpu", "name": _cpu_model(), "threads": torch.get_num_threads()}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def pin_determinism() -> None:
    """No TF32, no reduced-precision reductions, deterministic algorithms: a product of
    the same inputs is then the same bits every time (CUBLAS_WORKSPACE_CONFIG is set by
    each probe before torch starts CUDA)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.use_deterministic_algorithms(True)


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _mix(x: torch.Tensor, salt: int) -> torch.Tensor:
    # A small integer hash (splitmix-like, kept below 2**31 so int64 never overflows):
    # the same inputs on every node, with no dependence on a random number generator.
    x = ((x % 2147483647) * 2654435761 + salt * 40503 + 12345) % 2147483647
    x = (x ^ (x >> 13)) * 1274126177 % 2147483647
    return x ^ (x >> 16)


def _signed_ints(rows: int, cols: int, salt: int, dev) -> torch.Tensor:
    i = torch.arange(rows, device=dev, dtype=torch.int64).unsqueeze(1)
    j = torch.arange(cols, device=dev, dtype=torch.int64).unsqueeze(0)
    h = _mix(i * 1000003 + j, salt)
    magnitude = (h >> 3) % 32 + 1
    return torch.where((h & 1) == 1, -magnitude, magnitude)


class KnownAnswer:
    """One known-answer product on one device, with its exact expected checksums."""

    def __init__(self, n: int, dtype: str, dev: torch.device, seed: int = 0):
        if n > MAX_EXACT_N:
            raise ValueError(f"known-answer GEMMs are exact up to n={MAX_EXACT_N}, not {n}")
        self.n, self.dtype, self.dev = n, dtype, dev
        # Inputs and expected checksums are made on the CPU: the device under test
        # computes the products, never the answers it is checked against.
        cpu = torch.device("cpu")
        e = _mix(torch.arange(n, dtype=torch.int64), seed + 1) % 5
        f = _mix(torch.arange(n, dtype=torch.int64), seed + 2) % 5
        a64 = _signed_ints(n, n, seed + 3, cpu).double() * torch.exp2(e.double()).unsqueeze(1)
        b64 = _signed_ints(n, n, seed + 4, cpu).double() * torch.exp2(f.double()).unsqueeze(0)
        self.W = torch.stack([torch.ones(n, dtype=torch.float64), weights(n, cpu)], dim=1)
        self.exp_rows = (a64 @ (b64 @ self.W)).to(dev)  # [C.1, C.w] = A.(B.[1, w])
        self.exp_cols = (torch.ones(n, dtype=torch.float64) @ a64 @ b64).to(dev)
        self.W = self.W.to(dev)
        self.A = a64.to(DTYPES[dtype]).to(dev)
        self.B = b64.to(DTYPES[dtype]).to(dev)
        self.inputs_digest = hashlib.sha256(
            (digest(self.A) + digest(self.B)).encode()).hexdigest()

    def product(self, out: torch.Tensor) -> torch.Tensor:
        return mm_fp32_out(self.A, self.B, out)

    def verify(self, C: torch.Tensor) -> torch.Tensor:
        """Counts of CHECKS for product C, as a device tensor: no host synchronisation.

        An element that is not an integer (a low bit flipped on a small value, or NaN
        or Inf: their frac is NaN) is counted directly; every other error changes an
        exact row, weighted-row or column sum. Two passes over C in float64, as GEMVs.
        """
        Cd = C.double()
        sums = Cd @ self.W
        cols = self.W[:, 0] @ Cd
        return torch.stack([
            torch.count_nonzero(torch.frac(C)),
            (sums[:, 0] != self.exp_rows[:, 0]).sum(),
            (sums[:, 1] != self.exp_rows[:, 1]).sum(),
            (cols != self.exp_cols).sum(),
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


def mm_fp32_out(A: torch.Tensor, B: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """A @ B into `out` (fp32), bf16/fp16 inputs accumulated and stored in fp32."""
    if A.dtype == torch.float32:
        return torch.mm(A, B, out=out)
    if A.device.type != "cuda":
        raise RuntimeError(f"an fp32-output {A.dtype} GEMM needs CUDA; use dtype fp32 on CPU")
    return torch.mm(A, B, out_dtype=torch.float32, out=out)


def digest(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's bytes (copied to the host once)."""
    host = t.detach().contiguous().cpu()
    buf = (ctypes.c_char * (host.numel() * host.element_size())).from_address(host.data_ptr())
    return hashlib.sha256(memoryview(buf)).hexdigest()


class Timer:
    """Time spans on a device without a host synchronisation per span (CUDA events), or
    plainly on the CPU; total() synchronises once."""

    def __init__(self, dev: torch.device):
        self.dev, self.spans, self.cpu_s = dev, [], 0.0

    def start(self):
        if self.dev.type == "cuda":
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def stop(self, started) -> None:
        if self.dev.type == "cuda":
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
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
