"""The symbols for initialisation, the system, device lookup and device readings.

Prototypes follow nvml.h (NVML API 12/13); a selector the header does not define answers
NVML_ERROR_INVALID_ARGUMENT, as the header documents, never a value.
"""

from __future__ import annotations

import re
from ctypes import c_char, c_char_p, c_int, c_uint, c_ulonglong, c_void_p

import pynvml as nv

from . import scenario as sc
from .declarations import DEVICE, P, export, put, put_text, struct_version

UINT = P(c_uint)
TEXT = (P(c_char), c_uint)  # char *buffer, unsigned int length
THRESHOLDS = ("shutdown", "slowdown", "mem_max", "gpu_max", "acoustic_min", "acoustic_curr",
              "acoustic_max", "gps_curr")  # nvmlTemperatureThresholds_t order
CLOCK_IDS = ("current", "applications", "default_applications", "boost_max")  # nvmlClockId_t
NOT_AVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE as unsigned long long
NO_INSTANCE = 0xFFFFFFFF  # gpu/compute instance id of a process outside MIG


# -- initialisation and the system ---------------------------------------------------------

@export("nvmlInitWithFlags", c_uint, needs_init=False)
def _init_with_flags(emu, flags):
    if flags & ~0b111:  # NO_GPUS | NO_ATTACH | FORCE_INIT
        return sc.INVALID_ARGUMENT
    return emu.init()


@export("nvmlShutdown")
def _shutdown(emu):
    return emu.shutdown()


@export("nvmlErrorString", c_uint, restype=c_void_p, needs_init=False)
def _error_string(emu, code):
    return emu.error_string(code)  # const char *


@export("nvmlSystemGetDriverVersion", *TEXT)
def _driver_version(emu, buf, length):
    return put_text(buf, length, emu.scenario.driver_version)


@export("nvmlSystemGetNVMLVersion", *TEXT)
def _nvml_version(emu, buf, length):
    return put_text(buf, length, emu.scenario.nvml_version)


@export("nvmlSystemGetCudaDriverVersion", P(c_int))
def _cuda_version(emu, out):
    return put(out, emu.scenario.cuda_driver_version)


@export("nvmlSystemGetCudaDriverVersion_v2", P(c_int))
def _cuda_version_v2(emu, out):
    return put(out, emu.scenario.cuda_driver_version)


# -- finding a device ----------------------------------------------------------------------

@export("nvmlDeviceGetCount_v2", UINT)
def _count(emu, out):
    return put(out, len(emu.devices))


def _hand_out(dev, out, name: str) -> int:
    if not out:
        return sc.INVALID_ARGUMENT
    refused = dev.refusal((name,))
    if refused is not None:
        return refused
    out[0] = dev.handle
    return sc.SUCCESS


@export("nvmlDeviceGetHandleByIndex_v2", c_uint, P(DEVICE))
def _by_index(emu, index, out):
    if index >= len(emu.devices):
        return sc.INVALID_ARGUMENT
    return _hand_out(emu.devices[index], out, "nvmlDeviceGetHandleByIndex_v2")


@export("nvmlDeviceGetHandleByUUID", c_char_p, P(DEVICE))
def _by_uuid(emu, uuid, out):
    if not uuid:
        return sc.INVALID_ARGUMENT
    for dev in emu.devices:
        if dev.spec["uuid"].encode() == uuid:
            return _hand_out(dev, out, "nvmlDeviceGetHandleByUUID")
    return sc.NOT_FOUND


def parse_bus_id(text: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) from the forms nvml.h accepts: %x:%x:%x.%x, %x:%x:%x, %x:%x.%x."""
    m = (re.fullmatch(r"([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(\.[0-7])?", text)
         or re.fullmatch(r"()([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.[0-7]", text))
    if not m:
        return None
    return int(m[1] or "0", 16), int(m[2], 16), int(m[3], 16)


@export("nvmlDeviceGetHandleByPciBusId_v2", c_char_p, P(DEVICE))
def _by_bus_id(emu, bus_id, out):
    wanted = parse_bus_id(bus_id.decode(errors="replace")) if bus_id else None
    if wanted is None:
        return sc.INVALID_ARGUMENT
    for dev in emu.devices:
        if parse_bus_id(dev.spec["pci_bus_id"]) == wanted:
            return _hand_out(dev, out, "nvmlDeviceGetHandleByPciBusId_v2")
    return sc.NOT_FOUND


# -- identity and configuration ------------------------------------------------------------

def _text_reading(name: str, key: str) -> None:
    @export(name, DEVICE, *TEXT, reads=key)
    def read(emu, dev, buf, length):
        return put_text(buf, length, dev.get(key))


for _name, _key in (("nvmlDeviceGetName", "name"), ("nvmlDeviceGetUUID", "uuid"),
                    ("nvmlDeviceGetSerial", "serial"),
                    ("nvmlDeviceGetVbiosVersion", "vbios_version"),
                    ("nvmlDeviceGetInforomImageVersion", "inforom_image_version")):
    _text_reading(_name, _key)


def _uint_reading(name: str, *path: str, ctype=UINT) -> None:
    @export(name, DEVICE, ctype, reads=path[0])
    def read(emu, dev, out):
        return put(out, dev.get(*path))


for _name, *_path in (("nvmlDeviceGetMinorNumber", "minor_number"),
                      ("nvmlDeviceGetPersistenceMode", "persistence_mode"),
                      ("nvmlDeviceGetComputeMode", "compute_mode"),
                      ("nvmlDeviceGetCurrPcieLinkGeneration", "pcie", "gen"),
                      ("nvmlDeviceGetMaxPcieLinkGeneration", "pcie", "max_gen"),
                      ("nvmlDeviceGetCurrPcieLinkWidth", "pcie", "width"),
                      ("nvmlDeviceGetMaxPcieLinkWidth", "pcie", "max_width"),
                      ("nvmlDeviceGetPcieReplayCounter", "pcie", "replay"),
                      ("nvmlDeviceGetPowerUsage", "power", "usage_mw"),
                      ("nvmlDeviceGetEnforcedPowerLimit", "power", "enforced_limit_mw"),
                      ("nvmlDeviceGetPowerManagementLimit", "power", "limit_mw"),
                      ("nvmlDeviceGetPowerManagementDefaultLimit", "power", "default_limit_mw"),
                      ("nvmlDeviceGetRetiredPagesPendingStatus", "retired_pages", "pending")):
    _uint_reading(_name, *_path)
for _name in ("nvmlDeviceGetCurrentClocksEventReasons",
              "nvmlDeviceGetCurrentClocksThrottleReasons"):
    _uint_reading(_name, "clock_event_reasons", ctype=P(c_ulonglong))


@export("nvmlDeviceGetIndex", DEVICE, UINT)
def _index(emu, dev, out):
    return put(out, dev.index)


@export("nvmlDeviceGetPciInfo_v3", DEVICE, P(nv.nvmlPciInfo_t), reads="pci_bus_id")
def _pci_info(emu, dev, out):
    if not out:
        return sc.INVALID_ARGUMENT
    domain, bus, device = parse_bus_id(dev.spec["pci_bus_id"])
    info = out.contents
    info.busIdLegacy = f"{domain:04X}:{bus:02X}:{device:02X}.0".encode()
    info.busId = f"{domain:08X}:{bus:02X}:{device:02X}.0".encode()
    info.domain, info.bus, info.device = domain, bus, device
    info.pciDeviceId = dev.get("pci_device_id")
    info.pciSubSystemId = dev.get("pci_subsystem_id")
    return sc.SUCCESS


def _pair(out_a, out_b, a, b) -> int:
    if not out_a or not out_b:
        return sc.INVALID_ARGUMENT
    out_a[0], out_b[0] = int(a), int(b)
    return sc.SUCCESS


@export("nvmlDeviceGetMigMode", DEVICE, UINT, UINT, reads="mig_mode")
def _mig_mode(emu, dev, current, pending):
    return _pair(current, pending, dev.get("mig_mode", "current"), dev.get("mig_mode", "pending"))


def _room(count, items: list, out) -> int | None:
    """NVML's two-call sizing: a buffer too small gets INSUFFICIENT_SIZE and the count it
    needs; None when the caller may fill `out` (then it sets count itself)."""
    if count[0] < len(items):
        count[0] = len(items)
        return sc.INSUFFICIENT_SIZE
    if items and not out:
        return sc.INVALID_ARGUMENT
    return None


@export("nvmlDeviceGetComputeRunningProcesses_v3", DEVICE, UINT, P(nv.c_nvmlProcessInfo_v3_t),
        reads="processes")
def _processes(emu, dev, count, infos):
    procs = dev.get_list("processes")
    if not count:
        return sc.INVALID_ARGUMENT
    short = _room(count, procs, infos)
    if short is not None:
        return short
    for i, proc in enumerate(procs):
        infos[i].pid = proc["pid"]
        infos[i].usedGpuMemory = proc.get("used_memory", NOT_AVAILABLE)
        infos[i].gpuInstanceId = infos[i].computeInstanceId = NO_INSTANCE
    count[0] = len(procs)
    return sc.SUCCESS


def _memory(dev) -> tuple[int, int, int, int]:
    """(total, reserved, free, used), used without what the driver reserves."""
    total, reserved = dev.get("memory", "total"), dev.get("memory", "reserved")
    used = dev.get("memory", "used")
    if used is None:
        used = sum(p.get("used_memory", 0) for p in dev.get_list("processes"))
    return total, reserved, total - reserved - used, used


@export("nvmlDeviceGetMemoryInfo", DEVICE, P(nv.c_nvmlMemory_t), reads="memory")
def _memory_v1(emu, dev, out):
    if not out:
        return sc.INVALID_ARGUMENT
    total, reserved, free, used = _memory(dev)
    # v1 counts the reserved memory as used
    out.contents.total, out.contents.free, out.contents.used = total, free, used + reserved
    return sc.SUCCESS


@export("nvmlDeviceGetMemoryInfo_v2", DEVICE, P(nv.c_nvmlMemory_v2_t), reads="memory")
def _memory_v2(emu, dev, out):
    if not out:
        return sc.INVALID_ARGUMENT
    if out.contents.version != struct_version(nv.c_nvmlMemory_v2_t, 2):
        return sc.ARGUMENT_VERSION_MISMATCH
    m = out.contents
    m.total, m.reserved, m.free, m.used = _memory(dev)
    return sc.SUCCESS


# -- ECC, remapped rows, retired pages -----------------------------------------------------

def ecc_count(dev, error_type: int, counter_type: int, location: int | None = None):
    """An ECC counter now; a total not given is the sum of its locations. None: unsupported
    (ECC is off: nvml.h says the counters require ECC mode to be enabled)."""
    if not dev.get("ecc_mode", "current"):
        return None
    total = ("corrected", "uncorrected")[error_type] + ("_volatile", "_aggregate")[counter_type]
    by_location = {loc: sc.at(dev.spec["ecc_locations"].get(f"{total}_{loc}", 0), dev.emu.elapsed())
                   for loc in sc.MEMORY_LOCATIONS}
    if location is not None:
        return by_location[sc.MEMORY_LOCATIONS[location]]
    given = dev.get("ecc_errors", total)
    return sum(by_location.values()) if given is None else given


@export("nvmlDeviceGetEccMode", DEVICE, UINT, UINT, reads="ecc_mode")
def _ecc_mode(emu, dev, current, pending):
    return _pair(current, pending, dev.get("ecc_mode", "current"), dev.get("ecc_mode", "pending"))


@export("nvmlDeviceGetTotalEccErrors", DEVICE, c_uint, c_uint, P(c_ulonglong), reads="ecc_errors")
def _total_ecc(emu, dev, error_type, counter_type, out):
    if error_type > 1 or counter_type > 1:
        return sc.INVALID_ARGUMENT
    return put(out, ecc_count(dev, error_type, counter_type))


@export("nvmlDeviceGetMemoryErrorCounter", DEVICE, c_uint, c_uint, c_uint, P(c_ulonglong),
        reads=("ecc_errors", "ecc_locations"))
def _memory_errors(emu, dev, error_type, counter_type, location, out):
    if error_type > 1 or counter_type > 1 or location >= len(sc.MEMORY_LOCATIONS):
        return sc.INVALID_ARGUMENT
    return put(out, ecc_count(dev, error_type, counter_type, location))


@export("nvmlDeviceGetRemappedRows", DEVICE, UINT, UINT, UINT, UINT, reads="remapped_rows")
def _remapped_rows(emu, dev, corr, unc, pending, failed):
    if not (corr and unc and pending and failed):
        return sc.INVALID_ARGUMENT
    if dev.get("mig_mode", "current"):
        return sc.NOT_SUPPORTED  # nvml.h: not supported while MIG is enabled
    for out, key in ((corr, "correctable"), (unc, "uncorrectable"), (pending, "pending"),
                     (failed, "failed")):
        out[0] = int(dev.get("remapped_rows", key))
    return sc.SUCCESS


@export("nvmlDeviceGetRetiredPages", DEVICE, c_uint, UINT, P(c_ulonglong), reads="retired_pages")
def _retired_pages(emu, dev, cause, count, addresses):
    if cause > 1 or not count:  # MULTIPLE_SINGLE_BIT_ECC_ERRORS, DOUBLE_BIT_ECC_ERROR
        return sc.INVALID_ARGUMENT
    pages = dev.get_list("retired_pages", ("single_bit", "double_bit")[cause])
    short = _room(count, pages, addresses)
    if short is not None:
        return short
    for i, address in enumerate(pages):
        addresses[i] = address
    count[0] = len(pages)
    return sc.SUCCESS


# -- temperature, clocks -------------------------------------------------------------------

@export("nvmlDeviceGetTemperature", DEVICE, c_uint, UINT, reads="temperature")
def _temperature(emu, dev, sensor, out):
    if sensor != 0:  # NVML_TEMPERATURE_GPU is the only sensor
        return sc.INVALID_ARGUMENT
    return put(out, dev.get("temperature", "gpu"))


@export("nvmlDeviceGetTemperatureV", DEVICE, P(nv.c_nvmlTemperature_v1_t), reads="temperature")
def _temperature_v(emu, dev, out):
    if not out:
        return sc.INVALID_ARGUMENT
    if out.contents.version != struct_version(nv.c_nvmlTemperature_v1_t, 1):
        return sc.ARGUMENT_VERSION_MISMATCH
    if out.contents.sensorType != 0:
        return sc.INVALID_ARGUMENT
    value = dev.get("temperature", "gpu")
    if value is None:
        return sc.NOT_SUPPORTED
    out.contents.temperature = value
    return sc.SUCCESS


@export("nvmlDeviceGetTemperatureThreshold", DEVICE, c_uint, UINT, reads="temperature")
def _threshold(emu, dev, kind, out):
    if kind >= len(THRESHOLDS):
        return sc.INVALID_ARGUMENT
    return put(out, dev.get("temperature", THRESHOLDS[kind]))


def _clock_reading(name: str, clock_id: str) -> None:
    @export(name, DEVICE, c_uint, UINT, reads="clocks")
    def read(emu, dev, clock_type, out):
        if clock_type >= len(sc.CLOCK_TYPES):
            return sc.INVALID_ARGUMENT
        return put(out, dev.get("clocks", clock_id, sc.CLOCK_TYPES[clock_type]))


for _name, _id in (("nvmlDeviceGetClockInfo", "current"), ("nvmlDeviceGetMaxClockInfo", "max"),
                   ("nvmlDeviceGetApplicationsClock", "applications"),
                   ("nvmlDeviceGetDefaultApplicationsClock", "default_applications")):
    _clock_reading(_name, _id)


@export("nvmlDeviceGetClock", DEVICE, c_uint, c_uint, UINT, reads="clocks")
def _clock(emu, dev, clock_type, clock_id, out):
    if clock_type >= len(sc.CLOCK_TYPES) or clock_id >= len(CLOCK_IDS):
        return sc.INVALID_ARGUMENT
    return put(out, dev.get("clocks", CLOCK_IDS[clock_id], sc.CLOCK_TYPES[clock_type]))
