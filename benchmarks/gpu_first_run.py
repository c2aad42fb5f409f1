"""The first hour on a GPU machine: every measurement benchmarks/RESULTS.md still lacks,
in one command, with rows to paste into RESULTS.md and the raw figures kept.

    python benchmarks/gpu_first_run.py --device-call    # one device call: under 6 minutes,
                                                        # most useful first, into $OUT
                                                        # (benchmarks/device_call.py)

    python benchmarks/gpu_first_run.py --out /tmp/first-run      # on a GPU machine
    python benchmarks/gpu_first_run.py --smoke --out /tmp/smoke    # anywhere, tiny sizes

It measures, on cuda:0 (or the CPU with --smoke):
1. the known-answer exactness claim on tensor cores: each bf16/fp16/fp32 product of the
   known-answer inputs at n = 2048, 4096, 8192 equals the exact product (a float64 GEMM
   of the same integer-valued inputs: every partial sum is an integer below 2**53, so it
   is exact), and the probe's own zero-tolerance verification finds nothing;
2. set-up of the known-answer inputs at n=8192 (built once per probe, copied to each
   device): seconds and host memory, against what building them per device cost;
3. the sdc and burn probes against a bare torch.mm loop (bf16, n=8192), via
   benchmarks/probe_vs_mm.py;
4. a 60 s burn with its NVML series, judged as the suite judges it;
5. the intra-node all-reduce against nccl-tests' all_reduce_perf where it is installed
   and there are two GPUs or more;
6. storage GB/s per GPU on --storage-path;
7. the memory and pcie probes, where this checkout has them;
8. the health, fabric and dcgm probes, each judged as the suite judges it (on a GPU: the
   NVLink fabric state, NVLink 5 counters and DCGM's severities on real hardware);
9. what issue 25 says only a real node can answer, each item checked or said why not
   ("no GPU" without one): the NVML symbols the real driver exports against what the
   emulator claims for its branch (tests/nvmlemu/drivers.py); the real dcgmi's JSON
   shape, where dcgmi is installed; each PCIe worker's CPUs against the GPU's sysfs
   local_cpulist; every GPU's MIG mode; the all-reduce's bus saturation size (up to
   2 GiB, two GPUs or more); the kernel log, read as the user running this.

Whichever module `import pynvml` finds: nvidia-ml-py's, or the old `pynvml` package's
(strings as bytes, fewer functions), is named in the facts and read as either.

Time on one H100 (8 minutes in all, reasoned from each part; the log prints each step's
seconds): exactness ~20 s (inputs built on the host at n up to 8192, float64 products on
the GPU); set-up cost ~5 s; each ratio benchmark 2 repeats x (8 s probe + 8 s bare loop +
~10 s of two interpreters starting torch and CUDA) ~55 s; the 60 s burn ~75 s; storage
(4 GB written and read) ~20 s; memory and pcie ~60 s; the judged probes ~30 s, and dcgmi
diag -r 1 ~60 s where installed; issue 25 ~30 s (a short pcie run, dcgmi again where
installed). About 7 minutes; the ratio benchmarks were 20 s x 2 each way (~110 s each)
and left no room for the judged probes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROBES = REPO / "probes"
sys.path.insert(0, str(PROBES))
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from first_run_checks import (  # noqa: E402  (beside this script, found through the path)
    _text,
    checklist,
    issue25,
    judged_probes,
    pynvml_source,
    run_probe,
)


def facts(gpu: bool) -> dict:
    import torch
    out = {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "host": platform.node(), "cpus": os.cpu_count(), "device": "CPU", "gpus": 0}
    if gpu:
        try:
            import pynvml
            out["nvml"] = pynvml_source()
            pynvml.nvmlInit()
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(0)
                out.update(device=_text(pynvml.nvmlDeviceGetName(h)),
                           driver=_text(pynvml.nvmlSystemGetDriverVersion()),
                           gpus=pynvml.nvmlDeviceGetCount())
            finally:
                pynvml.nvmlShutdown()
        except Exception as e:  # the facts say what they could not read, the run goes on
            out["nvml_error"] = f"{type(e).__name__}: {e}"
            out.update(device=torch.cuda.get_device_name(0), gpus=torch.cuda.device_count())
    return out


def exactness(gpu: bool, sizes: list[int], dtypes: list[str]) -> list[dict]:
    import gemmcore as core
    import torch
    dev = torch.device("cuda", 0) if gpu else torch.device("cpu")
    core.pin_determinism()
    rows = []
    for dtype in dtypes:
        for n in sizes:
            ka = core.KnownAnswer(core.KnownInputs(n, dtype), dev)
            c = ka.product(torch.empty(n, n, dtype=torch.float32, device=dev))
            exact = ka.A.double() @ ka.B.double()  # integer-valued: exact in float64
            flagged = int(ka.verify(c).sum())
            rows.append({"dtype": dtype, "n": n, "exact": bool(torch.equal(c.double(), exact)),
                         "verification_alarms": flagged})
            del ka, c, exact
    return rows


def setup_cost(n: int, devices: int) -> dict:
    """Building the known-answer inputs once, then a copy per device, against the old way
    (every device built its own, 8 at once on an 8-GPU node)."""
    import gemmcore as core
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    inputs = core.KnownInputs(n, "bf16")
    once = time.perf_counter() - t
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    return {"n": n, "devices": devices, "build_once_s": round(once, 2),
            "host_peak_rise_mib": round(peak), "inputs_mib": round(
                (inputs.A.numel() * 2 + inputs.B.numel() * 2) / 2**20)}


def probe_vs_mm(name: str, n: int, dtype: str, seconds: float, repeat: int, gpus,
                timeout_s: float = 3600) -> str:
    argv = [sys.executable, str(REPO / "benchmarks" / "probe_vs_mm.py"), "--probe", name,
            "--n", str(n), "--dtype", dtype, "--seconds", str(seconds), "--repeat",
            str(repeat)]
    if gpus is not None:
        argv += ["--gpus", str(gpus)]
    # Its own process group: past `timeout_s` the probes and bare loops it started go
    # with it, rather than holding the GPU through the steps after.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise RuntimeError(stderr[-2000:])
    return stdout.strip().splitlines()[-1]


def burn_series(seconds: float, gpus, n: int | None) -> dict:
    from burnin.checks import Fleet, Judging, resolve_settings
    from burnin.checks.burn import fleet_summary, judge
    from burnin.model.gpu_reference import GPU_MODELS
    from burnin.model.nodes import Node
    from burnin.probe.protocol import ProbeOutcome
    settings = {"duration_s": seconds, "sample_s": 1.0}
    if n:
        settings["n"] = n
    doc = run_probe("burn", {"gpus": gpus, "settings": settings}, timeout_s=seconds + 600)
    dev = doc["devices"][0]
    tel = dev.get("telemetry") or {}
    series = tel.get("series") or {}
    model = next((m for m in GPU_MODELS.values() if m.matches(str(dev.get("name")))), None)
    node = Node(name="this", address="this", gpus=gpus, gpu_model=model.key if model else None)
    outcome = ProbeOutcome("this", "burn", True, data=doc)
    verdict = judge(node, outcome, Judging(resolve_settings("burn", "standard", settings),
                                           fleet_summary(Fleet({"this": outcome})), model))
    def stat(key, fn):
        values = [v for v in series.get(key, []) if v is not None]
        return round(fn(values), 1) if values else None
    return {"device": dev.get("name"), "tflops": dev.get("tflops"),
            "temp_max_c": stat("temp_c", max), "sm_mhz_mean": stat("sm_mhz",
                                                                    lambda v: sum(v) / len(v)),
            "power_max_w": stat("power_w", max), "samples": len(series.get("t", [])),
            "errors": doc["errors"], "verdict": list(verdict.failures) or "passed",
            "warnings": list(verdict.warnings)}


def nccl_tests(gpus: int) -> str:
    exe = shutil.which("all_reduce_perf")
    if gpus < 2:
        return f"not measured: {gpus} GPU (an all-reduce needs two or more)"
    if exe is None:
        return "not measured: nccl-tests' all_reduce_perf is not installed"
    done = subprocess.run([exe, "-b", "1M", "-e", "1G", "-f", "2", "-g", str(gpus)],
                          capture_output=True, text=True, timeout=1800)
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 else done.stderr[-500:]


def storage(path: str, gpus, size_gb: float) -> dict:
    doc = run_probe("storage", {"gpus": gpus, "storage": {"path": path},
                                "settings": {"size_gb": size_gb}})
    return {k: doc["figures"].get(k) for k in ("filesystem", "direct", "streams")} | {
        "read_per_gpu_min": doc["figures"]["read"].get("per_gpu_min"),
        "write_per_gpu_min": doc["figures"]["write"].get("per_gpu_min"),
        "errors": doc["errors"]}


def other_probes(gpus, small: bool = False) -> dict:
    out = {}
    # small: a MiB of host memory held a moment, not the probe's default 256 MiB for 30 s
    tiny = {"memory": {"host_bytes": 1 << 20, "retention_s": 0.2}} if small else {}
    for name in ("memory", "pcie"):
        if (PROBES / f"{name}.py").exists() and (gpus or name == "memory"):
            doc = run_probe(name, {"gpus": gpus, "settings": tiny.get(name, {})})
            out[name] = {"errors": doc["errors"], "figures": doc["figures"],
                         "devices": doc["devices"][:1]}
    return out


def train(gpus, small: bool) -> dict:
    """The train check's figures (issue 41): tokens/s, step times, compute against
    communication, and MFU over the measured GEMM rate and over the model's datasheet
    peak: the first measured MFU, from which a floor per model can be set."""
    from burnin.model.gpu_reference import GPU_MODELS
    tiny = {"d_model": 64, "layers": 1, "heads": 2, "seq_len": 32, "vocab": 128, "batch": 4,
            "gemm_n": 128, "gemm_s": 0.1}
    doc = run_probe("train", {"gpus": gpus, "settings": {"steps": 5 if small else 50,
                                                         **(tiny if small else {})}})
    fig, ranks = doc["figures"], doc["devices"]
    name = ranks[0].get("name") if ranks else None
    peak = next((m.peak_tflops for m in GPU_MODELS.values() if name in m.nvml_names), None)
    keys = ("tokens_per_s", "model_tflops", "gemm_tflops", "mfu", "shape", "dtype", "world",
            "diverged")
    return {"errors": doc["errors"], **{k: fig.get(k) for k in keys},
            "mfu_of_datasheet_peak": fig["model_tflops"] / len(ranks) / peak
            if peak and ranks and fig.get("model_tflops") else None,
            "loss_first_last": [fig["losses"][0], fig["losses"][-1]] if fig.get("losses")
            else None,
            "ranks": [{k: r.get(k) for k in ("device", "step_s", "step_spread", "compute_s",
                                             "comm_s", "tokens_per_s", "gemm_tflops")}
                      for r in ranks]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="folder for the raw figures (--device-call: "
                   "default $OUT)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, the CPU: does it run?")
    p.add_argument("--storage-path", default=None, help="where storage writes (default "
                   "/tmp; --device-call: a folder beside this checkout, removed after)")
    p.add_argument("--device-call", action="store_true", help="the steps that fit one "
                   "device call of under 6 minutes, most useful first "
                   "(benchmarks/device_call.py)")
    args = p.parse_args()
    if args.device_call:
        import device_call
        return device_call.run(device_call.out_dir(args.out), args.smoke, args.storage_path)
    if args.out is None:
        p.error("--out is required")
    args.storage_path = args.storage_path or "/tmp"
    args.out.mkdir(parents=True, exist_ok=True)
    import torch
    gpu = torch.cuda.is_available() and not args.smoke
    gpus = torch.cuda.device_count() if gpu else 0
    small = args.smoke
    try:
        results: dict = {"facts": facts(gpu)}
    except Exception as e:  # never the end of the run: each step still measures
        results = {"facts": {"device": "unknown", "failed": f"{type(e).__name__}: {e}"}}
    # Each ratio benchmark: 2 repeats of 8 s per side (see the module's time budget).
    ratio_s, repeats = (0.5, 1) if small else (8, 2)
    steps = [
        ("exactness", lambda: exactness(gpu, [64] if small else [2048, 4096, 8192],
                                        ["fp32"] if not gpu else ["bf16", "fp16", "fp32"])),
        ("setup_cost", lambda: setup_cost(256 if small else 8192, 8)),
        ("sdc_vs_mm", lambda: probe_vs_mm("sdc", 128 if small else 8192,
                                          "fp32" if not gpu else "bf16", ratio_s, repeats,
                                          None if gpu else 0)),
        ("burn_vs_mm", lambda: probe_vs_mm("burn", 128 if small else 8192,
                                           "fp32" if not gpu else "bf16", ratio_s, repeats,
                                           None if gpu else 0)),
        ("burn_60s", lambda: burn_series(2 if small else 60, gpus if gpu else 0,
                                         128 if small else None)),
        ("allreduce_vs_nccl_tests", lambda: nccl_tests(gpus)),
        ("storage", lambda: storage(args.storage_path, gpus if gpu else 0,
                                    0.02 if small else 4)),
        ("memory_pcie", lambda: other_probes(gpus if gpu else 0, small)),
        ("judged_probes", lambda: judged_probes(gpus if gpu else 0)),
        ("train", lambda: train(gpus if gpu else 0, small)),
        ("issue25", lambda: issue25(gpu, gpus if gpu else 0)),
    ]
    for name, step in steps:
        t = time.perf_counter()
        try:
            results[name] = step()
        except Exception as e:  # one step's failure is that step's result
            results[name] = {"failed": f"{type(e).__name__}: {e}"}
        print(f"{name} ({time.perf_counter() - t:.0f} s): {json.dumps(results[name])}",
              flush=True)
        (args.out / "first_run.json").write_text(json.dumps(results, indent=1))
    if isinstance(results.get("issue25"), dict) and "failed" not in results["issue25"]:
        print("\n".join(checklist(results["issue25"])))
    failed = [n for n, r in results.items() if isinstance(r, dict) and "failed" in r]
    print(f"first run on {results['facts']['device']}: {len(steps) - len(failed)} of "
          f"{len(steps)} steps measured" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
