"""The health probe's NVML path through the real pynvml and the NVML emulator
(tests/nvmlemu), and the health judge's rules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nvmlemu
import pytest
from support.suiterun import junit_cases, run_suite

from burnin.checks import Fleet, Judging
from burnin.checks.health import fleet_summary, judge
from burnin.inventory.schema import Node
from burnin.model.gpu_reference import GPU_MODELS
from burnin.probe.protocol import ProbeOutcome, run_probe
from burnin.transports.local import LocalTransport

REPO = Path(__file__).resolve().parent.parent
H100 = "NVIDIA H100 80GB HBM3"


def gpu(i: int, **over) -> dict:
    return {"name": H100, "uuid": f"GPU-{i}", "pci_bus_id": f"0000:{i:02x}:00.0", **over}


# One node, one fault per GPU: the judge must name each GPU with its own fault.
FAULTY = [
    (gpu(0), None),
    (gpu(1, ecc_mode={"current": 0, "pending": 0}), "GPU 1 (GPU-1): ECC is off, expected on"),
    (gpu(2, ecc_errors={"uncorrected_volatile": 3}),
     "GPU 2 (GPU-2): 3 uncorrectable ECC errors since the driver"),
    (gpu(3, remapped_rows={"uncorrectable": 1, "pending": 1}), "GPU 3 (GPU-3): row remap pending"),
    (gpu(4, remapped_rows={"failed": 1}), "GPU 4 (GPU-4): row remap failed"),
    (gpu(5, retired_pages={"pending": 1}), "GPU 5 (GPU-5): retired pages pending"),
    (gpu(6, pcie={"width": 8}), "GPU 6 (GPU-6): PCIe link width x8, max x16"),
    (gpu(7, pcie={"gen": 3}), "GPU 7 (GPU-7): PCIe link gen 3 under load, max gen 5"),
    (gpu(8, name="NVIDIA A100-SXM4-80GB"),
     "GPU 8 (GPU-8): model is 'NVIDIA A100-SXM4-80GB', inventory says H100-SXM5-80GB"),
    (gpu(9, errors={"ecc_mode": "GPU_IS_LOST", "ecc_errors": "GPU_IS_LOST"}),
     "GPU 9 (GPU-9): NVML error (GPU is lost) reading ecc_mode, ecc_uncorrected"),
    (gpu(10, ecc_mode={"current": 0, "pending": 1}),
     "GPU 10 (GPU-10): ECC is off (enabled, pending a reset)"),
    (gpu(11, lost=True), "GPU 11 (no UUID): NVML error (GPU is lost) reading handle"),
]


def judged(node: Node, outcome: ProbeOutcome, fleet: dict[str, ProbeOutcome]):
    """Judge as the suite does: against the summary of the whole fleet's outcomes."""
    model = GPU_MODELS.get(node.gpu_model or "")
    fleet_facts = Fleet(fleet, models=dict.fromkeys(fleet, model))
    return judge(node, outcome, Judging({}, fleet_summary(fleet_facts), model, node.gpus))


def probe(node: Node) -> ProbeOutcome:
    out = run_probe(LocalTransport(node, REPO / "probes"), "health", {}, timeout_s=120)
    assert out.ok, out.reason
    return out


def h100_node(gpus=8, name="n1") -> Node:
    return Node(name=name, address=name, transport="local", gpus=gpus,
                gpu_model="H100-SXM5-80GB")


def test_probe_reads_every_fault_and_judge_names_each_gpu(nvml):
    nvml(devices=[d for d, _ in FAULTY])
    node = h100_node(gpus=len(FAULTY))
    out = probe(node)
    reachable = len(FAULTY) - 1  # the lost one has no UUID to give
    assert [d.get("uuid") for d in out.data["devices"]] == [
        *(f"GPU-{i}" for i in range(reachable)), None]
    # NVML gives the bus id in its own form, whatever form the scenario used
    assert out.data["devices"][3]["pci_bus_id"] == "00000000:03:00.0"
    assert out.data["figures"]["gpu"]["driver"] == "550.54.15"
    assert out.data["figures"]["gpu"]["cuda_driver"] == "12.4"
    verdict = judged(node, out, {node.name: out})
    for _, message in FAULTY[1:]:
        assert sum(message in f for f in verdict.failures) == 1, (message, verdict.failures)
    assert not any("GPU 0 " in f for f in verdict.failures)
    # ... and the lost GPU is one torch cannot use either: the node fails that way too.
    assert f"torch sees 11 of the {len(FAULTY)} GPUs the inventory declares" in verdict.failures
    assert len(verdict.failures) == len(FAULTY)


def test_healthy_gpus_pass_and_unsupported_readings_are_not_faults(nvml):
    nvml(devices=[gpu(0), gpu(1, unsupported=["retired_pages", "remapped_rows"],
                            ecc_errors={"uncorrected_aggregate": 2})])
    node = h100_node(gpus=2)
    out = probe(node)
    dev1 = out.data["devices"][1]
    # The emulated H100 is in no NVLink fabric (NVML: NOT_SUPPORTED), nor need it be.
    # retired_pages: the count of retired pages the replace-soon list reads, said once
    assert sorted(dev1["unsupported"]) == ["fabric", "remapped_rows", "retired_pages",
                                           "retired_pages_pending"]
    assert dev1["retired_pages_pending"] is None and "remapped_rows" not in dev1
    assert dev1["retired_pages"] is None and out.data["devices"][0]["retired_pages"] == 0
    verdict = judged(node, out, {node.name: out})
    assert verdict.passed, verdict.failures
    assert any("lifetime" in w for w in verdict.warnings)


# The reading each branch answers through (tests/nvmlemu/drivers.py): R525 predates
# nvmlDeviceGetCurrentClocksEventReasons; CUDA 14 drops the names pynvml marks for removal.
REASONS_API = {"R525": "nvmlDeviceGetCurrentClocksThrottleReasons"}
CLOCK_API = {"CUDA14": "nvmlDeviceGetClock"}


@pytest.mark.parametrize("branch", ["R525", "R535", "R570", "CUDA14"])
def test_a_healthy_node_passes_on_every_driver_branch_and_says_which_call_answered(nvml,
                                                                                   branch):
    # GPU 1 as real Hopper parts answer: no page retirement (row remapping replaces it).
    nvml(driver_branch=branch, devices=[gpu(0), gpu(1, unsupported=["retired_pages"])])
    node = h100_node(gpus=2)
    out = probe(node)
    verdict = judged(node, out, {node.name: out})
    assert verdict.passed, verdict.failures
    for dev in out.data["devices"]:
        assert dev["errors"] == [] and dev["clock_event_reasons"] == 0
        assert dev["api"]["clock_event_reasons"] == REASONS_API.get(
            branch, "nvmlDeviceGetCurrentClocksEventReasons")
        assert dev["api"]["applications_clock_graphics"] == CLOCK_API.get(
            branch, "nvmlDeviceGetApplicationsClock")
        assert dev["clocks"]["graphics_applications"] == 1980


@pytest.mark.parametrize("branch", ["R525", "CUDA14"])
def test_clocks_held_are_still_read_through_the_older_or_newer_name(nvml, branch):
    held = {"clock_event_reasons": 0x2}  # nvmlClocksEventReasonApplicationsClocksSetting
    apps = {"clocks": {"applications": {"graphics": 1500}}}
    nvml(driver_branch=branch, devices=[gpu(0, **held), gpu(1, **apps)])
    node = h100_node(gpus=2)
    out = probe(node)
    failures = judged(node, out, {node.name: out}).failures
    assert any(f.startswith("GPU 0 (GPU-0): clocks held by the applications-clocks setting")
               for f in failures), failures
    assert "GPU 1 (GPU-1): graphics application clock set to 1500 MHz, default 1980 MHz " \
        "(declare it with checks.health.custom_clocks: true)" in failures


MIG_ON = {"mig_mode": {"current": 1, "pending": 1}}


@pytest.mark.parametrize("mig_on,cuda", [
    ([3], "0,1,2,4,5,6,7"),  # no MIG instance made yet: CUDA sees the other 7
    (list(range(8)), "all")])  # one MIG device to torch for 8 GPUs (nvmlemu.visible)
def test_mig_fails_health_as_mig_not_as_gpus_torch_cannot_see(nvml, mig_on, cuda):
    nvml(cuda=cuda, devices=[gpu(i, **(MIG_ON if i in mig_on else {})) for i in range(8)])
    node = h100_node(gpus=8)
    out = probe(node)
    failures = judged(node, out, {node.name: out}).failures
    assert list(failures) == [f"MIG is on for GPU {i} (GPU-{i}), expected off: CUDA sees MIG "
                              "devices in its place, not the GPU" for i in mig_on]


def test_gpus_torch_cannot_see_beyond_those_with_mig_are_still_named(nvml):
    nvml(cuda="0,1", devices=[gpu(0), gpu(1), gpu(2, **MIG_ON), gpu(3)])  # GPU 3 hidden
    node = h100_node(gpus=4)
    out = probe(node)
    failures = judged(node, out, {node.name: out}).failures
    assert failures == ("MIG is on for GPU 2 (GPU-2), expected off: CUDA sees MIG devices in "
                        "its place, not the GPU",
                        "torch sees 2 of the 4 GPUs the inventory declares (1 with MIG on)")


def test_gpu_count_differs_from_inventory(nvml):
    nvml(devices=[gpu(0), gpu(1)])
    node = h100_node(gpus=8)
    out = probe(node)
    assert "GPU count is 2, inventory says 8" in judged(node, out, {"n1": out}).failures


@pytest.mark.parametrize("code,text", [("LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"),
                                       ("DRIVER_NOT_LOADED", "Driver Not Loaded")])
def test_no_nvml_fails_only_a_node_that_should_have_gpus(nvml, code, text):
    nvml(init_error=code, devices=[gpu(0)])
    out = probe(h100_node())
    assert out.data["figures"]["gpu"]["nvml"] == "absent"
    assert f"NVML did not initialise: {text}" in out.data["figures"]["gpu"]["reason"]
    failures = judged(h100_node(gpus=8), out, {"n1": out}).failures
    assert failures and "inventory says 8 GPUs, but NVML is absent" in failures[0]
    # gpus: auto on a node the inventory gives a GPU model: it must have GPUs, and never
    # counts as a CPU node because NVML is not there to count them.
    failures = judged(h100_node(gpus=None), out, {"n1": out}).failures
    assert failures and ("inventory says gpu_model H100-SXM5-80GB (gpus: auto), but NVML is "
                         f"absent on the node (NVML did not initialise: {text}") in failures[0]
    assert judged(h100_node(gpus=0), out, {"n1": out}).passed  # a CPU node
    assert judged(auto_node("n1"), out, {"n1": out}).passed  # auto, and no GPU model


def test_real_probe_on_this_machine_without_gpu():
    # No emulator: whatever this machine is, the probe measures and the CPU node passes.
    node = Node(name="here", address="here", transport="local", gpus=None)
    out = probe(node)
    assert out.data["node"]["cpu_count"] == os.cpu_count()
    assert out.data["figures"]["torch"]["present"] is True
    assert judged(node, out, {"here": out}).passed


def test_gpu_nodes_over_ssh_get_the_emulator_through_their_python(pytester, make_hosts,
                                                                 tmp_path):
    """SSH passes no environment to a node: each host's `python:` is a wrapper that puts
    the emulator in front of pynvml, so two GPU nodes are judged over the real transport."""
    hosts = make_hosts(2)
    good, bad = hosts.hosts
    nodes = {}
    for host, devices in ((good, [gpu(0), gpu(1)]),
                          (bad, [gpu(0), gpu(1, remapped_rows={"pending": 1})])):
        scenario = nvmlemu.write_scenario(tmp_path / f"{host.name}.json", {"devices": devices})
        nodes[host.name] = {"python": nvmlemu.python_wrapper(tmp_path / f"py-{host.name}",
                                                             scenario)}
    inv = hosts.write_inventory(pytester.path / "inv.yaml", nodes=nodes, gpus="auto",
                                gpu_model="H100-SXM5-80GB")
    result, reports = run_suite(pytester, inv, "-k", "health")
    cases = junit_cases(reports)
    assert cases[good.name]["health"] == ("passed", "")
    outcome_, message = cases[bad.name]["health"]
    assert outcome_ == "failure" and "GPU 1 (GPU-1): row remap pending" in message


def outcome(name: str, driver: str | None = "550.54.15", torch: str = "2.13.0") -> ProbeOutcome:
    gpu_part = {"nvml": "present", "driver": driver} if driver else {"nvml": "absent"}
    return ProbeOutcome(name, "health", True, data={
        "probe": "health", "schema": 1, "node": {}, "devices": [], "errors": [],
        "figures": {"torch": {"present": True, "version": torch}, "gpu": gpu_part}})


def auto_node(name: str) -> Node:
    return Node(name=name, address=name, transport="local", gpus=None)


def test_driver_and_torch_that_differ_from_the_fleet_majority_fail():
    fleet = {"a": outcome("a"), "b": outcome("b"), "c": outcome("c", driver="535.1"),
             "d": outcome("d", torch="2.12.0"), "e": outcome("e", driver=None)}
    verdicts = {n: judged(auto_node(n), o, fleet) for n, o in fleet.items()}
    assert verdicts["a"].passed and verdicts["b"].passed and verdicts["e"].passed
    assert verdicts["c"].failures == ("driver version 535.1, the run's majority is 550.54.15",)
    assert verdicts["d"].failures == ("torch version 2.12.0, the run's majority is 2.13.0",)


def test_two_nodes_that_differ_are_neither_the_odd_one_out():
    """Of two nodes, one lying and one honest cannot outvote each other: a pair that
    differs is judged by its pinned versions (expect:) alone, not failed both."""
    fleet = {"a": outcome("a"), "b": outcome("b", driver="535.1")}
    for name in fleet:
        assert judged(auto_node(name), fleet[name], fleet).passed


def test_a_tie_among_three_or_more_has_no_majority_and_fails_every_side():
    fleet = {"a": outcome("a"), "b": outcome("b", driver="535.1"),
             "c": outcome("c", driver="525.9")}
    for name in fleet:
        (failure,) = judged(auto_node(name), fleet[name], fleet).failures
        assert "no majority" in failure


def test_failed_probe_fails_the_node_with_its_reason():
    bad = ProbeOutcome("a", "health", False, reason="unreachable: connection refused")
    assert judged(auto_node("a"), bad, {"a": bad}).failures == ("unreachable: connection refused",)


def test_missing_torch_fails_the_node():
    o = outcome("a")
    o.data["figures"]["torch"] = {"present": False, "error": "ModuleNotFoundError: torch"}
    assert "torch is not importable" in judged(auto_node("a"), o, {"a": o}).failures[0]


def health_direct(payload: dict, tmp_path: Path, pythonpath: str | None = None) -> tuple:
    """The probe run by hand: (its document, the modules it imported), the latter from
    Python's own -X importtime list on its stderr."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, str(REPO / "probes" / "health.py")],
                          input=json.dumps(payload), capture_output=True, text=True,
                          env=env, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {ln.rsplit("|", 1)[1].strip() for ln in done.stderr.splitlines()
                if ln.startswith("import time:") and "|" in ln}
    return json.loads(done.stdout), imported


def test_a_node_that_should_have_no_gpu_reads_torch_from_its_files_without_importing_it(
        tmp_path):
    import torch
    doc, imported = health_direct({"gpus": 0}, tmp_path)
    facts = doc["figures"]["torch"]
    assert "torch" not in imported and "probelib" in imported  # the list is the probe's
    assert facts == {"present": True, "version": torch.__version__, "cuda": torch.version.cuda,
                     "device_count": 0, "cuda_available": False, "devices": [],
                     "imported": False}
    node = Node(name="cpu", address="cpu", transport="local", gpus=0)
    out = ProbeOutcome("cpu", "health", True, data=doc)
    assert judged(node, out, {"cpu": out}).passed
    # gpus: auto, or any count: torch is imported for its view of the devices.
    _, imported = health_direct({}, tmp_path)
    assert "torch" in imported


def test_gpus_nvml_sees_on_a_node_said_to_have_none_get_torchs_view(nvml, tmp_path):
    nvml(devices=[gpu(0), gpu(1)])
    doc, imported = health_direct({"gpus": 0}, tmp_path)
    facts = doc["figures"]["torch"]
    assert "torch" in imported and "imported" not in facts
    assert facts["device_count"] == 2 and [d["uuid"] for d in facts["devices"]] == \
        ["GPU-0", "GPU-1"]


def test_a_torch_whose_files_do_not_say_its_version_is_imported_and_its_error_told(
        tmp_path):
    broken = tmp_path / "site" / "torch"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('libtorch_cpu.so: cannot open')\n")
    (broken / "version.py").write_text("git_version = 'abc'\n")  # no __version__
    doc, imported = health_direct({"gpus": 0}, tmp_path, str(tmp_path / "site"))
    facts = doc["figures"]["torch"]
    assert facts == {"present": False,
                     "error": "ImportError: libtorch_cpu.so: cannot open"}, facts
    node = Node(name="cpu", address="cpu", transport="local", gpus=0)
    out = ProbeOutcome("cpu", "health", True, data=doc)
    assert "torch is not importable on the node: ImportError: libtorch_cpu.so: cannot open" \
        in judged(node, out, {"cpu": out}).failures
