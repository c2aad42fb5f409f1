"""GB200/GB300 trays and NVSwitch systems: the health probe reads each GPU's NVLink fabric
registration through nvmlDeviceGetGpuFabricInfoV (the NVML emulator answering as nvml.h
says, per driver branch) and the IMEX channel devices; the judge fails a GPU whose fabric
is not completed, completed with an error, or degraded, and a model that needs a fabric
or IMEX channels where the node has none. Also: a GPU whose NVML max PCIe link is below
its model's datasheet (a Gen4 card in a Gen3 slot)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from burnin.checks import Fleet, Judging
from burnin.checks.gpu_fabric import fabric_faults, imex_faults
from burnin.checks.health import SCHEMA, fleet_summary, judge
from burnin.inventory.schema import Node
from burnin.model.gpu_reference import GPU_MODELS
from burnin.probe.protocol import ProbeOutcome, run_probe
from burnin.transports.local import LocalTransport

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "probes"))
import gpufabric  # noqa: E402  (a probe module: stdlib only)

sys.path.remove(str(REPO / "probes"))


def mask(**fields: int) -> int:
    """A health mask from named fields, NVML's NVML_GPU_FABRIC_HEALTH_MASK_* values."""
    return sum(v << gpufabric.HEALTH[k][0] for k, v in fields.items())


TRUE, FALSE = 1, 2
HEALTHY = mask(degraded_bandwidth=FALSE, route_recovery=FALSE, route_unhealthy=FALSE,
               access_timeout_recovery=FALSE, incorrect_configuration=1)


def gb200(i: int, fabric) -> dict:
    return {"name": "NVIDIA GB200", "uuid": f"GPU-{i}", "fabric": fabric}


def node(model: str, gpus: int, domain: str | None = None, imex: bool | None = None) -> Node:
    """A tray; `domain`: the NVLink domain the inventory declares for it (an NVL72 rack)."""
    return Node(name="tray1", address="tray1", transport="local", gpus=gpus, gpu_model=model,
                nvlink_domain=domain, imex_channels=imex)


def health(n: Node, dev_root: Path) -> ProbeOutcome:
    out = run_probe(LocalTransport(n, REPO / "probes"), "health",
                    {"settings": {"dev_root": str(dev_root), "kernel_log": "off"}},
                    timeout_s=120, schema=SCHEMA)
    assert out.ok, out.reason  # the document fits health's schema
    return out


def failures(n: Node, outcome: ProbeOutcome) -> list[str]:
    model = GPU_MODELS[n.gpu_model]
    fleet = Fleet({n.name: outcome}, models={n.name: model})
    v = judge(n, outcome, Judging({}, fleet_summary(fleet), model, n.gpus))
    return list(v.failures)


def fabric_lines(fails: list[str]) -> list[str]:
    return [f for f in fails if "fabric" in f.lower() or "nvlink" in f.lower()
            or "imex" in f.lower()]


@pytest.fixture
def dev_root(tmp_path) -> Path:
    root = tmp_path / "dev"
    (root / "nvidia-caps-imex-channels").mkdir(parents=True)
    (root / "nvidia-caps-imex-channels" / "channel0").write_text("")
    return root


def test_a_gb200_tray_fails_each_gpu_whose_fabric_is_not_completed_or_degraded(nvml,
                                                                              dev_root):
    nvml(driver_branch="R580", devices=[
        gb200(0, {"state": 3, "health_mask": HEALTHY, "health_summary": 1}),
        gb200(1, {"state": 2, "clique_id": 7}),  # in progress
        gb200(2, {"state": 3, "health_mask": mask(degraded_bandwidth=TRUE)}),
        gb200(3, {"state": 3, "health_mask": mask(incorrect_configuration=5),
                  "health_summary": 3}),
        gb200(4, {"state": 3, "status": "NOT_READY"}),
        gb200(5, {"state": 1}),  # not started: the fabric manager never registered it
        gb200(6, None),          # NVML says the GPU is in no fabric
    ])
    n = node("GB200-186GB", 7, domain="nvl72-a")
    out = health(n, dev_root)
    fab = {d["index"]: d["fabric"] for d in out.data["devices"]}
    assert fab[0]["state"] == "completed" and fab[0]["summary"] == "healthy"
    assert fab[0]["api"] == "nvmlDeviceGetGpuFabricInfoV" and fab[0]["version"] == 3
    assert fab[3]["health"]["incorrect_configuration"] == "insufficient_nvlinks"
    assert fab[6] is None and "fabric" in out.data["devices"][6]["unsupported"]
    assert out.data["figures"]["gpu"]["imex"]["channels"] == ["channel0"]
    assert fabric_lines(failures(n, out)) == [
        "GPU 1 (GPU-1): NVLink fabric registration is in progress, expected completed "
        "(clique 7, cluster 5e1f4a0c-9b7d-0000-b0a4-d00000000001)",
        f"GPU 2 (GPU-2): NVLink bandwidth is degraded (fabric health mask "
        f"{mask(degraded_bandwidth=TRUE)})",
        "GPU 3 (GPU-3): NVLink fabric configuration is incorrect: insufficient nvlinks",
        "GPU 3 (GPU-3): NVLink fabric health summary is limited capacity",
        "GPU 4 (GPU-4): NVLink fabric registration completed with NVML status 27, expected "
        "0 (success)",
        "GPU 5 (GPU-5): NVLink fabric registration is not started, expected completed "
        "(clique 1, cluster 5e1f4a0c-9b7d-0000-b0a4-d00000000001)",
        "GPU 6 (GPU-6): NVML reports no NVLink fabric state (the node's NVLink domain needs "
        "one: is the fabric manager running, NVLink supported here?)"]


def test_a_healthy_gb200_tray_passes_and_one_without_an_imex_channel_fails(nvml, dev_root,
                                                                           tmp_path):
    nvml(driver_branch="R570", devices=[gb200(i, {"state": 3, "health_mask": HEALTHY})
                                        for i in range(4)])
    n = node("GB200-186GB", 4, domain="nvl72-a", imex=True)
    out = health(n, dev_root)
    assert {d["fabric"]["version"] for d in out.data["devices"]} == {2}, "R570: v2 only"
    assert fabric_lines(failures(n, out)) == []
    bare = tmp_path / "bare-dev"
    bare.mkdir()
    assert fabric_lines(failures(n, health(n, bare))) == [
        f"no IMEX channel in {bare}/nvidia-caps-imex-channels (imex_channels: true: the "
        "driver's NVreg_CreateImexChannel0=1, or the channel made by hand; they do not "
        "survive a reboot)"]


@pytest.mark.parametrize("branch, api, fails", [
    ("R535", "nvmlDeviceGetGpuFabricInfo", False),  # no health mask before R550
    ("R525", None, True),                            # no fabric call at all
])
def test_an_older_driver_reads_what_it_has_and_a_gb200_without_any_fails(nvml, dev_root,
                                                                         branch, api, fails):
    nvml(driver_branch=branch, devices=[gb200(0, {"state": 3})])
    n = node("GB200-186GB", 1, domain="nvl72-a")
    out = health(n, dev_root)
    (dev,) = out.data["devices"]
    assert (dev["fabric"] or {}).get("api") == api
    assert bool(fabric_lines(failures(n, out))) is fails


def test_a_gpu_outside_any_fabric_passes_and_a_reported_fabric_is_judged_on_any_model(
        nvml, dev_root):
    nvml(devices=[{"uuid": "GPU-0"}, {"uuid": "GPU-1", "fabric": {"state": 2}}])
    n = node("H100-SXM5-80GB", 2)
    assert fabric_lines(failures(n, health(n, dev_root))) == [
        "GPU 1 (GPU-1): NVLink fabric registration is in progress, expected completed "
        "(clique 1, cluster 5e1f4a0c-9b7d-0000-b0a4-d00000000001)"]


def test_a_card_whose_slot_caps_its_link_below_the_datasheet_fails(nvml, dev_root):
    nvml(devices=[{"name": "NVIDIA A10", "uuid": "GPU-0",
                   "pcie": {"gen": 3, "max_gen": 3, "width": 16, "max_width": 16}},
                  {"name": "NVIDIA A10", "uuid": "GPU-1",
                   "pcie": {"gen": 4, "max_gen": 4, "width": 8, "max_width": 8}}])
    n = node("A10-24GB", 2)
    pcie = [f for f in failures(n, health(n, dev_root)) if "PCIe" in f]
    assert pcie == [
        "GPU 0 (GPU-0): PCIe max link gen 3 (the GPU and its slot), A10-24GB's datasheet "
        "gives gen 4",
        "GPU 1 (GPU-1): PCIe max link width 8 (the GPU and its slot), A10-24GB's datasheet "
        "gives width 16"]


@pytest.mark.parametrize("fabric, expected", [
    ({"state": "completed", "status": 0, "health": {"route_unhealthy": "true"},
      "health_mask": 16}, ["g: an NVLink route is unhealthy (fabric health mask 16)"]),
    ({"state": "completed", "status": 0, "health": {"route_recovery": "true"},
      "health_mask": 4}, ["g: an NVLink route recovery is in progress (fabric health mask "
                          "4)"]),
    ({"state": "completed", "status": 0, "health": {"access_timeout_recovery": "true"},
      "health_mask": 64}, ["g: an access-timeout recovery is in progress (fabric health "
                           "mask 64)"]),
    ({"state": "completed", "status": 0, "health": {"gfm_state": "disconnected"},
      "health_mask": 32768}, ["g: the global fabric manager is disconnected (fabric health "
                              "mask 32768)"]),
    ({"state": "completed", "status": 0, "summary": "unhealthy"},
     ["g: NVLink fabric health summary is unhealthy"]),
    ({"state": "completed", "status": 0, "health": {
        "incorrect_configuration": "not_supported", "degraded_bandwidth": "not_supported"},
      "summary": "not_supported"}, []),
    ({"state": "not_supported"}, []),
])
def test_each_health_field_against_a_gpu(fabric, expected):
    assert fabric_faults("g", fabric, required=False) == expected


def test_the_health_mask_reads_as_nvml_h_defines_it():
    assert gpufabric.health(0x5 << 8 | 1 << 4 | 2 << 14) == {
        "degraded_bandwidth": "not_supported", "route_recovery": "not_supported",
        "route_unhealthy": "true", "access_timeout_recovery": "not_supported",
        "incorrect_configuration": "insufficient_nvlinks", "partition_assigned":
        "not_supported", "gfm_state": "disconnected"}
    assert gpufabric.health(0xF << 8)["incorrect_configuration"] == "unknown 15"


def test_imex_is_judged_only_where_the_model_needs_it():
    assert imex_faults(None, required=False) == []
    assert imex_faults(None, required=True) == [
        "IMEX channels were not looked for (imex_channels: true needs them)"]
    assert imex_faults({"error": "/dev/x: Permission denied"}, required=True) == [
        "IMEX channels unreadable: /dev/x: Permission denied"]
