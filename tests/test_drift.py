"""Configuration drift, judged by health: the real health probe against emulated NVML,
one drift per GPU, each named with its GPU; the settings and the inventory's `expect:`
that change what is expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from burnin.checks import Fleet, Judging, resolve_settings
from burnin.checks.health import fleet_summary, judge
from burnin.inventory.schema import InventoryError, load_inventory
from burnin.model.gpu_reference import GPU_MODELS
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome, run_probe
from burnin.transports.local import LocalTransport

REPO = Path(__file__).resolve().parent.parent
SETTINGS = resolve_settings("health", "standard", {})


def gpu(i: int, **over) -> dict:
    return {"uuid": f"GPU-{i}", "pci_bus_id": f"0000:{i + 1:02x}:00.0", **over}


DRIFTED = [
    (gpu(0), None),
    (gpu(1, persistence_mode=0), "GPU 1 (GPU-1): persistence mode is off, expected on"),
    (gpu(2, mig_mode={"current": 1, "pending": 1}),
     "MIG is on for GPU 2 (GPU-2), expected off: CUDA sees MIG devices in its place, not the GPU"),
    (gpu(3, mig_mode={"current": 0, "pending": 1}), None),  # on only after a reset: off now
    (gpu(4, compute_mode=3),
     "GPU 4 (GPU-4): compute mode exclusive_process, expected default"),
    (gpu(5, processes=[{"pid": 4242, "used_memory": 1 << 30}]),
     "GPU 5 (GPU-5): 1 compute process(es) already on the GPU before the checks: pid 4242 "
     "(1024 MiB); expected none"),
    (gpu(6, power={"limit_mw": 500000}),
     "GPU 6 (GPU-6): power limit 500 W, expected 700 W (the GPU's default limit)"),
    (gpu(7, clocks={"applications": {"graphics": 1410}}),
     "GPU 7 (GPU-7): graphics application clock set to 1410 MHz, default 1980 MHz (declare "
     "it with checks.health.custom_clocks: true)"),
    (gpu(8, clock_event_reasons=0x2),  # locked clocks (nvidia-smi -lgc) show as this reason
     "GPU 8 (GPU-8): clocks held by the applications-clocks setting at rest (locked or "
     "application clocks; declare them with checks.health.custom_clocks: true)"),
]


def probe(node: Node, nvml, devices=None) -> ProbeOutcome:
    nvml(devices=devices or [d for d, _ in DRIFTED])
    out = run_probe(LocalTransport(node, REPO / "probes"), "health", {}, timeout_s=300)
    assert out.ok, out.reason
    return out


def judged(node: Node, outcome: ProbeOutcome, **settings):
    model = GPU_MODELS.get(node.gpu_model or "")
    summary = fleet_summary(Fleet({node.name: outcome}, models={node.name: model}))
    return judge(node, outcome, Judging({**SETTINGS, **settings}, summary, model, node.gpus))


def node(gpus: int = len(DRIFTED), **over) -> Node:
    return Node(name="n1", address="n1", transport="local", gpus=gpus,
                gpu_model="H100-SXM5-80GB", **over)


def test_each_drift_fails_with_its_gpu_named_and_a_clean_gpu_passes(nvml):
    n = node()
    out = probe(n, nvml)
    dev = out.data["devices"][0]
    assert (dev["persistence_mode"], dev["compute_mode"], dev["mig_mode_current"]) == (1, 0, 0)
    assert (dev["vbios"], dev["inforom_image"]) == ("96.00.99.00.01", "G520.0200.00.05")
    assert dev["power_limit_mw"] == dev["power_default_limit_mw"] == 700000
    verdict = judged(n, out)
    assert sorted(verdict.failures) == sorted(m for _, m in DRIFTED if m)
    clean = probe(node(gpus=1), nvml, [gpu(0)])
    assert judged(node(gpus=1), clean).passed


def test_settings_change_what_is_expected(nvml):
    devices = [gpu(0, mig_mode={"current": 1, "pending": 1}, compute_mode=3,
                   power={"limit_mw": 500000}, persistence_mode=0)]
    n = node(gpus=1)
    out = probe(n, nvml, devices)
    assert len(judged(n, out).failures) == 4
    assert judged(n, out, mig_mode=True, compute_mode="exclusive_process", power_limit_w=500,
                  persistence_mode=False).passed
    clocked = probe(n, nvml, [gpu(0, clocks={"applications": {"mem": 1593}})])
    assert judged(n, clocked).failures == (
        "GPU 0 (GPU-0): memory application clock set to 1593 MHz, default 2619 MHz (declare "
        "it with checks.health.custom_clocks: true)",)
    assert judged(n, clocked, custom_clocks=True).passed
    assert judged(n, out, mig_mode=True, compute_mode="exclusive_process",
                  power_limit_w=600, persistence_mode=False).failures == (
        "GPU 0 (GPU-0): power limit 500 W, expected 600 W (the power_limit_w setting)",)


def test_a_power_limit_a_watt_off_is_drift_and_less_is_not(nvml):
    """NVML states limits in mW: under a watt apart is the same setting, a watt or more is
    another one (the tolerance is held here, both sides of it: a wider one lets a GPU
    capped a few watts low pass)."""
    limits = (699_001, 700_999, 699_000, 701_000, 695_000)
    n = node(gpus=len(limits))
    out = probe(n, nvml, [gpu(i, power={"limit_mw": mw}) for i, mw in enumerate(limits)])
    assert sorted(judged(n, out).failures) == [
        f"GPU {i} (GPU-{i}): power limit {mw / 1000:g} W, expected 700 W (the GPU's default "
        "limit)" for i, mw in enumerate(limits) if i >= 2]
    assert sorted(judged(n, out, power_limit_w=695).failures)[-1] == (
        "GPU 3 (GPU-3): power limit 701 W, expected 695 W (the power_limit_w setting)")
    assert not any("GPU 4 " in f for f in judged(n, out, power_limit_w=695).failures)


def test_mig_expected_on_a_gpu_without_mig_fails(nvml):
    n = node(gpus=1)
    out = probe(n, nvml, [gpu(0, unsupported=["mig_mode"])])
    assert judged(n, out).passed
    assert judged(n, out, mig_mode=True).failures == (
        "GPU 0 (GPU-0): MIG mode cannot be read (not supported), expected on",)


def test_versions_the_inventory_pins(nvml):
    devices = [gpu(0), gpu(1, vbios_version="96.00.74.00.0B")]
    pinned = node(gpus=2, expect={"driver": "550.90.07", "vbios": "96.00.99.00.01",
                                  "cuda": "12.4"})
    out = probe(pinned, nvml, devices)
    assert judged(pinned, out).failures == (
        "GPU 1 (GPU-1): VBIOS 96.00.74.00.0B, the inventory expects 96.00.99.00.01",
        "driver version 550.54.15, the inventory expects 550.90.07")
    right = node(gpus=2, expect={"driver": "550.54.15", "cuda": "12.4"})
    assert judged(right, out).passed
    assert judged(node(gpus=2, expect={"cuda": "12.8"}), out).failures == (
        "cuda version 12.4, the inventory expects 12.8",)


def test_inventory_expect_merges_and_compute_mode_is_checked(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text("version: 1\ndefaults: {expect: {driver: '550.90.07', cuda: '12.4'}}\n"
                    "nodes:\n  - name: n1\n    expect: {vbios: 96.00.99.00.01}\n"
                    "  - name: n2\n")
    inv = load_inventory(path)
    assert inv.node("n1").expect == {"driver": "550.90.07", "cuda": "12.4",
                                     "vbios": "96.00.99.00.01"}
    assert inv.node("n2").expect == {"driver": "550.90.07", "cuda": "12.4"}
    path.write_text("version: 1\nnodes:\n  - name: n1\n    expect: {bios: x}\n"
                    "checks:\n  health: {compute_mode: exclusive}\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert "expect.bios" in str(info.value) and "unknown key" in str(info.value)
    assert "one of: default, exclusive_thread, prohibited, exclusive_process" in str(info.value)
