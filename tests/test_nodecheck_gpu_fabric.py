"""node-check's GPU fabric findings (GB200/GB300 NVL trays, NVSwitch systems), through the
NVML emulator (tests/nvmlemu, answering nvmlDeviceGetGpuFabricInfoV per driver branch):
the health probe's own reader (probes/gpufabric.py) and the health check's own rule
(burnin/checks/gpu_fabric.py), so that node-check and a run judge a fabric alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_gpu_fabric import FALSE, HEALTHY, TRUE, gb200, mask
from test_nodecheck import findings, make_inventory, node_check

from burnin.checks import CHECKS
from burnin.model.gpu_reference import GPU_MODELS
from burnin.model.nodes import Node
from burnin.nodecheck import gpu, gpuread

HEALTH = CHECKS["health"].resolve("quick")
CLUSTER = "5e1f4a0c-9b7d-0000-b0a4-d00000000001"  # the emulator's cluster UUID


def imex_dev(root: Path, channels: int = 1) -> Path:
    d = root / "nvidia-caps-imex-channels"
    d.mkdir(parents=True)
    for i in range(channels):
        (d / f"channel{i}").write_text("")
    return root


def run(nvml_in_process, dev_root: Path, model: str | None, devices: list,
        domain: str | None = "nvl72-a", imex: bool | None = True, **scenario):
    """node-check on a tray; by default one the inventory puts in an NVLink domain (an
    NVL72 rack) and requires IMEX channels of."""
    nv = nvml_in_process(devices=devices, **scenario)
    node = Node(name="tray1", address="tray1", gpus=len(devices), gpu_model=model,
                nvlink_domain=domain, imex_channels=imex)
    # gpu.check reads in a child process; here the same reader and judge in this one
    return gpu.judge(node, GPU_MODELS[model] if model else None,
                     {**HEALTH, "dev_root": str(dev_root)}, {},
                     gpuread.readings(nv, str(dev_root)))


def texts(result) -> list[str]:
    return [f.text for f in result.findings if not f.warn]


def test_a_gb200_tray_whose_fabric_is_completed_and_healthy_passes(nvml_in_process, tmp_path):
    devices = [gb200(i, {"state": 3, "health_mask": HEALTHY, "health_summary": 1})
               for i in range(4)]
    result = run(nvml_in_process, imex_dev(tmp_path), "GB200-186GB", devices,
                 driver_branch="R580")
    assert texts(result) == [] and result.state == {"gpus": 4}


def test_each_gpu_whose_fabric_is_not_completed_or_degraded_is_a_finding(nvml_in_process,
                                                                        tmp_path):
    devices = [
        gb200(0, {"state": 3, "health_mask": HEALTHY, "health_summary": 1}),
        gb200(1, {"state": 2, "clique_id": 7}),  # in progress
        gb200(2, {"state": 3, "health_mask": mask(degraded_bandwidth=TRUE,
                                                  route_unhealthy=FALSE)}),
        gb200(3, {"state": 3, "health_mask": mask(incorrect_configuration=5),
                  "health_summary": 3}),
        gb200(4, {"state": 3, "status": "NOT_READY"}),
        gb200(5, {"state": 1}),  # not started: the fabric manager never registered it
        gb200(6, None),          # NVML says the GPU is in no fabric
    ]
    result = run(nvml_in_process, imex_dev(tmp_path), "GB200-186GB", devices,
                 driver_branch="R580")
    assert texts(result) == [
        f"GPU 1 (GPU-1): NVLink fabric registration is in progress, expected completed "
        f"(clique 7, cluster {CLUSTER})",
        f"GPU 2 (GPU-2): NVLink bandwidth is degraded (fabric health mask "
        f"{mask(degraded_bandwidth=TRUE, route_unhealthy=FALSE)})",
        "GPU 3 (GPU-3): NVLink fabric configuration is incorrect: insufficient nvlinks",
        "GPU 3 (GPU-3): NVLink fabric health summary is limited capacity",
        "GPU 4 (GPU-4): NVLink fabric registration completed with NVML status 27, expected "
        "0 (success)",
        f"GPU 5 (GPU-5): NVLink fabric registration is not started, expected completed "
        f"(clique 1, cluster {CLUSTER})",
        "GPU 6 (GPU-6): NVML reports no NVLink fabric state (the node's NVLink domain needs "
        "one: is the fabric manager running, NVLink supported here?)"]
    assert all(f.check == "gpu" for f in result.findings)


@pytest.mark.parametrize("model, name, domain, fails", [
    ("H100-SXM5-80GB", "NVIDIA H100 80GB HBM3", None, False),  # no fabric call, no domain
    ("GB200-186GB", "NVIDIA GB200", "nvl72-a", True),  # a declared domain needs a fabric
    ("GB200-186GB", "NVIDIA GB200", None, False),      # an NVL4 tray: no domain
])
def test_a_driver_without_the_fabric_call_is_a_finding_only_where_the_node_needs_one(
        nvml_in_process, tmp_path, model, name, domain, fails):
    devices = [{"name": name, "uuid": "GPU-0", "fabric": {"state": 3}}]
    result = run(nvml_in_process, imex_dev(tmp_path), model, devices, domain=domain,
                 driver_branch="R525")
    assert texts(result) == ([
        "GPU 0 (GPU-0): NVML reports no NVLink fabric state (the node's NVLink domain needs "
        "one: is the fabric manager running, NVLink supported here?)"] if fails else [])


def test_an_older_driver_without_the_health_mask_is_judged_on_what_it_reports(
        nvml_in_process, tmp_path):
    devices = [gb200(0, {"state": 3}), gb200(1, {"state": 2})]
    result = run(nvml_in_process, imex_dev(tmp_path), "GB200-186GB", devices,
                 driver_branch="R535")
    assert texts(result) == [
        f"GPU 1 (GPU-1): NVLink fabric registration is in progress, expected completed "
        f"(clique 1, cluster {CLUSTER})"]


def test_an_h100_outside_any_fabric_passes_and_its_reported_fabric_is_judged(
        nvml_in_process, tmp_path):
    devices = [{"uuid": "GPU-0"}, {"uuid": "GPU-1", "fabric": {"state": 2}}]
    result = run(nvml_in_process, tmp_path, "H100-SXM5-80GB", devices, domain=None,
                 imex=None)  # no IMEX: not needed
    assert texts(result) == [
        f"GPU 1 (GPU-1): NVLink fabric registration is in progress, expected completed "
        f"(clique 1, cluster {CLUSTER})"]


def test_a_gb200_without_an_imex_channel_is_a_finding(nvml_in_process, tmp_path):
    devices = [gb200(i, {"state": 3, "health_mask": HEALTHY}) for i in range(2)]
    bare = tmp_path / "bare-dev"
    bare.mkdir()
    assert texts(run(nvml_in_process, bare, "GB200-186GB", devices,
                     driver_branch="R570")) == [
        f"no IMEX channel in {bare}/nvidia-caps-imex-channels (imex_channels: true: the "
        "driver's NVreg_CreateImexChannel0=1, or the channel made by hand; they do not "
        "survive a reboot)"]
    empty = imex_dev(tmp_path / "empty-dev", channels=0)
    assert texts(run(nvml_in_process, empty, "GB200-186GB", devices,
                     driver_branch="R570")) == [
        f"no IMEX channel in {empty}/nvidia-caps-imex-channels (imex_channels: true: the "
        "driver's NVreg_CreateImexChannel0=1, or the channel made by hand; they do not "
        "survive a reboot)"]
    # Without imex_channels: true (channels are the administrator's, gone after a
    # reboot): no finding.
    assert texts(run(nvml_in_process, bare, "GB200-186GB", devices, imex=None,
                     driver_branch="R570")) == []


def test_an_nvml_error_reading_the_fabric_is_a_finding_not_a_pass(nvml_in_process, tmp_path):
    # A GPU NVML cannot answer for is not vouched for: an error other than "not supported"
    # or "no such call" is the health check's NVML-error finding.
    devices = [{**gb200(0, {"state": 3, "health_mask": HEALTHY}),
                "errors": {"fabric": "UNKNOWN"}}]
    found = texts(run(nvml_in_process, imex_dev(tmp_path), "GB200-186GB", devices,
                      driver_branch="R580"))
    assert found == [  # the second as the run's health check says it too
        "GPU 0 (GPU-0): NVML error (Unknown Error) reading fabric",
        "GPU 0 (GPU-0): NVML reports no NVLink fabric state (the node's NVLink domain needs "
        "one: is the fabric manager running, NVLink supported here?)"]


def test_node_check_drains_a_gb200_node_for_its_fabric_read_from_the_inventory(tmp_path,
                                                                               nvml):
    # End to end: the inventory's gpu_model and checks.health.dev_root reach the rule.
    nvml(driver_branch="R580", devices=[gb200(0, {"state": 3, "health_mask": HEALTHY}),
                                        gb200(1, {"state": 3, "health_mask": mask(
                                            degraded_bandwidth=TRUE)})])
    bare = tmp_path / "bare-dev"
    bare.mkdir()
    inv = make_inventory(tmp_path, {"gpus": 2, "gpu_model": "GB200-186GB",
                                    "nvlink_domain": "nvl72-a", "imex_channels": True},
                         checks={"fabric": {"sysfs_root": str(tmp_path / "no-hcas")},
                                 "health": {"dev_root": str(bare), "kernel_log": "off"}})
    res = node_check(inv, "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    assert [f for f in findings(res) if f.startswith("gpu: ")] == [
        f"gpu: GPU 1 (GPU-1): NVLink bandwidth is degraded (fabric health mask "
        f"{mask(degraded_bandwidth=TRUE)})",
        f"gpu: no IMEX channel in {bare}/nvidia-caps-imex-channels (imex_channels: true: "
        "the driver's NVreg_CreateImexChannel0=1, or the channel made by hand; they do not "
        "survive a reboot)"]
