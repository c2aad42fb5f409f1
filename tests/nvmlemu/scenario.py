"""The scenario: what the emulated node's GPUs are, as data (the format is in __init__.py).

Loading fills in defaults (a healthy H100 SXM5 80GB at work) and refuses keys it does not
know, so that a misspelt key fails the test that wrote it instead of silently leaving the
default in place.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path

from .drivers import BRANCHES, Branch, branch_of

# nvmlReturn_t, from nvml.h. Scenarios may name a code ("GPU_IS_LOST") or give the number.
CODES = {
    "SUCCESS": 0, "UNINITIALIZED": 1, "INVALID_ARGUMENT": 2, "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4, "ALREADY_INITIALIZED": 5, "NOT_FOUND": 6, "INSUFFICIENT_SIZE": 7,
    "INSUFFICIENT_POWER": 8, "DRIVER_NOT_LOADED": 9, "TIMEOUT": 10, "IRQ_ISSUE": 11,
    "LIBRARY_NOT_FOUND": 12, "FUNCTION_NOT_FOUND": 13, "CORRUPTED_INFOROM": 14,
    "GPU_IS_LOST": 15, "RESET_REQUIRED": 16, "OPERATING_SYSTEM": 17,
    "LIB_RM_VERSION_MISMATCH": 18, "IN_USE": 19, "MEMORY": 20, "NO_DATA": 21,
    "VGPU_ECC_NOT_SUPPORTED": 22, "INSUFFICIENT_RESOURCES": 23, "FREQ_NOT_SUPPORTED": 24,
    "ARGUMENT_VERSION_MISMATCH": 25, "DEPRECATED": 26, "NOT_READY": 27, "GPU_NOT_FOUND": 28,
    "INVALID_STATE": 29, "RESET_TYPE_NOT_SUPPORTED": 30, "UNKNOWN": 999,
}
SUCCESS, UNINITIALIZED, INVALID_ARGUMENT, NOT_SUPPORTED = 0, 1, 2, 3
NOT_FOUND, INSUFFICIENT_SIZE, TIMEOUT, GPU_IS_LOST, UNKNOWN = 6, 7, 10, 15, 999
ARGUMENT_VERSION_MISMATCH = 25

CLOCK_TYPES = ("graphics", "sm", "mem", "video")  # nvmlClockType_t order
# nvmlNvLinkErrorCounter_t order
NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data", "ecc_data")
# NVLink 5's NVML_FI_DEV_NVLINK_COUNT_* error fields (fields.py NVLINK5_FIELDS)
NVLINK5_COUNTERS = ("malformed_packet_errors", "buffer_overrun_errors", "rcv_errors",
                    "rcv_remote_errors", "rcv_general_errors", "local_link_integrity_errors",
                    "xmit_discards", "link_recovery_successful_events",
                    "link_recovery_failed_events", "link_recovery_events",
                    "effective_errors", "symbol_errors", "ecc_data")
MEMORY_LOCATIONS = ("l1_cache", "l2_cache", "dram", "register_file", "texture_memory",
                    "texture_shm", "cbu", "sram")  # nvmlMemoryLocation_t order
ECC_TOTALS = ("corrected_volatile", "corrected_aggregate", "uncorrected_volatile",
              "uncorrected_aggregate")
_LOCATION_KEY = re.compile(r"^(?P<total>(un)?corrected_(volatile|aggregate))_(?P<loc>\w+)$")

_CLOCKS = {"graphics": 1980, "sm": 1980, "mem": 2619, "video": 1545}
DEFAULT_DEVICE = {
    "name": "NVIDIA H100 80GB HBM3",
    "uuid": None,            # None: GPU-<index-derived>
    "pci_bus_id": None,      # None: 00000000:18:00.0, 00000000:28:00.0, ...
    "pci_device_id": 0x233010DE,
    "pci_subsystem_id": 0x16C110DE,
    "serial": None,          # None: 1650923<index>
    "minor_number": None,    # None: the index
    "ecc_mode": {"current": 1, "pending": 1},
    "ecc_errors": dict.fromkeys(ECC_TOTALS),  # None: the sum of its ecc_locations entries
    "ecc_locations": {},
    "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": 0, "failed": 0},
    "retired_pages": {"single_bit": [], "double_bit": [], "pending": 0},
    "pcie": {"gen": 5, "max_gen": 5, "width": 16, "max_width": 16, "replay": 0},
    "temperature": {"gpu": 60, "shutdown": 92, "slowdown": 89, "mem_max": 95, "gpu_max": 87,
                    "acoustic_min": None, "acoustic_curr": None, "acoustic_max": None,
                    "gps_curr": None},
    "clocks": {"current": dict(_CLOCKS), "max": dict(_CLOCKS), "applications": dict(_CLOCKS),
               "default_applications": dict(_CLOCKS), "boost_max": dict(_CLOCKS)},
    "power": {"usage_mw": 650000, "enforced_limit_mw": 700000, "limit_mw": 700000,
              "default_limit_mw": 700000},
    "clock_event_reasons": 0,
    # ber: NVLink 5's NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER / _EFFECTIVE_BER as NVML packs
    # them (nvml.h NVML_NVLINK_BER_MANTISSA_SHIFT 8, width 0xf; _EXP_SHIFT 0, width 0xff);
    # 0xFFF (mantissa 15, exponent 255) is the zero BER of DCGM's
    # IsEffectiveBerThresholdExceeded (common/DcgmUtilities.cpp, DCGM v4.6.0).
    "nvlink": {"links": 18, "down": [], "errors": {}, "generation": 4,
               "ber": {"symbol": 0xFFF, "effective": 0xFFF}},
    "field_values": {},
    "persistence_mode": 1,
    "mig_mode": {"current": 0, "pending": 0},
    "compute_mode": 0,
    "processes": [],
    "vbios_version": "96.00.99.00.01",
    "inforom_image_version": "G520.0200.00.05",
    "memory": {"total": 85520809984, "reserved": 566231040, "used": None},  # None: processes'
    # The GPU's local CPUs (a cpulist as sysfs writes it, or "all": every CPU of this
    # machine) and NUMA node, as nvmlDeviceGetCpuAffinity / GetMemoryAffinity give them.
    "cpu_affinity": "all",
    "numa_node": 0,
    # nvmlGpuTopologyLevel_t between this GPU and any other (nvmlDeviceGetTopologyCommonAncestor):
    # 10 NVML_TOPOLOGY_SINGLE, 20 MULTIPLE, 30 HOSTBRIDGE, 40 NODE, 50 SYSTEM; null: NOT_SUPPORTED
    "topology_level": None,
    "unsupported": [],
    "errors": {},
    "lost": False,
    "fabric": None,  # fabric.py: null, a GPU in no NVLink fabric (NOT_SUPPORTED)
}
DEFAULT_TOP = {"init_error": None, "driver_branch": None, "driver_version": None,
               "cuda_driver_version": None, "nvml_version": None, "xid_events": [],
               "devices": []}
DEFAULT_BRANCH = "R550"
# Mappings whose keys are data, not a fixed schema: checked by their own rules below.
_FREE_FORM = {"ecc_locations", "field_values", "errors", "nvlink.errors"}


@dataclass(frozen=True)
class XidEvent:
    """An XID that happens at_s seconds after the emulator was installed."""
    at_s: float
    device: int
    xid: int


class ScenarioError(ValueError):
    """A scenario names a key, a code or a value the emulator does not know."""


def code(value, where: str) -> int:
    """An NVML return code from its name ("GPU_IS_LOST") or its number."""
    if isinstance(value, str):
        name = value.removeprefix("NVML_ERROR_").removeprefix("NVML_")
        if name not in CODES:
            raise ScenarioError(f"{where}: unknown NVML return code {value!r}")
        return CODES[name]
    if isinstance(value, int) and value in CODES.values():
        return value
    raise ScenarioError(f"{where}: {value!r} is not an NVML return code")


def _merge(default: dict, given: dict, where: str, rel: str = "") -> dict:
    out = copy.deepcopy(default)
    for key, value in given.items():
        if key not in default:
            raise ScenarioError(f"{where}: unknown key {key!r}; expected one of "
                                f"{', '.join(sorted(default))}")
        path = f"{rel}{key}"
        if isinstance(default[key], dict) and path not in _FREE_FORM:
            if not isinstance(value, dict):
                raise ScenarioError(f"{where}.{key}: expected a mapping, got {value!r}")
            out[key] = _merge(default[key], value, f"{where}.{key}", f"{path}.")
        else:
            out[key] = copy.deepcopy(value)
    return out


def _check_device(dev: dict, where: str) -> None:
    from .fabric import check as check_fabric  # fabric.py reads this module's codes
    check_fabric(dev["fabric"], where)
    for key in dev["ecc_locations"]:
        m = _LOCATION_KEY.match(key)
        if not m or m["loc"] not in MEMORY_LOCATIONS:
            raise ScenarioError(f"{where}.ecc_locations: {key!r} is not "
                                f"<(un)corrected>_<volatile|aggregate>_<{'|'.join(MEMORY_LOCATIONS)}>")
    known = NVLINK5_COUNTERS if dev["nvlink"]["generation"] >= 5 else NVLINK_COUNTERS
    for counter, links in dev["nvlink"]["errors"].items():
        if counter not in known:
            raise ScenarioError(f"{where}.nvlink.errors: unknown counter {counter!r}; expected "
                                f"one of {', '.join(known)}")
        if not isinstance(links, dict) or not all(str(k).isdigit() for k in links):
            raise ScenarioError(f"{where}.nvlink.errors.{counter}: expected {{link: value}}")
    for name, value in dev["errors"].items():
        code(value, f"{where}.errors.{name}")
    procs = dev["processes"]
    snapshots = procs if procs and all(isinstance(p, list) for p in procs) else [procs]
    for proc in (p for snapshot in snapshots for p in snapshot):
        if not isinstance(proc, dict) or "pid" not in proc or set(proc) - {"pid", "used_memory"}:
            raise ScenarioError(f"{where}.processes: expected {{pid, used_memory}}, got {proc!r}")
    if dev["cpu_affinity"] not in (None, "all"):
        try:
            cpulist(dev["cpu_affinity"])
        except ValueError as e:
            raise ScenarioError(f"{where}.cpu_affinity: {e}") from None


def cpulist(text: str) -> list[int]:
    """'0-3,8' -> [0, 1, 2, 3, 8], as the kernel writes a cpulist."""
    out: set[int] = set()
    for part in str(text).strip().split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"{text!r} is not a cpulist such as '0-3,8'")
        out.update(range(int(lo), int(hi or lo) + 1))
    return sorted(out)


def _driver(top: dict) -> tuple[Branch, str, int]:
    """(branch, driver version, CUDA driver version): each from the others when not given."""
    name = top["driver_branch"]
    if name is not None and name not in BRANCHES:
        raise ScenarioError(f"scenario.driver_branch: {name!r} is not one of "
                            f"{', '.join(BRANCHES)}")
    version = top["driver_version"] or BRANCHES[name or DEFAULT_BRANCH].driver_version
    try:
        branch = BRANCHES[name] if name else branch_of(version)
        if name and not branch.cuda14 and branch_of(version).number != branch.number:
            raise ValueError(f"driver_version {version!r} is not of branch {name}")
    except ValueError as e:
        raise ScenarioError(f"scenario: {e}") from None
    cuda = top["cuda_driver_version"] or branch.cuda_driver_version or \
        BRANCHES[DEFAULT_BRANCH].cuda_driver_version
    return branch, version, cuda


def load(spec: dict | str | Path) -> Scenario:
    """A Scenario from a dict, or from the JSON file at a path."""
    if not isinstance(spec, dict):
        spec = json.loads(Path(spec).read_text(encoding="utf-8"))
    top = _merge(DEFAULT_TOP, spec, "scenario")
    if top["init_error"] is not None:
        top["init_error"] = code(top["init_error"], "scenario.init_error")
    devices = []
    for i, given in enumerate(top["devices"]):
        dev = _merge(DEFAULT_DEVICE, given, f"devices[{i}]")
        _check_device(dev, f"devices[{i}]")
        dev["uuid"] = dev["uuid"] or f"GPU-{i:08x}-5e1f-4a0c-9b7d-0000b0a4d{i:03x}"
        dev["pci_bus_id"] = dev["pci_bus_id"] or f"{i // 8:08X}:{0x18 + 0x10 * (i % 8):02X}:00.0"
        dev["serial"] = dev["serial"] or f"1650923{i:06d}"
        dev["minor_number"] = i if dev["minor_number"] is None else dev["minor_number"]
        devices.append(dev)
    events = []
    for i, ev in enumerate(top["xid_events"]):
        if set(ev) != {"at_s", "device", "xid"} or not 0 <= ev["device"] < len(devices):
            raise ScenarioError(f"xid_events[{i}]: expected {{at_s, device, xid}} naming one "
                                f"of the {len(devices)} devices, got {ev!r}")
        events.append(XidEvent(float(ev["at_s"]), int(ev["device"]), int(ev["xid"])))
    branch, version, cuda = _driver(top)
    return Scenario(top["init_error"], version, cuda,
                    top["nvml_version"] or f"{cuda // 1000}.{version}", tuple(devices),
                    tuple(sorted(events, key=lambda e: e.at_s)), branch)


@dataclass(frozen=True)
class Scenario:
    init_error: int | None
    driver_version: str
    cuda_driver_version: int
    nvml_version: str
    devices: tuple[dict, ...]
    xid_events: tuple[XidEvent, ...]
    branch: Branch  # which symbols the library exports (drivers.py)


def at(value, elapsed_s: float):
    """A value now: a list is a time series, one entry per second (the last one holds)."""
    if isinstance(value, list):
        return value[min(int(elapsed_s), len(value) - 1)] if value else None
    return value


def at_list(value, elapsed_s: float) -> list:
    """A value that is itself a list (addresses, processes, links): a list of lists is its
    time series."""
    if value and all(isinstance(v, list) for v in value):
        return value[min(int(elapsed_s), len(value) - 1)]
    return value
