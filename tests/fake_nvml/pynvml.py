"""A fake of the few pynvml calls burnin's probes make, for machines without a GPU.

Put this folder first on PYTHONPATH and point BURNIN_FAKE_NVML at a JSON file:

    {"init_error": null | <NVML error code>,
     "driver": "550.54.15", "cuda": 12040,
     "devices": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "bus": "0000:18:00.0",
                  "ecc": [1, 1], "ecc_volatile": 0, "ecc_aggregate": 0,
                  "remap": [corr, unc, pending, failed], "retired_pending": 0,
                  "pcie": [gen, max_gen, width, max_width],
                  "unsupported": ["remap", ...], "errors": {"ecc": 15}}]}

"unsupported" and "errors" name calls that raise NVMLError (NOT_SUPPORTED, or the
given code) for that device. Used only by the project's tests.

Telemetry (burn): a device value given as a list is a series over time, one entry per
second since the fake was loaded (the last entry holds after): "temp", "sm", "mem",
"power_mw", "reasons", "ecc_corrected", "ecc_volatile", "replay", "nvlink_crc",
"remap". Scalars: "temp_slowdown", "power_limit_mw", "nvlink_links". XID events:
top-level "xid": [{"at_s": 1.0, "device": 0, "xid": 79}].
"""

import json
import os
import time
from types import SimpleNamespace

_LOADED = time.monotonic()

NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_FEATURE_ENABLED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_ERROR_TIMEOUT = 10
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_NVLINK_ERROR_DL_RECOVERY = 1
NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
nvmlEventTypeXidCriticalError = 0x8

_NAMES = {3: "Not Supported", 12: "NVML Shared Library Not Found", 15: "GPU is lost"}


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return _NAMES.get(self.value, f"NVML Error with code {self.value}")


def _spec():
    with open(os.environ["BURNIN_FAKE_NVML"], encoding="utf-8") as f:
        return json.load(f)


def _now(value):
    """A list is a series over seconds since load; anything else is constant."""
    if isinstance(value, list) and value and not isinstance(value[0], list):
        return value[min(int(time.monotonic() - _LOADED), len(value) - 1)]
    return value


def _call(handle, what, value):
    if what in handle.get("unsupported", ()):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if what in handle.get("errors", {}):
        raise NVMLError(handle["errors"][what])
    return value


def nvmlInit():
    code = _spec().get("init_error")
    if code:
        raise NVMLError(code)


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return _spec()["driver"]


def nvmlSystemGetCudaDriverVersion():
    return _spec()["cuda"]


def nvmlDeviceGetCount():
    return len(_spec()["devices"])


def nvmlDeviceGetHandleByIndex(index):
    return _spec()["devices"][index]


def nvmlDeviceGetName(h):
    return _call(h, "name", h["name"].encode())


def nvmlDeviceGetUUID(h):
    return _call(h, "uuid", h["uuid"])


def nvmlDeviceGetPciInfo(h):
    return _call(h, "pci", SimpleNamespace(busId=h["bus"].encode()))


def nvmlDeviceGetEccMode(h):
    return _call(h, "ecc", list(h.get("ecc", [1, 1])))


def nvmlDeviceGetTotalEccErrors(h, error_type, counter_type):
    if error_type == NVML_MEMORY_ERROR_TYPE_CORRECTED:
        return _call(h, "ecc", _now(h.get("ecc_corrected", 0)))
    key = "ecc_volatile" if counter_type == NVML_VOLATILE_ECC else "ecc_aggregate"
    return _call(h, "ecc", _now(h.get(key, 0)))


def nvmlDeviceGetRemappedRows(h):
    remap = h.get("remap", [0, 0, 0, 0])
    if remap and isinstance(remap[0], list):
        remap = remap[min(int(time.monotonic() - _LOADED), len(remap) - 1)]
    return _call(h, "remap", tuple(remap))


def nvmlDeviceGetRetiredPagesPendingStatus(h):
    return _call(h, "retired", h.get("retired_pending", 0))


def _pcie(h, i):
    return _call(h, "pcie", h.get("pcie", [5, 5, 16, 16])[i])


def nvmlDeviceGetCurrPcieLinkGeneration(h):
    return _pcie(h, 0)


def nvmlDeviceGetMaxPcieLinkGeneration(h):
    return _pcie(h, 1)


def nvmlDeviceGetCurrPcieLinkWidth(h):
    return _pcie(h, 2)


def nvmlDeviceGetMaxPcieLinkWidth(h):
    return _pcie(h, 3)


def nvmlDeviceGetHandleByUUID(uuid):
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    for d in _spec()["devices"]:
        if d["uuid"] == uuid:
            return d
    raise NVMLError(6)  # NOT_FOUND


def nvmlDeviceGetTemperature(h, sensor):
    return _call(h, "temp", _now(h.get("temp", 60)))


def nvmlDeviceGetTemperatureThreshold(h, kind):
    return _call(h, "temp_slowdown", h.get("temp_slowdown", 87))


def nvmlDeviceGetClockInfo(h, kind):
    key = "sm" if kind == NVML_CLOCK_SM else "mem"
    return _call(h, key, _now(h.get(key, 1980 if key == "sm" else 2619)))


def nvmlDeviceGetPowerUsage(h):
    return _call(h, "power", _now(h.get("power_mw", 650000)))


def nvmlDeviceGetEnforcedPowerLimit(h):
    return _call(h, "power_limit", h.get("power_limit_mw", 700000))


def nvmlDeviceGetCurrentClocksEventReasons(h):
    return _call(h, "reasons", _now(h.get("reasons", 0)))


def nvmlDeviceGetRetiredPages(h, cause):
    return _call(h, "retired", [])


def nvmlDeviceGetPcieReplayCounter(h):
    return _call(h, "replay", _now(h.get("replay", 0)))


def nvmlDeviceGetNvLinkState(h, link):
    if "nvlink" in h.get("unsupported", ()):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return 1 if link < h.get("nvlink_links", 18) else 0


def nvmlDeviceGetNvLinkErrorCounter(h, link, counter):
    if counter == NVML_NVLINK_ERROR_DL_CRC_FLIT and link == 0:
        return _now(h.get("nvlink_crc", 0))
    return 0


class _EventSet:
    def __init__(self):
        self.devices, self.sent = [], set()


def nvmlEventSetCreate():
    return _EventSet()


def nvmlDeviceRegisterEvents(h, types, event_set):
    if "xid_events" in h.get("unsupported", ()):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    event_set.devices.append(h)


def nvmlEventSetWait(event_set, timeout_ms):
    deadline = time.monotonic() + timeout_ms / 1000.0
    while time.monotonic() < deadline:
        for i, ev in enumerate(_spec().get("xid", [])):
            device = _spec()["devices"][ev["device"]]
            due = time.monotonic() - _LOADED >= ev["at_s"]
            if due and i not in event_set.sent and device["uuid"] in {
                    d["uuid"] for d in event_set.devices}:
                event_set.sent.add(i)
                return SimpleNamespace(device=device, eventType=nvmlEventTypeXidCriticalError,
                                       eventData=ev["xid"])
        time.sleep(0.02)
    raise NVMLError(NVML_ERROR_TIMEOUT)


def nvmlEventSetFree(event_set):
    pass
