#!/usr/bin/env python3
"""burnin health probe: what this node is, and the state of its GPUs as NVML reports it.

Runs ON a node. Imports nothing of burnin: Python's standard library, and torch and
nvidia-ml-py (pynvml) when present. Reads its settings as JSON on stdin (may be empty),
prints one JSON document on stdout, logs to stderr, exits 0 whenever it measured.

    echo '{}' | python3 probes/health.py

It measures and never decides: the controller judges the figures. A node that should have
no GPU (`gpus: 0`) and where NVML sees none is spared importing torch (1 to 2 s of CPU):
torch's version and CUDA build are read from its installed files.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import sys
import time

import fabric
import gpufabric
import hostfacts
import probelib

PROBE = "health"
# A PCIe link idles at a lower generation to save power; it is re-read under load.
PCIE_LOAD_S = 0.5


def log(msg: str) -> None:
    probelib.log(PROBE, msg)


def node_identity() -> dict:
    ident = {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "os": _os_name(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": _meminfo_total(),
        "python": platform.python_version(),
        # Not /etc/machine-id: systemd documents it as confidential, and reports travel.
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


def installed_torch() -> dict | None:
    """torch's version and CUDA build read from its installed files, without importing it
    (1 to 2 s of CPU): for a node that should have no GPU and where NVML sees none, torch's
    view of devices has nothing to tell. Absent: as torch_facts says it. None where the
    files do not say (torch_facts imports it then)."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("torch")
        if spec is None:
            return {"present": False, "error": "ModuleNotFoundError: No module named 'torch'"}
        where = list(spec.submodule_search_locations or ())
        path = os.path.join(where[0], "version.py")
        names: dict = {}
        with open(path, encoding="utf-8") as f:
            exec(compile(f.read(), path, "exec"), names)  # torch's own version.py
        version = names["__version__"]
    except Exception:  # a broken or unusual install: importing it says what is wrong
        return None
    if not isinstance(version, str):
        return None
    cuda = names.get("cuda")
    return {"present": True, "version": version, "cuda": cuda if isinstance(cuda, str) else None,
            "device_count": 0, "cuda_available": False, "devices": [], "imported": False}


def torch_facts() -> dict:
    """torch's version and the GPUs it sees (with UUIDs, to pair them with NVML's), or
    torch's own words for why it sees none."""
    try:
        import torch
    except Exception as e:  # an ImportError, or a broken install raising anything
        return {"present": False, "error": f"{type(e).__name__}: {e}"}
    facts = {"present": True, "version": torch.__version__,
             "cuda": getattr(torch.version, "cuda", None)}
    try:
        seen, error = probelib.cuda_devices()
    except Exception as e:
        seen, error = [], f"{type(e).__name__}: {e}"
    facts["device_count"] = len(seen)
    facts["cuda_available"] = bool(seen)
    facts["devices"] = [{"ordinal": d.ordinal, "uuid": d.uuid, "name": d.name,
                         "emulated": d.kind == "emulated"} for d in seen]
    if error:
        facts["cuda_error"] = error
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
            return self._failed(device, field, e)
        return value.decode() if isinstance(value, bytes) else value

    def read_first(self, device: dict, field: str, *calls):
        """read() from the first of `calls` this driver has (probelib.nvml_first: a
        newer name an older driver lacks, or a name a newer driver dropped); device['api']
        says which function answered."""
        try:
            value, device["api"][field] = probelib.nvml_first(self.nv, *calls)
        except self.nv.NVMLError as e:
            return self._failed(device, field, e)
        return value

    def _failed(self, device: dict, field: str, e) -> None:
        if getattr(e, "value", None) == self.nv.NVML_ERROR_NOT_SUPPORTED:
            device["unsupported"].append(field)
        else:
            device["errors"].append(f"{field}: {e}")
        return None

    def device(self, index: int) -> dict:
        nv = self.nv
        dev = {"index": index, "unsupported": [], "errors": [], "api": {}}
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
        dev["fabric"] = self.fabric(dev, h)
        self.configuration(dev, h)
        self.wear(dev, h)
        dev["_handle"] = h
        return dev

    def wear(self, dev: dict, h) -> None:
        """Counters that grow before a GPU fails, read for their trend across runs (the
        controller's replace-soon list, burnin/figures/wear.py): corrected ECC errors over
        the GPU's lifetime, its retired pages and the PCIe replays since the driver loaded."""
        nv = self.nv
        dev["ecc_corrected_aggregate"] = self.read(
            dev, "ecc_corrected_aggregate", nv.nvmlDeviceGetTotalEccErrors, h,
            nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC)
        dev["retired_pages"] = 0
        for cause in (nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                      nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR):
            pages = self.read(dev, "retired_pages", nv.nvmlDeviceGetRetiredPages, h, cause)
            if pages is None:  # unsupported or failed: said once, no count
                dev["retired_pages"] = None
                break
            dev["retired_pages"] += len(pages)
        dev["pcie_replay"] = self.read(dev, "pcie_replay", nv.nvmlDeviceGetPcieReplayCounter, h)

    def fabric(self, dev: dict, h) -> dict | None:
        """The GPU's NVLink fabric registration (gpufabric.read); None where the GPU is in
        no fabric or the driver has no fabric call (listed in 'unsupported': whether a
        model needs one is the controller's call), or NVML failed (in 'errors')."""
        nv = self.nv
        try:
            return gpufabric.read(nv, h)
        except nv.NVMLError as e:
            if getattr(e, "value", None) in (nv.NVML_ERROR_NOT_SUPPORTED,
                                             nv.NVML_ERROR_FUNCTION_NOT_FOUND):
                dev["unsupported"].append("fabric")
            else:
                dev["errors"].append(f"fabric: {e}")
            return None

    def configuration(self, dev: dict, h) -> None:
        """What an operator sets and may forget: persistence, MIG and compute modes, the
        power limit beside its default, VBIOS and InfoROM versions, and compute processes
        already on the GPU (other than this probe's own)."""
        nv = self.nv
        dev["persistence_mode"] = self.read(dev, "persistence_mode",
                                            nv.nvmlDeviceGetPersistenceMode, h)
        dev["compute_mode"] = self.read(dev, "compute_mode", nv.nvmlDeviceGetComputeMode, h)
        mig = self.read(dev, "mig_mode", nv.nvmlDeviceGetMigMode, h)
        dev["mig_mode_current"] = None if mig is None else int(mig[0])
        dev["mig_mode_pending"] = None if mig is None else int(mig[1])
        dev["power_limit_mw"] = self.read(dev, "power_limit", nv.nvmlDeviceGetPowerManagementLimit,
                                          h)
        dev["power_default_limit_mw"] = self.read(
            dev, "power_default_limit", nv.nvmlDeviceGetPowerManagementDefaultLimit, h)
        # nvml.h 13 deprecates the applications-clocks calls, and pynvml says CUDA 14.0
        # removes them: where they are gone, nvmlDeviceGetClock reads the same clocks by id.
        dev["clocks"] = {}
        for what, clock in (("graphics", nv.NVML_CLOCK_GRAPHICS), ("memory", nv.NVML_CLOCK_MEM)):
            for kind, old, clock_id in (
                    ("applications", getattr(nv, "nvmlDeviceGetApplicationsClock", None),
                     nv.NVML_CLOCK_ID_APP_CLOCK_TARGET),
                    ("default", getattr(nv, "nvmlDeviceGetDefaultApplicationsClock", None),
                     nv.NVML_CLOCK_ID_APP_CLOCK_DEFAULT)):
                dev["clocks"][f"{what}_{kind}"] = self.read_first(
                    dev, f"{kind}_clock_{what}", (old, (h, clock)),
                    (nv.nvmlDeviceGetClock, (h, clock, clock_id)))
        # At rest, before any check: a clock held by the applications-clocks setting
        # (application or locked clocks) shows as this event reason. The call is
        # nvmlDeviceGetCurrentClocksEventReasons from R535; before, and in an older
        # nvidia-ml-py, it was ...ThrottleReasons, which CUDA 14.0 removes.
        dev["clock_event_reasons"] = self.read_first(
            dev, "clock_event_reasons",
            (getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None), (h,)),
            (getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None), (h,)))
        dev["vbios"] = self.read(dev, "vbios", nv.nvmlDeviceGetVbiosVersion, h)
        dev["inforom_image"] = self.read(dev, "inforom_image",
                                         nv.nvmlDeviceGetInforomImageVersion, h)
        procs = self.read(dev, "processes", nv.nvmlDeviceGetComputeRunningProcesses, h)
        if procs is not None:
            dev["processes"] = [{"pid": int(p.pid), "used_memory": p.usedGpuMemory}
                                for p in procs if p.pid != os.getpid()]

    def gen_under_load(self, dev: dict, torch_dev: dict) -> int | None:
        """Re-read the link generation while this very GPU works (torch's device with
        the same UUID as NVML's, never the same index): idle links train down."""
        try:
            import torch
            where = "cpu" if torch_dev["emulated"] else torch.device("cuda", torch_dev["ordinal"])
            a = torch.randn(2048, 2048, device=where)
            end = time.monotonic() + PCIE_LOAD_S
            while time.monotonic() < end:
                a = (a @ a).clamp_(-1, 1)
                a.cpu()  # traffic over the link, not only compute
            gen = self.nv.nvmlDeviceGetCurrPcieLinkGeneration(dev["_handle"])
            if where != "cpu":
                torch.cuda.synchronize(where)
            dev["pcie"]["load_on"] = torch_dev["ordinal"]
            return gen
        except Exception as e:
            dev["errors"].append(f"pcie_gen_under_load: {type(e).__name__}: {e}")
            return None


def gpu_facts(torch_info: dict, dev_root: str = "/dev") -> dict:
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
        facts = {"nvml": "present", "devices": [],
                 "imex": gpufabric.imex_channels(dev_root)}
        top = {"unsupported": [], "errors": []}
        facts["driver"] = nvml.read(top, "driver", pynvml.nvmlSystemGetDriverVersion)
        cuda = nvml.read(top, "cuda_driver", pynvml.nvmlSystemGetCudaDriverVersion)
        facts["cuda_driver"] = None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}"
        count = nvml.read(top, "count", pynvml.nvmlDeviceGetCount)
        facts["errors"] = top["errors"]
        by_uuid = {d["uuid"]: d for d in torch_info.get("devices", []) if d.get("uuid")}
        for i in range(count or 0):
            dev = nvml.device(i)
            pcie = dev.get("pcie", {})
            mine = by_uuid.get(dev.get("uuid"))
            if (pcie.get("gen") is not None and pcie.get("max_gen") is not None
                    and pcie["gen"] < pcie["max_gen"] and mine is not None):
                pcie["gen_under_load"] = nvml.gen_under_load(dev, mine)
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
        settings = probelib.read_payload()
    except ValueError as e:
        log(f"settings on stdin are not a JSON object: {e}")
        return 2
    probelib.watch_controller(settings, PROBE)
    log(f"starting with settings {settings}")
    started = time.time()
    dev_root = str((settings.get("settings") or {}).get("dev_root") or "/dev")
    # A node that should have no GPU (gpus: 0) is spared importing torch, unless NVML sees
    # GPUs there after all: then torch's view is read as on any GPU node.
    light = installed_torch() if settings.get("gpus") == 0 else None
    torch_info = light or torch_facts()
    gpus = gpu_facts(torch_info, dev_root)
    if light and gpus.get("devices"):
        torch_info = torch_facts()
        gpus = gpu_facts(torch_info, dev_root)
    errors = list(gpus.pop("errors", []))
    devices = gpus.pop("devices", [])
    tools = {check: {"command": str(cmd), "path": shutil.which(str(cmd))}
             for check, cmd in (settings.get("tools") or {}).items()}
    host = hostfacts.host_facts(settings.get("settings") or {})
    sysfs_root = str((settings.get("settings") or {}).get("sysfs_root") or "/sys")
    for dev in devices:  # a wear counter (burnin/checks/wear.py); the kernel's, not NVML's
        dev["pcie_aer_correctable"] = hostfacts.aer_correctable(sysfs_root,
                                                                dev.get("pci_bus_id"))
    # Counters that later checks judge the growth of, read here, before the load.
    wanted = settings.get("baselines") if isinstance(settings.get("baselines"), dict) else {}
    baselines = {}
    if isinstance(wanted.get("fabric"), dict):
        baselines["fabric"] = fabric.snapshot(
            str(wanted["fabric"].get("sysfs_root") or fabric.SYSFS_ROOT), settings)
    probelib.emit(PROBE, node_identity(), devices,
                  {"torch": torch_info, "gpu": gpus, "tools": tools, "host": host,
                   "baselines": baselines, "elapsed_s": round(time.time() - started, 3)},
                  errors)
    return 0


if __name__ == "__main__":
    probelib.finish(main())
