"""NVLink 5 (Blackwell) error counters, as NVML's field values. Runs ON a node: standard
library, and the caller's pynvml module; imports nothing of burnin.

Blackwell's NVLink counts its errors in the NVML_FI_DEV_NVLINK_COUNT_* fields rather than
in the per-link DL counters of nvmlDeviceGetNvLinkErrorCounter and the _L0.._L11 / TOTAL
fields, which stop at 12 links (a Blackwell GPU has 18; nvml.h's NVML_NVLINK_MAX_LINKS is
36). DCGM reads them so: NVIDIA/DCGM v4.6.0, dcgmlib/src/DcgmCMUtils.cpp,
NvmlFieldRequiresNvLinkAggregate() lists the COUNT fields that, on NVLink 5 or newer
(DcgmCacheManager.cpp: arch >= DCGM_CHIP_ARCH_BLACKWELL), are read with scopeId =
UINT_MAX, the aggregate over all links; scopeId = a link's index reads that link
(DcgmCacheManager.cpp, ReadAndCacheNvLinkCountField, "per-link queries").

What DCGM judges, and so what is read here (modules/health/DcgmHealthWatch.cpp,
MonitorNVLink5Fields and MonitorNVLinkErrorFields; dcgmlib/src/dcgm_fields.cpp maps each
DCGM_FI_DEV_NVLINK_* field to its NVML id): the counters of ERRORS fail at a growth of
DCGM_LIMIT_MAX_NVLINK_ERROR (1, common/DcgmGPUHardwareLimits.h), symbol errors among them
("Shouldn't see Symbol at all. Symbol means FEC didn't succeed to fix the error.");
a failed link recovery (214) fails, a successful one (213) warns; the symbol and
effective BER (222, 220) fail past their thresholds (BER below). The controller's rule is
burnin/checks/fabric.py.

The field ids are nvml.h's (nvidia-ml-py 13.615's pynvml.py), given here as numbers so
that an older nvidia-ml-py without their names still asks for them.
"""

from __future__ import annotations

AGGREGATE = 0xFFFFFFFF  # scopeId: every link of the GPU at once (UINT_MAX)
# Counters whose growth DCGM fails at 1 (packets and bytes are not read).
ERRORS = {
    "malformed_packet_errors": 206,      # NVML_FI_DEV_NVLINK_COUNT_MALFORMED_PACKET_ERRORS
    "buffer_overrun_errors": 207,        # ..._BUFFER_OVERRUN_ERRORS (DCGM: RX_PACKET_DROPPED)
    "rcv_errors": 208,                   # ..._RCV_ERRORS
    "rcv_remote_errors": 209,            # ..._RCV_REMOTE_ERRORS
    "rcv_general_errors": 210,           # ..._RCV_GENERAL_ERRORS
    "local_link_integrity_errors": 211,  # ..._LOCAL_LINK_INTEGRITY_ERRORS
    "effective_errors": 219,             # ..._EFFECTIVE_ERRORS (left after FEC)
    "symbol_errors": 221,                # ..._SYMBOL_ERRORS (FEC did not fix them)
}
# Counters DCGM does not fail on: transmit discards (not in its NVLink 5 list) and a
# successful recovery (DCGM_HEALTH_RESULT_WARN).
NOTED = {
    "xmit_discards": 212,                       # ..._XMIT_DISCARDS
    "link_recovery_successful_events": 213,     # ..._LINK_RECOVERY_SUCCESSFUL_EVENTS
}
RECOVERY = {
    "link_recovery_events": 215,         # ..._LINK_RECOVERY_EVENTS: the link retrained
    "link_recovery_failed_events": 214,  # ..._LINK_RECOVERY_FAILED_EVENTS
}
FIELDS = {**ERRORS, **NOTED, **RECOVERY}
# Read once per GPU (the link "all"): NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL (160,
# a total of every link whatever the scope; DCGM_FI_DEV_NVLINK_ECC_ERROR_TOTAL, failed at
# a growth of 1) and the BERs, with scopeId UINT_MAX as DCGM reads them on Blackwell.
GPU_FIELDS = {
    "ecc_data_errors": 160,              # NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL
    "effective_ber": 220,                # NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER
    "symbol_ber": 222,                   # NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER
}
# A BER is a value, not a count: the probe reports it and never takes its growth.
BER = ("effective_ber", "symbol_ber")
# nvmlValueType_t -> the member of nvmlValue_t holding it
VALUE = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
SUCCESS, NOT_SUPPORTED = 0, 3


def _read(nv, handle, fields: dict[str, int], scope: int) -> dict[str, int]:
    values = nv.nvmlDeviceGetFieldValues(handle, [(fid, scope) for fid in fields.values()])
    out, refused = {}, None
    for i, name in enumerate(fields):
        v = values[i]
        if v.nvmlReturn == SUCCESS:
            out[name] = int(getattr(v.value, VALUE.get(v.valueType, "ullVal")))
        elif refused is None:
            refused = v.nvmlReturn
    if not out:
        raise nv.NVMLError(refused if refused is not None else NOT_SUPPORTED)
    return out


def read(nv, handle, scope: int = AGGREGATE) -> dict[str, int]:
    """{counter: value} of the COUNT fields NVML answers, for one link (scope = its
    index) or all of them (AGGREGATE). Raises nv.NVMLError when it answers none: the
    code of the first field's refusal (NOT_SUPPORTED before NVLink 5)."""
    return _read(nv, handle, FIELDS, scope)


def read_gpu(nv, handle) -> dict[str, int]:
    """The GPU-wide NVLink 5 readings: the data ECC total and the two BERs (raw, as
    NVML packs them: ber() decodes). Raises nv.NVMLError when NVML answers none."""
    return _read(nv, handle, GPU_FIELDS, AGGREGATE)


def totals(counts: dict[str, int]) -> tuple[int, int]:
    """(errors, recoveries) summed over read()'s counters."""
    return (sum(v for k, v in counts.items() if k in ERRORS),
            sum(v for k, v in counts.items() if k in RECOVERY))
