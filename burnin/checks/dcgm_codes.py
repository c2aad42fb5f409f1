"""DCGM's error codes as the dcgm check weighs them: the few that say "the GPU can run
this workload; watch it", and the severities DCGM gives every code. Imports nothing.

Source: NVIDIA/DCGM tag v4.6.0 (commit 72fa3fe), `dcgmlib/dcgm_errors.h` (`dcgmError_t`,
`dcgmErrorSeverity_t`) and `dcgmlib/src/dcgm_errors.c` (`dcgmErrorMeta`: each code's
severity); the same numbers from 3.3 on, with codes added at the end.

DCGM_ERROR_MONITOR ("can perform workload, but needs to be monitored") is not such a
list: dcgm_errors.c gives it to DCGM_FR_CUDA_FM_NOT_INITIALIZED (108, the fabric manager
is not running: an NVSwitch system cannot use its NVLinks), the NVSwitch errors (16, 17),
DCGM_FR_FABRIC_PROBE_STATE (123, the GPU is not in its NVLink fabric), DCGM_FR_CUDA_API
(51) and DCGM_FR_CONTAINED_ERROR (131, XID 94); and dcgmi itself counts every error, of
any severity, as a failure (`dcgmi/Diag.cpp`, `Diag::GetFailureResult`: any error on a
GPU makes DCGM_ST_NVVS_ERROR, exit 226). So a node only warns for the codes below, each
of MONITOR severity in that table and each a GPU that computed right, only slower,
warmer or with an error its ECC corrected; every other code fails the node.
"""

from __future__ import annotations

# Code -> (DCGM's name, why a node that shows it may still be admitted).
WATCH = {
    5: ("DCGM_FR_VOLATILE_SBE_DETECTED", "single-bit ECC errors, corrected"),
    10: ("DCGM_FR_CLOCKS_EVENT_THERMAL", "clocks lowered for temperature"),
    12: ("DCGM_FR_CLOCKS_EVENT_POWER", "clocks lowered to meet the power limit"),
    40: ("DCGM_FR_THERMAL_VIOLATIONS", "time spent in thermal clock events"),
    41: ("DCGM_FR_THERMAL_VIOLATIONS_TS", "time spent in thermal clock events"),
    42: ("DCGM_FR_TEMP_VIOLATION", "above the diagnostic's configured maximum temperature"),
}

# The MONITOR-severity codes of dcgm_errors.c that fail the node all the same, by name,
# so that a failure says what it is (any code not in WATCH fails; these are only named).
NAMED = {
    16: "DCGM_FR_NVSWITCH_NON_FATAL_ERROR", 17: "DCGM_FR_NVSWITCH_DOWN",
    51: "DCGM_FR_CUDA_API", 108: "DCGM_FR_CUDA_FM_NOT_INITIALIZED",
    123: "DCGM_FR_FABRIC_PROBE_STATE", 131: "DCGM_FR_CONTAINED_ERROR",
}

# dcgm_errors.h, dcgmErrorSeverity_t: the same numbers from DCGM 3.3 to 4.6.
SEVERITIES = {0: "DCGM_ERROR_NONE", 1: "DCGM_ERROR_MONITOR", 2: "DCGM_ERROR_ISOLATE",
              3: "DCGM_ERROR_UNKNOWN", 4: "DCGM_ERROR_TRIAGE", 5: "DCGM_ERROR_CONFIG",
              6: "DCGM_ERROR_RESET"}
MONITOR = 1


def watched(error_id, severity) -> bool:
    """Whether one DCGM error only warns: its code is in WATCH and its severity, as this
    DCGM gave it, is MONITOR (a DCGM that raised one of them to another severity is
    believed)."""
    return error_id in WATCH and severity == MONITOR
