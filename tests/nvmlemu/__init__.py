"""An NVML emulator at the C boundary, for the project's tests (never imported by burnin/
or probes/).

The real pynvml module (nvidia-ml-py) runs unchanged; only its C library is replaced:
install() assigns pynvml.nvmlLib an object whose attributes are ctypes callbacks, one per
symbol a modern libnvidia-ml.so.1 exports, declared with nvml.h's prototypes (exact
argument count and types: a wrong call fails as a ctypes call does, with TypeError or
ctypes.ArgumentError). Outputs are written through the pointers pynvml passes, into
pynvml's own structures; handles are real pointers. Answers are NVML return codes, so
pynvml raises its own NVMLError subclasses, and str or bytes come out as it gives them.
A symbol the emulator does not declare answers as a missing one does (FUNCTION_NOT_FOUND);
a selector nvml.h does not define (a threshold, counter, clock, link, cause) answers
INVALID_ARGUMENT; a call before nvmlInit (or after the last nvmlShutdown), UNINITIALIZED.

Three ways in:
- a probe subprocess: put SITE_DIR first on PYTHONPATH and name a scenario file in
  $BURNIN_NVML_SCENARIO; site/sitecustomize.py installs at interpreter start (pytest:
  the `nvml` fixture of tests/conftest.py);
- an SSH test host, which passes no environment: python_wrapper() writes an executable to
  use as the node's `python:`;
- in-process: installed(scenario) (a context manager), or install() / uninstall().

Scenario (JSON; every key optional; unknown keys are refused):

  init_error            null, or the code nvmlInit answers: "DRIVER_NOT_LOADED",
                        "LIBRARY_NOT_FOUND", 9, ... (any NVML_ERROR_ name or number)
  driver_branch         null, or "R525", "R535", "R550", "R570", "R580", "CUDA14": which
                        symbols the library exports (drivers.py: nvmlDeviceGetCurrentClocks-
                        EventReasons from R535, nvmlDeviceGetTemperatureV from R570; CUDA14
                        lacks what pynvml says CUDA 14.0 removes). A symbol the branch lacks
                        answers as a missing one does. null: driver_version's branch
  driver_version        a release of the branch ("550.54.15": R550, the default)
  cuda_driver_version   the branch's (12040 for R550)   nvmlSystemGetCudaDriverVersion(_v2)
  nvml_version          "<CUDA major>.<driver>"   nvmlSystemGetNVMLVersion
  xid_events            [{"at_s": 1.0, "device": 0, "xid": 79}]: an XID at_s seconds after
                        install, delivered once to each event set the device was registered
                        with (for nvmlEventTypeXidCriticalError) before at_s
  devices               [device, ...], in NVML index order

  device (defaults: a healthy NVIDIA H100 80GB HBM3 at work):
  name, uuid ("GPU-..."), pci_bus_id ("00000000:18:00.0"; any form nvml.h accepts),
  pci_device_id, pci_subsystem_id, serial, minor_number, vbios_version,
  inforom_image_version, persistence_mode (0/1), compute_mode (NVML_COMPUTEMODE_*)
  ecc_mode              {"current": 1, "pending": 1}; with current 0 the ECC counters
                        answer NOT_SUPPORTED (nvml.h: they need ECC enabled)
  ecc_errors            {"uncorrected_volatile", "uncorrected_aggregate",
                        "corrected_volatile", "corrected_aggregate"}: totals; one not given
                        is the sum of its ecc_locations
  ecc_locations         {"<total>_<location>": n}, location one of l1_cache, l2_cache, dram,
                        register_file, texture_memory, texture_shm, cbu, sram
  remapped_rows         {"correctable", "uncorrectable", "pending", "failed"}
                        (NOT_SUPPORTED while MIG is enabled, as nvml.h says)
  retired_pages         {"single_bit": [addresses], "double_bit": [addresses], "pending": 0}
  pcie                  {"gen", "max_gen", "width", "max_width", "replay"}
  temperature           {"gpu", "shutdown", "slowdown", "mem_max", "gpu_max", "acoustic_min",
                        "acoustic_curr", "acoustic_max", "gps_curr"}; null: NOT_SUPPORTED
  clocks                {"current" | "max" | "applications" | "default_applications" |
                        "boost_max": {"graphics", "sm", "mem", "video"}} in MHz
  power                 {"usage_mw", "enforced_limit_mw", "limit_mw" (management),
                        "default_limit_mw"}
  clock_event_reasons   bitmask of nvmlClocksEventReason*
  nvlink                {"links": 18 (0: no NVLink, calls answer NOT_SUPPORTED),
                        "down": [inactive link indices],
                        "errors": {"replay" | "recovery" | "crc_flit" | "crc_data" |
                        "ecc_data": {"<link>": count}},
                        "generation": 4 (5: Blackwell's NVLink 5: the errors are the
                        NVML_FI_DEV_NVLINK_COUNT_* fields, "errors" names them
                        "rcv_errors", "effective_errors", "link_recovery_events", ...,
                        and the older counters answer NOT_SUPPORTED, but for the data
                        ECC total (field 160, "ecc_data"); a down link refuses its
                        per-link COUNT fields; fields.py),
                        "ber": {"symbol": 0xFFF, "effective": 0xFFF} (NVLink 5's BER
                        fields 222 and 220, packed as nvml.h packs them)}
  field_values          {"NVML_FI_DEV_..." or "<id>": value}: answered as given; other
                        fields are derived from the readings above (NVLink counters per link
                        _L0.._L11, _TOTAL and scoped NVLINK_ERROR_DL_*, NVLINK_GET_STATE,
                        NVLINK_LINK_COUNT, PCIE_REPLAY_COUNTER, ECC, REMAPPED_*, RETIRED_*),
                        or NOT_SUPPORTED
  mig_mode              {"current": 0, "pending": 0}; with current 1 the GPU is no CUDA
                        device: visible() shows torch one MIG device ("mig:<index>") instead
  cpu_affinity          the GPU's local CPUs, a cpulist ("0-3,8") or "all" (every CPU of this
                        machine, the default); null: NOT_SUPPORTED   nvmlDeviceGetCpuAffinity
  numa_node             0; null: NOT_SUPPORTED              nvmlDeviceGetMemoryAffinity
  topology_level        null (NOT_SUPPORTED) or the nvmlGpuTopologyLevel_t this GPU shares
                        with any other (40: NODE)      nvmlDeviceGetTopologyCommonAncestor
  processes             [{"pid": 4242, "used_memory": bytes}]   running compute processes
  memory                {"total", "reserved", "used" (null: what the processes use)} bytes
  unsupported           [name, ...]: these answer NOT_SUPPORTED
  errors                {name: code}: these answer the code ("GPU_IS_LOST", 15, ...)
                        A name is a C symbol ("nvmlDeviceGetPcieReplayCounter": that call
                        only) or a reading, i.e. a key above ("pcie", "remapped_rows",
                        "nvlink", "xid_events", ...: every call and field value reading it).
                        NVLink counters refused while field values serve them, as on some
                        drivers: "unsupported": ["nvmlDeviceGetNvLinkErrorCounter"].
  fabric                null (NOT_SUPPORTED) or the GPU's NVLink fabric registration:
                        {"state", "status", "clique_id", "cluster_uuid", "health_mask",
                        "health_summary"} (fabric.py)   nvmlDeviceGetGpuFabricInfo(V)
  lost                  true: every call naming the device answers GPU_IS_LOST (lookups
                        included), and event waits on it too once its events are delivered

A number (or a list value such as down links or addresses) given as a list of values is a
time series: one entry per second since install (the last entry holds afterwards), e.g.
"temperature": {"gpu": [60, 75, 88]}, "lost": [false, false, true]. A probe subprocess
installs at interpreter start, before it imports torch: leave it time to start.
"""

from __future__ import annotations

from . import drivers
from .activate import (
    CUDA_ENV,
    SCENARIO_ENV,
    SITE_DIR,
    installed,
    python_wrapper,
    pythonpath_with_site,
    visible,
    write_scenario,
)
from .declarations import SYMBOLS
from .drivers import BRANCHES
from .scenario import ScenarioError, load
from .state import Emulator, install, uninstall

__all__ = ["BRANCHES", "CUDA_ENV", "SCENARIO_ENV", "SITE_DIR", "SYMBOLS", "Emulator",
           "ScenarioError", "drivers", "install", "installed", "load", "python_wrapper",
           "pythonpath_with_site", "uninstall", "visible", "write_scenario"]
