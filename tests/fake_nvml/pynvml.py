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
"""

import json
import os
from types import SimpleNamespace

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_FEATURE_ENABLED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1

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
    key = "ecc_volatile" if counter_type == NVML_VOLATILE_ECC else "ecc_aggregate"
    return _call(h, "ecc", h.get(key, 0))


def nvmlDeviceGetRemappedRows(h):
    return _call(h, "remap", tuple(h.get("remap", [0, 0, 0, 0])))


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
