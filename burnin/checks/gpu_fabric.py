"""The health check's rule for a GPU's NVLink fabric (GB200/GB300 NVL trays, HGX systems
with NVSwitch) and the IMEX channels multi-node NVLink needs, over what the node's
probes/gpufabric.py read from NVML. Imports nothing of burnin: a fast tier (burnin
node-check) may use it as it is.

NVML's words (nvml.h, NVML 13.0): the fabric registration state is NOT_SUPPORTED,
NOT_STARTED, IN_PROGRESS or COMPLETED, and its status "must be checked only if state
returns complete"; the health mask says whether bandwidth is degraded, a route is
unhealthy, a route or access-timeout recovery is in progress, and whether the
configuration is incorrect (no partition, insufficient NVLinks, ...); v3's summary is
HEALTHY, UNHEALTHY or LIMITED_CAPACITY.

A GPU whose fabric NVML reports (any state but not_supported) passes only COMPLETED with
status 0 and no health field against it; a model whose GPUs must be in a fabric
(gpu_models' nvlink_fabric: GB200, GB300) fails where NVML reports none; a model that
needs IMEX channels (imex_channels) fails where /dev/nvidia-caps-imex-channels has none.
"""

from __future__ import annotations

# Health fields whose value fails the GPU, and how the failure reads.
BAD_HEALTH = {
    "degraded_bandwidth": ({"true"}, "NVLink bandwidth is degraded"),
    "route_unhealthy": ({"true"}, "an NVLink route is unhealthy"),
    "route_recovery": ({"true"}, "an NVLink route recovery is in progress"),
    "access_timeout_recovery": ({"true"}, "an access-timeout recovery is in progress"),
    "gfm_state": ({"disconnected"}, "the global fabric manager is disconnected"),
}
GOOD_CONFIGURATION = ("none", "not_supported")
BAD_SUMMARY = ("unhealthy", "limited_capacity")


def fabric_faults(gpu: str, fabric: dict | None, required: bool) -> list[str]:
    """Why one GPU's fabric registration keeps the node out, or nothing. `required`: the
    GPU's model must be in an NVLink fabric (a missing or unsupported reading fails)."""
    if fabric is None or fabric.get("state") == "not_supported":
        if required:
            return [f"{gpu}: NVML reports no NVLink fabric state (the model's GPUs must "
                    "join a fabric: is the fabric manager or NVLink supported here?)"]
        return []
    state = fabric.get("state")
    if state != "completed":
        return [f"{gpu}: NVLink fabric registration is {str(state).replace('_', ' ')}, "
                "expected completed (clique "
                f"{fabric.get('clique_id')}, cluster {fabric.get('cluster_uuid')})"]
    out = []
    if fabric.get("status"):
        out.append(f"{gpu}: NVLink fabric registration completed with NVML status "
                   f"{fabric['status']}, expected 0 (success)")
    health = fabric.get("health") or {}
    for field, (bad, says) in BAD_HEALTH.items():
        if health.get(field) in bad:
            out.append(f"{gpu}: {says} (fabric health mask {fabric.get('health_mask')})")
    config = health.get("incorrect_configuration")
    if config is not None and config not in GOOD_CONFIGURATION:
        out.append(f"{gpu}: NVLink fabric configuration is incorrect: "
                   f"{config.replace('_', ' ')}")
    if fabric.get("summary") in BAD_SUMMARY:
        out.append(f"{gpu}: NVLink fabric health summary is "
                   f"{fabric['summary'].replace('_', ' ')}")
    return out


def imex_faults(imex: dict | None, required: bool) -> list[str]:
    """The node's IMEX channel devices, where its model needs them."""
    if not required:
        return []
    if not imex:
        return ["IMEX channels were not looked for (the model needs them)"]
    if imex.get("error"):
        return [f"IMEX channels unreadable: {imex['error']}"]
    if not imex.get("count"):
        return [f"no IMEX channel in {imex.get('path')} (the model's multi-node NVLink "
                "needs one: the driver's NVreg_CreateImexChannel0=1, or the channel made "
                "by hand)"]
    return []
