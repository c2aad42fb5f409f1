#!/usr/bin/env python3
"""burnin health probe: what this node is, and the state of its GPUs as NVML reports it.

Runs ON a node. Imports nothing of burnin: Python's standard library, and torch and
nvidia-ml-py (pynvml) when present. Reads its settings as JSON on stdin (may be empty),
prints one JSON document on stdout, logs to stderr, exits 0 whenever it measured.

    echo '{}' | python3 probes/health.py

It measures and never decides: the controller judges the figures.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time

PROBE = "health"
SCHEMA = 1
# A PCIe link idles at a lower generation to save power; it is re-read under load.
PCIE_LOAD_S = 0.5


def log(msg: str) -> None:
    print(f"[{PROBE}] {msg}", file=sys.stderr, flush=True)


def read_settings() -> dict:
    if sys.stdin.isatty():
        return {}
    text = sys.stdin.read()
    return json.loads(text) if text.strip() else {}


def node_identity() -> dict:
    ident = {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "os": _os_name(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": _meminfo_total(),
        "python": platform.python_version(),
        "machine_id": _read_first("/etc/machine-id"),
        "boot_id": _read_first("/proc/sys/kernel/random/boot_id"),
    }
    return ident


def _read_first(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().strip() or None
    except OSError:
        return None


def _os_name() -> str:
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.platform()


def _meminfo_total() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def torch_facts() -> dict:
    try:
        import torch
    except Exception as e:  # an ImportError, or a broken install raising anything
        return {"present": False, "error": f"{type(e).__name__}: {e}"}
    facts = {"present": True, "version": torch.__version__,
             "cuda": getattr(torch.version, "cuda", None), "cuda_available": False,
             "device_count": 0}
    try:
        facts["cuda_available"] = bool(torch.cuda.is_available())
        facts["device_count"] = torch.cuda.device_count() if facts["cuda_available"] else 0
    except Exception as e:
        facts["cuda_error"] = f"{type(e).__name__}: {e}"
    return facts


class Nvml:
    """The NVML readings this probe takes; every reading is a value, None when the GPU
    does not support it (listed in 'unsupported'), or an error (listed in 'errors')."""

    def __init__(self, pynvml):
        self.nv = pynvml

    def read(self, device: dict, field: str, fn, *args):
        try:
            value = fn(*args)
        except self.nv.NVMLError as e:
            if getattr(e, "value", None) == self.nv.NVML_ERROR_NOT_SUPPORTED:
                device["unsupported"].append(field)
            else:
                device["errors"].append(f"{field}: {e}")
            return None
        return value.decode() if isinstance(value, bytes) else value

    def device(self, index: int) -> dict:
        nv = self.nv
        dev = {"index": index, "unsupported": [], "errors": []}
        try:
            h = nv.nvmlDeviceGetHandleByIndex(index)
        except nv.NVMLError as e:
            dev["errors"].append(f"handle: {e}")
            return dev
        dev["name"] = self.read(dev, "name", nv.nvmlDeviceGetName, h)
        dev["uuid"] = self.read(dev, "uuid", nv.nvmlDeviceGetUUID, h)
        pci = self.read(dev, "pci", nv.nvmlDeviceGetPciInfo, h)
        bus = getattr(pci, "busId", None)
        dev["pci_bus_id"] = bus.decode() if isinstance(bus, bytes) else bus
        ecc = self.read(dev, "ecc_mode", nv.nvmlDeviceGetEccMode, h)
        dev["ecc_mode_current"] = None if ecc is None else int(ecc[0])
        dev["ecc_mode_pending"] = None if ecc is None else int(ecc[1])
        unc = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        dev["ecc_uncorrected_volatile"] = self.read(
            dev, "ecc_uncorrected_volatile", nv.nvmlDeviceGetTotalEccErrors, h, unc,
            nv.NVML_VOLATILE_ECC)
        dev["ecc_uncorrected_aggregate"] = self.read(
            dev, "ecc_uncorrected_aggregate", nv.nvmlDeviceGetTotalEccErrors, h, unc,
            nv.NVML_AGGREGATE_ECC)
        rows = self.read(dev, "remapped_rows", nv.nvmlDeviceGetRemappedRows, h)
        if rows is not None:
            corr, uncorr, pending, failed = rows
            dev["remapped_rows"] = {"correctable": corr, "uncorrectable": uncorr,
                                    "pending": bool(pending), "failed": bool(failed)}
        pages = self.read(dev, "retired_pages_pending",
                          nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
        dev["retired_pages_pending"] = None if pages is None else bool(
            pages == nv.NVML_FEATURE_ENABLED)
        dev["pcie"] = {
            "gen": self.read(dev, "pcie_gen", nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
            "max_gen": self.read(dev, "pcie_max_gen", nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
            "width": self.read(dev, "pcie_width", nv.nvmlDeviceGetCurrPcieLinkWidth, h),
            "max_width": self.read(dev, "pcie_max_width",
                                   nv.nvmlDeviceGetMaxPcieLinkWidth, h),
        }
        dev["_handle"] = h
        return dev

    def gen_under_load(self, dev: dict, torch_index: int) -> int | None:
        """Re-read the link generation while the GPU works: idle links train down."""
        try:
            import torch
            with torch.cuda.device(torch_index):
                a = torch.randn(2048, 2048, device="cuda")
                end = time.monotonic() + PCIE_LOAD_S
                while time.monotonic() < end:
                    a = (a @ a).clamp_(-1, 1)
                    a.cpu()  # traffic over the link, not only compute
                gen = self.nv.nvmlDeviceGetCurrPcieLinkGeneration(dev["_handle"])
                torch.cuda.synchronize()
                return gen
        except Exception as e:
            dev["errors"].append(f"pcie_gen_under_load: {type(e).__name__}: {e}")
            return None


def gpu_facts(torch_info: dict) -> dict:
    try:
        import pynvml
    except ImportError as e:
        return {"nvml": "absent", "reason": f"nvidia-ml-py is not installed ({e})"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return {"nvml": "absent", "reason": f"NVML did not initialise: {e}"}
    except OSError as e:
        return {"nvml": "absent", "reason": f"NVML library not loadable: {e}"}
    nvml = Nvml(pynvml)
    try:
        facts = {"nvml": "present", "devices": []}
        top = {"unsupported": [], "errors": []}
        facts["driver"] = nvml.read(top, "driver", pynvml.nvmlSystemGetDriverVersion)
        cuda = nvml.read(top, "cuda_driver", pynvml.nvmlSystemGetCudaDriverVersion)
        facts["cuda_driver"] = None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}"
        count = nvml.read(top, "count", pynvml.nvmlDeviceGetCount)
        facts["errors"] = top["errors"]
        for i in range(count or 0):
            dev = nvml.device(i)
            pcie = dev.get("pcie", {})
            if (pcie.get("gen") is not None and pcie.get("max_gen") is not None
                    and pcie["gen"] < pcie["max_gen"] and torch_info.get("cuda_available")
                    and i < torch_info.get("device_count", 0)):
                pcie["gen_under_load"] = nvml.gen_under_load(dev, i)
            dev.pop("_handle", None)
            facts["devices"].append(dev)
        return facts
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    try:
        settings = read_settings()
    except json.JSONDecodeError as e:
        log(f"settings on stdin are not JSON: {e}")
        return 2
    log(f"starting with settings {settings}")
    started = time.time()
    torch_info = torch_facts()
    gpus = gpu_facts(torch_info)
    errors = list(gpus.pop("errors", []))
    devices = gpus.pop("devices", [])
    doc = {
        "probe": PROBE, "schema": SCHEMA, "node": node_identity(),
        "devices": devices,
        "figures": {"torch": torch_info, "gpu": gpus,
                    "elapsed_s": round(time.time() - started, 3)},
        "errors": errors,
    }
    json.dump(doc, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
