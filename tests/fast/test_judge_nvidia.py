"""The rules taken from NVIDIA's sources (docs/reference/nvidia-sources.md), in the fast
tier (mutation testing runs these): DCGM's watched codes, the NVLink fabric and IMEX
rules, the PCIe link against the datasheet, the bidirectional PCIe round, NVLink 5's
recovery counters, and the memory check's NVML errors that are not memory's."""

from __future__ import annotations

import pytest
from support.judging import H100, judge, outcome

from burnin.checks import CHECKS, Judging
from burnin.checks.dcgm_codes import MONITOR, NAMED, WATCH, watched
from burnin.checks.gpu_fabric import fabric_faults, imex_faults
from burnin.model.gpu_reference import GpuModel
from burnin.model.nodes import Node

HEAD = "DCGM level 2 Integration/pcie on GPU 0: Fail"


def dcgm_result(*errors, status="Fail"):
    return {"category": "Integration", "test": "pcie", "gpu": "0", "status": status,
            "warnings": [{"message": m, "error_id": c, "severity": s} for m, c, s in errors],
            "info": []}


def dcgm(*results, exit_status=226):
    return outcome("dcgm", [], {"applies": True, "level": 2, "exit_status": exit_status,
                                "results": list(results)})


def test_dcgm_watches_only_its_list_of_monitor_codes():
    assert sorted(WATCH) == [5, 10, 12, 40, 41, 42]
    assert all(watched(code, MONITOR) for code in WATCH)
    assert not any(watched(code, MONITOR) for code in NAMED)
    assert not watched(10, 2) and not watched(10, None) and not watched(None, MONITOR)
    assert not watched(999, MONITOR)


@pytest.mark.parametrize("code, name", sorted(NAMED.items()))
def test_a_monitor_code_dcgm_does_not_say_to_watch_fails_with_its_name(code, name):
    assert judge("dcgm", dcgm(dcgm_result(("m", code, MONITOR)))) == (
        (f"{HEAD}: m (DCGM error id {code} {name}, DCGM_ERROR_MONITOR)",), ())


def test_a_watched_code_warns_and_226_stands_beside_it_alone():
    hot = ("hot", 10, MONITOR)
    warned = (f"{HEAD}, only errors DCGM says to watch: hot (DCGM error id 10 "
              "DCGM_FR_CLOCKS_EVENT_THERMAL, DCGM_ERROR_MONITOR)",)
    assert judge("dcgm", dcgm(dcgm_result(hot))) == ((), warned)
    assert judge("dcgm", dcgm(dcgm_result(hot), exit_status=0)) == ((), warned)
    assert judge("dcgm", dcgm(dcgm_result(hot), exit_status=3))[0] == (
        "dcgmi diag exited 3 though every error it gave is one DCGM says to watch",)
    assert judge("dcgm", dcgm(dcgm_result(hot, ("x", 131, MONITOR))))[1] == ()
    assert judge("dcgm", dcgm(dcgm_result(status="Fail")))[0] == (
        f"{HEAD}: no warning, so no error code given",)


FABRIC_OK = {"state": "completed", "status": 0, "clique_id": 4, "cluster_uuid": "c",
             "health_mask": 0, "health": {
                 "degraded_bandwidth": "false", "route_recovery": "false",
                 "route_unhealthy": "false", "access_timeout_recovery": "false",
                 "incorrect_configuration": "none", "partition_assigned": "true",
                 "gfm_state": "connected"}, "summary": "healthy"}


def fabric(**over):
    f = {**FABRIC_OK, **over}
    f["health"] = {**FABRIC_OK["health"], **over.get("health", {})}
    return f


@pytest.mark.parametrize("fab, required, expected", [
    (FABRIC_OK, True, []),
    (None, False, []),
    ({"state": "not_supported"}, False, []),
    (None, True, ["g: NVML reports no NVLink fabric state (the node's NVLink domain needs "
                  "one: is the fabric manager running, NVLink supported here?)"]),
    ({"state": "not_supported"}, True, ["g: NVML reports no NVLink fabric state (the "
                                        "node's NVLink domain needs one: is the fabric "
                                        "manager running, NVLink supported here?)"]),
    (fabric(state="in_progress"), False, [
        "g: NVLink fabric registration is in progress, expected completed (clique 4, "
        "cluster c)"]),
    (fabric(state="not_started", status=27), True, [
        "g: NVLink fabric registration is not started, expected completed (clique 4, "
        "cluster c)"]),
    (fabric(status=27), False, ["g: NVLink fabric registration completed with NVML status "
                                "27, expected 0 (success)"]),
    (fabric(health={"degraded_bandwidth": "true"}), False,
     ["g: NVLink bandwidth is degraded (fabric health mask 0)"]),
    (fabric(health={"route_unhealthy": "true"}), False,
     ["g: an NVLink route is unhealthy (fabric health mask 0)"]),
    (fabric(health={"route_recovery": "true"}), False,
     ["g: an NVLink route recovery is in progress (fabric health mask 0)"]),
    (fabric(health={"access_timeout_recovery": "true"}), False,
     ["g: an access-timeout recovery is in progress (fabric health mask 0)"]),
    (fabric(health={"gfm_state": "disconnected"}), False,
     ["g: the global fabric manager is disconnected (fabric health mask 0)"]),
    (fabric(health={"incorrect_configuration": "no_partition"}), False,
     ["g: NVLink fabric configuration is incorrect: no partition"]),
    (fabric(health={"incorrect_configuration": "not_supported"}), False, []),
    (fabric(summary="limited_capacity"), False,
     ["g: NVLink fabric health summary is limited capacity"]),
    (fabric(summary="unhealthy"), False, ["g: NVLink fabric health summary is unhealthy"]),
    (fabric(summary="not_supported"), False, []),
    ({"state": "completed", "status": 0}, False, []),  # R535: no health mask
])
def test_a_gpus_fabric_registration(fab, required, expected):
    assert fabric_faults("g", fab, required) == expected


def test_imex_channels_where_the_model_needs_them():
    assert imex_faults({"count": 0, "path": "/dev/x"}, required=False) == []
    assert imex_faults({"count": 1, "path": "/dev/x", "error": None}, required=True) == []
    assert imex_faults({"count": 0, "path": "/dev/x", "error": None}, required=True) == [
        "no IMEX channel in /dev/x (imex_channels: true: the driver's "
        "NVreg_CreateImexChannel0=1, or the channel made by hand; they do not survive a "
        "reboot)"]
    assert imex_faults({"count": 0, "error": "/dev/x: denied"}, required=True) == [
        "IMEX channels unreadable: /dev/x: denied"]
    assert imex_faults({}, required=True) == [
        "IMEX channels were not looked for (imex_channels: true needs them)"]


GB200 = GpuModel("GB200", ("NVIDIA GB200",), nvlink_fabric=True, imex_channels=True)
A10 = GpuModel("A10", ("NVIDIA A10",), pcie_gen=4, pcie_width=16)


def health_gpu(name, **over):
    d = {"index": 0, "name": name, "uuid": "GPU-0", "ecc_mode_current": 1,
         "pcie": {"gen": 4, "max_gen": 4, "width": 16, "max_width": 16},
         "unsupported": [], "errors": [], "api": {}, "persistence_mode": 1,
         "compute_mode": 0, "mig_mode_current": 0, "processes": []}
    d.update(over)
    return d


def health(*devices, imex=None):
    gpu = {"nvml": "present", "driver": "580.65.06", "cuda_driver": "13.0"}
    if imex is not None:
        gpu["imex"] = imex
    return outcome("health", list(devices), {"torch": {"present": True, "version": "2.13"},
                                             "gpu": gpu, "host": {}})


FLEET = {"driver": (None, "", 1), "torch": (None, "", 1), "gpus": {}, "hosts": {}}


def test_health_judges_fabric_imex_and_the_datasheets_pcie_link():
    f, _ = judge("health", health(health_gpu("NVIDIA GB200", fabric=fabric(
        state="in_progress"))), model=GB200, fleet=FLEET)
    assert [x for x in f if "fabric" in x or "IMEX" in x] == [
        "GPU 0 (GPU-0): NVLink fabric registration is in progress, expected completed "
        "(clique 4, cluster c)",
        "IMEX channels were not looked for (imex_channels: true needs them)"]
    f, _ = judge("health", health(health_gpu("NVIDIA GB200", fabric=FABRIC_OK),
                                  imex={"count": 1, "path": "/dev/x", "error": None}),
                 model=GB200, fleet=FLEET)
    assert [x for x in f if "fabric" in x or "IMEX" in x] == []
    # GB200 must be in a fabric: a GPU NVML puts in none fails there, not on an H100.
    f, _ = judge("health", health(health_gpu("NVIDIA GB200"),
                                  imex={"count": 1, "path": "/dev/x", "error": None}),
                 model=GB200, fleet=FLEET)
    assert [x for x in f if "fabric" in x] == [
        "GPU 0 (GPU-0): NVML reports no NVLink fabric state (the node's NVLink domain needs "
        "one: is the fabric manager running, NVLink supported here?)"]
    f, _ = judge("health", health(health_gpu("NVIDIA H100 80GB HBM3")), model=H100,
                 fleet=FLEET)
    assert [x for x in f if "fabric" in x] == []
    slot = health_gpu("NVIDIA A10", pcie={"gen": 3, "max_gen": 3, "width": 8, "max_width": 8})
    f, _ = judge("health", health(slot), model=A10, fleet=FLEET)
    assert [x for x in f if "datasheet" in x] == [
        "GPU 0 (GPU-0): PCIe max link gen 3 (the GPU and its slot), A10's datasheet gives "
        "gen 4", "GPU 0 (GPU-0): PCIe max link width 8 (the GPU and its slot), A10's "
        "datasheet gives width 16"]
    f, _ = judge("health", health(health_gpu("NVIDIA A10")), model=A10, fleet=FLEET)
    assert [x for x in f if "datasheet" in x] == []


def rate(gbps):
    return {"bytes": 1, "copies": 3, "seconds": 1.0, "gbps": gbps}


def pcie_gpu(i, bidir, together):
    return {"device": f"cuda:{i}", "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{i}",
            "h2d": rate(50.0), "d2h": rate(50.0), "bidir": rate(bidir),
            "concurrent": {"h2d": rate(50.0), "d2h": rate(50.0), "bidir": rate(together)}}


def pcie(*devices, directions=("h2d", "d2h", "bidir"), bidir_total=None):
    agg = {k: {"gbps": 100.0, "gpus": len(devices)} for k in ("h2d", "d2h")}
    if bidir_total is not None:
        agg["bidir"] = {"gbps": bidir_total, "gpus": len(devices)}
    return outcome("pcie", list(devices), {"aggregate": agg, "gpus": len(devices),
                                           "directions": list(directions)})


EMPTY = {"gpu": {}, "aggregate": {}}
BIDIR = "bidirectional (host-to-device and device-to-host at once)"


def test_pcie_bidirectional_floor_peers_and_all_at_once():
    ok = [pcie_gpu(i, 90.0, 80.0) for i in range(3)]
    assert judge("pcie", pcie(*ok), fleet=EMPTY, model=H100, devices=3) == ((), ())
    slow = pcie_gpu(3, 60.0, 80.0)
    f, _ = judge("pcie", pcie(*ok, slow), fleet=EMPTY, model=H100, devices=4)
    assert f == (f"cuda:3 (NVIDIA H100 80GB HBM3, GPU-3): {BIDIR} 60.000 GB/s, below 0.8 x "
                 "90.000 GB/s, the median of the node's 4 GPUs",)
    f, _ = judge("pcie", pcie(pcie_gpu(0, 60.0, 60.0)), fleet=EMPTY, devices=1,
                 model=GpuModel("m", ("x",), pcie_bidir_gbps=70.0))
    assert f == (f"cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): {BIDIR} 60.000 GB/s, below the "
                 "floor of 70 GB/s (both directions summed: twice nvbandwidth's "
                 "bidirectional figure)",)
    f, _ = judge("pcie", pcie(pcie_gpu(0, 60.0, 60.0)), fleet=EMPTY, devices=1,
                 settings={"min_bidir_gbps": 65})
    assert "below the floor of 65 GB/s (both directions summed" in f[0]
    lagging = pcie_gpu(3, 90.0, 30.0)
    f, _ = judge("pcie", pcie(*ok, lagging), fleet=EMPTY, devices=4)
    assert f == (f"cuda:3 (NVIDIA H100 80GB HBM3, GPU-3): {BIDIR} 30.000 GB/s with all GPUs "
                 "copying at once, below 0.8 x 80.000 GB/s, the node's median GPU then",)
    # min_aggregate_gbps is one direction's floor: not the bidirectional total's (here
    # below it, the single directions above it).
    f, _ = judge("pcie", pcie(*ok, bidir_total=80.0), fleet=EMPTY, devices=3,
                 settings={"min_aggregate_gbps": 90})
    assert f == ()
    f, _ = judge("pcie", pcie(*ok, bidir_total=80.0), fleet=EMPTY, devices=3,
                 settings={"min_aggregate_gbps": 110})
    assert f == ("all 3 GPUs at once: host-to-device 100.000 GB/s in aggregate, below the "
                 "floor of 110 GB/s", "all 3 GPUs at once: device-to-host 100.000 GB/s in "
                 "aggregate, below the floor of 110 GB/s")


def test_pcie_states_the_bidirectional_floor_it_judged_by():
    o = pcie(pcie_gpu(0, 90.0, 80.0))
    v = CHECKS["pcie"].judge(Node("n1", "n1"), o, Judging(
        {**CHECKS["pcie"].resolve("quick"), "min_bidir_gbps": 65}, EMPTY, H100, 1))
    assert v.floors == {"pcie": 50.0, "pcie bidirectional": 65}


def test_pcie_directions_the_document_did_not_measure_are_not_asked_for():
    old = pcie_gpu(0, 90.0, 80.0)
    del old["bidir"]
    assert judge("pcie", pcie(old, directions=("h2d", "d2h")), fleet=EMPTY, devices=1) == (
        (), ())
    assert judge("pcie", pcie(old), fleet=EMPTY, devices=1)[0] == (
        f"cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): no {BIDIR} figure",)
    # Each direction the document measured is judged, whichever it left out before it.
    slow = pcie_gpu(0, 90.0, 80.0)
    slow["d2h"] = rate(10.0)
    assert judge("pcie", pcie(slow, directions=("d2h",)), fleet=EMPTY, devices=1,
                 model=H100)[0] == ("cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): device-to-host "
                                    "10.000 GB/s, below the floor of 50 GB/s",)


def fabric_doc(growth):
    dev = {"device": "0", "index": 0, "name": "NVIDIA B200", "uuid": "GPU-b",
           "nvlink": {"links": 18, "active": 18, "down": [], "counters": {},
                      "growth": growth}}
    return outcome("fabric", [dev], {"ib": {"root": "/x", "hcas": [], "window_s": 5.0,
                                            "since": "window"}, "nvlink": {"read": True}})


FABRIC_FLEET = {"hcas": (None, "", 0), "rate": {}}


@pytest.mark.parametrize("counter, why", [
    ("recovery", "the link retrained"), ("link_recovery_events", "the link retrained"),
    ("link_recovery_failed_events", "a link recovery failed"),
    ("effective_errors", "errors left after FEC")])
def test_an_nvlink5_link_that_recovered_or_erred_fails_at_one(counter, why):
    f, w = judge("fabric", fabric_doc({"16": {counter: 1}}), fleet=FABRIC_FLEET, devices=1,
                 settings={"nvlink_links": 18})
    assert len(f) == 1 and f[0].endswith(why) and counter in f[0]
    f, w = judge("fabric", fabric_doc({"16": {"link_recovery_successful_events": 1}}),
                 fleet=FABRIC_FLEET, devices=1, settings={"nvlink_links": 18})
    assert f == () and len(w) == 1


def test_a_link_key_that_is_no_number_is_judged_not_a_crash():
    f, _ = judge("fabric", fabric_doc({"all": {"link_recovery_events": 1}, "2": {
        "recovery": 1}}), fleet=FABRIC_FLEET, devices=1, settings={"nvlink_links": 18})
    assert [x.split(":")[0] for x in f] == [
        "GPU 0 (NVIDIA B200, GPU-b) NVLink link 2", "GPU 0 (NVIDIA B200, GPU-b) NVLink link all"]


@pytest.mark.parametrize("error, fails", [
    ("nvlink counters: NVLink 5 COUNT fields: Unknown Error", False),
    ("nvlink: GPU is lost", False),
    ("pcie_replay: Unknown Error", False),
    ("ecc_corrected: Unknown Error", True),
    ("retired_pages: GPU is lost", True),
    ("telemetry: cannot open GPU-x in NVML: Not Found", True),
])
def test_the_memory_check_fails_only_for_nvml_errors_about_memory(error, fails):
    dev = {"device": "cuda:0", "uuid": "GPU-0", "name": "H100", "bytes": 1 << 30,
           "patterns": 4, "bad_words": 0, "bad": [],
           "nvml": {"before": {}, "after": {}, "unsupported": [], "errors": [error]}}
    f, w = judge("memory", outcome("memory", [dev], {"elapsed_s": 1.0}))
    line = f"cuda:0 (H100, GPU-0): NVML: {error}"
    assert (f, w) == (((line,), ()) if fails else ((), (line,)))
