"""node-check's GPU findings, each through the NVML emulator (tests/nvmlemu): the real
pynvml with its C library emulated, in this process."""

from __future__ import annotations

import pytest

from burnin.checks import CHECKS
from burnin.model.nodes import Node
from burnin.nodecheck import gpu, gpuread

HEALTH = CHECKS["health"].resolve("quick")


def texts(result) -> list[str]:
    return [f.text for f in result.findings if not f.warn]


def run(nvml_in_process, gpus=1, settings=None, last_good=None, **scenario):
    nv = nvml_in_process(**scenario)
    node = Node(name="n1", address="n1", gpus=gpus)
    # gpu.check reads in a child process (test_nodecheck_bounds.py); here the same reader
    # and judge in this one
    return gpu.judge(node, None, {**HEALTH, **(settings or {})}, last_good or {},
                     gpuread.readings(nv, "/dev"))


def test_healthy_gpus_pass(nvml_in_process):
    result = run(nvml_in_process, gpus=2, devices=[{}, {}])
    assert texts(result) == [] and result.state == {"gpus": 2}


@pytest.mark.parametrize("device, expected", [
    ({"lost": True}, "GPU 0 (no UUID): lost (NVML: GPU is lost): fallen off the bus"),
    ({"ecc_mode": {"current": 0, "pending": 1}}, "ECC is off (enabled, pending a reset), "
                                                 "expected on"),
    ({"ecc_errors": {"uncorrected_volatile": 3}}, "3 uncorrectable ECC errors since the "
                                                  "driver loaded, expected 0"),
    ({"remapped_rows": {"pending": 1}}, "row remap pending (a reset is needed), expected none"),
    ({"remapped_rows": {"failed": 1}}, "row remap failed, expected none"),
    ({"retired_pages": {"pending": 1}}, "retired pages pending, expected none"),
    ({"persistence_mode": 0}, "persistence mode is off, expected on"),
    ({"mig_mode": {"current": 1, "pending": 1}}, "MIG is on for GPU 0"),
    ({"clock_event_reasons": 0x48}, "clocks slowed by hardware slowdown, hardware thermal "
                                    "slowdown (clock event reasons 0x48), expected none"),
    ({"clock_event_reasons": 0x80}, "clocks slowed by hardware power brake"),
    ({"clock_event_reasons": 0x20}, "clocks slowed by software thermal slowdown (clock event "
                                    "reasons 0x20), expected none"),
])
def test_each_gpu_finding(nvml_in_process, device, expected):
    found = texts(run(nvml_in_process, devices=[device]))
    assert len(found) == 1 and expected in found[0], found


def test_a_job_on_the_gpu_and_idle_clocks_are_not_findings(nvml_in_process):
    # node-check runs beside jobs: their processes, a power cap and idling are no faults
    device = {"processes": [{"pid": 4242, "used_memory": 1 << 30}],
              "clock_event_reasons": 0x1 | 0x4, "pcie": {"gen": 1, "max_gen": 5}}
    assert texts(run(nvml_in_process, devices=[device])) == []


def test_count_against_the_inventory_and_against_the_last_clean_check(nvml_in_process):
    assert texts(run(nvml_in_process, gpus=8, devices=[{}, {}])) == [
        "GPU count is 2, inventory says 8"]
    assert texts(run(nvml_in_process, gpus=None, last_good={"gpus": 3}, devices=[{}, {}])) == [
        "GPU count is 2, the last clean node-check saw 3"]


def test_mig_wanted_on_and_persistence_not_required(nvml_in_process):
    found = texts(run(nvml_in_process, settings={"mig_mode": True, "persistence_mode": False},
                      devices=[{"persistence_mode": 0}]))
    assert len(found) == 1 and "MIG mode is off, expected on" in found[0]


def test_nvml_absent_on_a_gpu_node_fails_and_on_a_cpu_node_does_not(nvml_in_process):
    assert "but NVML is absent on the node" in texts(
        run(nvml_in_process, gpus=2, init_error="DRIVER_NOT_LOADED"))[0]
    assert texts(run(nvml_in_process, gpus=None, init_error="DRIVER_NOT_LOADED")) == []


def test_an_r525_driver_reads_the_clock_reasons_through_the_older_call(nvml_in_process):
    # nvmlDeviceGetCurrentClocksEventReasons came with R535: pynvml names it all the same,
    # and on R525 it answers FUNCTION_NOT_FOUND; the older call must answer instead, as in
    # the health probe, and neither the missing symbol nor a slowdown may go unsaid.
    assert texts(run(nvml_in_process, driver_branch="R525", devices=[{}])) == []
    found = texts(run(nvml_in_process, driver_branch="R525",
                      devices=[{"clock_event_reasons": 0x40}]))
    assert len(found) == 1 and "clocks slowed by hardware thermal slowdown" in found[0], found
