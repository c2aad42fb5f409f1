"""NVLink and field values: nvmlDeviceGetNvLinkState, nvmlDeviceGetNvLinkErrorCounter and
nvmlDeviceGetFieldValues, all answering from the same scenario readings.

A field is derived from the reading that holds it (NVLink counters per link and totals,
ECC, remapped rows, retired pages, PCIe replays) or given outright in "field_values".
Unsupported or failing calls named by function leave the field values working: that is
how a driver that refuses nvmlDeviceGetNvLinkErrorCounter but serves the same counters as
field values is described.

NVLink 5 ("nvlink": {"generation": 5}, Blackwell): the errors are the
NVML_FI_DEV_NVLINK_COUNT_* fields, read per link (scopeId = the link) or over every link
(scopeId = UINT_MAX), as DCGM reads them there (NVIDIA/DCGM v4.6.0, DcgmCMUtils.cpp
NvmlFieldRequiresNvLinkAggregate, DcgmCacheManager.cpp); the pre-NVLink 5 DL counters
(nvmlDeviceGetNvLinkErrorCounter, the _L0.._L11 / TOTAL and NVLINK_ERROR_DL_* fields)
answer NOT_SUPPORTED: what burnin must survive, whatever a given driver does. Before
NVLink 5, the COUNT fields answer NOT_SUPPORTED.
"""

from __future__ import annotations

import time
from ctypes import c_int, c_uint, c_ulonglong

import pynvml as nv

from . import scenario as sc
from .calls import UINT, ecc_count
from .declarations import DEVICE, FieldValueArray, P, export, put

UINT_T, ULL_T, DOUBLE_T, SLL_T = 1, 3, 0, 4  # nvmlValueType_t
ACTIVE = 1  # NVML_NVLINK_STATE_ACTIVE / NVML_FEATURE_ENABLED


def nvlink_error(dev, counter: str, link: int) -> int:
    return sc.at(dev.spec["nvlink"]["errors"].get(counter, {}).get(str(link), 0),
                 dev.emu.elapsed())


def generation(dev) -> int:
    return dev.spec["nvlink"]["generation"]


def link_active(dev, link: int) -> bool:
    return link not in dev.get_list("nvlink", "down")


@export("nvmlDeviceGetNvLinkState", DEVICE, c_uint, UINT, reads="nvlink")
def _nvlink_state(emu, dev, link, out):
    links = dev.get("nvlink", "links")
    if not links:
        return sc.NOT_SUPPORTED
    if link >= links:
        return sc.INVALID_ARGUMENT
    return put(out, int(link_active(dev, link)))


@export("nvmlDeviceGetNvLinkRemotePciInfo_v2", DEVICE, c_uint, P(nv.nvmlPciInfo_t),
        reads="nvlink")
def _nvlink_remote(emu, dev, link, out):
    """nvml.h: the PCI info of a link's far end. The emulator's scenarios name no far end
    (a GPU or an NVSwitch), so an existing link answers NOT_SUPPORTED, as a driver that
    cannot tell does; a link past the count is an invalid argument."""
    links = dev.get("nvlink", "links")
    if links and link >= links:
        return sc.INVALID_ARGUMENT
    return sc.NOT_SUPPORTED


@export("nvmlDeviceGetNvLinkErrorCounter", DEVICE, c_uint, c_uint, P(c_ulonglong), reads="nvlink")
def _nvlink_counter(emu, dev, link, counter, out):
    links = dev.get("nvlink", "links")
    if not links or generation(dev) >= 5:
        return sc.NOT_SUPPORTED
    if link >= links or counter >= len(sc.NVLINK_COUNTERS):
        return sc.INVALID_ARGUMENT
    return put(out, nvlink_error(dev, sc.NVLINK_COUNTERS[counter], link))


# -- field ids (nvml.h's NVML_FI_DEV_*) ----------------------------------------------------

def _per_link(first_six: int, total: int, next_six: int) -> dict[int, int | None]:
    """{field id: link (None for the total)} of a family like ..._L0 ... _L11, _TOTAL."""
    ids = {first_six + i: i for i in range(6)} | {next_six + i: 6 + i for i in range(6)}
    return ids | {total: None}


NVLINK_FIELDS = {  # counter -> {field id: link or None (total)}
    "crc_flit": _per_link(32, 38, 96), "crc_data": _per_link(39, 45, 102),
    "replay": _per_link(46, 52, 108), "recovery": _per_link(53, 59, 114),
    "ecc_data": {148 + i: i for i in range(12)} | {160: None},
}
SCOPED_NVLINK_FIELDS = {161: "replay", 162: "recovery", 163: "crc_flit"}  # scopeId = link
NVLINK5_FIELDS = dict(zip((206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 219, 221),
                          sc.NVLINK5_COUNTERS[:-1], strict=True))
# NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL: the total of every link, which DCGM's
# MonitorNVLink5Fields reads on Blackwell (DcgmHealthWatch.cpp, DCGM v4.6.0).
NVLINK5_ECC_TOTAL = 160
NVLINK5_BER = {220: "effective", 222: "symbol"}  # NVML_FI_DEV_NVLINK_COUNT_*_BER
ALL_LINKS = 0xFFFFFFFF  # scopeId: the aggregate over every link
NVLINK_GET_STATE, NVLINK_LINK_COUNT, PCIE_REPLAY_COUNTER = 165, 91, 94
ECC_CURRENT, ECC_PENDING = 1, 2
ECC_TOTAL_FIELDS = {3: (0, 0), 4: (1, 0), 5: (0, 1), 6: (1, 1)}  # (error type, counter type)
# Per-location ECC fields: volatile 7-17 and aggregate 18-28, SBE/DBE per location, CBU DBE only
ECC_LOCATION_FIELDS: dict[int, tuple[int, int, int]] = {}
for _counter, _base in ((0, 7), (1, 18)):
    for _i, _loc in enumerate((0, 1, 2, 3, 4)):  # L1, L2, device memory, register file, texture
        ECC_LOCATION_FIELDS[_base + 2 * _i] = (0, _counter, _loc)
        ECC_LOCATION_FIELDS[_base + 2 * _i + 1] = (1, _counter, _loc)
    ECC_LOCATION_FIELDS[_base + 10] = (1, _counter, 6)  # CBU
RETIRED_FIELDS = {29: "single_bit", 30: "double_bit", 31: "pending"}
REMAPPED_FIELDS = {142: "correctable", 143: "uncorrectable", 144: "pending", 145: "failed"}


def _field_id(name) -> int:
    return int(name) if str(name).isdigit() else getattr(nv, name)


def _derived(dev, field: int, scope: int) -> tuple[int, int, float | int | None]:
    """(nvmlReturn, value type, value) of a field the scenario holds in a reading."""
    def guarded(reading: str, value_type: int, read):
        refused = dev.refusal((reading,))
        if refused is not None:
            return refused, value_type, None
        value = read()
        return (sc.NOT_SUPPORTED, value_type, None) if value is None else (
            sc.SUCCESS, value_type, value)

    links = dev.get("nvlink", "links")
    five = bool(links) and generation(dev) >= 5
    if field in NVLINK5_BER or (field == NVLINK5_ECC_TOTAL and five):
        if not five:
            return sc.NOT_SUPPORTED, ULL_T, None
        if field == NVLINK5_ECC_TOTAL:
            return guarded("nvlink", ULL_T, lambda: sum(
                nvlink_error(dev, "ecc_data", x) for x in range(links)))
        return guarded("nvlink", ULL_T, lambda: sc.at(
            dev.spec["nvlink"]["ber"][NVLINK5_BER[field]], dev.emu.elapsed()))
    if field in NVLINK5_FIELDS:
        if not five:
            return sc.NOT_SUPPORTED, ULL_T, None
        if scope != ALL_LINKS and scope >= links:
            return sc.INVALID_ARGUMENT, ULL_T, None
        if scope != ALL_LINKS and not link_active(dev, scope):
            # The case the fabric probe must survive: a link that is down refusing its
            # own fields while the GPU's other links answer theirs.
            return sc.NOT_SUPPORTED, ULL_T, None
        chosen = range(links) if scope == ALL_LINKS else [scope]
        return guarded("nvlink", ULL_T, lambda c=NVLINK5_FIELDS[field]: sum(
            nvlink_error(dev, c, x) for x in chosen))
    if generation(dev) >= 5 and (field in SCOPED_NVLINK_FIELDS or any(
            field in ids for ids in NVLINK_FIELDS.values())):
        return sc.NOT_SUPPORTED, ULL_T, None
    for counter, ids in NVLINK_FIELDS.items():
        if field in ids:
            link = ids[field]
            if not links or (link is not None and link >= links):
                return sc.NOT_SUPPORTED, ULL_T, None
            chosen = range(links) if link is None else [link]
            return guarded("nvlink", ULL_T, lambda c=counter, ls=chosen: sum(
                nvlink_error(dev, c, x) for x in ls))
    if field in SCOPED_NVLINK_FIELDS or field == NVLINK_GET_STATE:
        if not links:
            return sc.NOT_SUPPORTED, ULL_T, None
        if scope >= links:
            return sc.INVALID_ARGUMENT, ULL_T, None
        if field == NVLINK_GET_STATE:
            return guarded("nvlink", UINT_T, lambda: int(link_active(dev, scope)))
        return guarded("nvlink", ULL_T,
                       lambda: nvlink_error(dev, SCOPED_NVLINK_FIELDS[field], scope))
    if field == NVLINK_LINK_COUNT:
        return guarded("nvlink", UINT_T, lambda: links or None)
    if field == PCIE_REPLAY_COUNTER:
        return guarded("pcie", ULL_T, lambda: dev.get("pcie", "replay"))
    if field in (ECC_CURRENT, ECC_PENDING):
        which = "current" if field == ECC_CURRENT else "pending"
        return guarded("ecc_mode", UINT_T, lambda: dev.get("ecc_mode", which))
    if field in ECC_TOTAL_FIELDS:
        return guarded("ecc_errors", ULL_T, lambda: ecc_count(dev, *ECC_TOTAL_FIELDS[field]))
    if field in ECC_LOCATION_FIELDS:
        return guarded("ecc_errors", ULL_T, lambda: ecc_count(dev, *ECC_LOCATION_FIELDS[field]))
    if field in RETIRED_FIELDS:
        key = RETIRED_FIELDS[field]
        return guarded("retired_pages", ULL_T, lambda: dev.get("retired_pages", key)
                       if key == "pending" else len(dev.get_list("retired_pages", key)))
    if field in REMAPPED_FIELDS:
        if dev.get("mig_mode", "current"):
            return sc.NOT_SUPPORTED, UINT_T, None
        return guarded("remapped_rows", UINT_T,
                       lambda: dev.get("remapped_rows", REMAPPED_FIELDS[field]))
    return sc.NOT_SUPPORTED, ULL_T, None


@export("nvmlDeviceGetFieldValues", DEVICE, c_int, FieldValueArray, reads="field_values")
def _field_values(emu, dev, count, values):
    if count < 0 or (count and not values.value):
        return sc.INVALID_ARGUMENT
    array = (nv.c_nvmlFieldValue_t * count).from_address(values.value) if count else []
    given = {_field_id(k): v for k, v in dev.spec["field_values"].items()}
    now_us = int(time.time() * 1e6)
    for fv in array:
        fv.timestamp, fv.latencyUsec = now_us, 0
        if not 0 < fv.fieldId < nv.NVML_FI_MAX:
            ret, kind, value = sc.INVALID_ARGUMENT, ULL_T, None
        elif fv.fieldId in given:
            value = sc.at(given[fv.fieldId], emu.elapsed())
            kind = DOUBLE_T if isinstance(value, float) else SLL_T if value < 0 else ULL_T
            ret = sc.SUCCESS
        else:
            ret, kind, value = _derived(dev, fv.fieldId, fv.scopeId)
        fv.nvmlReturn, fv.valueType = ret, kind
        if ret == sc.SUCCESS:
            setattr(fv.value, {UINT_T: "uiVal", ULL_T: "ullVal", DOUBLE_T: "dVal",
                               SLL_T: "sllVal"}[kind], value)
    return sc.SUCCESS
