"""Where a GPU sits on the host: its local CPUs and NUMA node (nvmlDeviceGetCpuAffinity,
nvmlDeviceGetCpuAffinityWithinScope, nvmlDeviceGetMemoryAffinity).

nvml.h: an array of `unsigned long` bitmasks, 64 CPUs (or NUMA nodes) per element on a
64-bit machine, sized by the caller; what does not fit is left out. The scope is
NVML_AFFINITY_SCOPE_NODE (0) or NVML_AFFINITY_SCOPE_SOCKET (1); the emulator's sockets
are its NUMA nodes.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import c_uint, c_ulong

from . import scenario as sc
from .declarations import DEVICE, P, array_of, export, put

BITS = ctypes.sizeof(c_ulong) * 8
SCOPES = (0, 1)  # NVML_AFFINITY_SCOPE_NODE, NVML_AFFINITY_SCOPE_SOCKET


def local_cpus(dev) -> list[int] | None:
    """The GPU's local CPUs now; None: not supported."""
    value = dev.get("cpu_affinity")
    if value is None:
        return None
    if value == "all":
        return list(range(os.cpu_count() or 1))
    return sc.cpulist(value)


def _fill(size: int, out, members: list[int] | None) -> int:
    if not size or not out.value:
        return sc.INVALID_ARGUMENT
    if members is None:
        return sc.NOT_SUPPORTED
    words = (c_ulong * size).from_address(out.value)
    for i in range(size):
        words[i] = 0
    for m in members:
        if m // BITS < size:
            words[m // BITS] |= 1 << (m % BITS)
    return sc.SUCCESS


@export("nvmlDeviceGetCpuAffinity", DEVICE, c_uint, array_of(c_ulong), reads="cpu_affinity")
def _cpu_affinity(emu, dev, size, out):
    return _fill(size, out, local_cpus(dev))


@export("nvmlDeviceGetCpuAffinityWithinScope", DEVICE, c_uint, array_of(c_ulong), c_uint,
        reads="cpu_affinity")
def _cpu_affinity_scope(emu, dev, size, out, scope):
    if scope not in SCOPES:
        return sc.INVALID_ARGUMENT
    return _fill(size, out, local_cpus(dev))


@export("nvmlDeviceGetMemoryAffinity", DEVICE, c_uint, array_of(c_ulong), c_uint,
        reads="numa_node")
def _memory_affinity(emu, dev, size, out, scope):
    if scope not in SCOPES:
        return sc.INVALID_ARGUMENT
    node = dev.get("numa_node")
    return _fill(size, out, None if node is None else [int(node)])


@export("nvmlDeviceGetTopologyCommonAncestor", DEVICE, DEVICE, P(c_uint), reads="topology_level")
def _common_ancestor(emu, dev, other, out):
    """nvml.h: the closest common ancestor of two GPUs (nvmlGpuTopologyLevel_t)."""
    if emu.device_at(other) is None:
        return sc.INVALID_ARGUMENT
    return put(out, dev.get("topology_level"))

