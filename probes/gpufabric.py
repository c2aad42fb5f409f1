"""A GPU's place in its NVLink fabric (GB200/GB300 NVL trays, HGX Hopper and Blackwell
with NVSwitch), as NVML reports it, and the IMEX channel devices multi-node NVLink needs.

Runs ON a node. Standard library only; the caller passes its pynvml module and a device
handle, so that a fast tier (burnin node-check) can use it without importing torch. It
reads and names what NVML says; it decides nothing (the controller's rule is
burnin/checks/gpu_fabric.py).

Source: nvml.h (NVIDIA/go-nvml gen/nvml/nvml.h: nvmlDeviceGetGpuFabricInfoV and
nvmlGpuFabricInfo_v2 from NVML 12.4 / R550, nvmlGpuFabricInfo_v3 with healthSummary from
13.0 / R580; nvmlDeviceGetGpuFabricInfo, no health mask, before) and nvidia-ml-py 13.615's
pynvml.py (c_nvmlGpuFabricInfo_v2_t / _v3_t, NVML_GPU_FABRIC_STATE_*,
NVML_GPU_FABRIC_HEALTH_MASK_*, NVML_GPU_FABRIC_HEALTH_SUMMARY_*). nvml.h: the status "must
be checked only if state returns complete".
"""

from __future__ import annotations

import ctypes
import os

# NVML_GPU_FABRIC_STATE_*
STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
# NVML_GPU_FABRIC_HEALTH_MASK_*: (shift, width, {value: name}), read as nvml.h's
# NVML_GPU_FABRIC_HEALTH_GET(mask, type) = (mask >> SHIFT) & WIDTH.
_YES_NO = {0: "not_supported", 1: "true", 2: "false"}
HEALTH = {
    "degraded_bandwidth": (0, 0x3, _YES_NO),
    "route_recovery": (2, 0x3, _YES_NO),            # true: route recovery in progress
    "route_unhealthy": (4, 0x3, _YES_NO),
    "access_timeout_recovery": (6, 0x3, _YES_NO),   # true: recovery in progress
    "incorrect_configuration": (8, 0xF, {
        0: "not_supported", 1: "none", 2: "incorrect_sysguid", 3: "incorrect_chassis_sn",
        4: "no_partition", 5: "insufficient_nvlinks", 6: "incompatible_gpu_fw",
        7: "invalid_location", 8: "gpu_state_invalid"}),
    "partition_assigned": (12, 0x3, _YES_NO),
    "gfm_state": (14, 0x3, {0: "not_supported", 1: "connected", 2: "disconnected"}),
}
# NVML_GPU_FABRIC_HEALTH_SUMMARY_*
SUMMARIES = {0: "not_supported", 1: "healthy", 2: "unhealthy", 3: "limited_capacity"}
IMEX_DIR = "nvidia-caps-imex-channels"
MAX_CHANNELS = 64  # names kept; the count is exact


def health(mask: int) -> dict[str, str]:
    """The named fields of a health mask (an unknown value of a field as 'unknown N')."""
    out = {}
    for name, (shift, width, values) in HEALTH.items():
        v = (mask >> shift) & width
        out[name] = values.get(v, f"unknown {v}")
    return out


def _uuid(raw) -> str:
    b = bytes(raw)
    return "-".join(b[i:j].hex() for i, j in ((0, 4), (4, 6), (6, 8), (8, 10), (10, 16)))


def _versions(nv) -> list[tuple[type, int]]:
    """(struct, version) to try, newest first: those this pynvml defines."""
    out = []
    for struct, version in (("c_nvmlGpuFabricInfo_v3_t", "nvmlGpuFabricInfo_v3"),
                            ("c_nvmlGpuFabricInfo_v2_t", "nvmlGpuFabricInfo_v2")):
        if hasattr(nv, struct) and hasattr(nv, version):
            out.append((getattr(nv, struct), getattr(nv, version)))
    return out


def read(nv, handle) -> dict:
    """The device's fabric information: {api, state, status, clique_id, cluster_uuid} and,
    from nvmlDeviceGetGpuFabricInfoV, health_mask and health (named fields), and from its
    v3, summary. Raises nv.NVMLError where NVML refuses (NOT_SUPPORTED: no fabric on this
    GPU or driver); a driver without any fabric call raises NVMLError_FunctionNotFound."""
    last = None
    call = getattr(nv, "nvmlDeviceGetGpuFabricInfoV", None)
    for struct, version in (_versions(nv) if call else []):
        info = struct()
        info.version = version
        try:
            call(handle, ctypes.byref(info))
        except nv.NVMLError as e:
            # An older driver knows only an older struct version; a driver without the
            # V call (before R550) falls back to the unversioned one below.
            if e.value in (getattr(nv, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25),
                           getattr(nv, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)):
                last = e
                continue
            raise
        out = _common(info, "nvmlDeviceGetGpuFabricInfoV", version)
        out["health_mask"] = int(info.healthMask)
        out["health"] = health(int(info.healthMask))
        if hasattr(info, "healthSummary"):
            s = int(info.healthSummary)
            out["summary"] = SUMMARIES.get(s, f"unknown {s}")
        return out
    old = getattr(nv, "nvmlDeviceGetGpuFabricInfo", None)
    if old is None or not hasattr(nv, "c_nvmlGpuFabricInfo_t"):
        if last is not None:
            raise last
        raise nv.NVMLError(getattr(nv, "NVML_ERROR_FUNCTION_NOT_FOUND", 13))
    info = nv.c_nvmlGpuFabricInfo_t()
    old(handle, ctypes.byref(info))
    return _common(info, "nvmlDeviceGetGpuFabricInfo", None)


def _state(info) -> int:
    """The registration state: one byte. nvml.h declares nvmlGpuFabricState_t an
    unsigned char, where nvidia-ml-py 13.615's structs give it a c_uint; the three bytes
    after it are padding a driver need not zero, so only the state's own byte is read
    (little-endian hosts: x86-64, aarch64)."""
    return ctypes.c_uint8.from_buffer(info, type(info).state.offset).value


def _common(info, api: str, version) -> dict:
    state = _state(info)
    return {"api": api, "version": None if version is None else int(version) >> 24,
            "state": STATES.get(state, f"unknown {state}"), "status": int(info.status),
            "clique_id": int(info.cliqueId), "cluster_uuid": _uuid(info.clusterUuid)}


def imex_channels(dev_root: str = "/dev") -> dict:
    """The IMEX channel devices (/dev/nvidia-caps-imex-channels/channelN): a CUDA process
    can share memory over a multi-node NVLink domain only through one of them."""
    path = os.path.join(dev_root, IMEX_DIR)
    try:
        names = sorted(n for n in os.listdir(path) if n.startswith("channel"))
    except FileNotFoundError:
        return {"path": path, "present": False, "count": 0, "channels": [], "error": None}
    except OSError as e:
        return {"path": path, "present": False, "count": 0, "channels": [],
                "error": f"{path}: {e.strerror or e}"}
    return {"path": path, "present": True, "count": len(names),
            "channels": names[:MAX_CHANNELS], "error": None}
