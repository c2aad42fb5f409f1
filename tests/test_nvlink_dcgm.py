"""NVLink errors judged as DCGM judges them (NVIDIA/DCGM v4.6.0,
modules/health/DcgmHealthWatch.cpp MonitorNVLink5Fields, MonitorNVLinkErrorFields and
MonitorNVLink; limits in common/DcgmGPUHardwareLimits.h; the BER rules in
common/DcgmUtilities.cpp), read through the NVML emulator: the real nvidia-ml-py, the
fabric probe's own reading, burnin's judge."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import nvmlemu
import pytest

from burnin.checks.base import Judging
from burnin.checks.fabric import (
    ber_parts,
    effective_ber_exceeded,
    judge,
    symbol_ber_exceeded,
)
from burnin.model.gpu_reference import GPU_MODELS
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome

REPO = Path(__file__).resolve().parent.parent
B200 = "NVIDIA B200"
UUID = "GPU-0000000b-aaaa-bbbb-cccc-dddddddddddd"
ZERO_BER = 0xFFF  # mantissa 15, exponent 255: DCGM's zero BER


def probe(name: str):
    sys.path.insert(0, str(REPO / "probes"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(REPO / "probes"))


@contextmanager
def two_reads(nvlink: dict):
    """The emulated B200 whose time series move from their first entry to their second
    between the fabric probe's two reads (a clock the test turns)."""
    now = [0.0]
    scenario = {"devices": [{"name": B200, "uuid": UUID,
                             "nvlink": {"generation": 5, "links": 18, **nvlink}}]}
    with nvmlemu.installed(scenario, clock=lambda: now[0]):
        yield now


def verdict(nvlink: dict, window_s: float = 10.0):
    fabric = probe("fabric")
    with two_reads(nvlink) as now:
        before, _ = fabric.nvlink({"gpus": 1})
        now[0] = 5.0
        devices, nv = fabric.nvlink({"gpus": 1})
    fabric.nvlink_growth(devices, {d["uuid"]: d["nvlink"]["counters"] for d in before})
    o = ProbeOutcome("n1", "fabric", True, data={
        "probe": "fabric", "schema": 1, "node": {}, "devices": devices, "errors": [],
        "figures": {"ib": {"root": "/x", "hcas": [], "window_s": window_s, "since": "window"},
                    "nvlink": nv}})
    node = Node(name="n1", address="n1", gpus=1, gpu_model="B200-SXM-180GB")
    v = judge(node, o, Judging({}, None, GPU_MODELS["B200-SXM-180GB"], 1, 1))
    return devices, v


@pytest.mark.parametrize("counter", [
    "malformed_packet_errors", "buffer_overrun_errors", "rcv_errors", "rcv_remote_errors",
    "rcv_general_errors", "local_link_integrity_errors", "link_recovery_events",
    "effective_errors", "symbol_errors", "link_recovery_failed_events"])
def test_one_nvlink5_error_of_any_dcgm_field_fails_the_link(counter):
    # DCGM_LIMIT_MAX_NVLINK_ERROR is 1: a single error in the window fails.
    _, v = verdict({"errors": {counter: {"7": [3, 4]}}})
    assert len(v.failures) == 1 and v.failures[0].startswith(
        f"GPU 0 ({B200}, {UUID}) NVLink link 7: {counter} grew by 1 in 10 s: ")
    assert not v.warnings


def test_a_successful_recovery_and_transmit_discards_warn():
    _, v = verdict({"errors": {"link_recovery_successful_events": {"3": [0, 1]},
                               "xmit_discards": {"4": [0, 2]}}})
    assert v.failures == ()
    assert v.warnings == (
        f"GPU 0 ({B200}, {UUID}) NVLink link 3: link_recovery_successful_events grew by 1 "
        "in 10 s",
        f"GPU 0 ({B200}, {UUID}) NVLink link 4: xmit_discards grew by 2 in 10 s")


def test_the_data_ecc_total_is_read_once_per_gpu_and_fails_at_one():
    devices, v = verdict({"errors": {"ecc_data": {"11": [0, 1]}}})
    assert devices[0]["nvlink"]["counters"]["all"] == {
        "ecc_data_errors": 1, "effective_ber": ZERO_BER, "symbol_ber": ZERO_BER}
    assert v.failures == (f"GPU 0 ({B200}, {UUID}) NVLink link all: ecc_data_errors grew "
                          "by 1 in 10 s: data ECC errors",)


@pytest.mark.parametrize("which, raw, fails", [
    ("effective", (2 << 8) | 12, True),     # 2e-12, past 1e-12
    ("effective", (1 << 8) | 12, False),    # 1e-12
    ("effective", ZERO_BER, False),
    ("symbol", (1 << 8) | 237, True),       # below DCGM's aggregated floor exponent 238
    ("symbol", (15 << 8) | 238, False),
    ("symbol", ZERO_BER, False),
])
def test_a_ber_past_dcgms_threshold_fails_the_gpu(which, raw, fails):
    # From zero to `raw` between the two reads: judged on the value, never its growth.
    devices, v = verdict({"ber": {"symbol": ZERO_BER, "effective": ZERO_BER,
                                  which: [ZERO_BER, raw]}})
    assert devices[0]["nvlink"]["counters"]["all"][f"{which}_ber"] == raw
    assert "growth" in devices[0]["nvlink"]
    assert all("ber" not in c for g in devices[0]["nvlink"]["growth"].values() for c in g), \
        "a BER is a value: never its growth"
    m, e = ber_parts(raw)
    assert v.failures == ((f"GPU 0 ({B200}, {UUID}) NVLink: {which} ber {m}e-{e}, worse "
                           f"than {'1e-12' if which == 'effective' else '1e-238'} "
                           "(DCGM's threshold)",) if fails else ())


def test_the_ber_rules_are_dcgms_own_cases():
    # common/tests/DcgmUtilitiesTests.cpp, "GIVEN BER values WHEN parsed and checked".
    assert not effective_ber_exceeded(15, 255) and not effective_ber_exceeded(1, 12)
    assert effective_ber_exceeded(2, 12) and not effective_ber_exceeded(10, 13)
    assert effective_ber_exceeded(11, 13) and effective_ber_exceeded(1, 11)
    assert ber_parts(0) == (0, 0) and not effective_ber_exceeded(0, 0), "a BER of 0"
    # DcgmHealthWatch.cpp IsSymbolBerThresholdExceeded: mantissa 0 healthy; worse than
    # the floor exponent fails.
    assert not symbol_ber_exceeded(0, 3) and symbol_ber_exceeded(1, 237)
    assert not symbol_ber_exceeded(15, 238) and not symbol_ber_exceeded(9, 250)


def test_with_link_0_down_the_other_links_are_still_read_as_nvlink5():
    # A down link refuses its COUNT fields; deciding NVLink 5 from link 0 alone fell back
    # to the DL counters Blackwell does not serve, and left the other 17 unjudged.
    devices, v = verdict({"down": [0], "errors": {"rcv_errors": {"5": [0, 2]}}})
    counters = devices[0]["nvlink"]["counters"]
    assert "0" not in counters and set(counters) == {str(i) for i in range(1, 18)} | {"all"}
    assert f"GPU 0 ({B200}, {UUID}) NVLink link 5: rcv_errors grew by 2 in 10 s: " \
           "receive errors" in v.failures
    assert f"GPU 0 ({B200}, {UUID}): 17 NVLink link(s) active of 18, expected 18 " \
           "(down: link 0)" in v.failures


def test_before_nvlink5_the_dl_counters_are_read_per_link():
    fabric = probe("fabric")
    scenario = {"devices": [{"uuid": "GPU-h", "nvlink": {"links": 18, "errors": {
        "replay": {"3": 1}}}}]}
    with nvmlemu.installed(scenario):
        devices, _ = fabric.nvlink({"gpus": 1})
    counters = devices[0]["nvlink"]["counters"]
    assert set(counters) == {str(i) for i in range(18)}
    assert counters["3"] == {"replay": 1, "recovery": 0, "crc_flit": 0, "crc_data": 0}
