"""`benchmarks/gpu_first_run.py --device-call`: the first GPU run shaped for one device
call of under 6 minutes on one H100 or H200, nothing carried (torch, nvidia-ml-py and
PyYAML only; the repository tree as it is, no venv), the most useful steps first:

  step              budget   what only a real GPU answers
  facts               10 s   torch, CUDA, driver, NVML and the GPUs
  nvml_raw            15 s   the fabric struct's bytes (the one-byte state), NVLink link
                             states, NVLink 5 and DL counters as NVML answers them
  probes_judged      165 s   every single-node probe but train, run as a local node runs
                             it and judged by its Check (a fleet of this one node)
  train_twice         60 s   the train probe twice: the same job gives the same digest
                             (the sdc and train consensus rules rest on it)
  sdc_exactness       25 s   the known-answer GEMM exact in bf16, fp16 and fp32
  ratios_vs_cublas    55 s   the sdc and burn probes against a bare torch.mm loop
                    ------
                     330 s   (the summary is printed after; a step whose budget no longer
                             fits what is left of --deadline-s is skipped, and says so)

Each step's result is written to OUT/first_run.json as it lands (OUT: --out, else $OUT),
so a call cut short still returns what finished. A step that starts probes or benchmark
interpreters bounds each by what is left of its share of the deadline (the time left less
the later steps' budgets, and never under FLOOR_S), so a hung one costs that step, not the
call. The storage probe writes 256 MB under --storage-path (default: a folder beside this
checkout, on its disk rather than the VM's /tmp, whose tmpfs refuses O_DIRECT; where that
folder cannot be made, one inside the checkout, then the temporary directory) and removes
it.
`--smoke` runs the same steps on the CPU at tiny sizes (tests/test_first_run.py).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROBES = REPO / "probes"
for _p in (str(PROBES), str(REPO), str(REPO / "benchmarks")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

BUDGET_S = {"facts": 10, "nvml_raw": 15, "probes_judged": 165, "train_twice": 60,
            "sdc_exactness": 25, "ratios_vs_cublas": 55}
# ratios: per probe, a probe and a bare loop of 4 s each, and two interpreters starting
# torch and CUDA (about 8 s each): 2 x 26 s.
DEADLINE_S = 330  # the budgets' sum: under 6 minutes, inside a 540 s call with room
# Per probe inside probes_judged (one GPU; a probe's start, torch and CUDA included), and
# the settings that keep it there. dcgm runs only where dcgmi is installed.
PROBE_BUDGET_S = {"health": 15, "pcie": 15, "gpupairs": 10, "memory": 20, "dcgm": 60,
                  "sdc": 15, "burn": 25, "storage": 15, "allreduce": 15,
                  "collectives": 15, "fabric": 12}
SHORT = {"pcie": {"seconds": 0.5, "rounds": 2}, "memory": {"retention_s": 1},
         "sdc": {"duration_s": 8}, "burn": {"duration_s": 12}, "storage": {"size_gb": 0.25}}
TINY = {"pcie": {"seconds": 0.1, "rounds": 1, "block_mb": 4},
        "gpupairs": {"seconds": 0.05, "rounds": 1},
        "memory": {"host_bytes": 1 << 20, "retention_s": 0.1},
        "sdc": {"duration_s": 0.5, "n": 128}, "burn": {"duration_s": 1, "n": 128},
        "storage": {"size_gb": 0.01}, "fabric": {"window_s": 0.1},
        "train": {"steps": 3, "d_model": 64, "layers": 1, "heads": 2, "seq_len": 32,
                  "vocab": 128, "batch": 4, "gemm_n": 128, "gemm_s": 0.05}}
# The smoke run judges these few through the same path (each probe's own tests run the
# others on the CPU): a test of the path, kept to seconds.
SMOKE_PROBES = ("sdc", "storage", "fabric")
# nvml.h field ids read raw: the NVLink data ECC total, the NVLink 5 COUNT error fields,
# their recoveries and BERs (probes/nvlink5.py names them).
RAW_FIELDS = (160, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 219, 220, 221, 222)
ALL_LINKS = 0xFFFFFFFF
# Where storage writes when --storage-path is not given, the first that can be made.
STORAGE_CANDIDATES = (REPO.parent / "burnin-first-run-storage", REPO / ".first-run-storage")
FLOOR_S = 20  # the least a probe or benchmark is given, however late its step runs


class Results:
    """first_run.json, rewritten whole after every step."""

    def __init__(self, out: Path):
        self.path, self.data = out / "first_run.json", {"steps": {}}
        out.mkdir(parents=True, exist_ok=True)

    def put(self, name: str, value, seconds: float, status: str) -> None:
        self.data["steps"][name] = {"status": status, "seconds": round(seconds, 1),
                                    "budget_s": BUDGET_S[name], "result": value}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)


def facts(gpu: bool) -> dict:
    from gpu_first_run import facts as first_facts
    return first_facts(gpu)


def nvml_raw() -> dict:
    """What NVML answers, before burnin interprets it: per GPU the fabric struct's bytes,
    its state read as one byte and as pynvml's four, each link's state, the raw field
    values per link 0 and over every link, and the DL counters of link 0."""
    import gpufabric
    import nvlink5
    import pynvml as nv
    nv.nvmlInit()
    try:
        return {"driver": _call(nv.nvmlSystemGetDriverVersion),
                "gpus": [_gpu_raw(nv, gpufabric, nvlink5, i)
                         for i in range(nv.nvmlDeviceGetCount())]}
    finally:
        nv.nvmlShutdown()


def _call(fn, *args):
    try:
        v = fn(*args)
        return v.decode() if isinstance(v, bytes) else v
    except Exception as e:  # NVML's refusal is a finding, recorded as it came
        return {"error": f"{type(e).__name__}: {e}"}


def _gpu_raw(nv, gpufabric, nvlink5, index: int) -> dict:
    h = nv.nvmlDeviceGetHandleByIndex(index)
    out = {"name": _call(nv.nvmlDeviceGetName, h), "uuid": _call(nv.nvmlDeviceGetUUID, h),
           "architecture": _call(getattr(nv, "nvmlDeviceGetArchitecture", lambda h: None), h),
           "fabric": _fabric_raw(nv, h), "fabric_read": _call(gpufabric.read, nv, h)}
    states = {}
    for link in range(36):  # nvml.h NVML_NVLINK_MAX_LINKS
        states[link] = _call(nv.nvmlDeviceGetNvLinkState, h, link)
        if isinstance(states[link], dict) and link:
            break  # past the GPU's last link
    out["nvlink_state"] = states
    out["nvlink_version_link0"] = _call(nv.nvmlDeviceGetNvLinkVersion, h, 0)
    for scope, key in ((0, "fields_link0"), (ALL_LINKS, "fields_all_links")):
        try:
            values = nv.nvmlDeviceGetFieldValues(h, [(f, scope) for f in RAW_FIELDS])
            out[key] = {str(f): {"return": v.nvmlReturn, "type": v.valueType,
                                 "value": getattr(v.value, nvlink5.VALUE.get(v.valueType,
                                                                             "ullVal"))}
                        for f, v in zip(RAW_FIELDS, values, strict=True)}
        except Exception as e:
            out[key] = {"error": f"{type(e).__name__}: {e}"}
    out["dl_counters_link0"] = {c: _call(nv.nvmlDeviceGetNvLinkErrorCounter, h, 0, c)
                                for c in range(4)}
    out["nvlink5_read"] = {"link0": _call(nvlink5.read, nv, h, 0),
                           "gpu": _call(nvlink5.read_gpu, nv, h)}
    return out


def _fabric_raw(nv, h) -> dict:
    for struct, version in (("c_nvmlGpuFabricInfo_v3_t", "nvmlGpuFabricInfo_v3"),
                            ("c_nvmlGpuFabricInfo_v2_t", "nvmlGpuFabricInfo_v2")):
        if not hasattr(nv, struct):
            continue
        info = getattr(nv, struct)()
        info.version = getattr(nv, version)
        try:
            nv.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))
        except Exception as e:
            last = {"struct": struct, "error": f"{type(e).__name__}: {e}"}
            continue
        offset = type(info).state.offset
        raw = bytes(memoryview(info).cast("B"))
        return {"struct": struct, "bytes": raw.hex(), "state_offset": offset,
                "state_byte": raw[offset], "state_as_c_uint": int(info.state),
                "padding": raw[offset + 1:offset + 4].hex()}
    return last if "last" in locals() else {"error": "no fabric struct in this pynvml"}


def _node(gpus: int, model, storage: str):
    from burnin.model.nodes import Node, StorageSettings
    return Node(name="this", address="this", transport="local", gpus=gpus,
                gpu_model=model.key if model else None,
                storage=StorageSettings(path=storage))


def judged(name: str, node, model, overrides: dict, extra: dict | None = None,
           timeout_s: float | None = None) -> tuple[dict, object]:
    """One probe run through the local transport as the suite runs it, its document held
    to the Check's schema, and judged by the Check over a fleet of this node."""
    from burnin.checks import CHECKS, Fleet, Judging, resolve_settings
    from burnin.probe.protocol import payload, run_probe
    from burnin.transports.local import LocalTransport
    check = CHECKS[name]
    settings = resolve_settings(name, "quick", overrides.get(name, {}))
    body = payload(name, node, "first-run", "quick", node.gpus, settings) | (extra or {})
    t = time.perf_counter()
    o = run_probe(LocalTransport(node, PROBES, "first-run"), check.probe_name, body,
                  float(timeout_s or settings["timeout_s"]),
                  max_output=check.output_limit(settings, node.gpus or node.cpu_devices),
                  schema=check.schema_for(settings, node.gpus or node.cpu_devices))
    took = round(time.perf_counter() - t, 1)
    if not o.ok:
        return {"seconds": took, "verdict": [o.reason]}, o
    devices = node.gpus or node.cpu_devices  # what the node's probes must report
    fleet = Fleet({"this": o}, {"this": devices}, {"this": model}, {"this": node})
    summary = check.summarize(fleet) if check.summarize else None
    v = check.judge(node, o, Judging(settings, summary, model, devices, node.gpus))
    return {"seconds": took, "verdict": list(v.failures) or "passed",
            "warnings": list(v.warnings), "errors": o.data.get("errors")}, o


def probes_judged(gpus: int, storage: str, small: bool, left) -> dict:
    from burnin.checks import CHECKS, FACTS, resolve_settings
    from burnin.checks.health import facts_baseline
    from burnin.model.gpu_reference import GPU_MODELS
    overrides = TINY if small else SHORT
    out: dict = {}
    node = _node(gpus, None, storage)
    tools = {c.name: c.tool(resolve_settings(c.name, "quick")) for c in CHECKS.values()
             if c.tool is not None}
    baselines = {c.name: c.baseline(resolve_settings(c.name, "quick", overrides.get(c.name,
                                                                                  {})))
                 for c in CHECKS.values() if c.baseline is not None}
    out[FACTS], facts_outcome = judged(FACTS, node, None, overrides,
                                       {"tools": tools, "baselines": baselines}, 60)
    names = [str(d.get("name")) for d in (facts_outcome.data or {}).get("devices", [])]
    model = next((m for m in GPU_MODELS.values() if names and all(m.matches(n)
                                                                  for n in names)), None)
    node = _node(gpus, model, storage)
    out["model"] = model.key if model else None
    for name, spec in CHECKS.items():
        if name in (FACTS, "train") or spec.execute is not None:
            continue  # train runs twice in its own step; groups need several nodes
        if spec.gpu_only and not gpus:
            out[name] = "not applicable: no GPU"
            continue
        if small and name not in SMOKE_PROBES:
            out[name] = "not run in smoke: its own tests run it on the CPU"
            continue
        budget = PROBE_BUDGET_S.get(name, 15)
        if left() < budget:
            out[name] = f"skipped: {left():.0f} s left of the step, {budget} s needed"
            continue
        extra = {"baseline": facts_baseline(facts_outcome, name)} \
            if spec.baseline is not None else None
        try:
            # Twice its budget at most, and never past what is left of the step.
            out[name], _ = judged(name, node, model, overrides, extra,
                                  timeout_s=max(5.0, min(budget * 2, left())))
        except Exception as e:  # one probe's failure is that probe's result
            out[name] = {"failed": f"{type(e).__name__}: {e}"}
    return out


def train_twice(gpus: int, small: bool, left=lambda: 1e6) -> dict:
    """The same job twice: its digest must be the same bits both times. Each run is
    bounded by what is left of the step (`left()`, at least FLOOR_S)."""
    from burnin.model.gpu_reference import GPU_MODELS
    node = _node(gpus, None, "/nonexistent")
    runs = []
    for _ in range(2):
        verdict, o = judged("train", node, None, TINY if small else {},
                            timeout_s=max(FLOOR_S, left()))
        fig = o.data.get("figures", {}) if o.ok else {}
        runs.append({**verdict, **{k: fig.get(k) for k in (
            "digest", "job", "tokens_per_s", "model_tflops", "mfu", "dtype", "diverged")}})
    names = [r.get("name") for r in (o.data.get("devices") or [])] if o.ok else []
    peak = next((m.peak_tflops for m in GPU_MODELS.values() if names and names[0] in
                 m.nvml_names), None)
    same = runs[0].get("digest") is not None and runs[0]["digest"] == runs[1]["digest"] \
        and runs[0]["job"] == runs[1]["job"]
    return {"same_digest": same, "runs": runs, "datasheet_peak_tflops": peak}


def sdc_exactness(gpu: bool, small: bool) -> list[dict]:
    from gpu_first_run import exactness
    return exactness(gpu, [64] if small else [2048, 8192],
                     ["bf16", "fp16", "fp32"] if gpu else ["fp32"])


def ratios(gpu: bool, small: bool, left=lambda: 1e6) -> dict:
    """Each probe against a bare loop, each pair bounded by what is left of the step
    (`left()`, at least FLOOR_S): a pair past it is that pair's result, not the step's."""
    import gpu_first_run
    seconds, n = (0.3, 128) if small else (4, 8192)
    dtype = "bf16" if gpu else "fp32"
    out: dict = {}
    # The smoke run's CPU time is four interpreters starting torch: burn's pair is left to
    # the GPU, where it is the figure.
    for name in ("sdc",) if small else ("sdc", "burn"):
        try:
            out[name] = gpu_first_run.probe_vs_mm(name, n, dtype, seconds, 1,
                                                  None if gpu else 0,
                                                  timeout_s=max(FLOOR_S, left()))
        except subprocess.TimeoutExpired as e:
            out[name] = {"failed": f"not done within {e.timeout:.0f} s"}
    return out


def summary(data: dict) -> list[str]:
    lines = ["step               status     seconds  budget  result"]
    for name, s in data["steps"].items():
        short = json.dumps(s["result"], default=str)
        lines.append(f"{name:<18} {s['status']:<10} {s['seconds']:>7} {s['budget_s']:>7}  "
                     f"{short[:160]}")
    return lines


def run(out: Path, smoke: bool, storage: str | None, deadline_s: float = DEADLINE_S) -> int:
    import torch
    start = time.monotonic()
    gpu = torch.cuda.is_available() and not smoke
    deadline_s = 1e6 if smoke else deadline_s  # the CPU's pace is not the budget's
    gpus = torch.cuda.device_count() if gpu else 0
    results = Results(out)
    store = storage_dir(storage)

    def left() -> float:
        return deadline_s - (time.monotonic() - start)

    def share(step: str):
        """What is left for `step`: the time left less the later steps' budgets."""
        later = sum(list(BUDGET_S.values())[list(BUDGET_S).index(step) + 1:])
        return lambda: left() - later

    steps = [("facts", lambda: facts(gpu)), ("nvml_raw", nvml_raw),
             ("probes_judged", lambda: probes_judged(gpus, str(store), smoke,
                                                     share("probes_judged"))),
             ("train_twice", lambda: train_twice(gpus, smoke, share("train_twice"))),
             ("sdc_exactness", lambda: sdc_exactness(gpu, smoke)),
             ("ratios_vs_cublas", lambda: ratios(gpu, smoke, share("ratios_vs_cublas")))]
    try:
        for name, step in steps:
            if left() < BUDGET_S[name] and not smoke:
                results.put(name, f"skipped: {left():.0f} s left, {BUDGET_S[name]} s "
                            "budgeted", 0.0, "skipped")
                continue
            t = time.monotonic()
            try:
                value, status = step(), "done"
            except Exception as e:  # one step's failure is that step's result
                value, status = {"failed": f"{type(e).__name__}: {e}"}, "failed"
            results.put(name, value, time.monotonic() - t, status)
            print(f"{name}: {status} in {time.monotonic() - t:.0f} s", flush=True)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    print("\n".join(summary(results.data)))
    done = [n for n, s in results.data["steps"].items() if s["status"] == "done"]
    print(f"device call on {_device(results.data)}: {len(done)} of {len(steps)} steps "
          f"done in {time.monotonic() - start:.0f} s; first_run.json in {out}")
    return 0 if len(done) == len(steps) else 1


def storage_dir(given: str | None) -> Path:
    """Where storage writes: `given`, else the first of STORAGE_CANDIDATES that can be
    made, else a new temporary directory: never the end of the call (a checkout whose
    parent is read-only once stopped it before its first step)."""
    for path in ([Path(given)] if given else []) + list(STORAGE_CANDIDATES):
        try:
            path.mkdir(parents=True, exist_ok=True)
            return path
        except OSError:
            continue
    return Path(tempfile.mkdtemp(prefix="burnin-first-run-storage-"))


def _device(data: dict) -> str:
    f = data["steps"].get("facts", {}).get("result") or {}
    return f.get("device", "unknown") if isinstance(f, dict) else "unknown"


def out_dir(given: Path | None) -> Path:
    if given is not None:
        return given
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"])
    raise SystemExit("--device-call: give --out DIR, or run where $OUT is set")


if __name__ == "__main__":  # python benchmarks/device_call.py: the same as --device-call
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_first_run.py"),
                    "--device-call", *sys.argv[1:]], check=False)
