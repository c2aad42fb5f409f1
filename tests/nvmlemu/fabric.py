"""A GPU's NVLink fabric registration: nvmlDeviceGetGpuFabricInfoV (nvmlGpuFabricInfo_v2,
and _v3 from R580) and the older nvmlDeviceGetGpuFabricInfo, from the device's "fabric".

nvml.h (NVIDIA/go-nvml gen/nvml/nvml.h, NVML 12.4 and 13.0): the V call takes a versioned
struct whose version field the caller sets; a version the driver does not know answers
NVML_ERROR_ARGUMENT_VERSION_MISMATCH (v3 and its healthSummary are new in 13.0, R580); a
GPU without a fabric answers NVML_ERROR_NOT_SUPPORTED.

  fabric   null (the default: NOT_SUPPORTED, a GPU outside any NVLink fabric), or
           {"state": 3, "status": "SUCCESS", "clique_id": 1, "cluster_uuid": "<32 hex>",
            "health_mask": 0, "health_summary": 1}: state NVML_GPU_FABRIC_STATE_* (0 not
           supported, 1 not started, 2 in progress, 3 completed), status an NVML return
           code, health_mask the NVML_GPU_FABRIC_HEALTH_MASK_* bits, health_summary
           NVML_GPU_FABRIC_HEALTH_SUMMARY_* (v3 only). Every key optional; each may be a
           time series.
"""

from __future__ import annotations

import ctypes

import pynvml as nv

from . import scenario as sc
from .declarations import DEVICE, P, export, struct_version

KEYS = {"state": 3, "status": "SUCCESS", "clique_id": 1,
        "cluster_uuid": "5e1f4a0c9b7d0000b0a4d00000000001", "health_mask": 0,
        "health_summary": 1}
PADDING = b"\xa5\xa5\xa5"
V2 = struct_version(nv.c_nvmlGpuFabricInfo_v2_t, 2)
V3 = struct_version(nv.c_nvmlGpuFabricInfo_v3_t, 3)


def check(fabric, where: str) -> None:
    """Refuse a scenario's fabric entry with keys the emulator does not know."""
    if fabric is None:
        return
    if not isinstance(fabric, dict) or set(fabric) - set(KEYS):
        raise sc.ScenarioError(f"{where}.fabric: expected null or a mapping of "
                               f"{', '.join(KEYS)}, got {fabric!r}")
    sc.code(fabric.get("status", "SUCCESS"), f"{where}.fabric.status")


def _fill(emu, dev, info) -> int:
    spec = dev.spec["fabric"]
    if spec is None:
        return sc.NOT_SUPPORTED
    now = {k: sc.at(spec.get(k, default), emu.elapsed()) for k, default in KEYS.items()}
    # nvml.h: nvmlGpuFabricState_t is an unsigned char. A driver that copies its own
    # struct leaves whatever its padding held in the three bytes after it: written here
    # as 0xA5, so that a reader of four bytes (pynvml's c_uint) reads them too.
    offset = type(info).state.offset
    ctypes.memmove(ctypes.addressof(info) + offset, bytes([now["state"] & 0xFF]) + PADDING, 4)
    info.status = sc.code(now["status"], "fabric.status")
    info.cliqueId = now["clique_id"]
    raw = bytes.fromhex(now["cluster_uuid"])
    ctypes.memmove(info.clusterUuid, raw, min(len(raw), len(info.clusterUuid)))
    if hasattr(info, "healthMask"):
        info.healthMask = now["health_mask"]
    if hasattr(info, "healthSummary"):
        info.healthSummary = now["health_summary"]
    return sc.SUCCESS


@export("nvmlDeviceGetGpuFabricInfoV", DEVICE, ctypes.c_void_p, reads="fabric")
def _fabric_info_v(emu, dev, address):
    if not address:
        return sc.INVALID_ARGUMENT
    version = ctypes.c_uint.from_address(address).value
    known = {V2: nv.c_nvmlGpuFabricInfo_v2_t}
    if emu.scenario.branch.number >= 580:
        known[V3] = nv.c_nvmlGpuFabricInfo_v3_t
    if version not in known:
        return sc.ARGUMENT_VERSION_MISMATCH
    return _fill(emu, dev, known[version].from_address(address))


@export("nvmlDeviceGetGpuFabricInfo", DEVICE, P(nv.c_nvmlGpuFabricInfo_t), reads="fabric")
def _fabric_info(emu, dev, out):
    if not out:
        return sc.INVALID_ARGUMENT
    return _fill(emu, dev, out.contents)
