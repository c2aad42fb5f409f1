"""The first GPU run's probes and items, apart from its measurements: each probe run as a
node runs it, the health, fabric and dcgm probes judged as the suite judges them, the
`pynvml` module named by the distribution it comes from, and issue 25's questions only a
real node answers. benchmarks/gpu_first_run.py drives them; tests/test_first_run.py runs
them on the CPU and the NVML emulator."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROBES = REPO / "probes"
for _p in (str(PROBES), str(REPO)):
    if _p not in sys.path:
        sys.path.insert(0, _p)


def run_probe(name: str, payload: dict, timeout_s: float = 1800) -> dict:
    done = subprocess.run([sys.executable, str(PROBES / f"{name}.py")],
                          input=json.dumps(payload), capture_output=True, text=True,
                          timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"{name} probe failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def _text(value) -> str:
    """NVML's strings: str from nvidia-ml-py, bytes from the old pynvml package."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def pynvml_source() -> str:
    """Which distribution the importable `pynvml` module comes from, and its version:
    nvidia-ml-py (NVIDIA's), or the old `pynvml` package (gpuopenanalytics), whose API
    differs (bytes, fewer functions); 'unknown' where no metadata says."""
    from importlib import metadata
    try:
        dists = metadata.packages_distributions().get("pynvml") or []
    except Exception:  # metadata of some other package unreadable: not this script's fault
        dists = []
    for dist in dists or ["nvidia-ml-py", "pynvml"]:
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "unknown (no package metadata for the pynvml module)"


def judged_probes(gpus: int) -> dict:
    """The health, fabric and dcgm probes on this node, each judged by its Check as the
    suite judges it (a fleet of this one node): the verdict, and what it read."""
    from burnin.checks import CHECKS, Fleet, Judging, resolve_settings
    from burnin.model.gpu_reference import GPU_MODELS
    from burnin.model.nodes import Node
    from burnin.probe.protocol import ProbeOutcome
    out: dict = {}
    model = None
    for name in ("health", "fabric", "dcgm"):
        check = CHECKS[name]
        settings = resolve_settings(name, "quick", {"level": 1} if name == "dcgm" else {})
        payload = {"gpus": gpus, "settings": settings}
        if name == "health":
            payload["tools"] = {"dcgm": settings.get("dcgmi", "dcgmi")}
        try:
            doc = run_probe(name, payload, timeout_s=float(settings["timeout_s"]))
            if model is None:
                names = [str(d.get("name")) for d in doc["devices"]]
                model = next((m for m in GPU_MODELS.values() if names and all(
                    m.matches(n) for n in names)), None)
            node = Node(name="this", address="this", gpus=gpus,
                        gpu_model=model.key if model else None)
            outcome = ProbeOutcome("this", name, True, data=doc)
            fleet = Fleet({"this": outcome}, {"this": gpus}, {"this": model})
            summary = check.summarize(fleet) if check.summarize else None
            v = check.judge(node, outcome, Judging(settings, summary, model, gpus, gpus))
            out[name] = {"verdict": list(v.failures) or "passed",
                         "warnings": list(v.warnings), "errors": doc["errors"],
                         "read": _what_it_read(name, doc)}
        except Exception as e:  # one probe's failure is that probe's result
            out[name] = {"failed": f"{type(e).__name__}: {e}"}
    out["model"] = model.key if model else None
    return out


def _what_it_read(name: str, doc: dict) -> dict:
    """The figures this run exists to see on real hardware, per probe."""
    if name == "health":
        return {"fabric": [d.get("fabric") for d in doc["devices"]],
                "imex": (doc["figures"].get("gpu") or {}).get("imex"),
                "unsupported": sorted({u for d in doc["devices"]
                                       for u in d.get("unsupported", [])})}
    if name == "fabric":
        return {"nvlink": [(d.get("nvlink") or {}).get("links") for d in doc["devices"]],
                "counters_link0": [((d.get("nvlink") or {}).get("counters") or {}).get("0")
                                   for d in doc["devices"]]}
    return {k: doc["figures"].get(k) for k in ("applies", "exit_status", "version", "why")}


# --- issue 25: what the emulator assumed, asked of the real node ---------------------------

def nvml_symbols(gpu: bool) -> dict:
    """Each symbol the emulator declares: does the real libnvidia-ml.so.1 export it, and
    does the emulator say this driver's branch does?"""
    if not gpu:
        return {"not_checked": "no GPU"}
    import ctypes

    import pynvml
    sys.path.insert(0, str(REPO / "tests"))
    from nvmlemu import drivers
    from nvmlemu.declarations import SYMBOLS
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    pynvml.nvmlInit()
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
    finally:
        pynvml.nvmlShutdown()
    version = _text(version)
    branch = drivers.branch_of(version)
    real = {name for name in SYMBOLS if hasattr(lib, name)}  # dlsym, as pynvml resolves
    claimed = {name for name in SYMBOLS if drivers.exports(name, branch)}
    return {"driver": version, "branch": branch.name, "symbols": len(SYMBOLS),
            "claimed_but_missing": sorted(claimed - real),
            "exported_but_not_claimed": sorted(real - claimed)}


def dcgmi_shape(gpu: bool) -> dict:
    """The real `dcgmi diag -r 1 -j`: its exit status and the document's shape, as the
    dcgm probe reads it (probes/dcgm.py)."""
    if not gpu:
        return {"not_checked": "no GPU"}
    exe = shutil.which("dcgmi")
    if exe is None:
        return {"not_checked": "dcgmi is not installed"}
    import dcgm
    done = subprocess.run([exe, "diag", "-r", "1", "-j"], capture_output=True, text=True,
                          timeout=900)
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"exit_status": done.returncode, "json": False,
                "stdout": done.stdout[-1000:], "stderr": done.stderr[-1000:]}
    results = dcgm.parse(doc)
    entity_keys = sorted({k for c in dcgm._dicts(dcgm.body_of(doc).get("test_categories"))
                          for t in dcgm._dicts(c.get("tests"))
                          for r in dcgm._dicts(t.get("results"))
                          for k in ("entity_id", "entity_group", "gpu_id", "gpu_ids") if k in r})
    return {"exit_status": done.returncode, "json": True, "root_keys": sorted(doc)[:20],
            "version": dcgm.version_of(doc), "results": len(results),
            "statuses": sorted({r["status"] for r in results}), "entity_keys": entity_keys,
            "severities": sorted({str(w.get("severity")) for r in results
                                  for w in r["warnings"]})}


def numa_binding(gpus: int) -> dict:
    """Each PCIe worker's CPUs (the pcie probe's record) against the GPU's local_cpulist
    as sysfs gives it, read here independently."""
    if not gpus:
        return {"not_checked": "no GPU"}
    import locality
    doc = run_probe("pcie", {"gpus": gpus, "settings": {"seconds": 0.5, "rounds": 1}})
    rows = []
    for dev in doc["devices"]:
        aff = dev.get("affinity") or {}
        bus = dev.get("pci_bus_id")
        text = locality._read(f"/sys/bus/pci/devices/{locality._sysfs_bdf(bus)}/local_cpulist") \
            if bus else None
        cpus = set(locality.parse_cpulist(aff["cpus"])) if aff.get("cpus") else set()
        local = set(locality.parse_cpulist(text)) if text else set()
        rows.append({"device": dev.get("device"), "bound": aff.get("bound"),
                     "numa_node": aff.get("numa_node"), "source": aff.get("source"),
                     "cpus": aff.get("cpus"), "sysfs_local_cpulist": text,
                     "within_local": bool(cpus) and bool(local) and cpus <= local,
                     "why": aff.get("why")})
    return {"devices": rows, "all_within_local": all(r["within_local"] for r in rows),
            "errors": doc["errors"]}


def mig_modes(gpu: bool) -> dict:
    """Every GPU's MIG mode (current, pending) as NVML reads it, and what the probes make
    of it (probelib.mig_gpus: the GPUs with MIG on)."""
    if not gpu:
        return {"not_checked": "no GPU"}
    import probelib
    import pynvml
    pynvml.nvmlInit()
    try:
        modes = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            try:
                current, pending = pynvml.nvmlDeviceGetMigMode(h)
                modes.append({"index": i, "current": current, "pending": pending})
            except pynvml.NVMLError as e:
                modes.append({"index": i, "error": str(e)})
    finally:
        pynvml.nvmlShutdown()
    return {"gpus": modes, "mig_on": [list(x) for x in probelib.mig_gpus()]}


def allreduce_saturation(gpus: int) -> dict:
    """The all-reduce sweep to 2 GiB on this node's GPUs: the best busbw, the smallest size
    within 5% of it (where the bus saturates), and whether the best is the sweep's end.
    2 GiB, not more: the probe's exactness check holds about 7 x the size per GPU (a 4 GiB
    sweep would not fit a 40 GB A100)."""
    if not gpus:
        return {"not_checked": "no GPU"}
    if gpus < 2:
        return {"not_checked": f"{gpus} GPU: an all-reduce needs two or more"}
    from burnin.checks.allreduce import judged, saturation
    doc = run_probe("allreduce", {"gpus": gpus, "settings": {"max_bytes": 2 << 30}})
    sweep = doc["figures"].get("sweep") or []
    if not sweep:
        return {"errors": doc["errors"], "sweep": []}
    best, sat = judged(sweep), saturation(sweep)
    return {"ranks": doc["figures"].get("world"), "best_gbps": best["busbw_gbps"],
            "best_bytes": best["bytes"], "saturation_bytes": sat["bytes"],
            "still_growing_at_end": best["bytes"] == sweep[-1]["bytes"],
            "at_1gib_gbps": next((s["busbw_gbps"] for s in sweep if s["bytes"] == 1 << 30),
                                 None), "errors": doc["errors"]}


def kernel_log() -> dict:
    """The kernel log as the health probe reads it, as the user running this."""
    import hostfacts
    out = hostfacts.kernel_xids("auto")
    return {k: out.get(k) for k in ("user", "readable", "source", "error", "records",
                                    "first_seq", "oldest_s", "uptime_s")}


def issue25(gpu: bool, gpus: int) -> dict:
    """Each item: its findings, {"not_checked": why}, or {"failed": the error}."""
    items = {"nvml_symbols": lambda: nvml_symbols(gpu), "dcgmi_json": lambda: dcgmi_shape(gpu),
             "pcie_numa_binding": lambda: numa_binding(gpus), "mig_mode": lambda: mig_modes(gpu),
             "allreduce_saturation": lambda: allreduce_saturation(gpus),
             "kernel_log": kernel_log}
    out = {}
    for name, item in items.items():
        try:
            out[name] = item()
        except Exception as e:  # one item's failure is that item's result
            out[name] = {"failed": f"{type(e).__name__}: {e}"}
    return out


def checklist(items: dict) -> list[str]:
    """One line per item: what was checked, and what could not be and why."""
    lines = []
    for name, r in items.items():
        if "not_checked" in r:
            lines.append(f"not checked: {name}: {r['not_checked']}")
        elif "failed" in r:
            lines.append(f"could not check: {name}: {r['failed']}")
        else:
            lines.append(f"checked: {name}")
    return lines
