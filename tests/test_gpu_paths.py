"""GPU nodes as they really are, without a GPU: several GPUs per node through the NVML
emulator with torch "seeing" them (BURNIN_EMULATE_CUDA, each computing on the CPU), on
real SSH hosts. Each test pins a defect a first run on an 8-GPU fleet would have hit."""

from __future__ import annotations

import ast
import json
import re
import sys
import threading
from pathlib import Path

import nvmlemu
import pytest
from support.replay import replay_python
from support.suiterun import junit_cases, run_suite

REPO = Path(__file__).resolve().parent.parent
PROBES = REPO / "probes"
TINY = {"sdc": {"duration_s": 0.3, "n": 64, "random_repeats": 2},
        "burn": {"duration_s": 1, "n": 64, "sample_s": 0.25, "peer_fraction": 0,
                 "clock_fraction": 0},
        # The emulated GPUs share this machine's cores: no relative floor between them.
        "allreduce": {"max_bytes": 65536, "seconds_per_size": 0.02, "peer_fraction": 0,
                      "pair_fraction": 0, "rendezvous_timeout_s": 120}}


def gpus(count: int, prefix: str) -> list[dict]:
    return [{"uuid": f"GPU-{prefix}{i}", "pci_bus_id": f"0000:{0x18 + i:02x}:00.0"}
            for i in range(count)]


def records(reports: Path, check: str) -> dict[str, dict]:
    out = {}
    for line in (reports / "latest" / "results.jsonl").open():
        r = json.loads(line)
        if r["check"] == check:
            out[r["node"]] = r
    return out


def test_gpus_auto_internode_ranks_come_from_each_nodes_real_count(pytester, make_hosts,
                                                                   tmp_path, finding):
    """Three hosts, gpus unset: two with 4 GPUs, one with 3. The odd one fails health
    alone; the other two form one inter-node group of 8 ranks, 0-3 on one, 4-7 on the
    other (with one rank per node, 2 nodes of 8 GPUs got WORLD_SIZE=2 and ranks 0..8)."""
    hosts = make_hosts(3)
    nodes = {}
    for host, count in zip(hosts.hosts, (4, 4, 3), strict=True):
        scenario = nvmlemu.write_scenario(tmp_path / f"{host.name}.json",
                                          {"devices": gpus(count, host.name)})
        # health's real probe counts the emulated GPUs; the all-reduce replays its recorded
        # document with the ranks the controller lays out (and the real rendezvous): the
        # layout is what is tested.
        inner = nvmlemu.python_wrapper(tmp_path / f"py-{host.name}", scenario)
        nodes[host.name] = {"python": replay_python(tmp_path / f"replay-{host.name}",
                                                    real=("health",), python=inner)}
    inv = hosts.write_inventory(pytester.path / "inv.yaml", nodes=nodes, checks=TINY,
                                gpus="auto", gpu_model="H100-SXM5-80GB")
    result, reports = run_suite(pytester, inv, "-k", "health or allreduce")
    cases = junit_cases(reports)
    outcome, message = cases["h3"]["health"]
    assert outcome == "failure", cases
    assert "GPU count is 3, most of the run's 3 nodes of this model have 4" in message
    for name in ("h1", "h2"):
        assert cases[name] == {"health": ("passed", ""), "allreduce": ("passed", ""),
                               "allreduce_internode": ("passed", "")}, cases[name]
    assert cases["h3"]["allreduce_internode"][0] == "skipped"  # failed health: not a member
    inter = records(reports, "allreduce_internode")
    ranks = {n: r["data"]["figures"].get("ranks") for n, r in inter.items()}
    assert ranks == {"h1": [0, 1, 2, 3], "h2": [4, 5, 6, 7], "h3": None}
    worlds = {inter[n]["data"]["figures"]["group"]["members"] for n in ("h1", "h2")}
    assert worlds == {2}
    intra = records(reports, "allreduce")
    assert intra["h1"]["data"]["figures"]["world"] == 4
    finding("gpus auto: one inter-node group of 8 ranks over h1+h2 (4 emulated GPUs "
            "each); h3 with 3 GPUs failed health alone")
    result.assert_outcomes(passed=7, failed=1, skipped=1)  # h3 all-reduces its own 3


def test_a_gpu_node_whose_gpus_torch_cannot_see_fails_instead_of_using_its_cpu(pytester,
                                                                                tmp_path):
    hidden = nvmlemu.write_scenario(tmp_path / "hidden.json", {"devices": gpus(2, "h")})
    inv = pytester.path / "inv.yaml"
    inv.write_text(json.dumps({
        "version": 1, "defaults": {"transport": "local", "gpus": 0}, "checks": TINY,
        "nodes": [
            # The control: a CPU node passes (its recorded documents; the GPU nodes' probes
            # are what is tested, and they run for real).
            {"name": "cpu", "python": replay_python(tmp_path / "py-cpu")},
            # The inventory says 2 GPUs; this machine's torch has no CUDA at all.
            {"name": "declared", "gpus": 2},
            # gpus auto: NVML sees 2 GPUs, torch none (a driver/CUDA mismatch).
            {"name": "mismatch", "gpus": "auto",
             "python": nvmlemu.python_wrapper(tmp_path / "py-mismatch", hidden, cuda="none")},
        ]}))
    result, reports = run_suite(pytester, inv, "-k", "health or sdc or burn")
    cases = junit_cases(reports)
    assert cases["cpu"] == dict.fromkeys(("health", "sdc", "burn"), ("passed", ""))
    # Why torch sees no GPU is torch's own words, which differ between its CPU and CUDA
    # builds: what is asserted is that the message gives them.
    declared = cases["declared"]["health"][1]
    assert re.search(r"torch sees 0 of the 2 GPUs the inventory declares: \S", declared), \
        declared
    assert "torch sees 0 of the 2 GPUs NVML reports" in cases["mismatch"]["health"][1]
    for node in ("declared", "mismatch"):
        for check in ("sdc", "burn"):
            outcome, message = cases[node][check]
            assert outcome == "failure", (node, check)
            assert "the node should have 2 GPUs, torch sees 0" in message, message
            assert "nothing is measured on the CPU instead" in message
    result.assert_outcomes(passed=3, failed=6)


def probe(name: str, payload: dict, timeout_s: float = 300) -> dict:
    from burnin.model.nodes import Node
    from burnin.probe.protocol import run_probe
    from burnin.transports.local import LocalTransport
    out = run_probe(LocalTransport(Node(name="n", address="n", transport="local"), PROBES),
                    name, payload, timeout_s)
    assert out.ok, out.reason
    return out.data


def test_pcie_under_load_reads_the_gpu_it_loads_paired_by_uuid(nvml):
    # torch's order differs from NVML's (cuda:0 is NVML's 2, ...); NVML's GPU 1 idles at
    # gen 3: the load must go to cuda:2, its UUID's device, never cuda:1.
    devices = gpus(3, "p")
    devices[1]["pcie"] = {"gen": 3}
    nvml(cuda="2,0,1", devices=devices)
    data = probe("health", {})
    assert [d["ordinal"] for d in data["figures"]["torch"]["devices"]] == [0, 1, 2]
    assert [d["uuid"] for d in data["figures"]["torch"]["devices"]] == \
        ["GPU-p2", "GPU-p0", "GPU-p1"]
    slow = data["devices"][1]
    assert slow["uuid"] == "GPU-p1" and slow["pcie"]["load_on"] == 2
    assert "gen_under_load" not in data["devices"][0]["pcie"]


def test_each_gpu_worker_binds_its_own_device_and_inputs_are_built_once(nvml):
    nvml(cuda="1,0,2,3", devices=gpus(4, "s"))
    payload = {"gpus": 4, "settings": {"duration_s": 0.3, "n": 64, "random_repeats": 2}}
    from burnin.model.nodes import Node
    from burnin.probe.protocol import run_probe
    from burnin.transports.local import LocalTransport
    out = run_probe(LocalTransport(Node(name="n", address="n", transport="local"), PROBES),
                    "sdc", payload, 300)
    assert out.ok and out.data["errors"] == [], out.data["errors"]
    devices = out.data["devices"]
    assert [(d["device"], d["uuid"]) for d in devices] == [
        ("cuda:0", "GPU-s1"), ("cuda:1", "GPU-s0"), ("cuda:2", "GPU-s2"), ("cuda:3", "GPU-s3")]
    assert all(d["known"]["verified"] >= 1 and d["selftest"] for d in devices)
    assert out.stderr_tail.count("known-answer inputs n=64 fp32 built") == 1


def test_a_timer_refuses_a_thread_bound_to_another_device():
    sys.path.insert(0, str(PROBES))
    try:
        import gemmcore
        import probelib
    finally:
        sys.path.remove(str(PROBES))
    a, b = probelib.cpu_devices(2)
    errors = []

    def worker(bind_to, time_on):
        gemmcore.bind(bind_to)
        try:
            gemmcore.Timer(time_on)
        except RuntimeError as e:
            errors.append(str(e))
    for args in ((a, a), (a, b)):
        t = threading.Thread(target=worker, args=args)
        t.start()
        t.join()
    assert errors == ["timer for cpu:1 in a thread bound to cpu:0"]


def load_probe_module(name: str):
    sys.path.insert(0, str(PROBES))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(PROBES))


def test_allreduce_values_stay_exact_for_any_world_up_to_100000_ranks():
    ar = load_probe_module("allreduce")
    for world in (1, 2, 63, 64, 65, 700, 5_500, 6_000, 50_000, ar.MAX_WORLD):
        assert ar.offsets_sum(world) == sum(r % ar.VALUE_MOD for r in range(world))
        assert ar.max_sum(world) < ar.EXACT, world
    # What it replaced: base % 251 + rank, whose sums passed 2**24 near 5,500 ranks.
    old = 6_000 * 250 + 6_000 * 5_999 // 2
    assert old > ar.EXACT


def test_nccl_starts_eagerly_with_its_device_and_busbw_is_the_mean_over_ranks():
    tree = ast.parse((PROBES / "allreduce.py").read_text())
    calls = [c for c in ast.walk(tree) if isinstance(c, ast.Call)
             and getattr(c.func, "attr", "") == "init_process_group"
             and isinstance(c.args[0], ast.Constant) and c.args[0].value == "nccl"]
    assert calls and all("device_id" in {k.arg for k in c.keywords} for c in calls)
    data = probe("allreduce", {"gpus": 0, "cpu_devices": 3,
                               "settings": {"max_bytes": 65536, "seconds_per_size": 0.05}})
    for size in data["figures"]["sweep"]:
        assert size["time_max_us"] >= size["time_us"] > 0
        algbw = size["bytes"] / (size["time_us"] / 1e6) / 1e9
        assert size["algbw_gbps"] == pytest.approx(algbw, rel=1e-2, abs=1e-4)
        assert size["busbw_gbps"] == pytest.approx(algbw * 2 * 2 / 3, rel=1e-2, abs=1e-4)


def test_telemetry_survives_a_gpu_nvml_cannot_open(nvml_in_process):
    telemetry = load_probe_module("telemetry")
    nv = nvml_in_process(devices=[{"uuid": "GPU-a"}, {"uuid": "GPU-b", "lost": True}])
    nv.nvmlInit()
    tel = telemetry.GpuTelemetry(nv, ["GPU-a", "GPU-b", "GPU-unknown"], interval_s=0.1)
    tel.start()
    tel.stop_event.wait(0.35)
    a, b, unknown = tel.stop()
    assert a["errors"] == [] and len(a["series"]["t"]) >= 2
    assert b["errors"] == ["telemetry: cannot open GPU-b in NVML: GPU is lost"]
    assert unknown["errors"][0].startswith("telemetry: cannot open GPU-unknown in NVML:")
    assert b["series"]["t"] == [] and unknown["after"] == {}


def test_a_gpu_check_names_mig_and_never_measures_a_mig_device(nvml):
    devices = gpus(4, "m")
    devices[1]["mig_mode"] = {"current": 1, "pending": 1}
    nvml(devices=devices)  # torch: cuda:0, a MIG device of GPU 1, cuda:2, cuda:3
    data = probe("sdc", {"gpus": 4, "settings": {"duration_s": 0.3, "n": 64}})
    assert data["devices"] == []
    assert data["errors"] == [
        "MIG is on for GPU 1 (GPU-m1): CUDA sees MIG devices in its place, not the GPU; the "
        "node should have 4 GPUs, torch sees 3 whole GPUs; nothing is measured"]


@pytest.mark.parametrize("branch,reasons,temperature", [
    ("R525", "nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetTemperature"),
    ("R535", "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetTemperature"),
    ("R570", "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetTemperatureV"),
    ("CUDA14", "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetTemperatureV")])
def test_telemetry_reads_each_driver_branch_through_the_name_it_exports(nvml_in_process,
                                                                        branch, reasons,
                                                                        temperature):
    telemetry = load_probe_module("telemetry")
    nv = nvml_in_process(driver_branch=branch, devices=[
        {"uuid": "GPU-a", "clock_event_reasons": 0x40, "temperature": {"gpu": 77}}])
    nv.nvmlInit()
    tel = telemetry.GpuTelemetry(nv, ["GPU-a"], interval_s=0.05)
    tel.start()
    tel.stop_event.wait(0.2)
    (a,) = tel.stop()
    assert a["errors"] == [] and a["unsupported"] == []
    assert a["series"]["reasons"][0] == 0x40 and a["series"]["temp_c"][0] == 77
    assert a["api"] == {"clock_event_reasons": reasons, "temperature": temperature}


@pytest.mark.parametrize("branch", ["R525", "CUDA14"])
def test_a_burn_on_an_older_or_newer_driver_records_no_nvml_error(nvml, branch):
    nvml(driver_branch=branch, devices=gpus(2, "b"))
    data = probe("burn", {"gpus": 2, "settings": {"duration_s": 0.6, "n": 64,
                                                  "sample_s": 0.2}})
    assert data["errors"] == []
    for dev in data["devices"]:
        tel = dev["telemetry"]
        assert tel["errors"] == [] and tel["series"]["reasons"], tel
        assert None not in tel["series"]["reasons"] + tel["series"]["temp_c"]


@pytest.mark.parametrize("refused,crc", [
    (["nvmlDeviceGetNvLinkErrorCounter"], 7),
    (["nvmlDeviceGetNvLinkErrorCounter", "nvmlDeviceGetFieldValues"], None)])
def test_nvlink_counters_fall_back_to_field_values_and_say_which_call_failed(nvml_in_process,
                                                                             refused, crc):
    telemetry = load_probe_module("telemetry")
    nv = nvml_in_process(devices=[{"uuid": "GPU-a", "unsupported": refused,
                                   "nvlink": {"errors": {"crc_flit": {"3": 7}}}}])
    nv.nvmlInit()
    (d,) = telemetry.GpuTelemetry(nv, ["GPU-a"]).devices
    assert d["before"]["nvlink_active_links"] == 18
    assert d["before"]["nvlink_crc"] == crc
    assert "nvlink" not in d["unsupported"], "counters refused is not 'no NVLink'"
    if crc is None:
        (error,) = d["errors"]
        assert "nvmlDeviceGetNvLinkErrorCounter: Not Supported" in error
        assert "nvmlDeviceGetFieldValues: Not Supported" in error


def test_the_burn_warm_up_product_is_compared_and_counted(monkeypatch):
    burn = load_probe_module("burn")
    probelib = load_probe_module("probelib")
    real_mm = burn.torch.mm
    calls = {"n": 0}

    def first_one_wrong(a, b, out=None):
        result = real_mm(a, b, out=out) if out is not None else real_mm(a, b)
        calls["n"] += 1
        if calls["n"] == 1:  # the warm-up product
            result.view(-1)[0] += 1.0
        return result
    monkeypatch.setattr(burn.torch, "mm", first_one_wrong)
    (cpu,) = probelib.cpu_devices(1)
    load = burn.Load(cpu, {"n": 32, "buffers": 2, "verify_every": 1})
    import time
    load.run(time.perf_counter() + 0.3, 0.1, lambda _: None)
    assert load.record["mismatched_products"] == 1
    assert load.record["mismatched_elements"] == 1
