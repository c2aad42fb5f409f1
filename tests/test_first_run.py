"""The first-GPU-hour script and the known-answer set-up benchmark keep running: each at a
tiny scale on the CPU, asserting what it measures, so that they have not rotted when a GPU
is finally lent."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_benchmarks import ratios

# Real SSH hosts or a real Slurm cluster, or a benchmark: minutes, not seconds. CI runs
# them all; `-m "not slow"` leaves them out of a developer's quick run.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent


def load(name: str):
    """A benchmarks/ module by its file (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_first_gpu_run_script_measures_every_step_in_smoke_mode(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_first_run.py"),
                           "--smoke", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "first run on CPU: 11 of 11 steps measured"
    results = json.loads((tmp_path / "first_run.json").read_text())
    assert results["exactness"] == [{"dtype": "fp32", "n": 64, "exact": True,
                                     "verification_alarms": 0}]
    # benchmarks/probe_vs_mm.py, for both probes (tests/test_benchmarks.py leaves it here)
    for step in ("sdc_vs_mm", "burn_vs_mm"):
        assert ratios(results[step], "probe/bare"), results[step]
    assert results["burn_60s"]["verdict"] == "passed" and results["burn_60s"]["tflops"] > 0
    assert results["storage"]["read_per_gpu_min"] > 0 and results["storage"]["errors"] == []
    train = results["train"]
    assert train["errors"] == [] and train["diverged"] == [] and train["tokens_per_s"] > 0
    assert train["mfu"] > 0 and train["mfu_of_datasheet_peak"] is None  # a CPU has none
    # Issue 25's items that only a real GPU answers say so; the kernel log is read here.
    items = results["issue25"]
    gpu_items = ("nvml_symbols", "dcgmi_json", "pcie_numa_binding", "mig_mode",
                 "allreduce_saturation")
    assert {k: items[k] for k in gpu_items} == dict.fromkeys(gpu_items, {"not_checked": "no GPU"})
    assert isinstance(items["kernel_log"]["readable"], bool) and items["kernel_log"]["user"]
    lines = done.stdout.splitlines()
    for name in gpu_items:
        assert f"not checked: {name}: no GPU" in lines
    assert "checked: kernel_log" in lines


def test_the_first_run_reads_mig_mode_and_says_what_it_could_not_check(tmp_path, monkeypatch):
    """The GPU items' own code, on the NVML emulator: MIG read per GPU and matched with
    what the probes conclude; an item that raises is reported, never the whole step."""
    import nvmlemu
    first = load("first_run_checks")
    scenario = {"devices": [{"uuid": "GPU-a"}, {"uuid": "GPU-b",
                                                "mig_mode": {"current": 1, "pending": 1}}]}
    with nvmlemu.installed(scenario):
        mig = first.mig_modes(True)
    assert mig["mig_on"] == [[1, "GPU-b"]]
    assert [(g["current"], g["pending"]) for g in mig["gpus"]] == [(0, 0), (1, 1)]
    monkeypatch.setattr(first, "nvml_symbols", lambda gpu: 1 / 0)
    items = first.issue25(False, 0)
    assert items["nvml_symbols"] == {"failed": "ZeroDivisionError: division by zero"}
    assert "could not check: nvml_symbols: ZeroDivisionError: division by zero" in \
        first.checklist(items)


def test_the_known_answer_set_up_benchmark_compares_now_with_before():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "known_inputs.py"),
                           "--n", "512", "--devices", "2"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.splitlines()[-2])
    assert figures["now"]["seconds"] > 0 and figures["before_one_device"]["peak_mib"] > 0
    assert done.stdout.splitlines()[-1].startswith("known-answer set-up, n=512, 2 devices")


OLD_PYNVML = '''\
"""Shaped like the old `pynvml` package (gpuopenanalytics/pynvml 11.x) at the import
level: its own distribution, strings as bytes, no nvmlDeviceGetGpuFabricInfoV."""


class NVMLError(Exception):
    pass


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return 1


def nvmlDeviceGetHandleByIndex(index):
    return index


def nvmlDeviceGetName(handle):
    return b"NVIDIA H100 80GB HBM3"


def nvmlSystemGetDriverVersion():
    return b"535.129.03"
'''


def test_the_first_run_names_and_reads_the_old_pynvml_package(tmp_path):
    """Where `import pynvml` finds the old `pynvml` distribution rather than NVIDIA's
    nvidia-ml-py, the facts say so and its bytes are read as text: no crash."""
    site = tmp_path / "site"
    dist = site / "pynvml-11.5.0.dist-info"
    dist.mkdir(parents=True)
    (site / "pynvml.py").write_text(OLD_PYNVML)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pynvml\nVersion: 11.5.0\n")
    (dist / "top_level.txt").write_text("pynvml\n")
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import gpu_first_run as f; "
            "print(json.dumps(f.facts(True)))")
    done = subprocess.run([sys.executable, "-c", code, str(REPO / "benchmarks")],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(site)})
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.splitlines()[-1])
    assert (facts["nvml"], facts["device"], facts["driver"], facts["gpus"]) == (
        "pynvml 11.5.0", "NVIDIA H100 80GB HBM3", "535.129.03", 1)


def test_the_first_run_judges_health_fabric_and_dcgm_as_the_suite_does(nvml, tmp_path):
    """On emulated GB200 GPUs, one whose fabric is still registering: the first run's
    health verdict says so, fabric reads the links, dcgm says where dcgmi is not."""
    first = load("first_run_checks")
    nvml(driver_branch="R580", devices=[
        {"name": "NVIDIA GB200", "uuid": "GPU-a", "fabric": {"state": 3}},
        {"name": "NVIDIA GB200", "uuid": "GPU-b", "fabric": {"state": 2}}])
    judged = first.judged_probes(2)
    assert judged["model"] == "GB200-186GB"
    assert "GPU 1 (GPU-b): NVLink fabric registration is in progress, expected completed " \
        "(clique 1, cluster 5e1f4a0c-9b7d-0000-b0a4-d00000000001)" in judged["health"]["verdict"]
    assert [f["state"] for f in judged["health"]["read"]["fabric"]] == ["completed",
                                                                        "in_progress"]
    assert judged["fabric"]["read"]["nvlink"] == [18, 18]
    assert judged["dcgm"]["read"]["applies"] in (True, False)
    assert "failed" not in judged["dcgm"]


def test_the_device_call_runs_its_steps_in_order_and_writes_each_as_it_lands(nvml, tmp_path):
    """`--device-call --smoke`: the steps one device call runs, on the CPU, with NVML the
    emulator's (an NVLink 5 GPU whose fabric padding is not zero): every step done, each
    with its budget, the raw NVML reads showing what burnin reads through them."""
    nvml(driver_branch="R580", devices=[{"name": "NVIDIA B200", "uuid": "GPU-b",
                                         "fabric": {"state": 3},
                                         "nvlink": {"generation": 5, "links": 18}}])
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_first_run.py"),
                           "--device-call", "--smoke", "--storage-path",
                           str(tmp_path / "store")], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "OUT": str(out)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("device call on CPU: 6 of 6 steps done in "), last
    steps = json.loads((out / "first_run.json").read_text())["steps"]
    assert list(steps) == ["facts", "nvml_raw", "probes_judged", "train_twice",
                           "sdc_exactness", "ratios_vs_cublas"]
    assert sum(s["budget_s"] for s in steps.values()) < 360, "one call of under 6 minutes"
    (gpu,) = steps["nvml_raw"]["result"]["gpus"]
    assert gpu["fabric"]["state_byte"] == 3 and gpu["fabric"]["state_as_c_uint"] != 3
    assert gpu["fabric_read"]["state"] == "completed"
    assert gpu["fields_all_links"]["221"] == {"return": 0, "type": 3, "value": 0}
    assert gpu["nvlink5_read"]["gpu"]["symbol_ber"] == 0xFFF
    assert isinstance(gpu["dl_counters_link0"]["0"], dict), "Blackwell refuses DL counters"
    judged = steps["probes_judged"]["result"]
    assert judged["health"]["verdict"] and judged["fabric"]["seconds"] >= 0
    assert all(judged[p]["verdict"] for p in ("sdc", "storage", "fabric"))
    assert judged["burn"] == "not run in smoke: its own tests run it on the CPU"
    assert steps["train_twice"]["result"]["same_digest"] is True
    assert steps["sdc_exactness"]["result"][0]["exact"] is True
    assert ratios(steps["ratios_vs_cublas"]["result"]["sdc"], "probe/bare")
    assert not (tmp_path / "store").exists(), "its storage removed after"
    assert "step               status" in done.stdout


def test_a_device_call_short_of_time_skips_what_no_longer_fits_and_says_so(tmp_path):
    first = load("device_call")
    assert sum(first.BUDGET_S.values()) == first.DEADLINE_S < 360, "the budgets add up"
    calls = []
    first.facts = lambda gpu: calls.append("facts") or {"device": "X"}
    # Written as it lands: when the second step runs, the file already holds the first.
    first.nvml_raw = lambda: calls.append("nvml_raw") or {"file_then": list(json.loads(
        (tmp_path / "first_run.json").read_text())["steps"])}
    first.sdc_exactness = lambda gpu, small: calls.append("sdc_exactness") or []
    # 30 s: what is left after the first two fits the exactness step's 25 s alone.
    code = first.run(tmp_path, smoke=False, storage=str(tmp_path / "s"), deadline_s=30)
    steps = json.loads((tmp_path / "first_run.json").read_text())["steps"]
    assert calls == ["facts", "nvml_raw", "sdc_exactness"] and code == 1
    assert steps["probes_judged"]["status"] == "skipped"
    assert steps["probes_judged"]["result"].endswith("s left, 165 s budgeted")
    assert [s["status"] for s in steps.values()] == ["done", "done", "skipped", "skipped",
                                                     "done", "skipped"]
    assert steps["nvml_raw"]["result"] == {"file_then": ["facts"]}
