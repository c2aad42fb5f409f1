"""A GPU's NVLink fabric judged per node and per declared NVLink domain, not per model
(burnin/checks/gpu_fabric.py): one GB200 model covers NVL72 trays (a multi-node NVLink
domain) and NVL4 trays (none); IMEX channels are the administrator's and do not survive
a reboot; the GPUs of a node, and the nodes of a declared domain, agree on cluster uuid
and clique id. And the fabric state, an unsigned char in nvml.h, read as one byte."""

from __future__ import annotations

import copy
import ctypes
import sys
from dataclasses import replace
from pathlib import Path

import nvmlemu
import pytest

from burnin.checks import Fleet, Judging
from burnin.checks.gpu_fabric import agreement_faults
from burnin.checks.health import SCHEMA, fleet_summary, judge
from burnin.inventory.schema import Node
from burnin.model.gpu_reference import GPU_MODELS
from burnin.probe.protocol import ProbeOutcome, run_probe
from burnin.transports.local import LocalTransport

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "probes"))
import gpufabric  # noqa: E402  (a probe module: stdlib only)

sys.path.remove(str(REPO / "probes"))
GB200 = "GB200-186GB"
HEALTHY = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8  # every NVML_GPU_FABRIC_HEALTH_MASK_* fine


def tray(name: str, gpus: int = 4, domain: str | None = None, imex: bool | None = None):
    return Node(name=name, address=name, transport="local", gpus=gpus, gpu_model=GB200,
                nvlink_domain=domain, imex_channels=imex)


def gb200(i: int, fabric) -> dict:
    return {"name": "NVIDIA GB200", "uuid": f"GPU-{i}", "fabric": fabric}


def health(n: Node, dev_root: Path) -> ProbeOutcome:
    out = run_probe(LocalTransport(n, REPO / "probes"), "health",
                    {"settings": {"dev_root": str(dev_root), "kernel_log": "off"}},
                    timeout_s=120, schema=SCHEMA)
    assert out.ok, out.reason
    return out


def verdicts(outcomes: dict[str, ProbeOutcome], nodes: dict[str, Node]):
    model = GPU_MODELS[GB200]
    fleet = Fleet(outcomes, models={n: model for n in outcomes}, nodes=nodes)
    summary = fleet_summary(fleet)
    return {n: judge(nodes[n], o, Judging({}, summary, model, nodes[n].gpus))
            for n, o in outcomes.items()}


def fabric_lines(lines) -> list[str]:
    return [x for x in lines if "fabric" in x.lower() or "imex" in x.lower()]


@pytest.fixture
def bare(tmp_path) -> Path:
    root = tmp_path / "dev"
    root.mkdir()
    return root


def test_an_nvl4_tray_with_no_fabric_and_no_imex_passes_unless_it_declares_a_domain(
        nvml, bare):
    nvml(devices=[gb200(i, None) for i in range(4)])
    nvl4 = tray("nvl4")
    out = health(nvl4, bare)
    v = verdicts({"nvl4": out}, {"nvl4": nvl4})["nvl4"]
    assert fabric_lines(v.failures) == [] and fabric_lines(v.warnings) == []
    rack = tray("nvl4", domain="nvl72-a")
    v = verdicts({"nvl4": out}, {"nvl4": rack})["nvl4"]
    assert fabric_lines(v.failures) == [
        f"GPU {i} (GPU-{i}): NVML reports no NVLink fabric state (the node's NVLink domain "
        "needs one: is the fabric manager running, NVLink supported here?)" for i in range(4)]
    # No channel: the administrator has not made one since the last reboot. A warning
    # where the inventory declares a domain; a failure only where it requires them.
    assert fabric_lines(v.warnings) == [
        f"no IMEX channel in {bare}/nvidia-caps-imex-channels: multi-node NVLink memory "
        "sharing in nvlink_domain nvl72-a needs one (the administrator creates them, or a "
        "ComputeDomain; they do not survive a reboot: imex_channels: true requires one)"]
    strict = tray("nvl4", domain="nvl72-a", imex=True)
    v = verdicts({"nvl4": out}, {"nvl4": strict})["nvl4"]
    assert f"no IMEX channel in {bare}/nvidia-caps-imex-channels (imex_channels: true: the " \
           "driver's NVreg_CreateImexChannel0=1, or the channel made by hand; they do not " \
           "survive a reboot)" in v.failures


def test_the_gpu_whose_clique_differs_from_its_nodes_others_fails(nvml, bare):
    nvml(driver_branch="R580", devices=[
        gb200(i, {"state": 3, "health_mask": HEALTHY, "clique_id": 7 if i == 2 else 1})
        for i in range(4)])
    n = tray("t1")
    v = verdicts({"t1": health(n, bare)}, {"t1": n})["t1"]
    assert fabric_lines(v.failures) == [
        "GPU 2 (GPU-2): NVLink fabric cluster 5e1f4a0c-9b7d-0000-b0a4-d00000000001, clique 7; "
        "3 of the node's GPUs: cluster 5e1f4a0c-9b7d-0000-b0a4-d00000000001, clique 1"]


def test_with_no_majority_in_a_node_each_differing_gpu_fails():
    devs = [{"fabric": {"state": "completed", "cluster_uuid": "c", "clique_id": i % 2}}
            for i in range(2)]
    assert agreement_faults(devs, lambda d: f"g{d['fabric']['clique_id']}") == [
        "g0: NVLink fabric cluster c, clique 0; the node's GPUs disagree, none leads",
        "g1: NVLink fabric cluster c, clique 1; the node's GPUs disagree, none leads"]
    one = [{"fabric": {"state": "completed", "cluster_uuid": "c", "clique_id": 1}},
           {"fabric": {"state": "in_progress", "cluster_uuid": "d", "clique_id": 0}}]
    assert agreement_faults(one, str) == [], "only completed registrations are compared"


def test_the_node_of_a_declared_domain_in_another_cluster_fails_alone(nvml, bare):
    nvml(driver_branch="R580", devices=[gb200(i, {"state": 3, "health_mask": HEALTHY})
                                        for i in range(4)])
    first = health(tray("t0"), bare)
    outcomes, nodes = {}, {}
    for i in range(4):
        name = f"t{i}"
        o = replace(first, node=name, data=copy.deepcopy(first.data))
        if i == 3:  # cabled into, or registered with, another rack's fabric
            for d in o.data["devices"]:
                d["fabric"]["cluster_uuid"] = "00000000-0000-0000-0000-00000000beef"
        outcomes[name] = o
        nodes[name] = tray(name, domain="nvl72-a")
    v = verdicts(outcomes, nodes)
    assert [fabric_lines(v[f"t{i}"].failures) for i in range(3)] == [[], [], []]
    assert fabric_lines(v["t3"].failures) == [
        "NVLink fabric cluster 00000000-0000-0000-0000-00000000beef, clique 1; most of "
        "nvlink_domain nvl72-a's 4 nodes: cluster 5e1f4a0c-9b7d-0000-b0a4-d00000000001, "
        "clique 1"]
    # Outside a declared domain, nodes are not compared: two NVL72 racks of one run.
    plain = {n: tray(n) for n in nodes}
    assert fabric_lines(verdicts(outcomes, plain)["t3"].failures) == []
    # Two nodes that disagree: neither leads, both are named.
    two = {n: outcomes[n] for n in ("t0", "t3")}
    v = verdicts(two, {n: nodes[n] for n in two})
    assert all(fabric_lines(v[n].failures) == [
        f"NVLink fabric {w}: the 2 nodes of nvlink_domain nvl72-a disagree, none leads"]
        for n, w in (("t0", "cluster 5e1f4a0c-9b7d-0000-b0a4-d00000000001, clique 1"),
                     ("t3", "cluster 00000000-0000-0000-0000-00000000beef, clique 1")))


def test_the_fabric_state_is_one_byte_whatever_its_padding_holds():
    # nvml.h: typedef unsigned char nvmlGpuFabricState_t; the emulator's driver leaves
    # 0xA5 in the three bytes after it, as a driver copying its own struct may.
    scenario = {"driver_branch": "R580", "devices": [gb200(0, {"state": 3})]}
    with nvmlemu.installed(scenario) as emu:
        nv = emu.pynvml
        nv.nvmlInit()
        h = nv.nvmlDeviceGetHandleByIndex(0)
        info = gpufabric.read(nv, h)
        raw = nv.c_nvmlGpuFabricInfo_v3_t()
        nv.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(raw))
        nv.nvmlShutdown()
    assert info["state"] == "completed"
    assert int(raw.state) == 0xA5A5A503, "pynvml's c_uint reads the padding too"
    assert info["cluster_uuid"] == "5e1f4a0c-9b7d-0000-b0a4-d00000000001"


def test_the_inventory_declares_a_nodes_nvlink_domain_and_imex_channels(tmp_path):
    from burnin.errors import BurninError
    from burnin.inventory.schema import load_inventory
    inv = tmp_path / "rack.yaml"
    inv.write_text("version: 1\ncluster: c\n"
                   "defaults: {transport: local, gpus: 4, gpu_model: GB200-186GB,\n"
                   "           nvlink_domain: nvl72-a}\n"
                   "nodes:\n  - {name: 'tray[1-2]'}\n"
                   "  - {name: tray3, imex_channels: true}\n"
                   "  - {name: nvl4, nvlink_domain: null}\n")
    with pytest.raises(BurninError):
        load_inventory(inv)  # null is no domain name: an NVL4 tray leaves the key out
    inv.write_text(inv.read_text().replace("  - {name: nvl4, nvlink_domain: null}\n", ""))
    nodes = {n.name: n for n in load_inventory(inv).nodes}
    assert [(n.nvlink_domain, n.imex_channels) for n in nodes.values()] == [
        ("nvl72-a", None), ("nvl72-a", None), ("nvl72-a", True)]
    inv.write_text(inv.read_text().replace("imex_channels: true", "imex_channels: yes please"))
    with pytest.raises(BurninError, match="imex_channels"):
        load_inventory(inv)


def test_only_nodes_reporting_their_real_gpu_count_vote_on_the_domains_fabric(nvml, bare):
    nvml(driver_branch="R580", devices=[gb200(i, {"state": 3, "health_mask": HEALTHY})
                                        for i in range(4)])
    honest = health(tray("t0"), bare)
    outcomes = {"t0": honest}
    for name in ("t1", "t2"):  # three GPUs of four, in another cluster: no vote
        o = replace(honest, node=name, data=copy.deepcopy(honest.data))
        del o.data["devices"][3]
        for d in o.data["devices"]:
            d["fabric"]["cluster_uuid"] = "00000000-0000-0000-0000-00000000beef"
        outcomes[name] = o
    nodes = {n: tray(n, domain="nvl72-a") for n in outcomes}
    model = GPU_MODELS[GB200]
    fleet = Fleet(outcomes, {n: 4 for n in outcomes}, {n: model for n in outcomes}, nodes)
    summary = fleet_summary(fleet)
    assert summary["nvlink_domains"] == {"nvl72-a": (
        ("5e1f4a0c-9b7d-0000-b0a4-d00000000001", 1), 1)}
    v = judge(nodes["t0"], honest, Judging({}, summary, model, 4))
    assert fabric_lines(v.failures) == []
