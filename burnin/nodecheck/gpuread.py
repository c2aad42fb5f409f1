"""The GPU readings of node-check, taken in a child process (`python -m
burnin.nodecheck.gpuread DEV_ROOT`) that prints one JSON document: a driver call stuck in
the kernel then holds that child, which node-check kills at its deadline and never waits
for (burnin/nodecheck/gpu.py), not node-check itself.

It imports only the standard library, pynvml and probes/gpufabric.py (through
probelink), and reads as the health probe reads (probes/health.py's names), minus what a
running job changes: compute processes, the PCIe link generation, the power limit."""

from __future__ import annotations

import json
import sys

from burnin.nodecheck.probelink import gpufabric


def readings(nv, dev_root: str) -> dict:
    """{init: '' or why NVML is absent, count, count_error, devices: [...], imex}: `nv`
    is pynvml, not yet initialised."""
    try:
        nv.nvmlInit()
    except nv.NVMLError as e:
        return {"init": f"NVML did not initialise: {e}"}
    except OSError as e:
        return {"init": f"NVML library not loadable: {e}"}
    try:
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as e:
            return {"init": "", "count_error": f"NVML cannot count the GPUs: {e}"}
        return {"init": "", "count": count, "devices": [_device(nv, i) for i in range(count)],
                "imex": gpufabric().imex_channels(dev_root)}
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # nothing to report: the readings are taken
            pass


def _device(nv, index: int) -> dict:
    """The readings of one GPU; each reading NVML refuses is listed in 'errors' (or left
    out where the GPU does not support it)."""
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


def main(argv: list[str]) -> int:
    try:
        import pynvml
    except ImportError as e:
        out: dict = {"init": f"nvidia-ml-py is not installed ({e})"}
    else:
        out = readings(pynvml, argv[1] if len(argv) > 1 else "/dev")
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
