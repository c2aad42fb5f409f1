"""Where a GPU sits on the host: the CPUs near it and their NUMA node, so that a process
feeding the GPU runs there and the host memory it allocates (pinned buffers) lands in
that node: a copy that crosses the socket interconnect is slower, by an amount that
depends on what else crosses it, and a healthy GPU would then fail against its peers.

Runs ON a node: Python's standard library, and nvidia-ml-py when present. Imports
nothing of burnin. Sources, in order: NVML (nvmlDeviceGetCpuAffinity, the CPUs of the
GPU's NUMA node, and nvmlDeviceGetMemoryAffinity with NVML_AFFINITY_SCOPE_NODE), then
sysfs (/sys/bus/pci/devices/<bus id>/local_cpulist and numa_node). Where neither says,
the process runs where the kernel puts it, and the record says why.
"""

from __future__ import annotations

import os

WORD = 64  # nvml.h: 64 CPUs (or NUMA nodes) per unsigned long on a 64-bit machine


def cpulist(cpus) -> str:
    """[0, 1, 2, 5] -> '0-2,5', as the kernel writes a cpulist."""
    out, run = [], []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def parse_cpulist(text: str) -> list[int]:
    """'0-2,5' -> [0, 1, 2, 5]; ValueError when it is not a cpulist."""
    out: set[int] = set()
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return sorted(out)


def _bits(words) -> list[int]:
    return [i * WORD + b for i, w in enumerate(words) for b in range(WORD) if int(w) >> b & 1]


def _sysfs_bdf(bus_id: str) -> str:
    """NVML's '00000000:18:00.0' as sysfs names the device: '0000:18:00.0'."""
    parts = bus_id.lower().split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    try:
        return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
    except (ValueError, IndexError):
        return bus_id.lower()


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def _from_nvml(nv, uuid: str) -> tuple[list[int] | None, int | None, str]:
    """(local CPUs, NUMA node, why not) from NVML."""
    size = max(1, -(-(os.cpu_count() or 1) // WORD))
    try:
        h = nv.nvmlDeviceGetHandleByUUID(uuid)
        cpus = _bits(nv.nvmlDeviceGetCpuAffinity(h, size)) or None
    except nv.NVMLError as e:
        return None, None, f"NVML: {e}"
    try:
        nodes = _bits(nv.nvmlDeviceGetMemoryAffinity(h, size, nv.NVML_AFFINITY_SCOPE_NODE))
    except nv.NVMLError:
        nodes = []
    return cpus, (nodes[0] if nodes else None), "" if cpus else "NVML: no CPU in the GPU's set"


def _from_sysfs(root: str, bus_id: str | None) -> tuple[list[int] | None, int | None, str]:
    if not bus_id:
        return None, None, "sysfs: no PCI bus id"
    where = os.path.join(root, "bus", "pci", "devices", _sysfs_bdf(bus_id))
    text = _read(os.path.join(where, "local_cpulist"))
    node = _read(os.path.join(where, "numa_node"))
    try:
        cpus = parse_cpulist(text) if text else None
        numa = int(node) if node is not None and int(node) >= 0 else None  # -1: no NUMA
    except ValueError:
        return None, None, f"sysfs: unreadable {where}"
    return cpus, numa, "" if cpus else f"sysfs: no {where}/local_cpulist"


def places(devs, sysfs_root: str = "/sys") -> list[dict]:
    """Per device (probelib.Device, paired with NVML by UUID): {'local_cpus': [...] or
    None, 'numa_node', 'source': 'nvml' | 'sysfs' | None, 'why'}."""
    nv, no_nvml = None, ""
    try:
        import pynvml
        pynvml.nvmlInit()
        nv = pynvml
    except Exception as e:  # not installed, no driver: sysfs may still say
        no_nvml = f"NVML: {e}"
    out = []
    try:
        for d in devs:
            cpus, node, why = _from_nvml(nv, d.uuid or "") if nv else (None, None, no_nvml)
            source = "nvml" if cpus else None
            if not cpus or node is None:
                s_cpus, s_node, s_why = _from_sysfs(sysfs_root, d.pci_bus_id)
                if not cpus and s_cpus:
                    cpus, source = s_cpus, "sysfs"
                node = node if node is not None else s_node
                why = f"{why}, and {s_why}" if not cpus else ""  # '; ' joins failures
            out.append({"local_cpus": cpus, "numa_node": node, "source": source, "why": why})
    finally:
        if nv is not None:
            try:
                nv.nvmlShutdown()
            except Exception:
                pass
    return out


def bind(place: dict | None) -> dict:
    """Bind this process (call it before it starts threads or allocates) to the place's
    CPUs that it may use. The record: bound, the CPUs it then runs on (as the kernel
    reports them), the GPU's local CPUs, its NUMA node, the source; why, when unbound."""
    place = place or {}
    local = place.get("local_cpus")
    allowed = os.sched_getaffinity(0)
    record = {"bound": False, "numa_node": place.get("numa_node"), "source": place.get("source"),
              "local_cpus": cpulist(local) if local else None}
    if not local:
        why = place.get("why") or "no locality given"
        return {**record, "cpus": cpulist(allowed), "why": f"the GPU's CPUs are unknown ({why})"}
    usable = set(local) & allowed
    if not usable:
        return {**record, "cpus": cpulist(allowed),
                "why": f"the GPU's CPUs {cpulist(local)} are all outside this process's "
                       f"CPUs {cpulist(allowed)} (a cgroup, cpuset or taskset)"}
    try:
        os.sched_setaffinity(0, usable)
    except OSError as e:
        return {**record, "cpus": cpulist(allowed), "why": f"sched_setaffinity: {e}"}
    return {**record, "bound": True, "cpus": cpulist(os.sched_getaffinity(0))}
