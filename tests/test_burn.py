"""The burn check: reject rules against recorded telemetry series, the NVML sampler
through the real pynvml and the NVML emulator (tests/nvmlemu), and a straggler made slow
for real."""

from __future__ import annotations

import copy
import json
import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from support.suiterun import junit_cases, run_suite, script

from burnin.checks import Fleet, Judging, resolve_settings
from burnin.checks.burn import fleet_summary as burn_summary
from burnin.checks.burn import judge as burn_judge
from burnin.checks.burn import telemetry_rules
from burnin.inventory.schema import Node
from burnin.model.gpu_reference import GPU_MODELS
from burnin.probe.protocol import ProbeOutcome

REPO = Path(__file__).resolve().parent.parent
SETTINGS = resolve_settings("burn", "quick", {})


H100 = "NVIDIA H100 80GB HBM3"


def fleet_summary(outcomes: dict[str, ProbeOutcome]) -> dict:
    return burn_summary(Fleet(outcomes))


def judge(node: Node, o: ProbeOutcome, fleet: dict, settings: dict):
    return burn_judge(node, o, Judging(settings, fleet, GPU_MODELS.get(node.gpu_model or "")))


def gpu(index=0, tflops=700.0, **tel) -> dict:
    """A device record as the burn probe writes it, with a clean telemetry series."""
    counters = {"ecc_corrected": 0, "ecc_uncorrected": 0, "retired_pages": 0,
                "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False,
                                  "failed": False},
                "pcie_replay": 0, "nvlink_crc": 0, "nvlink_recovery": 0}
    telemetry = {"uuid": f"GPU-{index}", "temp_slowdown_c": 87, "power_limit_w": 700,
                 "pcie_gen": 5, "pcie_max_gen": 5, "pcie_width": 16, "pcie_max_width": 16,
                 "series": {"t": [0, 1, 2], "temp_c": [60, 70, 75], "sm_mhz": [1980] * 3,
                            "mem_mhz": [2619] * 3, "power_w": [650] * 3, "reasons": [0, 4, 0]},
                 "before": counters, "after": copy.deepcopy(counters), "xid": [],
                 "unsupported": [], "errors": []}
    for key, value in tel.items():
        if key in telemetry["series"]:
            telemetry["series"][key] = value
        elif key.startswith("after_"):
            telemetry["after"][key[6:]] = value
        else:
            telemetry[key] = value
    return {"device": f"cuda:{index}", "name": H100, "tflops": tflops, "products": 100,
            "verified": 10, "mismatched_products": 0, "mismatched_elements": 0,
            "telemetry": telemetry}


def outcome(name: str, *devices: dict) -> ProbeOutcome:
    return ProbeOutcome(name, "burn", True, data={"probe": "burn", "schema": 1, "node": {},
                                                  "devices": list(devices), "figures": {},
                                                  "errors": []})


NODE = Node(name="g1", address="g1", gpus=1, gpu_model="H100-SXM5-80GB")

# (id, device, expected failure fragment or None, expected warning fragment or None)
SERIES = [
    ("clean", gpu(), None, None),
    ("sw-power-cap-alone", gpu(reasons=[4, 4, 4]), None, None),
    ("xid", gpu(xid=[{"t": 12.0, "xid": 79}]), "XID 79 (GPU has fallen off the bus) at 12 s",
     None),
    ("hw-slowdown", gpu(reasons=[0, 8, 8 | 4]), "clock event hw_slowdown in 2 of 3", None),
    ("sw-thermal", gpu(reasons=[0x20, 0, 0]), "sw_thermal_slowdown in 1 of 3", None),
    ("hw-thermal", gpu(reasons=[0x40, 0, 0]), "hw_thermal_slowdown", None),
    ("power-brake", gpu(reasons=[0x80, 0, 0]), "hw_power_brake", None),
    ("new-uncorrectable-ecc", gpu(after_ecc_uncorrected=2),
     "2 new uncorrectable ECC errors during the burn", None),
    ("remap-pending", gpu(after_remapped_rows={"correctable": 0, "uncorrectable": 1,
                                                "pending": True, "failed": False}),
     "row remap pending", None),
    ("temperature-at-slowdown", gpu(temp_c=[70, 87, 80]),
     "temperature reached 87 C, at or above the slowdown threshold of 87 C", None),
    ("pcie-gen-under-load", gpu(pcie_gen=4), "PCIe link gen 4 under load, max 5", None),
    ("few-correctable-ecc", gpu(after_ecc_corrected=5), None,
     "5 correctable ECC errors during the burn (limit 100)"),
    ("many-correctable-ecc", gpu(after_ecc_corrected=500),
     "500 correctable ECC errors during the burn, above the limit of 100", None),
    ("pcie-replays", gpu(after_pcie_replay=3), None, "3 PCIe replays"),
    ("nvlink-crc", gpu(after_nvlink_crc=7), None, "7 NVLink CRC errors"),
    ("unsupported-readings", gpu(temp_c=[None] * 3, reasons=[None] * 3,
                                 before={"ecc_corrected": None, "ecc_uncorrected": None},
                                 after={"ecc_corrected": None, "ecc_uncorrected": None},
                                 unsupported=["temperature", "ecc_corrected", "nvlink"]),
     None, None),
    ("below-floor", gpu(tflops=420.0), "420.0 TFLOPS, below the floor of 550 TFLOPS", None),
]


@pytest.mark.parametrize("device,failure,warning", [s[1:] for s in SERIES],
                         ids=[s[0] for s in SERIES])
def test_reject_rules_on_recorded_series(device, failure, warning):
    o = outcome("g1", device)
    verdict = judge(NODE, o, fleet_summary({"g1": o}), SETTINGS)
    if failure:
        assert len(verdict.failures) == 1 and failure in verdict.failures[0], verdict.failures
        assert verdict.failures[0].startswith(f"cuda:0 ({H100}): ")
    else:
        assert verdict.passed, verdict.failures
    if warning:
        assert any(warning in w for w in verdict.warnings), verdict.warnings
    else:
        assert not verdict.warnings


def test_mismatching_products_fail():
    dev = gpu()
    dev.update(mismatched_products=2, mismatched_elements=9)
    (failure,) = judge(NODE, outcome("g1", dev), {}, SETTINGS).failures
    assert "2 of 10 verified products differ from the first (9 elements)" in failure


def test_straggler_and_slow_clock_against_the_fleet():
    fleet = {f"g{i}": outcome(f"g{i}", gpu(tflops=700.0 + i)) for i in range(1, 5)}
    fleet["slow"] = outcome("slow", gpu(tflops=600.0))
    fleet["cold"] = outcome("cold", gpu(tflops=700.0, sm_mhz=[1500, 1500, 1500]))
    summary = fleet_summary(fleet)
    verdicts = {n: judge(Node(name=n, address=n, gpus=1), o, summary, SETTINGS)
                for n, o in fleet.items()}
    assert sorted(n for n, v in verdicts.items() if not v.passed) == ["cold", "slow"]
    assert "straggler: 600.000 TFLOPS, below 0.9 x 701.500 TFLOPS, the median of the " \
           "run's 6 nodes with this model" in verdicts["slow"].failures[0]
    assert "mean SM clock 1500 MHz, below 0.9 x 1980 MHz" in verdicts["cold"].failures[0]


def test_straggler_inside_one_node():
    o = outcome("g1", gpu(0, 700.0), gpu(1, 705.0), gpu(2, 500.0), gpu(3, 702.0))
    verdict = judge(Node(name="g1", address="g1", gpus=4), o, fleet_summary({"g1": o}),
                    SETTINGS)
    (failure,) = verdict.failures
    assert failure.startswith("cuda:2 ") and "straggler: 500.000 TFLOPS" in failure


def import_telemetry():
    sys.path.insert(0, str(REPO / "probes"))
    try:
        import telemetry
    finally:
        sys.path.remove(str(REPO / "probes"))
    return telemetry


def test_nvml_sampler_records_series_counters_xid_and_unsupported(nvml_in_process):
    telemetry = import_telemetry()
    nv = nvml_in_process(devices=[
        {"name": H100, "uuid": "GPU-a", "temperature": {"gpu": [60, 75, 88], "slowdown": 87},
         "power": {"usage_mw": 650000, "enforced_limit_mw": 700000},
         "clock_event_reasons": [0, 4, 8], "ecc_errors": {"corrected_volatile": [0, 0, 0, 4]},
         "nvlink": {"links": 18, "errors": {"crc_flit": {"0": [0, 0, 0, 2]}}}},
        {"name": H100, "uuid": "GPU-b",
         "unsupported": ["nvmlDeviceGetPcieReplayCounter", "nvlink"]},
    ], xid_events=[{"at_s": 1.0, "device": 1, "xid": 79}])
    nv.nvmlInit()
    tel = telemetry.GpuTelemetry(nv, ["GPU-a", "GPU-b"], interval_s=0.25)
    tel.start()
    time.sleep(3.3)
    tel.pcie_under_load()
    a, b = tel.stop()
    assert len(a["series"]["t"]) >= 10
    assert a["series"]["temp_c"][0] == 60 and a["series"]["temp_c"][-1] == 88
    assert a["series"]["power_w"][0] == 650.0 and a["power_limit_w"] == 700.0
    assert a["before"]["ecc_corrected"] == 0 and a["after"]["ecc_corrected"] == 4
    assert a["before"]["nvlink_active_links"] == 18 and a["after"]["nvlink_crc"] == 2
    assert a["xid"] == [] and [x["xid"] for x in b["xid"]] == [79]
    assert b["unsupported"] == ["nvlink", "pcie_replay"]
    assert b["after"]["pcie_replay"] is None, "unsupported is recorded as such, not as 0"
    assert a["errors"] == [] and b["errors"] == []
    failures, warnings = telemetry_rules(a, SETTINGS)
    assert any("hw_slowdown" in f for f in failures)
    assert any("temperature reached 88 C" in f for f in failures)
    assert any("4 correctable ECC" in w for w in warnings)
    assert any("2 NVLink CRC" in w for w in warnings)
    assert telemetry_rules(b, SETTINGS)[0] == ["XID 79 (GPU has fallen off the bus) at 1 s into "
                                               "the burn"]


def test_failing_nvlink_calls_are_errors_not_unsupported(nvml_in_process):
    """NVLink is unsupported only where NVML says so (or the GPU has fewer links); a call
    that fails otherwise (a lost GPU, a driver error) is an error, never silently 'no
    NVLink'."""
    telemetry = import_telemetry()
    nv = nvml_in_process(devices=[
        {"uuid": "GPU-a", "errors": {"nvlink": "GPU_IS_LOST"}},
        {"uuid": "GPU-b", "nvlink": {"links": 0}},
        {"uuid": "GPU-c", "nvlink": {"links": 12, "down": [3],
                                     "errors": {"crc_flit": {"5": 4}, "recovery": {"5": 2}}}},
    ])
    nv.nvmlInit()
    tel = telemetry.GpuTelemetry(nv, ["GPU-a", "GPU-b", "GPU-c"])
    a, b, c = tel.devices
    assert "nvlink" not in a["unsupported"] and a["before"]["nvlink_crc"] is None
    assert a["errors"] == ["nvlink: GPU is lost"]
    assert "nvlink" in b["unsupported"] and b["errors"] == []
    assert (c["before"]["nvlink_active_links"], c["before"]["nvlink_crc"],
            c["before"]["nvlink_recovery"]) == (11, 4, 2)
    assert "nvlink" not in c["unsupported"] and c["errors"] == []


def throttle(pidfile: Path, stop: threading.Event) -> None:
    """Slow a probe down for real, below it: stop and continue it, 80% stopped, while its
    burn runs: from when its load starts (probes/burn.py starts the telemetry's thread and
    one a device together, after the controller watchdog's: three tasks or more) to when
    the first of them ends (the device's, at the burn's deadline). Its start-up and its
    exit are not what the burn measures: throttled from when libtorch was mapped to the
    end, they took the slow node 26 s where the others took 7."""
    deadline = time.monotonic() + 60
    while not pidfile.exists() and time.monotonic() < deadline and not stop.is_set():
        time.sleep(0.01)
    pid = int(pidfile.read_text())

    def tasks() -> int:
        return len(os.listdir(f"/proc/{pid}/task"))

    while time.monotonic() < deadline and not stop.is_set():
        try:
            if tasks() >= 3:
                break
        except OSError:
            return
        time.sleep(0.01)
    try:
        most = tasks()
        while not stop.is_set():
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.08)
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.02)
            now = tasks()
            if now < most:
                break  # a thread of the load ended: the burn is over
            most = now
    except (ProcessLookupError, FileNotFoundError):
        return
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def test_a_node_made_slow_below_the_probe_fails_as_a_straggler(pytester):
    pidfile = pytester.path / "slow.pid"
    # The three 'nodes' share this machine's cores: one torch thread each, or their
    # OpenMP threads spin against one another and speeds say nothing about a node.
    one_thread = f"OMP_NUM_THREADS=1 exec {sys.executable} \"$@\"\n"
    fast = script(pytester.path / "python-fast", one_thread)
    slow = script(pytester.path / "python-slow", f"echo $$ > {pidfile}\n{one_thread}")
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{transport: local, gpus: 0, python: {fast}}}
        checks:
          burn: {{duration_s: 2, n: 256, sample_s: 0.5}}
        nodes:
          - name: fast[1-2]
          - name: slow
            python: {slow}
        """))
    stop = threading.Event()
    slower = threading.Thread(target=throttle, args=(pidfile, stop), daemon=True)
    slower.start()
    try:
        result, reports = run_suite(pytester, inv, "-k", "burn")
    finally:
        stop.set()
        slower.join()
    cases = junit_cases(reports)
    rates = {json.loads(ln)["node"]: json.loads(ln)["data"]["devices"][0]["tflops"]
             for ln in (reports / "latest" / "results.jsonl").open()}
    assert min(rates, key=rates.get) == "slow", f"the throttle did not bite: {rates}"
    assert cases["fast1"]["burn"] == ("passed", "")
    assert cases["fast2"]["burn"] == ("passed", "")
    outcome_, message = cases["slow"]["burn"]
    assert outcome_ == "failure" and "straggler:" in message and "median" in message
