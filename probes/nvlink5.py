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

The field ids are nvml.h's (nvidia-ml-py 13.615's pynvml.py), given here as numbers so
that an older nvidia-ml-py without their names still asks for them.
"""

from __future__ import annotations

AGGREGATE = 0xFFFFFFFF  # scopeId: every link of the GPU at once (UINT_MAX)
# The COUNT fields that count errors (packets and bytes are not read; nor symbol errors
# and BER, which FEC corrects on a healthy link and which grow under load).
ERRORS = {
    "malformed_packet_errors": 206,      # NVML_FI_DEV_NVLINK_COUNT_MALFORMED_PACKET_ERRORS
    "buffer_overrun_errors": 207,        # ..._BUFFER_OVERRUN_ERRORS
    "rcv_errors": 208,                   # ..._RCV_ERRORS
    "rcv_remote_errors": 209,            # ..._RCV_REMOTE_ERRORS
    "rcv_general_errors": 210,           # ..._RCV_GENERAL_ERRORS
    "local_link_integrity_errors": 211,  # ..._LOCAL_LINK_INTEGRITY_ERRORS
    "xmit_discards": 212,                # ..._XMIT_DISCARDS
    "effective_errors": 219,             # ..._EFFECTIVE_ERRORS (left after FEC)
}
RECOVERY = {
    "link_recovery_events": 215,         # ..._LINK_RECOVERY_EVENTS: the link retrained
    "link_recovery_failed_events": 214,  # ..._LINK_RECOVERY_FAILED_EVENTS
}
FIELDS = {**ERRORS, **RECOVERY}
# nvmlValueType_t -> the member of nvmlValue_t holding it
VALUE = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
SUCCESS, NOT_SUPPORTED = 0, 3


def read(nv, handle, scope: int = AGGREGATE) -> dict[str, int]:
    """{counter: value} of the COUNT fields NVML answers, for one link (scope = its
    index) or all of them (AGGREGATE). Raises nv.NVMLError when it answers none: the
    code of the first field's refusal (NOT_SUPPORTED before NVLink 5)."""
    values = nv.nvmlDeviceGetFieldValues(handle, [(fid, scope) for fid in FIELDS.values()])
    out, refused = {}, None
    for i, name in enumerate(FIELDS):
        v = values[i]
        if v.nvmlReturn == SUCCESS:
            out[name] = int(getattr(v.value, VALUE.get(v.valueType, "ullVal")))
        elif refused is None:
            refused = v.nvmlReturn
    if not out:
        raise nv.NVMLError(refused if refused is not None else NOT_SUPPORTED)
    return out


def totals(counts: dict[str, int]) -> tuple[int, int]:
    """(errors, recoveries) summed over read()'s counters."""
    return (sum(v for k, v in counts.items() if k in ERRORS),
            sum(v for k, v in counts.items() if k in RECOVERY))
