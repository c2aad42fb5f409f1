"""Blackwell's NVLink 5: its errors are NVML's NVML_FI_DEV_NVLINK_COUNT_* fields (per link,
or every link at once with scopeId UINT_MAX, as DCGM reads them), not the DL counters the
probes read before; NVML_NVLINK_MAX_LINKS is 36, not 18. The emulated B200 refuses the
old counters: the fabric probe reads each link's COUNT fields, the burn telemetry their
aggregate, and the memory check never fails because an NVLink counter read failed."""

from __future__ import annotations

import sys
from pathlib import Path

from test_fabric import verdicts

from burnin.checks import Judging, resolve_settings
from burnin.checks.fabric import figures
from burnin.checks.memory import judge as memory_judge
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome, run_probe
from burnin.transports.local import LocalTransport

REPO = Path(__file__).resolve().parent.parent
B200 = "NVIDIA B200"


def probe_module(name: str):
    sys.path.insert(0, str(REPO / "probes"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(REPO / "probes"))


def blackwell(uuid: str, counts: dict, links: int = 18, **over) -> dict:
    return {"name": B200, "uuid": uuid,
            "nvlink": {"generation": 5, "links": links, "errors": counts}, **over}


def test_telemetry_sums_every_link_of_an_nvlink5_gpu_from_the_aggregate_fields(
        nvml_in_process):
    telemetry = probe_module("telemetry")
    nv = nvml_in_process(devices=[
        blackwell("GPU-b", {"effective_errors": {"17": 4}, "rcv_errors": {"0": 1},
                            "link_recovery_events": {"16": 2}}),
        # A GPU with more links than the 18 the probes stopped at (nvml.h: up to 36).
        blackwell("GPU-w", {"local_link_integrity_errors": {"30": 9}}, links=36),
        {"uuid": "GPU-h", "nvlink": {"errors": {"crc_flit": {"17": 3}}}},  # NVLink 4
    ])
    nv.nvmlInit()
    b, w, h = telemetry.GpuTelemetry(nv, ["GPU-b", "GPU-w", "GPU-h"]).devices
    assert (b["before"]["nvlink_active_links"], b["before"]["nvlink_crc"],
            b["before"]["nvlink_recovery"]) == (18, 5, 2)
    assert b["api"]["nvlink_counters"] == "NVML_FI_DEV_NVLINK_COUNT_* (all links)"
    assert b["errors"] == []
    assert (w["before"]["nvlink_active_links"], w["before"]["nvlink_crc"]) == (36, 9)
    assert h["before"]["nvlink_crc"] == 3 and "nvlink_counters" not in h["api"]


def test_an_nvlink5_gpu_whose_counters_cannot_be_read_says_so_under_nvlink(nvml_in_process):
    telemetry = probe_module("telemetry")
    nv = nvml_in_process(devices=[blackwell("GPU-b", {}, errors={
        "nvmlDeviceGetFieldValues": "UNKNOWN"})])
    nv.nvmlInit()
    (b,) = telemetry.GpuTelemetry(nv, ["GPU-b"]).devices
    assert b["before"]["nvlink_crc"] is None
    (error,) = b["errors"]
    assert error.startswith("nvlink counters: NVLink 5 COUNT fields: Unknown Error; "
                            "nvmlDeviceGetNvLinkErrorCounter: Not Supported")


def test_the_memory_check_warns_for_an_nvlink_read_failure_and_fails_for_ecc():
    def outcome(errors):
        dev = {"device": "cuda:0", "uuid": "GPU-b", "name": B200, "bytes": 1 << 30,
               "patterns": 4, "bad_words": 0, "bad": [],
               "nvml": {"before": {}, "after": {}, "unsupported": [], "errors": errors}}
        return ProbeOutcome("n", "memory", True, data={
            "probe": "memory", "schema": 1, "node": {}, "devices": [dev],
            "figures": {}, "errors": []})

    node = Node(name="n", address="n", transport="local", gpus=1)
    j = Judging(resolve_settings("memory", "standard"), {}, None, 1)
    nvlink = ("nvlink counters: NVLink 5 COUNT fields: Unknown Error; "
              "nvmlDeviceGetNvLinkErrorCounter: Not Supported")
    v = memory_judge(node, outcome([nvlink]), j)
    assert v.failures == () and v.warnings == (f"cuda:0 ({B200}, GPU-b): NVML: {nvlink}",)
    v = memory_judge(node, outcome(["ecc_corrected: GPU is lost"]), j)
    assert v.failures == (f"cuda:0 ({B200}, GPU-b): NVML: ecc_corrected: GPU is lost",)


def test_nvlink5_counters_grown_since_health_fail_the_link_by_its_count_fields(nvml,
                                                                              tmp_path):
    uuids = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(2)]
    node = Node(name="n1", address="n1", transport="local", gpus=2,
                gpu_model="B200-SXM-180GB")
    settings = {"sysfs_root": str(tmp_path / "no-ib")}
    nvml(devices=[blackwell(u, {"symbol_errors": {"2": 50}, "rcv_errors": {"17": 1}})
                  for u in uuids])
    health = run_probe(LocalTransport(node, REPO / "probes"), "health",
                       {"gpus": 2, "baselines": {"fabric": settings}}, timeout_s=300)
    assert health.ok, health.reason
    baseline = health.data["figures"]["baselines"]["fabric"]
    assert baseline["nvlink"][uuids[1]]["17"]["rcv_errors"] == 1
    assert baseline["nvlink"][uuids[1]]["2"]["symbol_errors"] == 50
    nvml(devices=[blackwell(uuids[0], {"symbol_errors": {"2": 90}, "rcv_errors": {"17": 1}}),
                  blackwell(uuids[1], {"rcv_errors": {"17": 201},
                                       "effective_errors": {"9": 3},
                                       "link_recovery_events": {"16": 1}})])
    fabric = run_probe(LocalTransport(node, REPO / "probes"), "fabric",
                       {"gpus": 2, "settings": settings, "baseline": baseline}, timeout_s=300)
    assert fabric.ok, fabric.reason
    assert fabric.data["devices"][1]["nvlink"]["links"] == 18
    v = verdicts({"n1": fabric}, gpus=2, model="B200-SXM-180GB")["n1"]
    over = f"since the health check {fabric.data['figures']['ib']['window_s']:.0f} s " \
           "earlier, over the run's load"
    gpu1 = f"GPU 1 ({B200}, {uuids[1]})"
    gpu0 = f"GPU 0 ({B200}, {uuids[0]})"
    assert v.failures == (
        f"{gpu0} NVLink link 2: symbol_errors grew by 40 {over}: symbol errors: FEC did "
        "not fix them",
        f"{gpu1} NVLink link 9: effective_errors grew by 3 {over}: errors left after FEC",
        f"{gpu1} NVLink link 16: link_recovery_events grew by 1 {over}: the link retrained",
        f"{gpu1} NVLink link 17: rcv_errors grew by 200 {over}: receive errors")
    assert v.warnings == ()
    new = {(dict(f.labels)["link"], dict(f.labels)["counter"]): f.value
           for f in figures(fabric.to_record("r", "fabric")) if f.metric == "nvlink_new_errors"}
    assert new[("9", "effective_errors")] == 3 and new[("17", "rcv_errors")] == 200
