"""GPUs through NVML, at rest: count against the inventory (or the last clean check), a
GPU lost or fallen off the bus, and per GPU the health check's own rules
(burnin/checks/health.py, drift.py, host.py): model, ECC mode, uncorrectable errors since
the driver loaded, row remap pending or failed, retired pages pending, persistence and MIG
mode, clocks held by a setting; the GPU's NVLink fabric registration and the node's IMEX
channels, read by the health probe's own reader (probes/gpufabric.py) and judged by its
rule (burnin/checks/gpu_fabric.py); and what node-check adds: clocks slowed right now by
the hardware (slowdown, thermal, power brake).

Not read here, because a job may be running on the GPUs while node-check runs: compute
processes, the PCIe link generation (it trains down at rest and is re-read under load by
the health check), the power limit. pynvml is imported only when this check runs.
"""

from __future__ import annotations

from burnin.checks.drift import device_drift
from burnin.checks.gpu_fabric import fabric_faults, imex_faults
from burnin.checks.health import _device_faults, _gpu
from burnin.checks.host import clock_rules
from burnin.model.gpu_reference import GpuModel
from burnin.model.nodes import Node
from burnin.nodecheck.model import CheckResult, fail
from burnin.nodecheck.probelink import gpufabric

CHECK = "gpu"
# nvml.h nvmlClocksEventReason*: the hardware slowing the clocks (not the application,
# not idling, not a power cap the operator set).
SLOWDOWNS = {0x8: "hardware slowdown", 0x20: "software thermal slowdown",
             0x40: "hardware thermal slowdown", 0x80: "hardware power brake"}


def check(node: Node, model: GpuModel | None, settings: dict, last_good: dict) -> CheckResult:
    """`settings`: the node's health check settings; `last_good`: {gpus} of the last clean
    node-check (the count to hold a `gpus: auto` node to)."""
    try:
        import pynvml
    except ImportError as e:
        return _absent(node, f"nvidia-ml-py is not installed ({e})")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return _absent(node, f"NVML did not initialise: {e}")
    except OSError as e:
        return _absent(node, f"NVML library not loadable: {e}")
    try:
        return _read(pynvml, node, model, settings, last_good)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # nothing to report: the readings are taken
            pass


def _absent(node: Node, why: str) -> CheckResult:
    if node.gpus:
        return CheckResult(CHECK, (fail(CHECK, f"inventory says {node.gpus} GPUs, but NVML is "
                                               f"absent on the node ({why})"),))
    if node.gpus is None and node.gpu_model:
        return CheckResult(CHECK, (fail(CHECK, f"inventory says gpu_model {node.gpu_model} "
                                               f"(gpus: auto), but NVML is absent on the node "
                                               f"({why})"),))
    return CheckResult(CHECK, state={"gpus": 0})


def _read(nv, node: Node, model, settings: dict, last_good: dict) -> CheckResult:
    findings = []
    try:
        count = nv.nvmlDeviceGetCount()
    except nv.NVMLError as e:
        return CheckResult(CHECK, (fail(CHECK, f"NVML cannot count the GPUs: {e}"),))
    want, source = node.gpus, "inventory says"
    if want is None and last_good.get("gpus"):
        want, source = last_good["gpus"], "the last clean node-check saw"
    if want is not None and count != want:
        findings.append(fail(CHECK, f"GPU count is {count}, {source} {want}"))
    # As the run's health check: a model whose GPUs must be in an NVLink fabric (GB200,
    # GB300) fails without one; any GPU whose fabric NVML reports is judged on any model.
    in_fabric = bool(model and model.nvlink_fabric)
    for i in range(count):
        dev = _device(nv, i)
        name = _gpu(dev)
        lost = [e for e in dev["errors"] if "GPU is lost" in e or "GPU_IS_LOST" in e]
        if lost:
            findings.append(fail(CHECK, f"{name}: lost (NVML: GPU is lost): fallen off the "
                                        f"bus or hung; XID 79 territory, the node needs a "
                                        f"reset"))
            continue
        for text in (_device_faults(node, dev, model)
                     + fabric_faults(name, dev.get("fabric"), in_fabric)
                     + device_drift(name, dev, node, settings)
                     + clock_rules(name, dev, settings) + _slowdowns(name, dev)):
            findings.append(fail(CHECK, text))
    imex = gpufabric().imex_channels(str(settings.get("dev_root") or "/dev"))
    for text in imex_faults(imex, bool(model and model.imex_channels)):
        findings.append(fail(CHECK, text))
    return CheckResult(CHECK, tuple(findings), state={"gpus": count})


def _slowdowns(name: str, dev: dict) -> list[str]:
    reasons = dev.get("clock_event_reasons")
    if not reasons:
        return []
    active = [what for bit, what in SLOWDOWNS.items() if reasons & bit]
    return [f"{name}: clocks slowed by {', '.join(active)} (clock event reasons "
            f"{reasons:#x}), expected none"] if active else []


def _device(nv, index: int) -> dict:
    """The readings the health probe takes of one GPU (probes/health.py's names), minus
    those a running job changes; each reading an NVML refuses is listed in 'errors' (or
    left out where the GPU does not support it)."""
    dev: dict = {"index": index, "errors": []}

    def read(field: str, fn, *args):
        try:
            value = fn(*args)
        except nv.NVMLError as e:
            if getattr(e, "value", None) != nv.NVML_ERROR_NOT_SUPPORTED:
                dev["errors"].append(f"{field}: {e}")
            return None
        return value.decode() if isinstance(value, bytes) else value

    h = read("handle", nv.nvmlDeviceGetHandleByIndex, index)
    if h is None:
        return dev
    dev["name"] = read("name", nv.nvmlDeviceGetName, h)
    dev["uuid"] = read("uuid", nv.nvmlDeviceGetUUID, h)
    ecc = read("ecc_mode", nv.nvmlDeviceGetEccMode, h)
    if ecc is not None:
        dev["ecc_mode_current"], dev["ecc_mode_pending"] = int(ecc[0]), int(ecc[1])
    dev["ecc_uncorrected_volatile"] = read(
        "ecc_uncorrected_volatile", nv.nvmlDeviceGetTotalEccErrors, h,
        nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)
    rows = read("remapped_rows", nv.nvmlDeviceGetRemappedRows, h)
    if rows is not None:
        dev["remapped_rows"] = {"pending": bool(rows[2]), "failed": bool(rows[3])}
    pages = read("retired_pages_pending", nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
    dev["retired_pages_pending"] = None if pages is None else pages == nv.NVML_FEATURE_ENABLED
    dev["persistence_mode"] = read("persistence_mode", nv.nvmlDeviceGetPersistenceMode, h)
    mig = read("mig_mode", nv.nvmlDeviceGetMigMode, h)
    if mig is not None:
        dev["mig_mode_current"], dev["mig_mode_pending"] = int(mig[0]), int(mig[1])
    dev["clock_event_reasons"] = read("clock_event_reasons", _reasons, nv, h)
    dev["fabric"] = _fabric(nv, h, dev)
    return dev


def _reasons(nv, h):
    """The clock event reasons from the first call this driver has, as the health probe
    reads them (probelib.nvml_first): ...EventReasons from R535, ...ThrottleReasons before
    (an R525 driver lacks the new symbol, which pynvml names all the same, and CUDA 14.0
    drops the old one)."""
    missing = None
    for name in ("nvmlDeviceGetCurrentClocksEventReasons",
                 "nvmlDeviceGetCurrentClocksThrottleReasons"):
        fn = getattr(nv, name, None)
        if fn is None:
            continue
        try:
            return fn(h)
        except nv.NVMLError as e:
            if getattr(e, "value", None) != nv.NVML_ERROR_FUNCTION_NOT_FOUND:
                raise
            missing = e
    raise missing or nv.NVMLError(nv.NVML_ERROR_FUNCTION_NOT_FOUND)


def _fabric(nv, h, dev: dict) -> dict | None:
    """The GPU's NVLink fabric registration, as the health probe reads it (probes/health.py
    Nvml.fabric): None where the GPU is in no fabric or the driver has no fabric call (the
    rule decides whether the model needs one), None with the error listed where NVML
    failed otherwise."""
    try:
        return gpufabric().read(nv, h)
    except nv.NVMLError as e:
        if getattr(e, "value", None) not in (nv.NVML_ERROR_NOT_SUPPORTED,
                                             nv.NVML_ERROR_FUNCTION_NOT_FOUND):
            dev["errors"].append(f"fabric: {e}")
        return None
