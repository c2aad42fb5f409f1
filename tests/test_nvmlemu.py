"""The NVML emulator itself (tests/nvmlemu), through the real pynvml: values, selectors,
errors, arguments, time, events, lost GPUs, init errors, and activation in subprocesses."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import nvmlemu
import pytest

H100 = "NVIDIA H100 80GB HBM3"
FULL = {  # one device with a value in every reading, none of them a default
    "name": "NVIDIA H200", "uuid": "GPU-6a1e9d1c-2f3b-4c5d-8e9f-0a1b2c3d4e5f",
    "pci_bus_id": "0000:9a:00.0", "serial": "1652123456789", "minor_number": 5,
    "vbios_version": "96.00.AF.00.02", "inforom_image_version": "G525.0210.00.03",
    "persistence_mode": 0, "compute_mode": 3, "mig_mode": {"current": 0, "pending": 1},
    "ecc_mode": {"current": 1, "pending": 0},
    "ecc_errors": {"corrected_volatile": 11, "corrected_aggregate": 12,
                   "uncorrected_volatile": 13},
    "ecc_locations": {"uncorrected_aggregate_dram": 4, "uncorrected_aggregate_sram": 1},
    "remapped_rows": {"correctable": 2, "uncorrectable": 1, "pending": 1, "failed": 0},
    "retired_pages": {"single_bit": [0x1000, 0x2000], "double_bit": [0x3000], "pending": 1},
    "pcie": {"gen": 4, "max_gen": 5, "width": 8, "max_width": 16, "replay": 7},
    "temperature": {"gpu": 71, "shutdown": 95, "slowdown": 90, "gpu_max": 88},
    "clocks": {"current": {"sm": 1755, "mem": 2600}, "max": {"sm": 1980},
               "applications": {"sm": 1500}, "default_applications": {"sm": 1980},
               "boost_max": {"sm": 1990}},
    "power": {"usage_mw": 401000, "enforced_limit_mw": 600000, "limit_mw": 610000,
              "default_limit_mw": 700000},
    "clock_event_reasons": 0x28,
    "nvlink": {"links": 18, "down": [17], "errors": {"crc_flit": {"0": 3, "13": 4},
                                                     "recovery": {"1": 5}, "replay": {"2": 6}}},
    "processes": [{"pid": 4242, "used_memory": 1 << 30}, {"pid": 4343, "used_memory": 1 << 20}],
    "memory": {"total": 150 << 30, "reserved": 1 << 30},
}


@pytest.fixture
def nv(nvml_in_process):
    nv = nvml_in_process(driver_version="570.86.15", cuda_driver_version=12080,
                         devices=[{"name": H100}, FULL])
    nv.nvmlInit()
    return nv


def test_real_pynvml_returns_the_scenario(nv):
    assert nv.nvmlSystemGetDriverVersion() == "570.86.15"  # str: pynvml decodes
    assert nv.nvmlSystemGetCudaDriverVersion_v2() == 12080 and nv.nvmlDeviceGetCount() == 2
    h = nv.nvmlDeviceGetHandleByIndex(1)
    assert isinstance(h, nv.c_nvmlDevice_t) and ctypes.cast(h, ctypes.c_void_p).value
    assert nv.nvmlDeviceGetIndex(h) == 1
    assert nv.nvmlDeviceGetName(h) == "NVIDIA H200" and nv.nvmlDeviceGetSerial(h) == FULL["serial"]
    assert nv.nvmlDeviceGetUUID(h) == FULL["uuid"] and nv.nvmlDeviceGetMinorNumber(h) == 5
    pci = nv.nvmlDeviceGetPciInfo(h)
    # pynvml's structures decode char arrays: str, in NVML's own 8-digit-domain form
    assert pci.busId == "00000000:9A:00.0" and pci.busIdLegacy == "0000:9A:00.0"
    assert (pci.domain, pci.bus, pci.device) == (0, 0x9A, 0)
    assert nv.nvmlDeviceGetVbiosVersion(h) == "96.00.AF.00.02"
    assert nv.nvmlDeviceGetInforomImageVersion(h) == "G525.0210.00.03"
    assert nv.nvmlDeviceGetPersistenceMode(h) == 0 and nv.nvmlDeviceGetComputeMode(h) == 3
    assert nv.nvmlDeviceGetMigMode(h) == [0, 1] and nv.nvmlDeviceGetEccMode(h) == [1, 0]
    assert nv.nvmlDeviceGetRemappedRows(h) == (2, 1, 1, 0)
    assert nv.nvmlDeviceGetRetiredPages(h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR) \
        == [0x3000]
    assert nv.nvmlDeviceGetRetiredPagesPendingStatus(h) == 1
    assert (nv.nvmlDeviceGetCurrPcieLinkGeneration(h), nv.nvmlDeviceGetMaxPcieLinkGeneration(h),
            nv.nvmlDeviceGetCurrPcieLinkWidth(h), nv.nvmlDeviceGetMaxPcieLinkWidth(h),
            nv.nvmlDeviceGetPcieReplayCounter(h)) == (4, 5, 8, 16, 7)
    assert nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU) == 71
    assert nv.nvmlDeviceGetTemperatureV(h, nv.NVML_TEMPERATURE_GPU) == 71
    assert (nv.nvmlDeviceGetPowerUsage(h), nv.nvmlDeviceGetEnforcedPowerLimit(h),
            nv.nvmlDeviceGetPowerManagementLimit(h),
            nv.nvmlDeviceGetPowerManagementDefaultLimit(h)) == (401000, 600000, 610000, 700000)
    assert nv.nvmlDeviceGetCurrentClocksEventReasons(h) == 0x28
    assert nv.nvmlDeviceGetCurrentClocksThrottleReasons(h) == 0x28
    procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
    assert [(p.pid, p.usedGpuMemory) for p in procs] == [(4242, 1 << 30), (4343, 1 << 20)]
    mem, mem2 = nv.nvmlDeviceGetMemoryInfo(h), nv.nvmlDeviceGetMemoryInfo(h, nv.nvmlMemory_v2)
    used = (1 << 30) + (1 << 20)
    assert (mem2.total, mem2.reserved, mem2.used) == (150 << 30, 1 << 30, used)
    assert mem.used == used + (1 << 30) and mem.free == mem2.free == mem.total - mem.used
    assert nv.nvmlDeviceGetNvLinkState(h, 16) == 1 and nv.nvmlDeviceGetNvLinkState(h, 17) == 0
    by_uuid = nv.nvmlDeviceGetHandleByUUID(FULL["uuid"])
    for bus_id in ("00000000:9A:00.0", "0000:9a:00.0", "9a:00.0"):
        assert nv.nvmlDeviceGetIndex(nv.nvmlDeviceGetHandleByPciBusId(bus_id)) == 1
    assert ctypes.cast(by_uuid, ctypes.c_void_p).value == ctypes.cast(h, ctypes.c_void_p).value


def test_selectors_choose_their_own_value(nv):
    """The stand-in this replaced ignored selectors, so a probe asking for the wrong counter
    passed its tests: here each selector answers its own figure."""
    h = nv.nvmlDeviceGetHandleByIndex(1)
    ecc = {(e, c): nv.nvmlDeviceGetTotalEccErrors(h, e, c)
           for e in (nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
           for c in (nv.NVML_VOLATILE_ECC, nv.NVML_AGGREGATE_ECC)}
    assert ecc == {(0, 0): 11, (0, 1): 12, (1, 0): 13, (1, 1): 5}  # 5: the sum of locations
    assert nv.nvmlDeviceGetMemoryErrorCounter(h, 1, 1, nv.NVML_MEMORY_LOCATION_DRAM) == 4
    assert nv.nvmlDeviceGetMemoryErrorCounter(h, 1, 1, nv.NVML_MEMORY_LOCATION_SRAM) == 1
    assert [nv.nvmlDeviceGetTemperatureThreshold(h, t) for t in (
        nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
        nv.NVML_TEMPERATURE_THRESHOLD_GPU_MAX)] == [95, 90, 88]
    assert nv.nvmlDeviceGetRetiredPages(h, 0) == [0x1000, 0x2000]
    assert (nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
            nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_SM),
            nv.nvmlDeviceGetDefaultApplicationsClock(h, nv.NVML_CLOCK_SM),
            nv.nvmlDeviceGetClock(h, nv.NVML_CLOCK_SM, nv.NVML_CLOCK_ID_CUSTOMER_BOOST_MAX)) \
        == (1755, 2600, 1980, 1500, 1980, 1990)
    counter = nv.nvmlDeviceGetNvLinkErrorCounter
    assert [counter(h, 0, nv.NVML_NVLINK_ERROR_DL_CRC_FLIT), counter(h, 13, 2), counter(h, 1, 2),
            counter(h, 1, nv.NVML_NVLINK_ERROR_DL_RECOVERY),
            counter(h, 2, nv.NVML_NVLINK_ERROR_DL_REPLAY)] == [3, 4, 0, 5, 6]


def test_field_values_derive_from_the_readings(nv):
    h = nv.nvmlDeviceGetHandleByIndex(1)
    ids = [nv.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0,
           nv.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L1,
           nv.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
           nv.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L1,
           nv.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L2,
           (nv.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 13), (nv.NVML_FI_DEV_NVLINK_GET_STATE, 17),
           nv.NVML_FI_DEV_NVLINK_LINK_COUNT, nv.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
           nv.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, nv.NVML_FI_DEV_REMAPPED_PENDING,
           nv.NVML_FI_DEV_RETIRED_SBE]
    values = nv.nvmlDeviceGetFieldValues(h, ids)
    assert [v.nvmlReturn for v in values] == [0] * len(ids)
    got = [v.value.uiVal if v.valueType == nv.NVML_VALUE_TYPE_UNSIGNED_INT else v.value.ullVal
           for v in values]
    assert got == [3, 0, 7, 5, 6, 4, 0, 18, 7, 13, 1, 2]
    odd = nv.nvmlDeviceGetFieldValues(h, [0, 5000, nv.NVML_FI_DEV_MEMORY_TEMP,
                                          (nv.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 18)])
    assert [v.nvmlReturn for v in odd] == [nv.NVML_ERROR_INVALID_ARGUMENT] * 2 + [
        nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_INVALID_ARGUMENT]


def test_nvlink_counters_refused_while_field_values_serve_them(nvml_in_process):
    nv = nvml_in_process(devices=[{"unsupported": ["nvmlDeviceGetNvLinkErrorCounter"],
                                   "nvlink": {"errors": {"crc_flit": {"0": 9}}}}])
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetNvLinkErrorCounter(h, 0, nv.NVML_NVLINK_ERROR_DL_CRC_FLIT)
    assert nv.nvmlDeviceGetNvLinkState(h, 0) == 1
    (fv,) = nv.nvmlDeviceGetFieldValues(h, [nv.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0])
    assert (fv.nvmlReturn, fv.value.ullVal) == (0, 9)


def test_unsupported_and_errors_raise_pynvml_subclasses(nvml_in_process):
    nv = nvml_in_process(devices=[{
        "unsupported": ["remapped_rows", "nvmlDeviceGetPcieReplayCounter"],
        "errors": {"temperature": "GPU_IS_LOST", "nvmlDeviceGetSerial": 4}}])
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetRemappedRows(h)
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetPcieReplayCounter(h)
    assert nv.nvmlDeviceGetCurrPcieLinkWidth(h) == 16, "a symbol's name refuses only it"
    (fv,) = nv.nvmlDeviceGetFieldValues(h, [nv.NVML_FI_DEV_REMAPPED_PENDING])
    assert fv.nvmlReturn == nv.NVML_ERROR_NOT_SUPPORTED, "a reading refuses its fields too"
    for call in (lambda: nv.nvmlDeviceGetTemperature(h, 0),
                 lambda: nv.nvmlDeviceGetTemperatureThreshold(h, 1)):
        with pytest.raises(nv.NVMLError_GpuIsLost, match="GPU is lost"):
            call()
    with pytest.raises(nv.NVMLError_NoPermission):
        nv.nvmlDeviceGetSerial(h)


@pytest.mark.parametrize("call", [
    lambda nv, h: nv.nvmlDeviceGetTemperatureThreshold(h, 8),
    lambda nv, h: nv.nvmlDeviceGetTemperature(h, 1),
    lambda nv, h: nv.nvmlDeviceGetTotalEccErrors(h, 2, 0),
    lambda nv, h: nv.nvmlDeviceGetTotalEccErrors(h, 1, 2),
    lambda nv, h: nv.nvmlDeviceGetMemoryErrorCounter(h, 1, 0, 8),
    lambda nv, h: nv.nvmlDeviceGetClockInfo(h, 4),
    lambda nv, h: nv.nvmlDeviceGetClock(h, 1, 4),
    lambda nv, h: nv.nvmlDeviceGetNvLinkErrorCounter(h, 0, 5),
    lambda nv, h: nv.nvmlDeviceGetNvLinkErrorCounter(h, 18, 2),
    lambda nv, h: nv.nvmlDeviceGetNvLinkState(h, 18),
    lambda nv, h: nv.nvmlDeviceGetRetiredPages(h, 2),
    lambda nv, h: nv.nvmlDeviceRegisterEvents(h, 1 << 40, nv.nvmlEventSetCreate()),
    lambda nv, h: nv.nvmlDeviceGetHandleByPciBusId("not-a-bus-id"),
    lambda nv, h: nv.nvmlDeviceGetMemoryAffinity(h, 1, 2),
    lambda nv, h: nv.nvmlDeviceGetCpuAffinityWithinScope(h, 1, 2),
    lambda nv, h: nv.nvmlDeviceGetCpuAffinity(h, 0),
], ids=["threshold", "sensor", "ecc-type", "ecc-counter", "location", "clock-type", "clock-id",
        "nvlink-counter", "nvlink-link", "nvlink-state-link", "retirement-cause", "event-type",
        "bus-id", "affinity-scope", "cpu-affinity-scope", "cpu-set-size"])
def test_a_selector_nvml_does_not_define_is_an_invalid_argument(nv, call):
    with pytest.raises(nv.NVMLError_InvalidArgument):
        call(nv, nv.nvmlDeviceGetHandleByIndex(1))


def test_wrong_argument_count_or_type_fails_as_ctypes_does(nv):
    lib, h = nv.nvmlLib, nv.nvmlDeviceGetHandleByIndex(0)
    out = ctypes.c_uint()
    assert lib.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU, ctypes.byref(out)) == 0
    assert out.value == 60
    with pytest.raises(TypeError):
        lib.nvmlDeviceGetTemperature(h, 0)
    with pytest.raises(TypeError):
        lib.nvmlDeviceGetTemperature(h, 0, ctypes.byref(out), 1)
    with pytest.raises(ctypes.ArgumentError):  # unsigned long long * where unsigned int *
        lib.nvmlDeviceGetTemperature(h, 0, ctypes.byref(ctypes.c_ulonglong()))
    with pytest.raises(ctypes.ArgumentError):  # a str where const char *
        lib.nvmlDeviceGetHandleByUUID("GPU-x", ctypes.byref(nv.c_nvmlDevice_t()))
    with pytest.raises(ctypes.ArgumentError):  # not an array of nvmlFieldValue_t
        lib.nvmlDeviceGetFieldValues(h, 1, ctypes.byref((ctypes.c_uint * 8)()))
    with pytest.raises(nv.NVMLError_InvalidArgument):  # a handle the library never gave
        nv.nvmlDeviceGetName(ctypes.cast(ctypes.create_string_buffer(8), nv.c_nvmlDevice_t))
    with pytest.raises(nv.NVMLError_FunctionNotFound):  # a symbol it does not export
        nv.nvmlDeviceGetBAR1MemoryInfo(h)


# Per branch: (a symbol only the newer branches export, the older name that stands in for
# it), as nvml.h of each CUDA release declares them (tests/nvmlemu/drivers.py).
RENAMED = [("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
           ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature")]


@pytest.mark.parametrize("branch,version,cuda,exported,missing", [
    ("R525", "525.147.05", 12000, ["nvmlDeviceGetCurrentClocksThrottleReasons"],
     ["nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetTemperatureV"]),
    ("R535", "535.230.02", 12020, ["nvmlDeviceGetCurrentClocksEventReasons",
                                   "nvmlDeviceGetCurrentClocksThrottleReasons"],
     ["nvmlDeviceGetTemperatureV"]),
    ("R570", "570.86.15", 12080, [name for pair in RENAMED for name in pair], []),
    ("CUDA14", "999.0.0", 14000, ["nvmlDeviceGetCurrentClocksEventReasons",
                                  "nvmlDeviceGetTemperatureV", "nvmlDeviceGetClock"],
     ["nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetTemperature",
      "nvmlDeviceGetApplicationsClock", "nvmlDeviceGetDefaultApplicationsClock"]),
])
def test_a_driver_branch_lacks_the_symbols_its_nvml_h_lacks(nvml_in_process, branch, version,
                                                             cuda, exported, missing):
    nv = nvml_in_process(driver_branch=branch, devices=[{"clock_event_reasons": 0x4}])
    nv.nvmlInit()
    assert nv.nvmlSystemGetDriverVersion() == version
    assert nv.nvmlSystemGetCudaDriverVersion() == cuda
    assert nv.nvmlSystemGetNVMLVersion() == f"{cuda // 1000}.{version}"
    h = nv.nvmlDeviceGetHandleByIndex(0)
    calls = {"nvmlDeviceGetCurrentClocksEventReasons": (h,),
             "nvmlDeviceGetCurrentClocksThrottleReasons": (h,),
             "nvmlDeviceGetTemperatureV": (h, 0), "nvmlDeviceGetTemperature": (h, 0),
             "nvmlDeviceGetClock": (h, 0, 1), "nvmlDeviceGetApplicationsClock": (h, 0),
             "nvmlDeviceGetDefaultApplicationsClock": (h, 0)}
    for name in exported:
        assert getattr(nv, name)(*calls[name]) in (0x4, 60, 1980), name
    for name in missing:  # pynvml finds the symbol missing when it is first called
        with pytest.raises(nv.NVMLError_FunctionNotFound):
            getattr(nv, name)(*calls[name])


def test_the_cuda14_branch_follows_what_pynvml_announces():
    removed = nvmlemu.drivers.removed_in_cuda14()
    assert {"nvmlDeviceGetTemperature", "nvmlDeviceGetCurrentClocksThrottleReasons",
            "nvmlDeviceGetApplicationsClock", "nvmlDeviceGetDefaultApplicationsClock",
            "nvmlDeviceGetHandleBySerial"} <= removed
    assert not removed & {"nvmlDeviceGetTemperatureV", "nvmlDeviceGetClock",
                          "nvmlDeviceGetCurrentClocksEventReasons"}
    # a driver version stands for its branch; an unknown branch orders by its number
    assert nvmlemu.load({"driver_version": "525.60.13"}).branch.name == "R525"
    assert nvmlemu.load({"driver_version": "560.35.03"}).branch.number == 560
    assert nvmlemu.load({}).driver_version == "550.54.15"


def test_the_local_cpus_and_numa_node_of_a_gpu(nvml_in_process):
    nv = nvml_in_process(devices=[{"cpu_affinity": "1,3-4,65", "numa_node": 1},
                                  {"cpu_affinity": None, "numa_node": None}, {}])
    nv.nvmlInit()
    a, b, c = (nv.nvmlDeviceGetHandleByIndex(i) for i in range(3))
    assert list(nv.nvmlDeviceGetCpuAffinity(a, 2)) == [0b11010, 0b10]
    assert list(nv.nvmlDeviceGetCpuAffinity(a, 1)) == [0b11010], "what does not fit is left out"
    assert list(nv.nvmlDeviceGetCpuAffinityWithinScope(a, 2, nv.NVML_AFFINITY_SCOPE_NODE)) \
        == [0b11010, 0b10]
    assert list(nv.nvmlDeviceGetMemoryAffinity(a, 1, nv.NVML_AFFINITY_SCOPE_NODE)) == [0b10]
    for call in (lambda: nv.nvmlDeviceGetCpuAffinity(b, 1),
                 lambda: nv.nvmlDeviceGetMemoryAffinity(b, 1, 0)):
        with pytest.raises(nv.NVMLError_NotSupported):
            call()
    assert list(nv.nvmlDeviceGetCpuAffinity(c, 1)) == [(1 << os.cpu_count()) - 1]
    assert list(nv.nvmlDeviceGetMemoryAffinity(c, 1, 0)) == [1]


def test_torch_sees_one_mig_device_in_place_of_the_gpus_with_mig_on():
    mig = {"mig_mode": {"current": 1, "pending": 1}}
    assert nvmlemu.visible({"devices": [{}, mig, mig, {}]}) == "0,mig:1,3"
    assert nvmlemu.visible({"devices": [mig] * 8}) == "mig:0"
    assert nvmlemu.visible({"devices": [mig, {}]}, cuda="1") == "1"


def test_time_series_one_entry_per_second_the_last_holds(nvml_in_process):
    now = [0.0]
    with nvmlemu.installed({"devices": [{"temperature": {"gpu": [50, 60, 70]},
                                         "nvlink": {"down": [[], [3], []]}}]},
                           clock=lambda: now[0]) as emu:
        nv = emu.pynvml
        nv.nvmlInit()
        h = nv.nvmlDeviceGetHandleByIndex(0)
        seen = []
        for t in (0.0, 0.99, 1.0, 2.5, 60.0):
            now[0] = t
            seen.append((nv.nvmlDeviceGetTemperature(h, 0), nv.nvmlDeviceGetNvLinkState(h, 3)))
        assert seen == [(50, 1), (50, 1), (60, 0), (70, 1), (70, 1)]
        assert emu.internal_errors == []


def test_xids_reach_the_sets_registered_before_them(nvml_in_process):
    nv = nvml_in_process(devices=[{}, {}], xid_events=[
        {"at_s": 0.3, "device": 1, "xid": 79}, {"at_s": 0.3, "device": 0, "xid": 48},
        {"at_s": 0.6, "device": 0, "xid": 13}])
    nv.nvmlInit()
    h0, h1 = nv.nvmlDeviceGetHandleByIndex(0), nv.nvmlDeviceGetHandleByIndex(1)
    early, only_gpu1 = nv.nvmlEventSetCreate(), nv.nvmlEventSetCreate()
    for h in (h0, h1):
        nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, early)
    nv.nvmlDeviceRegisterEvents(h1, nv.nvmlEventTypeXidCriticalError, only_gpu1)
    got = []
    for _ in range(3):
        ev = nv.nvmlEventSetWait(early, 2000)
        assert ev.eventType == nv.nvmlEventTypeXidCriticalError
        got.append((nv.nvmlDeviceGetIndex(ev.device), ev.eventData))
    assert sorted(got[:2]) == [(0, 48), (1, 79)] and got[2] == (0, 13)
    with pytest.raises(nv.NVMLError_Timeout):
        nv.nvmlEventSetWait(early, 50)
    assert nv.nvmlEventSetWait(only_gpu1, 0).eventData == 79
    late = nv.nvmlEventSetCreate()  # registered after every XID: nothing to deliver
    nv.nvmlDeviceRegisterEvents(h0, nv.nvmlEventTypeXidCriticalError, late)
    with pytest.raises(nv.NVMLError_Timeout):
        nv.nvmlEventSetWait(late, 50)
    for es in (early, only_gpu1, late):
        nv.nvmlEventSetFree(es)
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlEventSetWait(early, 0)


def test_a_lost_gpu_fails_every_call(nvml_in_process):
    now = [0.0]
    # R580: the newest branch exports every symbol the emulator declares
    with nvmlemu.installed({"driver_branch": "R580",
                            "devices": [{"lost": [False, True]}, {"lost": True}],
                            "xid_events": [{"at_s": 1.0, "device": 0, "xid": 79}]},
                           clock=lambda: now[0]) as emu:
        nv = emu.pynvml
        nv.nvmlInit()
        h = nv.nvmlDeviceGetHandleByIndex(0)
        events = nv.nvmlEventSetCreate()
        nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, events)
        for lookup in (lambda: nv.nvmlDeviceGetHandleByIndex(1),
                       lambda: nv.nvmlDeviceGetHandleByUUID(emu.scenario.devices[1]["uuid"])):
            with pytest.raises(nv.NVMLError_GpuIsLost):
                lookup()
        now[0] = 1.0
        device_calls = [s for s in nvmlemu.SYMBOLS.values() if s.takes_device]
        for sym in device_calls:
            args = [h] + [arg() for arg in sym.argtypes[1:]]
            assert getattr(nv.nvmlLib, sym.name)(*args) == nv.NVML_ERROR_GPU_IS_LOST, sym.name
        assert len(device_calls) > 40
        assert nv.nvmlEventSetWait(events, 0).eventData == 79  # what happened is still told
        with pytest.raises(nv.NVMLError_GpuIsLost):
            nv.nvmlEventSetWait(events, 0)
        assert emu.internal_errors == []


@pytest.mark.parametrize("code,error,text", [
    ("DRIVER_NOT_LOADED", "NVMLError_DriverNotLoaded", "Driver Not Loaded"),
    ("LIBRARY_NOT_FOUND", "NVMLError_LibraryNotFound", "NVML Shared Library Not Found"),
    (18, "NVMLError_LibRmVersionMismatch", "RM has detected an NVML/RM version mismatch.")])
def test_init_errors_surface_from_nvmlInit(nvml_in_process, code, error, text):
    nv = nvml_in_process(init_error=code, devices=[{}])
    with pytest.raises(getattr(nv, error), match=text):
        nv.nvmlInit()
    with pytest.raises(nv.NVMLError_Uninitialized):
        nv.nvmlDeviceGetCount()


def test_init_is_counted_and_uninstall_restores_pynvml(nvml_in_process):
    import pynvml
    nv = nvml_in_process(devices=[{}])
    assert nv is pynvml and isinstance(nv.nvmlLib, nvmlemu.state.Library)
    with pytest.raises(nv.NVMLError_Uninitialized):
        nv.nvmlDeviceGetCount()
    nv.nvmlInit()
    nv.nvmlInit()
    nv.nvmlShutdown()
    assert nv.nvmlDeviceGetCount() == 1
    nv.nvmlShutdown()
    with pytest.raises(nv.NVMLError_Uninitialized):
        nv.nvmlDeviceGetCount()
    assert nv.nvmlErrorString(nv.NVML_ERROR_NOT_READY) == "Not ready"
    nvmlemu.uninstall()
    assert pynvml.nvmlLib is None and pynvml._nvmlGetFunctionPointer_cache == {}
    assert nv.NVML_ERROR_NOT_READY not in pynvml.NVMLError._errcode_to_string


def test_an_emulator_bug_answers_unknown_error_never_success():
    with nvmlemu.installed({"devices": [{"pcie": {"gen": "five"}}]}) as emu:
        nv = emu.pynvml
        nv.nvmlInit()
        with pytest.raises(nv.NVMLError_Unknown):
            nv.nvmlDeviceGetCurrPcieLinkGeneration(nv.nvmlDeviceGetHandleByIndex(0))
        assert "ValueError" in emu.internal_errors[0]


@pytest.mark.parametrize("scenario,message", [
    ({"devices": [{"ecc_volatile": 3}]}, "unknown key 'ecc_volatile'"),
    ({"devices": [{"pcie": {"generation": 4}}]}, "unknown key 'generation'"),
    ({"devices": [{"unsupported": ["remap"]}]}, "'remap' names neither"),
    ({"devices": [{"errors": {"pcie": "LOST"}}]}, "unknown NVML return code 'LOST'"),
    ({"devices": [{"field_values": {"NVML_FI_NOPE": 1}}]}, "'NVML_FI_NOPE' is neither"),
    ({"devices": [{"nvlink": {"errors": {"crc": {"0": 1}}}}]}, "unknown counter 'crc'"),
    ({"devices": [{"ecc_locations": {"uncorrected_volatile_hbm": 1}}]}, "ecc_locations"),
    ({"devices": [{}], "xid_events": [{"at_s": 1, "device": 1, "xid": 79}]}, "xid_events[0]"),
    ({"driver_branch": "R470"}, "'R470' is not one of R525, R535"),
    ({"driver_branch": "R525", "driver_version": "550.54.15"},
     "driver_version '550.54.15' is not of branch R525"),
    ({"driver_version": "latest"}, "'latest' is not <branch>"),
    ({"devices": [{"cpu_affinity": "0-x"}]}, "devices[0].cpu_affinity: '0-x' is not a cpulist"),
])
def test_scenario_mistakes_are_refused_when_written(tmp_path, scenario, message):
    with pytest.raises(nvmlemu.ScenarioError) as caught:
        nvmlemu.write_scenario(tmp_path / "s.json", scenario)
    assert message in str(caught.value)


PROBE = """\
import json, sys, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
print(json.dumps({"name": pynvml.nvmlDeviceGetName(h), "torch": "torch" in sys.modules,
                  "path": [p for p in sys.path if p.endswith("tests")]}))
"""


def test_a_subprocess_gets_the_emulator_from_the_nvml_fixture(nvml):
    nvml(devices=[{"name": "NVIDIA B200"}])
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True)
    assert json.loads(out.stdout) == {"name": "NVIDIA B200", "torch": False, "path": []}


def test_a_python_wrapper_carries_the_emulator_where_no_environment_goes(tmp_path):
    path = nvmlemu.write_scenario(tmp_path / "s.json", {"devices": [{"name": "NVIDIA L40S"}]})
    python = nvmlemu.python_wrapper(tmp_path / "python", path)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", nvmlemu.SCENARIO_ENV)}
    out = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, check=True,
                         env=env)
    assert json.loads(out.stdout)["name"] == "NVIDIA L40S"


def test_nothing_that_ships_imports_the_emulator():
    repo = nvmlemu.SITE_DIR.parents[2]
    shipped = [*repo.glob("burnin/**/*.py"), *repo.glob("probes/*.py"), *repo.glob("suites/*.py")]
    assert len(shipped) > 10
    assert [str(p) for p in shipped if "nvmlemu" in p.read_text()] == []
