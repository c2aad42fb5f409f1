"""The first-GPU-hour script and the known-answer set-up benchmark keep running: each at a
tiny scale on the CPU, asserting what it measures, so that they have not rotted when a GPU
is finally lent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_first_gpu_run_script_measures_every_step_in_smoke_mode(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_first_run.py"),
                           "--smoke", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "first run on CPU: 8 of 8 steps measured"
    results = json.loads((tmp_path / "first_run.json").read_text())
    assert results["exactness"] == [{"dtype": "fp32", "n": 64, "exact": True,
                                     "verification_alarms": 0}]
    assert "probe/bare = " in results["sdc_vs_mm"] and "probe/bare = " in results["burn_vs_mm"]
    assert results["burn_60s"]["verdict"] == "passed" and results["burn_60s"]["tflops"] > 0
    assert results["storage"]["read_per_gpu_min"] > 0 and results["storage"]["errors"] == []


def test_the_known_answer_set_up_benchmark_compares_now_with_before():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "known_inputs.py"),
                           "--n", "512", "--devices", "2"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.splitlines()[-2])
    assert figures["now"]["seconds"] > 0 and figures["before_one_device"]["peak_mib"] > 0
    assert done.stdout.splitlines()[-1].startswith("known-answer set-up, n=512, 2 devices")
