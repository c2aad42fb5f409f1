"""The health judge and its fleet majorities (burnin/checks/health.py). The configuration
and host rules it calls (drift.py, host.py) have their own tests; here they stay quiet."""

from __future__ import annotations

from support.judging import H100, failed, judge, outcome, summary

from burnin.checks.health import _odd_one_out, evidence
from burnin.model.gpu_reference import GpuModel
from burnin.model.nodes import Node

NAME = "NVIDIA H100 80GB HBM3"


def gpu(i=0, **over) -> dict:
    dev = {"index": i, "name": NAME, "uuid": f"GPU-{i}", "ecc_mode_current": 1,
           "ecc_uncorrected_volatile": 0, "retired_pages_pending": False,
           "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False,
                             "failed": False},
           "pcie": {"gen": 5, "max_gen": 5, "width": 16, "max_width": 16}}
    dev.update(over)
    return dev


def figures(n=2, nvml="present", driver="550.54", torch_version="2.13.0", **over):
    fig = {"torch": {"present": True, "version": torch_version, "device_count": n},
           "gpu": {"nvml": nvml, "driver": driver, "cuda_driver": "12.4"},
           "host": {}}
    for k, v in over.items():
        fig[k] = v
    return fig


def health(devices, figs=None, errors=(), node="n1"):
    return outcome("health", devices, figs or figures(len(devices)), errors, node)


def fleet(driver=("550.54", "", 3), torch=("2.13.0", "", 3), gpus=None, cpus=None,
          memory=None):
    return {"driver": driver, "torch": torch, "gpus": gpus or {}, "cpus": cpus or {},
            "memory_gib": memory or {}}


NODE = Node("n1", "n1", gpus=2, gpu_model="H100")
AUTO = Node("n1", "n1", gpus=None, gpu_model="H100")
CPU = Node("n1", "n1", gpus=0)


def verdict(o, node=NODE, **kw):
    kw.setdefault("fleet", fleet())
    kw.setdefault("model", H100)
    return judge("health", o, node, **kw)


def test_a_healthy_gpu_node_passes():
    assert verdict(health([gpu(0), gpu(1)])) == ((), ())


def test_a_failed_probe_fails_with_its_reason():
    assert verdict(failed("health", "no route to host")) == (("no route to host",), ())


def test_probe_errors_and_a_missing_torch_fail():
    figs = figures(2)
    figs["torch"] = {"present": False, "error": "No module named 'torch'"}
    assert verdict(health([gpu(0), gpu(1)], figs, errors=["nvml: timeout"]))[0] == (
        "probe error: nvml: timeout",
        "torch is not importable on the node: No module named 'torch'")
    figs["torch"] = {}
    assert verdict(health([gpu(0), gpu(1)], figs))[0] == (
        "torch is not importable on the node: absent",)


def test_a_gpu_node_without_nvml_fails_and_a_cpu_node_does_not():
    figs = figures(0, nvml="absent")
    figs["gpu"]["reason"] = "libnvidia-ml.so.1 not found"
    figs["torch"]["device_count"] = 0
    assert verdict(health([], figs))[0] == (
        "inventory says 2 GPUs, but NVML is absent on the node (libnvidia-ml.so.1 not found)",
        "torch sees 0 of the 2 GPUs the inventory declares")
    assert verdict(health([], figs), AUTO)[0] == (
        "inventory says gpu_model H100 (gpus: auto), but NVML is absent on the node "
        "(libnvidia-ml.so.1 not found)",)
    del figs["gpu"]["reason"]
    assert verdict(health([], figs), AUTO)[0] == (
        "inventory says gpu_model H100 (gpus: auto), but NVML is absent on the node "
        "(no reason given)",)
    assert verdict(health([], figs), Node("n1", "n1", gpus=None), model=None) == ((), ())
    assert verdict(health([], figs), CPU, model=None) == ((), ())
    figs["gpu"] = None
    assert verdict(health([], figs), Node("n1", "n1", gpus=1))[0] == (
        "inventory says 1 GPUs, but NVML is absent on the node (no reason given)",
        "torch sees 0 of the 1 GPUs the inventory declares")


def test_the_gpu_count_against_the_inventory():
    assert verdict(health([gpu(0)], figures(2)))[0] == (
        "GPU count is 1, inventory says 2",)
    assert verdict(health([gpu(0), gpu(1), gpu(2)], figures(3)))[0] == (
        "GPU count is 3, inventory says 2",)


def test_gpus_auto_is_held_to_the_majority_of_its_model():
    counts = {"H100": (8, "", 3)}
    eight = [gpu(i) for i in range(8)]
    assert verdict(health(eight, figures(8)), AUTO, fleet=fleet(gpus=counts)) == ((), ())
    assert verdict(health(eight[:7], figures(7)), AUTO, fleet=fleet(gpus=counts))[0] == (
        "GPU count is 7, most of the run's 3 nodes of this model have 8",)
    assert verdict(health(eight[:7], figures(7)), AUTO,
                   fleet=fleet(gpus={"H100": (8, "", 1)})) == ((), ())
    tie = {"H100": (None, "no majority (8 on 1 node(s), 7 on 1 node(s))", 2)}
    assert verdict(health(eight[:7], figures(7)), AUTO, fleet=fleet(gpus=tie)) == ((), ())
    f = verdict(health(eight[:7], figures(7), errors=["nvml: slow"]), AUTO,
                fleet=fleet(gpus=counts))[0]
    assert f == ("probe error: nvml: slow",
                 "GPU count is 7, most of the run's 3 nodes of this model have 8")
    tie3 = {"H100": (None, "no majority (8, 7, 6)", 3)}
    assert verdict(health(eight[:7], figures(7)), AUTO, fleet=fleet(gpus=tie3))[0] == (
        "GPU count 7: no majority (8, 7, 6) among 3 nodes of this model",)
    nomodel = Node("n1", "n1", gpus=None)
    assert verdict(health(eight[:7], figures(7)), nomodel, model=None,
                   fleet=fleet(gpus={"": (8, "", 2)}))[0] == (
        "GPU count is 7, most of the run's 2 nodes of this model have 8",)


def test_each_gpus_faults():
    bad = gpu(0, errors=["temperature: GPU is lost", "power: GPU is lost", "clocks: timeout",
                         "ecc: nvmlDeviceGetEccMode: Unknown Error"],
              name="NVIDIA A100", ecc_mode_current=0, ecc_mode_pending=1,
              ecc_uncorrected_volatile=2, retired_pages_pending=True,
              remapped_rows={"pending": True, "failed": True, "correctable": 0,
                             "uncorrectable": 1},
              pcie={"gen": 4, "max_gen": 5, "width": 8, "max_width": 16, "gen_under_load": 3})
    assert verdict(health([bad, gpu(1)]))[0] == (
        "GPU 0 (GPU-0): NVML error (GPU is lost) reading temperature, power",
        "GPU 0 (GPU-0): NVML error (timeout) reading clocks",
        "GPU 0 (GPU-0): NVML error (nvmlDeviceGetEccMode: Unknown Error) reading ecc",
        "GPU 0 (GPU-0): model is 'NVIDIA A100', inventory says H100 ('NVIDIA H100 80GB HBM3')",
        "GPU 0 (GPU-0): ECC is off (enabled, pending a reset), expected on",
        "GPU 0 (GPU-0): 2 uncorrectable ECC errors since the driver loaded, expected 0",
        "GPU 0 (GPU-0): row remap pending (a reset is needed), expected none",
        "GPU 0 (GPU-0): row remap failed, expected none (the GPU needs service)",
        "GPU 0 (GPU-0): retired pages pending, expected none",
        "GPU 0 (GPU-0): PCIe link width x8, max x16",
        "GPU 0 (GPU-0): PCIe link gen 3 under load, max gen 5")


def test_readings_a_gpu_does_not_give_are_not_judged():
    sparse = {"index": 0, "uuid": None, "name": None, "pcie": {"gen": 4, "width": None,
                                                               "max_width": 16}}
    assert verdict(health([sparse, gpu(1)])) == ((), ())
    at_rest = gpu(0, ecc_mode_current=0, pcie={"gen": 4, "max_gen": 5, "width": 16,
                                               "max_width": 16})
    assert verdict(health([at_rest, gpu(1)]))[0] == (
        "GPU 0 (GPU-0): ECC is off, expected on",
        "GPU 0 (GPU-0): PCIe link gen 4 at rest, max gen 5")
    assert verdict(health([gpu(0, name="x"), gpu(1)]), model=None) == ((), ())
    two_names = GpuModel("H100", ("NVIDIA H100 80GB HBM3", "NVIDIA H100"), peak_tflops=1000.0)
    assert verdict(health([gpu(0, name="x", uuid=None), gpu(1)]), model=two_names)[0] == (
        "GPU 0 (no UUID): model is 'x', inventory says H100 ('NVIDIA H100 80GB HBM3' or "
        "'NVIDIA H100')",)


def test_lifetime_uncorrectable_errors_warn():
    assert verdict(health([gpu(0, ecc_uncorrected_aggregate=3), gpu(1)])) == ((), (
        "GPU 0 (GPU-0): 3 uncorrectable ECC errors over its lifetime (aggregate counter)",))


def test_versions_against_the_fleet_majority():
    o = health([gpu(0), gpu(1)], figures(2, driver="535.1", torch_version="2.12.0"))
    assert verdict(o)[0] == ("driver version 535.1, the run's majority is 550.54",
                             "torch version 2.12.0, the run's majority is 2.13.0")
    assert verdict(o, fleet=fleet(driver=("550.54", "", 1), torch=("2.13.0", "", 1))) == (
        (), ())


def test_odd_one_out():
    assert _odd_one_out("1", "driver", ("1", "", 5)) == []
    assert _odd_one_out(None, "driver", ("1", "", 5)) == []
    assert _odd_one_out("2", "driver", ("1", "", 2)) == ["driver version 2, the run's majority "
                                                         "is 1"]
    assert _odd_one_out("2", "driver", ("1", "", 1)) == []
    assert _odd_one_out("2", "torch", (None, "no majority (x)", 2)) == []
    assert _odd_one_out("2", "torch", (None, "no majority (x)", 3)) == [
        "torch version 2: no majority (x) among 3 nodes"]


def test_torch_seeing_fewer_gpus_than_the_node_has_fails_health():
    figs = figures(1)
    figs["torch"]["cuda_error"] = "CUDA driver version is insufficient"
    assert verdict(health([gpu(0), gpu(1)], figs))[0] == (
        "torch sees 1 of the 2 GPUs the inventory declares: CUDA driver version is "
        "insufficient",)
    assert verdict(health([gpu(0), gpu(1)], figures(1)), AUTO)[0] == (
        "torch sees 1 of the 2 GPUs NVML reports",)
    assert verdict(health([gpu(0), gpu(1)], figures(3))) == ((), ())
    figs = figures(2)
    del figs["torch"]["device_count"]
    assert verdict(health([gpu(0), gpu(1)], figs))[0] == (
        "torch sees 0 of the 2 GPUs the inventory declares",)


def test_a_mig_device_is_not_a_gpu_and_a_gpu_with_mig_on_is_named_as_mig():
    figs = figures(2)
    figs["torch"]["devices"] = [{"uuid": "MIG-1"}, {"uuid": "MIG-2"}, {"uuid": "GPU-1"}]
    mig = gpu(0, mig_mode_current=1)
    failures = verdict(health([mig, gpu(1)], figs))[0]
    assert failures == ("MIG is on for GPU 0 (GPU-0), expected off: CUDA sees MIG devices in "
                        "its place, not the GPU",)
    figs["torch"]["devices"] = [{"uuid": "MIG-1"}, {"uuid": None}]
    assert verdict(health([gpu(0), gpu(1)], figs))[0] == (
        "torch sees 1 of the 2 GPUs the inventory declares",)
    figs["torch"]["devices"] = [{"uuid": "MIG-1"}]
    assert verdict(health([mig, gpu(1)], figs))[0][-1] == \
        "torch sees 0 of the 2 GPUs the inventory declares (1 with MIG on)"
    no_nvml = figures(0, nvml="absent")
    no_nvml["torch"]["devices"] = []
    assert verdict(health([mig], no_nvml), Node("n1", "n1", gpus=1))[0][-1] == \
        "torch sees 0 of the 1 GPUs the inventory declares"
    # Devices listed where NVML says it is absent are not GPUs torch owes us.
    assert verdict(health([gpu(0), gpu(1)], no_nvml), Node("n1", "n1", gpus=None),
                   model=None) == ((), ())


def test_a_cpu_node_passes_without_gpus_or_nvml():
    figs = figures(0, nvml="absent")
    assert verdict(health([], figs), CPU, model=None) == ((), ())


def test_the_kernel_log_and_host_rules_reach_the_verdict():
    figs = figures(2)
    figs["host"] = {"cpus": 64, "kernel_log": {"readable": False, "source": "/dev/kmsg",
                                               "user": "burnin", "error": "EPERM"}}
    f, w = verdict(health([gpu(0), gpu(1)], figs), settings={"cpus": 128})
    assert f[0].startswith("kernel log unreadable as burnin, so XIDs")
    assert f[1] == "64 CPUs, the settings declare 128"
    figs["host"]["kernel_log"]["source"] = "off"
    figs["host"]["kernel_log"]["readable"] = False
    f, w = verdict(health([gpu(0), gpu(1)], figs))
    assert f == () and w[0].startswith("kernel log not read (checks.health.kernel_log: off)")
    # A CPU node with no GPU has no XIDs to miss; a GPU node whose NVML is gone has.
    cpu_figs = figures(0, nvml="absent")
    cpu_figs["host"] = {**figs["host"], "kernel_log": {**figs["host"]["kernel_log"],
                                                         "source": "/dev/kmsg"}}
    assert verdict(health([], cpu_figs), CPU, model=None) == ((), ())
    lost = verdict(health([], cpu_figs), Node("n1", "n1", gpus=2), model=None)[0]
    assert any(line.startswith("kernel log unreadable") for line in lost), lost
    # gpus: auto where NVML sees GPUs: a GPU node.
    assert verdict(health([gpu(0), gpu(1)], figs), AUTO)[1] == w
    f, _ = verdict(health([gpu(0), gpu(1)], figs), fleet=fleet(cpus={"H100": (128, 3)}))
    assert f == ("64 CPUs, most of the run's 3 nodes of this model have 128",)
    f, _ = verdict(health([gpu(0), gpu(1)], figs), model=None,
                   fleet=fleet(cpus={"": (128, 3)}))
    assert f == ("64 CPUs, most of the run's 3 nodes of this model have 128",)


def test_xids_in_the_kernel_log_name_the_gpu_at_their_pci_address():
    figs = figures(2)
    figs["host"] = {"kernel_log": {"readable": True, "source": "/dev/kmsg", "xids": [
        {"pci": "0000:19:00", "xid": 79, "text": "GPU has fallen off the bus", "t": 5.0}]}}
    devices = [gpu(0, pci_bus_id="00000000:18:00.0"), gpu(1, pci_bus_id="00000000:19:00.0")]
    f, _ = verdict(health(devices, figs))
    assert len(f) == 1 and f[0].startswith(
        "GPU 1 (GPU-1): XID 79 (GPU has fallen off the bus) in the kernel log since boot"), f


def test_pinned_versions_and_drift_reach_the_verdict():
    cuda = Node("n1", "n1", gpus=2, gpu_model="H100", expect={"cuda": "12.4"})
    assert verdict(health([gpu(0), gpu(1)]), cuda) == ((), ())
    assert verdict(health([gpu(0), gpu(1)]), Node("n1", "n1", gpus=2, gpu_model="H100",
                                                  expect={"cuda": "12.6"}))[0] == (
        "cuda version 12.4, the inventory expects 12.6",)
    node = Node("n1", "n1", gpus=2, gpu_model="H100", expect={"driver": "560.1"})
    assert verdict(health([gpu(0, persistence_mode=0), gpu(1)]), node)[0] == (
        "GPU 0 (GPU-0): persistence mode is off, expected on",
        "driver version 550.54, the inventory expects 560.1")
    assert verdict(health([gpu(0, clocks={"graphics_applications": 1500,
                                         "graphics_default": 1980}), gpu(1)]))[0] == (
        "GPU 0 (GPU-0): graphics application clock set to 1500 MHz, default 1980 MHz "
        "(declare it with checks.health.custom_clocks: true)",)


# --- the fleet ------------------------------------------------------------------------

def test_the_fleet_majorities():
    def node(name, driver, torch_version, n, cpus=None, mem=None, nvml="present"):
        figs = figures(n, nvml=nvml, driver=driver, torch_version=torch_version)
        figs["host"] = {"cpus": cpus, "memory_bytes": mem}
        return health([gpu(i) for i in range(n)], figs, node=name)
    gib = 1 << 30
    outcomes = {"n1": node("n1", "550", "2.13", 8, 64, 1024 * gib),
                "n2": node("n2", "550", "2.13", 8, 64, 1000 * gib + 1),
                "n3": node("n3", "535", "2.12", 7, 32, None),
                "n4": node("n4", "550", None, 0, None, 512 * gib, nvml="absent"),
                "n5": failed("health", "down", "n5")}
    outcomes["n6"] = node("n6", "550", "2.13", 4)
    models = {"n1": H100, "n2": H100, "n3": H100, "n4": None, "n6": None}
    assert summary("health", outcomes, models=models) == {
        "driver": ("550", "", 4), "torch": ("2.13", "", 4),
        "gpus": {"H100": (8, "", 3), "": (4, "", 1)},
        "cpus": {"H100": (64, 3)}, "memory_gib": {"H100": (None, 2), "": (512, 1)},
        "nvlink_domains": {}}
    empty = summary("health", {})
    assert empty == {"driver": (None, "no node reported a value", 0),
                     "torch": (None, "no node reported a value", 0), "gpus": {}, "cpus": {},
                     "memory_gib": {}, "nvlink_domains": {}}


def test_evidence_keeps_the_facts_that_identify_the_node():
    rec = {"data": {"node": {"host": "n1"}, "figures": figures(1),
                    "devices": [gpu(0, pci_bus_id="0000:18:00.0", vbios="96")]}}
    assert evidence(rec) == {"facts.json": {
        "node": {"host": "n1"}, "gpu": figures(1)["gpu"], "torch": figures(1)["torch"],
        "devices": [{"index": 0, "name": NAME, "uuid": "GPU-0", "pci_bus_id": "0000:18:00.0"}]}}
    assert evidence({"data": {"figures": {}}})["facts.json"]["devices"] == []
